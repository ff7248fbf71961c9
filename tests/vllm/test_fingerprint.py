"""`fleetwatch probe fingerprint` on real vLLM replicas: the fleet agrees, the one served with
another chat template is named by its prompt token counts.

Runs before ``test_lane.py`` (file order), whose last test stops the servers; the replica with
the other template is stopped here, once judged, so the lane's timing tests run on the fleet
alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.cli import main
from fleetwatch.engine_probe.probe.fingerprint.prompts import load_prompt_set

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def other_template(vllm_other_template: Any) -> Iterator[Any]:
    yield vllm_other_template
    vllm_other_template.stop()


def test_the_replica_with_another_chat_template_is_named_and_the_fleet_agrees(
    vllm_fleet: Mapping[str, Any],
    other_template: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fleet = [s.url for s in vllm_fleet.values()]
    out = tmp_path / "fp.json"
    rc = main(["probe", "fingerprint", *fleet, other_template.url, "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 3, text
    data = json.loads(out.read_text())
    (model,) = data["models"].values()
    assert model["differing"] == [other_template.url], text
    findings = model["findings"][other_template.url]
    chat_prompts = [p.id for p in load_prompt_set(None).prompts if p.api == "chat"]
    # the template changes every chat prompt's token count, and nothing on the completions API
    assert [f["prompt"] for f in findings] == chat_prompts
    assert {f["kind"] for f in findings} == {"prompt tokens"}
    assert f"DIFFERS {other_template.url}" in text and "chat template or tokenizer" in text
    for replica in data["replicas"]:
        assert replica["logprobs"] is True and replica["error"] is None
        assert replica["served"]["max_model_len"] == 512
        assert replica["served"]["version"][0].isdigit()
        assert all(len(a["logprobs"]) == a["completion_tokens"] for a in replica["answers"])

    # how far apart the fleet's logprobs are (the tolerance is 0.05 nats)
    answers = [r["answers"] for r in data["replicas"] if r["url"] in fleet]
    gap = max(
        abs(x - y)
        for per_prompt in zip(*answers, strict=True)
        for a in per_prompt
        for x, y in zip(a["logprobs"], per_prompt[0]["logprobs"], strict=True)
    )
    with capsys.disabled():
        print(f"\n{text}largest logprob gap between the fleet's replicas: {gap:.2e} nats")
    assert gap < 0.05

    # the fleet alone agrees, and a replica judged against its file later agrees too
    assert main(["probe", "fingerprint", *fleet, "--json", str(out)]) == 0
    assert "AGREE" in capsys.readouterr().out
    assert main(["probe", "fingerprint", fleet[0], "--against", str(out)]) == 0
    assert main(["probe", "fingerprint", other_template.url, "--against", str(out)]) == 3
