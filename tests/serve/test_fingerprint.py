"""`fleetwatch probe fingerprint`: real reference servers on loopback, alike and not.

Two servers share weights (seed 0) and one has other weights (seed 1): the fingerprint must
name that one and only that one, write a file, and judge later replicas against the file. The
judge's own rules (majority, prompt tokens, logprobs, failures, models apart) are checked on
answers built here, where each case can be made exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.cli import main
from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine
from fleetwatch.engine_probe.probe.errors import ProbeError
from fleetwatch.engine_probe.probe.fingerprint.collect import (
    Answer,
    ReplicaPrint,
    keep,
    parse_answer,
)
from fleetwatch.engine_probe.probe.fingerprint.judge import judge
from fleetwatch.engine_probe.probe.fingerprint.prompts import (
    load_prompt_set,
    parse_prompt_set,
)
from fleetwatch.engine_probe.probe.fingerprint.report import load_reference, render, to_dict


def _engine(kit: Any, seed: int) -> LLMEngine:
    """The serve tests' small model, its weights drawn from ``seed``."""
    config = EngineConfig(num_blocks=256, max_num_seqs=8, device="cpu")
    return LLMEngine(dataclasses.replace(kit.model, seed=seed), config)


@pytest.fixture(scope="module")
def fleet(kit: Any) -> Iterator[dict[str, str]]:
    """Three reference servers: ``a`` and ``b`` with one set of weights, ``odd`` with another."""
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(kit.live_server(_engine(kit, seed))).url
            for name, seed in (("a", 0), ("b", 0), ("odd", 1))
        }


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(["probe", "fingerprint", *argv])
    return rc, capsys.readouterr().out


def test_the_replica_with_other_weights_is_named_and_the_file_records_why(
    fleet: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fp.json"
    rc, text = _run([fleet["a"], fleet["odd"], fleet["b"], "--json", str(out)], capsys)
    assert rc == 3
    assert f"DIFFERS {fleet['odd']}" in text
    assert f"DIFFERS {fleet['a']}" not in text and f"DIFFERS {fleet['b']}" not in text
    data = json.loads(out.read_text())
    (model,) = data["models"].values()
    assert model["verdict"] == "differ" and model["differing"] == [fleet["odd"]]
    prompts = load_prompt_set(None)
    assert {f["kind"] for f in model["findings"][fleet["odd"]]} == {"output"}
    # other weights change the text of nearly every answer, not the prompt token counts
    assert len(model["findings"][fleet["odd"]]) >= len(prompts.prompts) - 2
    assert data["prompt_set"] == prompts.identity()
    # the reference server refuses logprobs with a 400; the fingerprint asked again without
    assert [r["logprobs"] for r in data["replicas"]] == [False, False, False]
    a, odd = data["replicas"][0], data["replicas"][1]
    assert [x["prompt"] for x in a["answers"]] == [p.id for p in prompts.prompts]
    assert all(x["prompt_tokens"] > 0 and x["completion_tokens"] > 0 for x in a["answers"])
    assert a["answers"][0]["sha256"] != odd["answers"][0]["sha256"]


def test_alike_replicas_agree_and_later_ones_are_judged_against_the_file(
    fleet: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fp.json"
    rc, text = _run([fleet["a"], fleet["b"], "--json", str(out), "--meta", "image=v1"], capsys)
    assert rc == 0, text
    assert "AGREE: all 2 replicas agree" in text
    data = json.loads(out.read_text())
    assert data["ok"] is True and data["meta"] == {"image": "v1"}
    rc, text = _run([fleet["b"], "--against", str(out)], capsys)
    assert rc == 0, text
    rc, text = _run([fleet["odd"], "--against", str(out), "-v"], capsys)
    assert rc == 3 and f"DIFFERS {fleet['odd']}" in text
    assert text.count("this replica:") >= 10  # -v: every differing prompt


def test_against_a_file_of_other_prompts_or_models_is_bad_input(
    fleet: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fp.json"
    assert _run([fleet["a"], fleet["b"], "--json", str(out)], capsys)[0] == 0
    mine = tmp_path / "mine.json"
    mine.write_text(
        json.dumps({"name": "mine", "version": 1, "prompts": [{"id": "x", "prompt": "Hi"}]})
    )
    assert (
        main(["probe", "fingerprint", fleet["a"], "--prompts", str(mine), "--against", str(out)])
        == 2
    )
    assert "fingerprints compare only on the same prompts" in capsys.readouterr().err
    data = json.loads(out.read_text())
    data["models"] = {"another-model": next(iter(data["models"].values()))}
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    assert main(["probe", "fingerprint", fleet["a"], "--against", str(other)]) == 2
    assert "has no fingerprint of model" in capsys.readouterr().err


def test_a_replica_that_is_down_fails_the_fingerprint_and_all_down_is_an_error(
    fleet: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.child_processes import free_port

    down = f"http://127.0.0.1:{free_port()}"
    rc, text = _run([fleet["a"], fleet["b"], down], capsys)
    assert rc == 3 and f"UNREACHABLE {down}" in text
    assert main(["probe", "fingerprint", down, f"http://127.0.0.1:{free_port()}"]) == 2
    assert "no replica answered" in capsys.readouterr().err


# --- the judge, on answers made here ---------------------------------------------------------

PROMPTS = parse_prompt_set(
    {
        "name": "t",
        "version": 1,
        "prompts": [{"id": "p1", "prompt": "x"}, {"id": "p2", "prompt": "y"}],
    },
    "test",
)


def _answer(pid: str, text: str = "ok", pt: int = 5, lp: tuple[float, ...] | None = None) -> Answer:
    return Answer(pid, text, pt, 2, "length", lp)


def _replica(url: str, *answers: Answer, model: str = "m") -> ReplicaPrint:
    return ReplicaPrint(url, model, answers=list(answers))


def test_a_strict_majority_decides_and_a_tie_is_no_majority() -> None:
    same = [_replica(u, _answer("p1"), _answer("p2")) for u in ("r1", "r2")]
    odd = _replica("r3", _answer("p1", "other"), _answer("p2"))
    (m,) = judge([*same, odd], PROMPTS).models
    assert m.verdict == "differ" and m.differing == ["r3"]
    assert [(f.prompt_id, f.kind) for f in m.findings["r3"]] == [("p1", "output")]
    (m,) = judge([same[0], odd], PROMPTS).models
    assert m.verdict == "no majority" and list(m.no_majority) == ["p1"]
    assert sorted(u for urls in m.no_majority["p1"].values() for u in urls) == ["r1", "r3"]
    assert not judge([same[0], odd], PROMPTS).ok


def test_prompt_tokens_name_a_template_difference_and_logprobs_a_numeric_one() -> None:
    lp = (-0.5, -1.0)
    reps = [_replica(u, _answer("p1", lp=lp), _answer("p2", lp=lp)) for u in ("r1", "r2", "r3")]
    reps.append(_replica("tmpl", _answer("p1", pt=9, lp=lp), _answer("p2", pt=9, lp=lp)))
    reps.append(_replica("quant", _answer("p1", lp=(-0.5, -1.2)), _answer("p2", lp=(-0.52, -1.0))))
    (m,) = judge(reps, PROMPTS, tolerance=0.05).models
    assert m.differing == ["tmpl", "quant"]
    assert {f.kind for f in m.findings["tmpl"]} == {"prompt tokens"}
    assert "9 prompt tokens vs 5" in m.findings["tmpl"][0].detail
    assert [(f.prompt_id, f.kind) for f in m.findings["quant"]] == [("p1", "logprobs")]
    assert "token 1" in m.findings["quant"][0].detail
    (m,) = judge(reps, PROMPTS, tolerance=0.5).models
    assert m.differing == ["tmpl"]


def test_models_are_judged_apart_and_a_failed_replica_is_named() -> None:
    reps = [
        _replica("a1", _answer("p1"), _answer("p2")),
        _replica("a2", _answer("p1"), _answer("p2")),
        _replica("b1", _answer("p1", "bee"), _answer("p2", "bee"), model="b"),
        _replica("b2", _answer("p1", "bee"), _answer("p2", "bee"), model="b"),
        ReplicaPrint("b3", "b", error="no prompt answered"),
        ReplicaPrint("x", None, error="GET /v1/models failed"),
    ]
    result = judge(reps, PROMPTS)
    by = {m.model: m for m in result.models}
    assert by["m"].verdict == "agree"
    assert by["b"].verdict == "differ" and by["b"].failed == {"b3": "no prompt answered"}
    assert result.unreachable == {"x": "GET /v1/models failed"} and not result.ok
    lines = render(result, PROMPTS)
    assert "model m: AGREE: all 2 replicas agree with the majority on every prompt" in lines
    assert "  FAILED b3: no prompt answered" in lines


def test_an_error_answer_differs_and_a_file_round_trips(tmp_path: Path) -> None:
    reps = [_replica(u, _answer("p1", lp=(-0.1, -0.2)), _answer("p2")) for u in ("r1", "r2")]
    reps.append(_replica("r3", _answer("p1"), Answer("p2", error="HTTP 500: boom")))
    result = judge(reps, PROMPTS)
    (m,) = result.models
    assert [(f.prompt_id, f.kind) for f in m.findings["r3"]] == [("p2", "error")]
    path = tmp_path / "fp.json"
    path.write_text(json.dumps(to_dict(reps, PROMPTS, result, taken_at="t", meta={})))
    ref = load_reference(path, PROMPTS)
    assert ref["m"]["p1"].key == _answer("p1").key and ref["m"]["p1"].logprobs == (-0.1, -0.2)
    (m,) = judge([reps[2]], PROMPTS, against=ref, against_name=str(path)).models
    assert m.differing == ["r3"] and m.reference_from == str(path)


def test_answers_parse_from_either_api_and_bad_prompt_sets_name_the_field() -> None:
    chat = parse_prompt_set(
        {
            "name": "c",
            "version": 1,
            "prompts": [{"id": "c", "messages": [{"role": "user", "content": "hi"}]}],
        },
        "t",
    ).prompts[0]
    a = parse_answer(
        chat,
        {
            "choices": [
                {
                    "message": {"role": "assistant", "content": "hello"},
                    "finish_reason": "stop",
                    "logprobs": {
                        "content": [
                            {"token": "hel", "logprob": -0.25},
                            {"token": "lo", "logprob": -1.5},
                        ]
                    },
                }
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2},
        },
    )
    assert (a.text, a.prompt_tokens, a.finish_reason, a.logprobs) == (
        "hello",
        7,
        "stop",
        (-0.25, -1.5),
    )
    text = PROMPTS.prompts[0]
    b = parse_answer(
        text, {"choices": [{"text": "z", "logprobs": {"token_logprobs": [-0.5]}}], "usage": {}}
    )
    assert (b.text, b.prompt_tokens, b.logprobs) == ("z", None, (-0.5,))
    assert parse_answer(text, {"choices": []}).error == "response has no choices"
    for bad, needle in (
        (
            {"name": "n", "version": 1, "prompts": [{"id": "a", "prompt": "x", "messages": []}]},
            "one of them",
        ),
        (
            {
                "name": "n",
                "version": 1,
                "prompts": [{"id": "a", "messages": [{"role": "bot", "content": "x"}]}],
            },
            "prompts[0].messages[0].role",
        ),
        (
            {
                "name": "n",
                "version": 1,
                "prompts": [{"id": "a", "prompt": "x"}, {"id": "a", "prompt": "y"}],
            },
            "used twice",
        ),
        ({"name": "n", "version": 0, "prompts": [{"id": "a", "prompt": "x"}]}, "version"),
        (
            {"name": "n", "version": 1, "prompts": [{"id": "a", "prompt": "x", "max_tokens": 0}]},
            "max_tokens",
        ),
    ):
        with pytest.raises(ProbeError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            parse_prompt_set(bad, "f.json")


def test_a_failed_request_does_not_vote_and_against_needs_a_reference(tmp_path: Path) -> None:
    reps = [
        _replica("r1", _answer("p1"), Answer("p2", error="HTTP 500: boom")),
        _replica("r2", _answer("p1"), Answer("p2", error="HTTP 500: boom")),
        _replica("r3", _answer("p1"), _answer("p2")),
    ]
    (m,) = judge(reps, PROMPTS).models
    # two timeouts do not outvote the one answer: they are the failing replicas' findings
    assert m.reference["p2"].error is None
    assert {u: [f.kind for f in fs] for u, fs in m.findings.items()} == {
        "r1": ["error"],
        "r2": ["error"],
    }
    # a file without a reference for a prompt decides nothing there: not "agree"
    tie = [
        _replica("a", _answer("p1"), _answer("p2", "x")),
        _replica("b", _answer("p1"), _answer("p2", "y")),
    ]
    result = judge(tie, PROMPTS)
    path = tmp_path / "fp.json"
    path.write_text(json.dumps(to_dict(tie, PROMPTS, result, taken_at="t", meta={})))
    ref = load_reference(path, PROMPTS)
    (m,) = judge([tie[0]], PROMPTS, against=ref, against_name="fp.json").models
    assert m.verdict == "no majority" and list(m.no_majority) == ["p2"]
    alone = judge([tie[0]], PROMPTS, against=None)
    path.write_text(json.dumps(to_dict([tie[0]], PROMPTS, alone, taken_at="t", meta={})))
    with pytest.raises(ProbeError, match="no reference answer for model 'm'"):
        load_reference(path, PROMPTS)


# --- --repeat: a near-tie flip against a replica that answers otherwise ---------------------


def test_the_answer_kept_is_the_one_most_runs_gave_and_an_answer_beats_an_error() -> None:
    a, b = _answer("p1", "a"), _answer("p1", "b")
    boom = Answer("p1", error="HTTP 500: boom")
    assert keep([a, b, b]) == (b, [a], [])
    assert keep([a, b]) == (a, [b], [])  # a tie: the earliest
    # a failed request is no answer: apart from the variants, never one of them
    assert keep([boom, boom, a]) == (a, [], [boom, boom])
    assert keep([boom]) == (boom, [], [])
    other = Answer("p1", error="TimeoutError")
    assert keep([boom, other, boom]) == (boom, [], [other, boom])


def _repeated(url: str, runs: list[list[Answer]]) -> ReplicaPrint:
    """A replica asked ``len(runs)`` times over, each run its answers in prompt order."""
    rep = ReplicaPrint(url, "m", runs=len(runs))
    for i, per_prompt in enumerate(zip(*runs, strict=True)):
        kept, others, failed = keep(per_prompt)
        rep.answers.append(kept)
        if others:
            rep.variants[PROMPTS.prompts[i].id] = others
        if failed:
            rep.failures[PROMPTS.prompts[i].id] = failed
    return rep


def test_a_replica_whose_runs_mostly_give_the_reference_flips_and_is_not_held_against_it(
    tmp_path: Path,
) -> None:
    """Over three runs, ``tie`` gives the reference to p1 twice and another answer once: a
    near-tie token, noted; ``odd`` gives another answer every time: a difference."""
    ok, other = _answer("p1"), _answer("p1", "other")
    same = [_repeated(u, [[ok, _answer("p2")]] * 3) for u in ("r1", "r2", "r3")]
    tie = _repeated("tie", [[ok, _answer("p2")], [other, _answer("p2")], [ok, _answer("p2")]])
    odd = _repeated("odd", [[other, _answer("p2")]] * 3)
    result = judge([*same, tie, odd], PROMPTS)
    (m,) = result.models
    assert m.differing == ["odd"] and [f.kind for f in m.findings["odd"]] == ["output"]
    (flip,) = m.flips["tie"]
    assert flip.kind == "flip" and flip.detail.startswith("2 of 3 runs gave the reference")
    assert "odd" not in m.flips and "r1" not in m.flips
    lines = render(result, PROMPTS)
    assert (
        "  FLIPS tie: its runs answered unlike each other on 1 of 2 prompts (1 of them a "
        "near-tie: most runs gave the reference, the others not held against it)"
    ) in lines
    (m,) = judge([*same, tie], PROMPTS).models
    assert m.verdict == "agree"
    data = to_dict([*same, tie], PROMPTS, judge([*same, tie], PROMPTS), taken_at="t", meta={})
    (entry,) = [r for r in data["replicas"] if r["url"] == "tie"]
    assert entry["runs"] == 3 and [v["text"] for v in entry["variants"]["p1"]] == ["other"]
    assert entry["failures"] == {}
    assert data["models"]["m"]["flips"]["tie"][0]["kind"] == "flip"


def test_a_replica_whose_runs_mostly_answer_otherwise_differs_though_some_gave_the_reference() -> (
    None
):
    """19 runs of 20 answering otherwise is a replica that answers otherwise: the one run that
    gave the reference does not clear it; its flips are still listed, and none is a near-tie."""
    ok, other = _answer("p1"), _answer("p1", "other")
    same = [_repeated(u, [[ok, _answer("p2")]] * 20) for u in ("r1", "r2", "r3")]
    mostly = _repeated("mostly", [[ok, _answer("p2")]] + [[other, _answer("p2")]] * 19)
    result = judge([*same, mostly], PROMPTS)
    (m,) = result.models
    assert m.verdict == "differ" and m.differing == ["mostly"]
    (finding,) = m.findings["mostly"]
    assert finding.kind == "output" and finding.this == "other"
    (flip,) = m.flips["mostly"]
    assert flip.kind == "flip" and flip.detail.startswith("1 of 20 runs gave the reference")
    assert "(0 of them a near-tie" in "\n".join(render(result, PROMPTS))


def test_a_failed_run_is_a_failure_not_a_flip_nor_a_way_of_answering() -> None:
    """A replica whose every answer was the reference but one of whose runs timed out is not
    flipping: it failed a request, reported as the error it is, as without --repeat. Runs that
    all failed, with different messages, are a failure too, not an unstable answer."""
    ok, p2 = _answer("p1"), _answer("p2")
    timeout = Answer("p1", error="TimeoutError: ")
    same = [_repeated(u, [[ok, p2]] * 3) for u in ("r1", "r2", "r3")]
    slow = _repeated("slow", [[ok, p2], [timeout, p2], [ok, p2]])
    down = _repeated(
        "down",
        [[Answer("p1", error=f"HTTP 50{k}: boom"), p2] for k in (2, 3, 4)],
    )
    result = judge([*same, slow, down], PROMPTS)
    (m,) = result.models
    assert m.flips == {}
    assert {u: [(f.kind, f.detail) for f in fs] for u, fs in m.findings.items()} == {
        "slow": [("error", "1 of 3 runs failed: TimeoutError: ")],
        "down": [("error", "HTTP 502: boom (3 of 3 runs failed)")],
    }
    lines = render(result, PROMPTS)
    assert not any(line.startswith("  FLIPS") for line in lines)
    assert "  DIFFERS slow: 1 of 2 prompts (error)" in lines
    data = to_dict([*same, slow, down], PROMPTS, result, taken_at="t", meta={})
    by_url = {r["url"]: r for r in data["replicas"]}
    assert by_url["slow"]["variants"] == {} and by_url["down"]["variants"] == {}
    assert by_url["slow"]["failures"] == {"p1": [{"prompt": "p1", "error": "TimeoutError: "}]}
    assert [f["error"] for f in by_url["down"]["failures"]["p1"]] == [
        "HTTP 503: boom",
        "HTTP 504: boom",
    ]
    # a replica that answered otherwise and also failed a run differs by its answer
    odd = _repeated("odd", [[_answer("p1", "x"), p2], [timeout, p2], [_answer("p1", "x"), p2]])
    (m,) = judge([*same, odd], PROMPTS).models
    ((kind, detail),) = [(f.kind, f.detail) for f in m.findings["odd"]]
    assert kind == "output" and detail.endswith("(1 of 3 runs failed)") and m.flips == {}


def test_runs_that_never_give_the_reference_are_a_difference_and_unstable() -> None:
    ok = _answer("p1")
    same = [_repeated(u, [[ok, _answer("p2")]] * 2) for u in ("r1", "r2", "r3")]
    wild = _repeated(
        "wild", [[_answer("p1", "x"), _answer("p2")], [_answer("p1", "y"), _answer("p2")]]
    )
    (m,) = judge([*same, wild], PROMPTS).models
    assert m.differing == ["wild"]
    (flip,) = m.flips["wild"]
    assert flip.kind == "unstable" and "2 runs answered 2 ways, none the reference" in flip.detail


def test_alike_servers_asked_twice_over_agree_without_flips_and_the_odd_one_differs(
    fleet: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fp.json"
    argv = [fleet["a"], fleet["b"], fleet["odd"], "--repeat", "2", "--json", str(out)]
    rc, text = _run(argv, capsys)
    assert rc == 3 and f"DIFFERS {fleet['odd']}" in text and "FLIPS" not in text
    data = json.loads(out.read_text())
    assert [r["runs"] for r in data["replicas"]] == [2, 2, 2]
    assert all(r["variants"] == {} for r in data["replicas"])
    (model,) = data["models"].values()
    assert model["differing"] == [fleet["odd"]] and model["flips"] == {}
