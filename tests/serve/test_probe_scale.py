"""The probe holds 1,000 concurrent streams on loopback and measures its own timing error."""

from __future__ import annotations

import asyncio
import math

from fleetwatch.engine_probe.probe.client import Prober, completion_body
from fleetwatch.engine_probe.probe.measure import RequestResult
from fleetwatch.engine_probe.probe.scripted_server import Script, ScriptedServer
from fleetwatch.engine_probe.probe.stats import summarise

STREAMS = 1000


def test_probe_drives_1000_concurrent_streams() -> None:
    script = Script(
        first_token_s=0.0, first_chunk_tokens=1, chunks=((0.02, 2), (0.02, 1), (0.02, 3))
    )

    async def go() -> tuple[list[RequestResult], ScriptedServer]:
        # The server answers nobody until all 1,000 requests are in: the run completes only if the
        # probe really holds 1,000 streams open at once.
        server = ScriptedServer(script, barrier=STREAMS)
        url = await server.start()
        try:
            async with Prober(url, max_connections=STREAMS + 16, timeout_s=120) as p:
                bodies = [completion_body("p", 7) for _ in range(STREAMS)]
                results = await p.open_loop([0.0] * STREAMS, bodies)
        finally:
            await server.stop()
        return results, server

    results, server = asyncio.run(go())
    assert len(server.arrived) == STREAMS
    assert all(r.ok for r in results), {r.error for r in results if not r.ok}
    assert all(r.output_tokens == 7 and r.tokens_from_usage for r in results)
    assert all(list(r.chunk_tokens) == [1, 2, 1, 3] for r in results)
    s = summarise(results, label="1000", mode="constant", rate=None, concurrency=STREAMS)
    assert s.ok == STREAMS and s.itl.n == STREAMS * 6
    # The probe's own timing error is measured for every request (its size is a benchmark's business).
    assert s.send_lag.n == STREAMS and math.isfinite(s.send_lag.p99) and s.send_lag.p50 >= 0
