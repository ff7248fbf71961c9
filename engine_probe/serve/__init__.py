"""The OpenAI-compatible HTTP server for the reference engine.

>>> handle = await start_server(LLMEngine(ModelConfig(), EngineConfig()), "127.0.0.1", 0)  # doctest: +SKIP
>>> handle.url                                                                             # doctest: +SKIP
'http://127.0.0.1:40123'

Names are resolved on first use, so importing a module of this package (as the command line does
for ``serve``'s options) does not import aiohttp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetwatch.core.lazy import lazy_attributes, lazy_dir

if TYPE_CHECKING:
    from fleetwatch.engine_probe.serve.front.config import ServerConfig
    from fleetwatch.engine_probe.serve.front.tenants import TenantLimits
    from fleetwatch.engine_probe.serve.lifecycle import ServerHandle, start_server
    from fleetwatch.engine_probe.serve.server import CompletionServer

__all__ = ["CompletionServer", "ServerConfig", "ServerHandle", "TenantLimits", "start_server"]

_WHERE = {
    "CompletionServer": "server",
    "ServerConfig": "front.config",
    "ServerHandle": "lifecycle",
    "TenantLimits": "front.tenants",
    "start_server": "lifecycle",
}


__getattr__ = lazy_attributes(__name__, _WHERE)
__dir__ = lazy_dir(__all__)
