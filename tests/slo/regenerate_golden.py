"""Regenerate the golden rules and promtool test files from the example specs.

Run from the repository root: ``.venv/bin/python tests/slo/regenerate_golden.py``.
``test_generated_rules.py`` fails when the committed files drift from what the generator writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
EXAMPLES = ROOT / "slo" / "examples"
CASES = {"fleetwatch": "chat.yaml", "vllm": "vllm.yaml", "sglang": "sglang.yaml", "tgi": "tgi.yaml"}


def render(profile_name: str) -> tuple[str, str]:
    """(rules text, promtool test text) for one profile's example spec."""
    from fleetwatch.core.profiles import get_profile
    from fleetwatch.slo.load import read_spec
    from fleetwatch.slo.rules import (
        generate_promtool_tests,
        generate_rules,
        render_rules,
        render_tests,
    )

    profile = get_profile(profile_name)
    ruleset = generate_rules(read_spec(EXAMPLES / CASES[profile_name]), profile)
    rules_name = f"{profile_name}.rules.yaml"
    tests = generate_promtool_tests(ruleset, profile, rules_name)
    return render_rules(ruleset), render_tests(tests)


def main() -> None:
    sys.path.insert(0, str(ROOT))
    GOLDEN.mkdir(exist_ok=True)
    for name in CASES:
        rules, tests = render(name)
        (GOLDEN / f"{name}.rules.yaml").write_text(rules)
        (GOLDEN / f"{name}.rules.test.yaml").write_text(tests)
        print(f"wrote {GOLDEN / name}.rules.yaml and .rules.test.yaml")


if __name__ == "__main__":
    main()
