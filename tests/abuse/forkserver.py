"""Start `engine serve` processes fast: this process imports everything once, then forks one
child per request line on stdin (a JSON list: log file, then the serve arguments) and answers
with the child's pid. Children are reaped automatically; the tests signal them by pid.

Importing torch and the server takes seconds on a small box; forking takes milliseconds, so the
SIGKILL runs of ``test_record_loss`` stay short. Nothing runs torch before the fork.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def main() -> None:
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    import torch  # noqa: F401
    import typer

    import fleetwatch.engine_probe.serve.lifecycle
    import fleetwatch.telemetry.instrument  # noqa: F401
    from fleetwatch.engine_probe.serve.command.cli import serve

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # reap children without waiting
    print("ready", flush=True)
    for line in sys.stdin:
        log, *args = json.loads(line)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
            sys.argv = ["serve", *args]
            try:
                typer.run(serve)
            finally:
                os._exit(0)
        print(pid, flush=True)


if __name__ == "__main__":
    main()
