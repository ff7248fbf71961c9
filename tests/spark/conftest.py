"""The Spark lane: a real standalone cluster on loopback (one master, one worker of 2 cores),
started once per session from the PySpark install's ``bin/spark-class``, one classic session on
it shared by the tests, and a Spark Connect server in front of the same cluster (started with it,
waited for when a test first asks for it).

``make test`` installs PySpark (``make spark``: the ``spark`` extra, and Debian's
``default-jre-headless`` when there is no ``java``). Without PySpark or Java 17+ these tests are
skipped, except in CI (CI=true), where a missing lane is a failure. Readiness is polled (the
master's port, then its JSON status until the worker is registered; the Connect server's port),
against a deadline. Every process is a child whose PID is kept and is stopped by signalling that
PID (SIGTERM, a wait, SIGKILL), an executor a worker leaves behind by its own PID; nothing is
matched by name. Their logs are in the session's temporary folder, and the end of one is shown
when its process fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.child_processes import free_port, stop_tree

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

START_TIMEOUT_S = 180.0
"""Deadline for a daemon to be ready (a loaded 2-core machine starts a JVM in seconds)."""
LOOPBACK = "127.0.0.1"
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""Every JVM of the lane compiles with C1 only and collects serially: for seconds-long work on
kilobytes that starts faster and leaves the CPUs to the others."""
DRIVER_CONF: Mapping[str, str] = {
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    # one core each for the lane's session and the Connect server: both run on the one worker
    "spark.cores.max": "1",
    "spark.executor.memory": "768m",
    "spark.sql.shuffle.partitions": "2",
    "spark.executor.extraJavaOptions": JVM_OPTS,
}
"""What the lane's sessions are given besides the engine's own settings."""


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _missing(message: str) -> None:
    if _in_ci():
        pytest.fail(message)
    pytest.skip(message)


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").is_file():
        return str(Path(home, "bin", "java"))
    return shutil.which("java")


def _java_major(java: str) -> int:
    """The release of ``java -version`` (``1.8.0_392`` is 8, ``17.0.15`` is 17)."""
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if found is None:
        return 0
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


@pytest.fixture(scope="session")
def spark_home() -> Path:
    """The PySpark install (its ``bin/spark-class``), with a Java it can run on."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        _missing("PySpark is not installed: run 'make spark' (pip install 'fleetwatch[spark]')")
    assert spec is not None and spec.origin is not None
    java = _java()
    if java is None:
        _missing(
            "java not found on PATH or in JAVA_HOME: run 'make spark' as root (Debian's "
            "default-jre-headless) or install Java 17+"
        )
    assert java is not None
    if _java_major(java) < 17:
        _missing(f"{java} is older than Java 17, which Spark 4 needs")
    return Path(spec.origin).parent


def port_open(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=1):
            return True
    except OSError:
        return False


@dataclass
class Daemon:
    """One Spark JVM run by ``spark-class`` (which becomes the JVM: its PID is the JVM's)."""

    name: str
    argv: Sequence[str]
    log: Path
    env: Mapping[str, str]
    proc: subprocess.Popen[bytes] | None = None
    started_s: float = 0.0
    ready_s: float | None = field(default=None)

    def start(self) -> None:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                list(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(self.env),
                cwd=self.log.parent,
            )
        self.started_s = time.monotonic()

    def wait_until(self, ready: Callable[[], bool], what: str) -> None:
        """Poll ``ready`` until it holds, this process dies, or the deadline passes."""
        assert self.proc is not None
        deadline = self.started_s + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"Spark {self.name} exited with {self.proc.returncode} before {what}:\n"
                    + self.tail()
                )
            if ready():
                self.ready_s = time.monotonic() - self.started_s
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"Spark {self.name}: not {what} in {START_TIMEOUT_S:g} s:\n{self.tail()}"
        )

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the JVM (a worker kills its executors on the way out), then SIGKILL it and
        whatever of its process tree is left, by PID."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_tree(proc, timeout_s)


@dataclass(frozen=True)
class Cluster:
    """A running standalone cluster: its master URL, and the Connect server in front of it."""

    master: str
    connect: Daemon
    connect_port: int


def alive_workers(webui_port: int) -> int:
    """Workers the master counts alive (its JSON status page), 0 while it cannot say."""
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{webui_port}/json/", timeout=2) as r:
            count: int = json.load(r).get("aliveworkers", 0)
            return count
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return 0


def _connect_server(
    spark_class: Path, master: str, port: int, logs: Path, env: Mapping[str, str]
) -> Daemon:
    """A Spark Connect server on ``master``, serving gRPC on ``port``."""
    conf = {
        **DRIVER_CONF,
        "spark.driver.extraJavaOptions": JVM_OPTS,
        "spark.ui.enabled": "false",
        "spark.connect.grpc.binding.address": LOOPBACK,
        "spark.connect.grpc.binding.port": str(port),
    }
    return Daemon(
        "connect server",
        [
            str(spark_class),
            "org.apache.spark.deploy.SparkSubmit",
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name",
            "fleetwatch-connect",
            "--master",
            master,
            *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")),
        ],
        logs / "connect.log",
        env,
    )


@pytest.fixture(scope="session")
def spark_cluster(spark_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and one worker (2 cores, 2 GB) on loopback, and a Connect server on them
    (started now, waited for by ``connect_url``), all stopped at the session's end."""
    logs = tmp_path_factory.mktemp("spark")
    spark_class = spark_home / "bin" / "spark-class"
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "SPARK_LOCAL_IP": LOOPBACK,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(logs),
        "SPARK_WORKER_DIR": str(logs / "work"),
        "SPARK_DAEMON_JAVA_OPTS": JVM_OPTS,
    }
    port, webui = free_port(), free_port()
    master_url = f"spark://{LOOPBACK}:{port}"
    master = Daemon(
        "master",
        [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
         "--port", str(port), "--webui-port", str(webui)],
        logs / "master.log",
        env,
    )  # fmt: skip
    worker = Daemon(
        "worker",
        [str(spark_class), "org.apache.spark.deploy.worker.Worker", master_url,
         "--cores", "2", "--memory", "2g", "--webui-port", str(free_port()),
         "--work-dir", str(logs / "work")],
        logs / "worker.log",
        env,
    )  # fmt: skip
    connect_port = free_port()
    connect = _connect_server(spark_class, master_url, connect_port, logs, env)
    with ExitStack() as stack:  # stopped last-in first-out: server, worker, master
        master.start()
        stack.callback(master.stop)
        master.wait_until(lambda: port_open(port) and port_open(webui), "listening")
        worker.start()
        stack.callback(worker.stop)
        worker.wait_until(lambda: alive_workers(webui) >= 1, "registered with the master")
        print(
            f"Spark master ready in {master.ready_s:.1f} s, worker in {worker.ready_s:.1f} s",
            file=sys.stderr,
        )
        connect.start()
        stack.callback(connect.stop)
        yield Cluster(master_url, connect, connect_port)


@pytest.fixture(scope="session")
def spark(spark_cluster: Cluster) -> Iterator[SparkSession]:
    """The lane's classic session on the cluster (the driver in this process, on loopback)."""
    from fleetwatch.records.engine.spark import spark_session

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARK_LOCAL_IP", LOOPBACK)  # read by the driver's JVM as it starts
        mp.setenv("PYSPARK_PYTHON", sys.executable)
        started = time.monotonic()
        session = spark_session(
            spark_cluster.master, conf={**DRIVER_CONF, "spark.driver.extraJavaOptions": JVM_OPTS}
        )
    print(f"Spark session ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def connect_url(spark_cluster: Cluster) -> str:
    """The Connect server, once it serves, as ``sc://127.0.0.1:PORT``."""
    server = spark_cluster.connect
    server.wait_until(lambda: port_open(spark_cluster.connect_port), "serving")
    print(f"Spark Connect server ready in {server.ready_s:.1f} s", file=sys.stderr)
    return f"sc://{LOOPBACK}:{spark_cluster.connect_port}"
