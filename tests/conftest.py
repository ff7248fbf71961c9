"""Shared fixtures: real binaries (promtool, prometheus) found on PATH; seeded property tests.

In CI (CI=true) a test that needs a binary fails when it is missing; elsewhere it is skipped with
a message saying how to install it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests are seeded (derandomize: the same examples every run) and never fail on a slow
# machine's timing: speed belongs to benchmarks.
settings.register_profile("fleetwatch", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("fleetwatch")

_INSTALL_HINT = "install Debian's prometheus package: sudo apt-get install prometheus (or run make test as root)"


def _binary(name: str) -> Path:
    found = shutil.which(name)
    if found is None:
        message = f"{name} not found on PATH: {_INSTALL_HINT}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return Path(found)


@pytest.fixture(scope="session")
def promtool() -> Path:
    """Path of the real promtool binary."""
    return _binary("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    """Path of the real prometheus server binary."""
    return _binary("prometheus")
