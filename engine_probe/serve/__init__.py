"""The OpenAI-compatible HTTP server for the reference engine.

>>> handle = await start_server(LLMEngine(ModelConfig(), EngineConfig()), "127.0.0.1", 0)  # doctest: +SKIP
>>> handle.url                                                                             # doctest: +SKIP
'http://127.0.0.1:40123'
"""

from engine_probe.serve.config import ServerConfig
from engine_probe.serve.lifecycle import ServerHandle, start_server
from engine_probe.serve.server import CompletionServer
from engine_probe.serve.tenants import TenantLimits

__all__ = ["CompletionServer", "ServerConfig", "ServerHandle", "TenantLimits", "start_server"]
