"""fleetwatch inside vLLM: a ``vllm.stat_logger_plugins`` entry point (``plugin.py``).

vLLM hands stat loggers each finished request's intervals; this adapter turns them into
``RequestRecord``s (``reconstruct.py``), spans with queue/prefill/decode children, and the two
metric families vLLM lacks: requests by outcome (exported from zero) and goodput
(``metrics.py``). Settings come from ``FLEETWATCH_VLLM_*`` variables (``settings.py``); with none
set the plugin does nothing. Importing this package never imports vLLM.
"""

from fleetwatch.telemetry.adapters.vllm.reconstruct import (
    FinishedRequest,
    operation_of,
    outcome_of,
    record_from_finished,
    records_from_finished,
)
from fleetwatch.telemetry.adapters.vllm.settings import AdapterSettings, SettingsError

__all__ = [
    "AdapterSettings",
    "FinishedRequest",
    "SettingsError",
    "operation_of",
    "outcome_of",
    "record_from_finished",
    "records_from_finished",
]
