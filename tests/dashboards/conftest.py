"""``check_exprs``: PromQL expressions written as recording rules and read by ``promtool check``."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import yaml

CheckExprs = Callable[[str, Sequence[str]], subprocess.CompletedProcess[str]]


@pytest.fixture
def check_exprs(promtool: Path, tmp_path: Path) -> CheckExprs:
    """``check(name, exprs)``: run ``promtool check rules`` on one group holding each expression
    as a recording rule ``fleetwatch:<name>_expr_<i>``; returns the finished process."""

    def check(name: str, exprs: Sequence[str]) -> subprocess.CompletedProcess[str]:
        rules = [{"record": f"fleetwatch:{name}_expr_{i}", "expr": e} for i, e in enumerate(exprs)]
        path = tmp_path / f"{name}.rules.yaml"
        path.write_text(yaml.safe_dump({"groups": [{"name": name, "rules": rules}]}))
        return subprocess.run(
            [str(promtool), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
        )

    return check
