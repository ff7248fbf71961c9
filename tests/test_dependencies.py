"""Declared dependency floors are at least the releases that added the APIs the code uses, so an
install resolved to the oldest allowed versions still imports and runs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "fleetwatch",
    "telemetry",
    "records",
    "slo",
    "resilience",
    "engine_probe",
    "dashboards",
    "fleet",
)
# The two distributions: the toolkit (root) and the serving side (telemetry/).
PYPROJECTS = (ROOT / "pyproject.toml", ROOT / "telemetry" / "pyproject.toml")

# (distribution, attribute used in the source, first release that has it, where that is shown)
NEEDS = [
    # RetryCallState.upcoming_sleep: jd/tenacity#423 (commit 99e7482, "Add ability to inspect
    # upcoming sleep in stop funcs"), first tagged in 8.3.0; 8.2.3 has no such attribute.
    ("tenacity", "upcoming_sleep", (8, 3)),
    # prometheus_client.registry.Collector is an ABC through 0.23.1 and a typing.Protocol from
    # 0.24.0; telemetry/instrument/api.py declares a Protocol extending it, which an older
    # release refuses at import ("Protocols can only inherit from other protocols").
    ("prometheus-client", "(Collector, Protocol)", (0, 24)),
    # typer before 0.17.5 neither caps click nor works with click 8.3+ (a required option left
    # out reaches its converter as None: exit 1 and a TypeError instead of exit 2 naming it);
    # 0.17.5 caps click below 8.3 and later releases support it. Found by tests/floors/run.sh.
    ("typer", "typer.Option(", (0, 17, 5)),
    # parse_env_headers(..., liberal=True) (OTEL_EXPORTER_OTLP_HEADERS as the SDK itself reads
    # them): opentelemetry-api 1.27.0; 1.26.0 takes the string alone.
    ("opentelemetry-api", "liberal=True", (1, 27)),
    # RecordBatch.drop_columns: pyarrow 16.0.0 (15.0 has it on Table only).
    ("pyarrow", "drop_columns", (16,)),
    # request.url (the server's own address for span attributes): aiohttp before 3.10.7 builds it
    # with URL.build(host="127.0.0.1:PORT"), which current yarl refuses ("cannot contain ':'").
    ("aiohttp", "request.url", (3, 10, 7)),
    # The engine extra. torch.nn.functional.rms_norm: torch 2.4.0 (2.2 and 2.3 have no such
    # function). scaled_dot_product_attention(..., enable_gqa=True) (grouped-query attention with
    # fewer key/value heads): torch 2.5.0; 2.4 refuses the keyword. Found by tests/floors/run.sh
    # with FLOORS_TORCH.
    ("torch", "F.rms_norm(", (2, 4)),
    ("torch", "enable_gqa=True", (2, 5)),
]


def _requirements() -> list[str]:
    out: list[str] = []
    for pyproject in PYPROJECTS:
        project = tomllib.loads(pyproject.read_text())["project"]
        out += project["dependencies"]
        out += [r for extra in project["optional-dependencies"].values() for r in extra]
    return out


def _floor(distribution: str) -> tuple[int, ...]:
    for requirement in _requirements():
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)
        if name and name.group(0).lower() == distribution:
            found = re.search(r">=\s*([0-9][0-9.]*)", requirement)
            assert found, f"{requirement!r} has no lower bound"
            return tuple(int(part) for part in found.group(1).split("."))
    raise AssertionError(f"{distribution} is not a declared dependency")


def _used(attribute: str) -> bool:
    return any(
        attribute in path.read_text(encoding="utf-8")
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
    )


@pytest.mark.parametrize(("distribution", "attribute", "added_in"), NEEDS)
def test_dependency_floor_has_the_apis_the_code_uses(
    distribution: str, attribute: str, added_in: tuple[int, ...]
) -> None:
    assert _used(attribute), f"{attribute} is no longer used: drop this entry"
    assert _floor(distribution) >= added_in, (
        f"{distribution}: the code uses {attribute}, added in "
        f"{'.'.join(map(str, added_in))}; raise the floor in pyproject.toml"
    )
