"""The `fleetwatch` command: composes the sub-commands each package owns. No logic lives here.

Each package raises its own exception type for bad input; they are collected in ``USER_ERRORS``
and printed as one line on stderr with exit status 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys

import typer

from dashboards.cli import app as dashboards_app
from dashboards.errors import DashboardError
from engine_probe.cli import app as engine_app
from engine_probe.engine.errors import EngineConfigError
from engine_probe.probe.cli import app as probe_app
from engine_probe.probe.errors import ProbeError
from fleet.cli import app as fleet_app
from fleet.errors import AnalysisError
from fleetwatch import __version__
from fleetwatch.demo.cli import demo
from resilience.cli import app as resilience_app
from resilience.errors import ResilienceConfigError
from slo.cli import app as slo_app
from slo.errors import SLOSpecError
from telemetry.cli import app as telemetry_app
from telemetry.profiles import ProfileError
from telemetry.records.cli import app as records_app
from telemetry.records.schema import RecordError

USER_ERRORS: tuple[type[Exception], ...] = (
    AnalysisError,
    DashboardError,
    EngineConfigError,
    ProbeError,
    ProfileError,
    RecordError,
    ResilienceConfigError,
    SLOSpecError,
)

app = typer.Typer(
    name="fleetwatch",
    help="SRE observability and reliability for LLM inference fleets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fleetwatch {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """SRE observability and reliability for LLM inference fleets."""


app.command("demo")(demo)
app.add_typer(records_app, name="records")
app.add_typer(telemetry_app, name="telemetry")
app.add_typer(slo_app, name="slo")
app.add_typer(fleet_app, name="fleet")
app.add_typer(resilience_app, name="resilience")
app.add_typer(engine_app, name="engine")
app.add_typer(probe_app, name="probe")
app.add_typer(dashboards_app, name="dashboards")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return its exit status (2 for bad input, as for a bad flag)."""
    try:
        app(args=argv, prog_name="fleetwatch")
    except USER_ERRORS as exc:
        print(f"fleetwatch: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def entrypoint() -> None:
    sys.exit(main())
