"""The `fleetwatch` command: composes the sub-commands each package owns, and its one error path.

Expected failures print one line, ``fleetwatch: error: <what> (<where>)``, on stderr and exit 2:
each package's own exception type for bad input (listed in ``_USER_ERRORS``), a file that cannot
be read or written (the path is named), a missing optional extra (the install command is named),
and a command line that does not parse (the command's ``--help`` is named). Anything else is a
bug: one line and exit 1, with ``--debug`` for the traceback.
"""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from fleetwatch.demo.cli import demo

# Each package's sub-app: name -> module holding its `app`, in the order --help lists them. A
# sub-app is imported when its name is typed (or when the top-level --help lists them all), so
# `fleetwatch slo validate` loads slo's command line and no other package's.
SUB_APPS = {
    "records": "fleetwatch.records.cli",
    "telemetry": "fleetwatch.telemetry_cli",
    "slo": "fleetwatch.slo.cli",
    "fleet": "fleetwatch.fleet.cli",
    "resilience": "fleetwatch.resilience.cli",
    "engine": "fleetwatch.engine_probe.cli",
    "probe": "fleetwatch.engine_probe.probe.cli",
    "dashboards": "fleetwatch.dashboards.cli",
}

# Each package's exception type for bad input: (module, class).
_USER_ERRORS = (
    ("fleetwatch.fleet.errors", "AnalysisError"),
    ("fleetwatch.dashboards.errors", "DashboardError"),
    ("fleetwatch.engine_probe.engine.errors", "EngineConfigError"),
    ("fleetwatch.engine_probe.probe.errors", "ProbeError"),
    ("fleetwatch.core.model", "ModelShapeError"),
    ("fleetwatch.core.kubernetes", "ManifestError"),
    ("fleetwatch.core.profiles.types", "ProfileError"),
    ("fleetwatch.core.records.schema", "RecordError"),
    ("fleetwatch.core.rules.render", "RulesError"),
    ("fleetwatch.resilience.errors", "ResilienceConfigError"),
    ("fleetwatch.slo.errors", "SLOSpecError"),
)


@functools.cache
def user_errors() -> tuple[type[Exception], ...]:
    """The exception types that are bad input, not bugs (imported when an error is judged)."""
    return tuple(getattr(importlib.import_module(m), name) for m, name in _USER_ERRORS)


class _Commands(TyperGroup):
    """The root group: ``demo`` plus each package's sub-app, loaded on first use."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [*(n for n in super().list_commands(ctx) if n not in SUB_APPS), *SUB_APPS]

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.commands and args[0] not in SUB_APPS:
            # no such command: typer suggests from the commands it holds, so hold them all
            for name in SUB_APPS:
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in SUB_APPS:
            # Composed exactly as add_typer composes it under this root (its help layout, no
            # completion options), through a parent of the same settings.
            parent = _typer()
            parent.add_typer(importlib.import_module(SUB_APPS[cmd_name]).app, name=cmd_name)
            command = typer.main.get_command(parent).commands[cmd_name]  # type: ignore[attr-defined]
            self.commands[cmd_name] = command
        return command


def _typer(**kwargs: Any) -> typer.Typer:
    return typer.Typer(
        pretty_exceptions_enable=False, rich_markup_mode=None, add_completion=False, **kwargs
    )


app = _typer(
    name="fleetwatch",
    cls=_Commands,
    help="SRE observability and reliability for LLM inference fleets.",
    no_args_is_help=True,
)


def _version(value: bool) -> None:
    if value:
        from fleetwatch.version import __version__

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


# Optional extras: the module a command imports -> the extra that provides it.
EXTRAS = {"torch": "engine"}


def one_line(exc: BaseException) -> tuple[str, int]:
    """The message and exit status for an exception that reached the command line."""
    if isinstance(exc, user_errors()):
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
        if "--debug" in args and not isinstance(exc, user_errors()):
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


def single_threaded_blas() -> None:
    """One OpenBLAS thread unless the user set otherwise: the analyses' matrix products are
    small (a few columns by a chunk of rows), and OpenBLAS's threads spin on them, doubling the
    CPU time for no wall time (``fleet tail``'s normal equations, measured). Read when numpy is
    first imported, which no sub-command does before this runs."""
    import os

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def entrypoint() -> None:
    single_threaded_blas()
    sys.exit(main())
