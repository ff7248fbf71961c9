"""Malformed requests get a 4xx with a message, never a 500, and the server keeps serving."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetwatch.engine_probe.serve import ServerConfig, start_server
from fleetwatch.engine_probe.serve.wire.completions import InvalidRequest, Limits, parse_completion

LIMITS = Limits(vocab_size=512, context_tokens=64, model_name="reference", max_tokens_cap=4)


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, None),
        (b"\xff\xfe", 400, None),
        (b'{"max_tokens": 3}', 400, "prompt"),
        (b'{"prompt": 5}', 400, "prompt"),
        (b'{"prompt": ""}', 400, "prompt"),
        (b'{"prompt": [1, "a"]}', 400, "prompt"),
        (b'{"prompt": [1, 99999]}', 400, "prompt"),
        (b'{"prompt": [[1], [2]]}', 400, "prompt"),
        (b'{"prompt": "hi", "max_tokens": 0}', 400, "max_tokens"),
        (b'{"prompt": "hi", "max_tokens": 2.5}', 400, "max_tokens"),
        (b'{"prompt": "hi", "max_tokens": true}', 400, "max_tokens"),
        (b'{"prompt": "hi", "max_tokens": 5}', 400, "max_tokens"),
        (b'{"prompt": "' + b"x" * 64 + b'", "max_tokens": 1}', 400, "prompt"),
        (b'{"prompt": "hi", "max_tokens": 2, "temperature": -1}', 400, "temperature"),
        (b'{"prompt": "hi", "max_tokens": 2, "temperature": "hot"}', 400, "temperature"),
        (b'{"prompt": "hi", "max_tokens": 2, "top_p": 0}', 400, "top_p"),
        (b'{"prompt": "hi", "max_tokens": 2, "seed": 1.5}', 400, "seed"),
        (b'{"prompt": "hi", "max_tokens": 2, "stream": "yes"}', 400, "stream"),
        (b'{"prompt": "hi", "max_tokens": 2, "n": 2}', 400, "n"),
        (b'{"prompt": "hi", "max_tokens": 2, "stream_options": 3}', 400, "stream_options"),
        (b'{"prompt": "hi", "max_tokens": 2, "model": "gpt-4"}', 404, "model"),
    ],
)
def test_bad_bodies_are_named_4xx(body: bytes, status: int, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_completion(body, LIMITS)
    assert err.value.status == status
    assert err.value.param == param
    assert err.value.message


def test_good_body_parses_text_to_byte_ids() -> None:
    req = parse_completion(b'{"prompt": "hi", "max_tokens": 3, "stream": true, "seed": 3}', LIMITS)
    assert req.prompt_token_ids == (104, 105)
    assert req.max_tokens == 3 and req.stream and req.seed == 3
    assert not req.include_usage  # a usage chunk only when stream_options asks for it


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4)
    ),
    max_leaves=12,
)
_fields = st.fixed_dictionaries(
    {},
    optional={
        "prompt": _json | st.text(max_size=80) | st.lists(st.integers(-5, 600), max_size=70),
        "max_tokens": _json | st.integers(-3, 80),
        "temperature": _json,
        "top_p": _json,
        "seed": _json,
        "stream": _json | st.booleans(),
        "model": st.sampled_from(["reference", "other"]) | _json,
        "stream_options": _json,
        "n": _json,
    },
)
_bodies = st.one_of(
    _fields.map(lambda d: json.dumps(d).encode()),
    _json.map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=64),
)


@settings(max_examples=300, deadline=None)
@given(_bodies)
def test_parse_never_fails_with_anything_but_a_4xx(body: bytes) -> None:
    try:
        parse_completion(body, LIMITS)
    except InvalidRequest as exc:
        assert 400 <= exc.status < 500


@pytest.fixture(scope="module")
def live_server() -> Iterator[tuple[int, Any]]:
    """A real server on its own event-loop thread, driven with a plain blocking HTTP client."""
    from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        model = ModelConfig(
            num_layers=1,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            num_kv_heads=1,
            vocab_size=512,
            max_position_embeddings=64,
        )
        engine = LLMEngine(model, EngineConfig(num_blocks=256, device="cpu"))
        box["handle"] = await start_server(engine, config=ServerConfig(max_tokens_cap=4))
        box["stop"] = asyncio.Event()
        ready.set()
        await box["stop"].wait()
        await box["handle"].stop(drain_timeout_s=5)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(30)
    yield box["handle"].port, box["handle"]
    loop.call_soon_threadsafe(box["stop"].set)
    thread.join(30)
    loop.close()


def _post(port: int, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            "POST",
            "/v1/completions",
            body=body,
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=_bodies)
def test_fuzzed_requests_over_http_get_4xx_or_a_completion(
    live_server: tuple[int, Any], body: bytes
) -> None:
    port, _ = live_server
    status, data = _post(port, body)
    assert status == 200 or 400 <= status < 500, (status, data[:200])
    if status != 200:
        err = json.loads(data)["error"]
        assert err["message"] and err["type"] and set(err) == {"message", "type", "param", "code"}


def test_server_keeps_serving_after_malformed_requests(live_server: tuple[int, Any]) -> None:
    port, handle = live_server
    for bad in (b"{", b'{"prompt": []}', b"\x00" * 10, b'{"prompt": "x", "max_tokens": 1e309}'):
        status, _ = _post(port, bad)
        assert 400 <= status < 500
    status, _ = _post(port, b"x" * (2 << 20))
    assert status == 413
    status, _ = _post(port, b'{"prompt": "x"}', {"Idempotency-Key": ""})
    assert status == 400
    status, data = _post(
        port, json.dumps({"prompt": "ok", "max_tokens": 3, "stream": True}).encode()
    )
    assert status == 200
    assert data.endswith(b"data: [DONE]\n\n")
    assert (
        handle.registry.get_sample_value(
            "fleetwatch_http_responses_total", {"replica": handle.engine.replica, "code": "500"}
        )
        is None
    )
