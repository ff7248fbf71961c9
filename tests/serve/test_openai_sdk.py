"""The official ``openai`` SDK, unmodified, against ``fleetwatch engine serve`` on loopback:
completions and chat, whole and streamed, usage, stop strings, and errors as the SDK's classes."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from fleetwatch.core.records import RequestRecord
from fleetwatch.engine_probe.serve import ServerConfig
from fleetwatch.engine_probe.serve.wire.chat_template import ChatMessage, render_chat
from fleetwatch.telemetry.sink import MemoryRecordSink

MODEL = "reference"
CONTEXT = 4096  # the test model's positions
KV_TOKENS = 64 * 16  # num_blocks x block_size of the module's engine


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def _poll(cond: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Wait (without sleeping for timing) until ``cond`` holds; fail after ``timeout_s``."""
    gate = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if cond():
            return
        gate.wait(0.01)
    raise AssertionError("condition not reached in time")


@pytest.fixture(scope="module")
def served(kit: Any) -> Iterator[tuple[Any, openai.OpenAI, MemoryRecordSink]]:
    sink = MemoryRecordSink()
    with kit.live_server(kit.make_engine(num_blocks=64), record_sink=sink) as h:
        yield h, _client(h.url), sink


def _record(h: Any, sink: MemoryRecordSink, request_id: str) -> RequestRecord:
    def there() -> bool:
        h.instrumentation.flush(10)  # hand finished requests to the sink now
        return any(r.request_id == request_id for r in list(sink.records))

    _poll(there)
    return next(r for r in list(sink.records) if r.request_id == request_id)


def test_completions_whole_and_streamed(served: Any) -> None:
    _, client, _ = served
    whole = client.completions.create(
        model=MODEL, prompt="hello there", max_tokens=12, temperature=0
    )
    assert whole.object == "text_completion"
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage is not None
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (11, 12)
    text = whole.choices[0].text
    assert len(text) == 12

    # the plain loop a user writes works: no usage-only chunk unless it was asked for
    parts, finish = [], None
    for chunk in client.completions.create(
        model=MODEL, prompt="hello there", max_tokens=12, temperature=0, stream=True
    ):
        parts.append(chunk.choices[0].text)
        finish = chunk.choices[0].finish_reason or finish
        assert chunk.usage is None
    assert "".join(parts) == text and finish == "length"

    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt="hello there",
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 12 and chunks[-1].usage.total_tokens == 23
    assert all(c.usage is None for c in chunks[:-1])
    assert "".join(c.choices[0].text for c in chunks[:-1]) == text


def test_chat_whole_and_streamed(served: Any) -> None:
    h, client, sink = served
    messages: list[Any] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Tell"}, {"type": "text", "text": "me"}],
        },
    ]
    prompt = render_chat(
        [
            ChatMessage("system", "You are terse."),
            ChatMessage("user", "Hi"),
            ChatMessage("assistant", "Hello."),
            ChatMessage("user", "Tell\nme"),
        ]
    )
    whole = client.chat.completions.create(
        model=MODEL, messages=messages, max_completion_tokens=10, temperature=0
    )
    assert whole.object == "chat.completion"
    msg = whole.choices[0].message
    assert msg.role == "assistant" and msg.content is not None and len(msg.content) == 10
    assert whole.usage is not None
    assert whole.usage.prompt_tokens == len(prompt.encode())  # the template's tokens count
    assert whole.usage.completion_tokens == 10
    rec = _record(h, sink, whole.id)
    assert rec.prompt_tokens == whole.usage.prompt_tokens and rec.output_tokens == 10

    stream = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=10, temperature=0, stream=True
    )
    deltas = [chunk.choices[0].delta for chunk in stream]
    assert deltas[0].role == "assistant" and not deltas[0].content
    assert "".join(d.content or "" for d in deltas) == msg.content

    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=10,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert chunks[-2].choices[0].finish_reason == "length"


def test_seed_makes_sampling_reproducible(served: Any) -> None:
    _, client, _ = served

    def one(seed: int) -> str:
        r = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "roll"}],
            max_tokens=16,
            temperature=1.0,
            top_p=0.9,
            seed=seed,
        )
        return r.choices[0].message.content or ""

    assert one(7) == one(7)


def _greedy(client: openai.OpenAI, api: str, n: int) -> str:
    if api == "chat":
        r = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "stop me"}],
            max_tokens=n,
            temperature=0,
        )
        return r.choices[0].message.content or ""
    c = client.completions.create(model=MODEL, prompt="stop me", max_tokens=n, temperature=0)
    return c.choices[0].text


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_stop_strings_end_the_answer_before_them(served: Any, api: str, stream: bool) -> None:
    h, client, sink = served
    full = _greedy(client, api, 40)
    stop = full[20:23]
    cut = full.find(stop)
    kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 40, "temperature": 0}
    kwargs["stop"] = [stop, "\x7fnever"]
    if stream:
        kwargs.update(stream=True, stream_options={"include_usage": True})
    if api == "chat":
        r: Any = client.chat.completions.create(
            messages=[{"role": "user", "content": "stop me"}], **kwargs
        )
    else:
        r = client.completions.create(prompt="stop me", **kwargs)
    if stream:
        chunks = list(r)
        usage, rid = chunks[-1].usage, chunks[0].id
        body = chunks[:-1]
        get = (
            (lambda c: c.choices[0].delta.content or "")
            if api == "chat"
            else (lambda c: c.choices[0].text)
        )
        text = "".join(get(c) for c in body)
        finish = body[-1].choices[0].finish_reason
    else:
        usage, rid, finish = r.usage, r.id, r.choices[0].finish_reason
        text = r.choices[0].message.content if api == "chat" else r.choices[0].text
    assert text == full[:cut]
    assert stop not in text
    assert finish == "stop"
    assert usage.completion_tokens == cut + len(stop)
    rec = _record(h, sink, rid)
    assert rec.status == "ok" and rec.finish_reason == "stop"
    assert rec.output_tokens == cut + len(stop)


def test_a_single_stop_string_and_no_match(served: Any) -> None:
    _, client, _ = served
    full = _greedy(client, "completions", 8)
    r = client.completions.create(
        model=MODEL, prompt="stop me", max_tokens=8, temperature=0, stop="\x7f"
    )
    assert r.choices[0].text == full and r.choices[0].finish_reason == "length"


_CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
_TEXT = {"model": MODEL, "prompt": "hi", "max_tokens": 4}


@pytest.mark.parametrize(
    ("api", "extra", "param"),
    [
        ("completions", {"n": 2}, "n"),
        ("completions", {"prompt": ["one", "two"]}, "prompt"),
        ("completions", {"echo": True}, "echo"),
        ("completions", {"logprobs": 2}, "logprobs"),
        ("completions", {"best_of": 3}, "best_of"),
        ("completions", {"suffix": "end"}, "suffix"),
        ("completions", {"presence_penalty": 0.5}, "presence_penalty"),
        ("completions", {"frequency_penalty": 1.0}, "frequency_penalty"),
        ("completions", {"logit_bias": {"5": 10}}, "logit_bias"),
        ("completions", {"temperature": 3}, "temperature"),
        ("completions", {"max_tokens": CONTEXT}, "max_tokens"),
        ("completions", {"prompt": "x" * 600, "max_tokens": 600}, "max_tokens"),
        ("completions", {"stream_options": {"include_usage": True}}, "stream_options"),
        ("chat", {"n": 2}, "n"),
        ("chat", {"logprobs": True}, "logprobs"),
        ("chat", {"top_logprobs": 3}, "top_logprobs"),
        ("chat", {"presence_penalty": -1.0}, "presence_penalty"),
        ("chat", {"response_format": {"type": "json_object"}}, "response_format"),
        (
            "chat",
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
            "tools",
        ),
        (
            "chat",
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ]
            },
            "messages",
        ),
        ("chat", {"messages": [{"role": "tool", "content": "1", "tool_call_id": "a"}]}, "messages"),
        ("chat", {"messages": []}, "messages"),
        ("chat", {"max_completion_tokens": 0}, "max_completion_tokens"),
        ("chat", {"stop": ["a"] * 17}, "stop"),
    ],
)
def test_refused_fields_are_400_bad_request(
    served: Any, api: str, extra: dict[str, Any], param: str
) -> None:
    h, client, sink = served
    with pytest.raises(openai.BadRequestError) as err:
        if api == "chat":
            client.chat.completions.create(**{**_CHAT, **extra})
        else:
            client.completions.create(**{**_TEXT, **extra})
    assert err.value.status_code == 400
    body = err.value.body
    assert (
        isinstance(body, dict)
        and body["param"] == param
        and body["type"] == "invalid_request_error"
    )
    assert body["message"]
    rid = err.value.response.headers["x-request-id"]
    rec = _record(h, sink, rid)  # the refusal is a record too
    assert rec.status == "rejected" and rec.error_type


def test_limits_are_named_and_never_429(served: Any) -> None:
    _, client, _ = served
    with pytest.raises(openai.BadRequestError) as ctx:
        client.completions.create(**{**_TEXT, "max_tokens": CONTEXT})
    assert ctx.value.code == "context_length_exceeded" and str(CONTEXT) in ctx.value.message
    with pytest.raises(openai.BadRequestError) as kv:
        client.completions.create(**{**_TEXT, "prompt": "x" * 600, "max_tokens": 600})
    assert kv.value.code == "context_length_exceeded" and "KV cache" in kv.value.message
    assert str(KV_TOKENS) in kv.value.message


def test_neutral_values_of_unsupported_fields_are_accepted(served: Any) -> None:
    _, client, _ = served
    client.completions.create(
        **_TEXT, n=1, best_of=1, echo=False, presence_penalty=0, frequency_penalty=0.0, user="u"
    )
    client.chat.completions.create(
        **_CHAT, n=1, logprobs=False, presence_penalty=0, tool_choice="none", extra_body={"x": 1}
    )


def test_unknown_models_and_routes_are_404_not_found(served: Any) -> None:
    h, client, _ = served
    with pytest.raises(openai.NotFoundError) as chat:
        client.chat.completions.create(**{**_CHAT, "model": "gpt-4o"})
    assert chat.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(**{**_TEXT, "model": "gpt-4o"})
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL] and models[0].created > 0
    one = client.models.retrieve(MODEL)
    assert one.id == MODEL and one.created == models[0].created and one.owned_by
    status, body = _raw(h.port, "GET", "/v1/nowhere", b"")
    assert status == 404 and json.loads(body)["error"]["code"] == "unknown_url"
    status, body = _raw(h.port, "GET", "/v1/chat/completions", b"")
    assert status == 405 and json.loads(body)["error"]["message"]


def _raw(port: int, method: str, path: str, body: bytes) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_a_lone_surrogate_is_a_400_never_a_500(served: Any) -> None:
    h, _, _ = served
    bodies = [
        b'{"prompt": "ab\\ud800", "max_tokens": 2}',
        b'{"prompt": "ok", "max_tokens": 2, "stop": "\\udfff"}',
    ]
    for body in bodies:
        assert _raw(h.port, "POST", "/v1/completions", body)[0] == 400
    chat = b'{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 2}'
    status, data = _raw(h.port, "POST", "/v1/chat/completions", chat)
    assert status == 400 and json.loads(data)["error"]["param"] == "messages"
    fives = h.registry.get_sample_value(
        "fleetwatch_http_responses_total", {"replica": h.engine.replica, "code": "500"}
    )
    assert fives is None


def test_queue_full_is_rate_limit_error_with_retry_after(kit: Any) -> None:
    engine = kit.make_engine(max_num_seqs=1)
    with kit.live_server(engine, config=ServerConfig(max_queue=1)) as h:
        client = _client(h.url)
        long = client.completions.create(
            model=MODEL, prompt="a", max_tokens=3000, temperature=0, stream=True
        )
        it = iter(long)
        next(it)  # running: the engine's only slot is taken
        with ThreadPoolExecutor(1) as pool:
            queued = pool.submit(client.chat.completions.create, **{**_CHAT, "temperature": 0})
            _poll(lambda: h.server.waiting == 1)
            with pytest.raises(openai.RateLimitError) as err:
                client.chat.completions.create(**_CHAT)
            long.close()  # hang up: the slot frees and the queued request runs
            answer = queued.result(timeout=60)
    assert err.value.status_code == 429
    assert int(err.value.response.headers["retry-after"]) >= 1
    assert isinstance(err.value.body, dict) and err.value.body["type"] == "rate_limit_exceeded"
    assert answer.usage is not None and answer.usage.completion_tokens == 4
