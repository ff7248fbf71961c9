"""Run ``promtool test rules`` on a unit-test file written next to its rule files."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["promtool_test"]


def promtool_test(
    promtool: Path, directory: Path, text: str, name: str = "test.yaml"
) -> subprocess.CompletedProcess[str]:
    """Write ``text`` (the test document as YAML) to ``directory/name`` and run promtool's unit
    tests on it, from ``directory`` so relative rule files resolve (2 minutes at most)."""
    (directory / name).write_text(text)
    return subprocess.run(
        [str(promtool), "test", "rules", name],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
    )
