"""The request record: one finished request, shared by every analysis in fleetwatch.

This is the serving side: the record, its checks and its writer, with no pandas. Reading records
back, as DataFrames, is the analysis side's job (``fleetwatch.records``).
"""

from fleetwatch.core.records.schema import (
    DERIVED_COLUMNS,
    FIELDS,
    RecordError,
    RequestRecord,
    Status,
)
from fleetwatch.core.records.write import write_records

__all__ = [
    "DERIVED_COLUMNS",
    "FIELDS",
    "RecordError",
    "RequestRecord",
    "Status",
    "write_records",
]
