"""The `fleetwatch` command: composes the sub-commands each package owns, and its one error path.

Expected failures print one line, ``fleetwatch: error: <what> (<where>)``, on stderr and exit 2:
each package's own exception type for bad input (collected in ``USER_ERRORS``), a file that cannot
be read or written (the path is named), a missing optional extra (the install command is named),
and a command line that does not parse (the command's ``--help`` is named). Anything else is a bug: one line and exit 1, with ``--debug`` for the traceback.
"""

from __future__ import annotations

import sys
from typing import Any

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
    debug: bool = typer.Option(
        False, "--debug", help="Show the traceback of an unexpected error instead of one line."
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


# Optional extras: the module a command imports -> the extra that provides it.
EXTRAS = {"torch": "engine"}


def one_line(exc: BaseException) -> tuple[str, int]:
    """The message and exit status for an exception that reached the command line."""
    if isinstance(exc, USER_ERRORS):
        return _flat(str(exc)), 2
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in EXTRAS:
        module = (exc.name or "").split(".")[0]
        extra = EXTRAS[module]
        return f"this command needs {module}: pip install 'fleetwatch[{extra}]'", 2
    if isinstance(exc, OSError) and exc.filename is not None:
        what = (exc.strerror or type(exc).__name__).lower()
        where = exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
        return f"{what} ({where})", 2
    message = _flat(str(exc)) or type(exc).__name__
    return f"unexpected {type(exc).__name__}: {message} (run with --debug for the traceback)", 1


def _flat(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return its exit status (2 for bad input, as for a bad flag)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = app(args=args, prog_name="fleetwatch", standalone_mode=False)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if _is_usage_error(exc):
            return _usage(exc)
        if "--debug" in args and not isinstance(exc, USER_ERRORS):
            raise
        message, status = one_line(exc)
        print(f"fleetwatch: error: {message}", file=sys.stderr)
        return status
    # without standalone mode, an explicit typer.Exit comes back as its status
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def _is_usage_error(exc: BaseException) -> bool:
    """A command-line parsing error (unknown option, bad value, missing argument): the parser's
    own exception type, recognised by its interface so any click version will do."""
    return (
        isinstance(getattr(exc, "exit_code", None), int)
        and callable(getattr(exc, "format_message", None))
        and callable(getattr(exc, "show", None))
    )


def _usage(exc: Any) -> int:
    """One line for a parsing error, with the command's --help; help itself when no arguments
    were given to a group that needs one."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        exc.show()
        return int(exc.exit_code)
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    print(f"fleetwatch: error: {_flat(exc.format_message())}{hint}", file=sys.stderr)
    return int(exc.exit_code)


def entrypoint() -> None:
    sys.exit(main())
