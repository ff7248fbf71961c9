"""Stop strings on streamed text, and chat bodies: properties checked on generated input."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetwatch.engine_probe.serve.producer import TextCutter
from fleetwatch.engine_probe.serve.wire.chat import parse_chat
from fleetwatch.engine_probe.serve.wire.chat_template import ChatMessage, render_chat
from fleetwatch.engine_probe.serve.wire.completions import InvalidRequest, Limits
from fleetwatch.engine_probe.serve.wire.stop import StopScanner
from fleetwatch.engine_probe.serve.wire.text_ids import decode

LIMITS = Limits(
    vocab_size=512, context_tokens=256, model_name="reference", kv_blocks=12, block_size=16
)


def _reference(text: str, stops: list[str]) -> tuple[str, int | None]:
    """Token by token: the output ends where a stop string is first complete."""
    for end in range(1, len(text) + 1):
        done = [s for s in stops if text[:end].endswith(s)]
        if done:
            return text[: end - max(len(s) for s in done)], end
    return text, None


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet="abc", max_size=40),
    stops=st.lists(st.text(alphabet="abc", min_size=1, max_size=4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 40), max_size=8),
)
def test_streamed_stop_scanning_equals_scanning_the_whole_text(
    text: str, stops: list[str], cuts: list[int]
) -> None:
    scan = StopScanner(stops)
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    sent, end = "", None
    for a, b in itertools.pairwise(bounds):
        out, end = scan.feed(text[a:b])
        sent += out
        if end is not None:
            break
        # nothing sent so far may be the start of a stop string that later text completes
        assert _reference(text, stops)[0].startswith(sent)
    if end is None:
        sent += scan.flush()
    assert (sent, end) == _reference(text, stops)


def test_the_cutter_keeps_tokens_and_text_aligned() -> None:
    ids = tuple(range(97, 107))  # "abcdefghij"
    cut = TextCutter(("efg",))
    got_ids, got_text = [], ""
    for i in range(0, len(ids), 3):
        step_ids, step_text = cut.feed(ids[i : i + 3])
        assert decode(step_ids) == step_text
        got_ids.extend(step_ids)
        got_text += step_text
        if cut.stop_end is not None:
            break
    assert got_text == "abcd" and tuple(got_ids) == ids[:4] and cut.stop_end == 7


def test_the_chat_template_is_what_prompt_tokens_count() -> None:
    body = {
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Hi", "name": "ann"},
        ],
        "max_tokens": 3,
    }
    req = parse_chat(json.dumps(body).encode(), LIMITS)
    prompt = render_chat([ChatMessage("system", "Be brief."), ChatMessage("user", "Hi", "ann")])
    assert prompt.endswith("<|assistant|>\n")
    assert req.prompt_token_ids == tuple(prompt.encode())
    assert req.operation == "chat" and req.max_tokens == 3


def test_chat_default_max_tokens_fills_what_fits_and_naming_the_kv_limit() -> None:
    body = {"messages": [{"role": "user", "content": "x"}]}
    req = parse_chat(json.dumps(body).encode(), LIMITS)
    assert len(req.prompt_token_ids) + req.max_tokens == 12 * 16  # the KV pool, below context
    body["max_completion_tokens"] = 200
    with pytest.raises(InvalidRequest) as err:
        parse_chat(json.dumps(body).encode(), LIMITS)
    assert err.value.status == 400 and err.value.reason == "KVCapacityExceeded"
    assert err.value.param == "max_completion_tokens" and "192 tokens" in err.value.message


_json: Any = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 300) | st.floats() | st.text(max_size=6),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3)
    ),
    max_leaves=10,
)
_message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["system", "user", "assistant", "tool", "developer"]) | _json,
        "content": st.text(max_size=20)
        | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)}))
        | _json,
        "name": _json,
    },
)
_chat = st.fixed_dictionaries(
    {},
    optional={
        "messages": st.lists(_message, max_size=3) | _json,
        "max_tokens": _json,
        "max_completion_tokens": _json,
        "stop": _json | st.lists(st.text(max_size=3), max_size=3),
        "stream": _json,
        "stream_options": _json,
        "n": _json,
        "logprobs": _json,
        "tools": _json,
        "model": st.sampled_from(["reference", "other"]) | _json,
    },
)


@settings(max_examples=200, deadline=None)
@given(_chat.map(lambda d: json.dumps(d).encode()) | st.binary(max_size=40))
def test_chat_parsing_never_fails_with_anything_but_a_4xx(body: bytes) -> None:
    try:
        parse_chat(body, LIMITS)
    except InvalidRequest as exc:
        assert exc.status in (400, 404) and exc.message
