"""Run `fleetwatch` commands as real processes, fast, and SIGKILL them on cue: this process imports
the record stack once, then forks one child per request line on stdin, a JSON object
``{"argv": [...], "env": {...}, "log": path, "kill_after_s": seconds or null}``, and answers each
with a JSON line ``{"status": exit status, or -9 when killed}`` once the child has ended.

The parent waits on the child through a pidfd: the kill delay is the wait's timeout, and the
SIGKILL goes through the pidfd, so it can never hit another process that reused the pid.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys


def main() -> None:
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import fleetwatch.records.cli
    import fleetwatch.records.compact
    import fleetwatch.records.prune  # noqa: F401
    from fleetwatch.cli import main as fleetwatch_main

    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        # the log exists before the child does: a kill before its first step leaves it empty
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
                os.environ.update(request["env"])
                status = fleetwatch_main(request["argv"])
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(status)
        os.close(fd)
        pidfd = os.pidfd_open(pid)
        delay = request["kill_after_s"]
        if delay is not None:
            ended, _, _ = select.select([pidfd], [], [], delay)
            if not ended:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        _, raw = os.waitpid(pid, 0)
        os.close(pidfd)
        print(json.dumps({"status": os.waitstatus_to_exitcode(raw)}), flush=True)


if __name__ == "__main__":
    main()
