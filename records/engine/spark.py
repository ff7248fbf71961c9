"""Spark through PySpark: the ``records`` view over a dataset's files, read by a cluster.

The same view as DuckDB's (``duck.py``), so the same SQL text runs on both: JSON lines read with
an explicit schema built from ``COLUMNS`` (no inference pass; a key a line lacks reads as NULL; a
line that is not JSON, or a value of the wrong type, fails the read: mode ``FAILFAST``), Parquet
read with ``mergeSchema`` (a column no file has reads as NULL; files whose schemas do not merge
read with the columns' types given, ``SparkEngine._parquet``), both cast to the ``COLUMNS`` types,
with ``filename`` added (``input_file_name()``: the file as Spark names it, a ``file:`` URL for a
local path). Two temporary views: ``everything`` (every row) and ``records`` (the rows the filter
keeps). When the dataset has JSON lines, ``everything`` is persisted (memory, then disk) so each
reduction does not parse the JSON again; a server that refuses to persist (a serverless one) reads
it again each time.

The master is a standalone cluster (``spark://host:7077``), ``local[N]`` (in this process), or a
Spark Connect server (``sc://host:15002``, e.g. Databricks, EMR or Dataproc; the client needs
``grpcio``, ``grpcio-status`` and ``zstandard``, which the ``spark`` extra installs). Paths are
read by the cluster, not by this process: a local path is valid only where the executors (or the
Connect server) see the same file system, as with a cluster on this machine. A real cluster needs
paths it can reach, given as URLs (``s3a://``, ``abfss://``, ``gs://``, ``dbfs:/``), which are
passed to Spark unchanged.

PySpark is imported when an engine or a session is made, never when this module is imported, so
the command and every other module load without it (``pip install 'fleetwatch[spark]'``; a
classic session also needs Java 17 or later). Errors are a ``RecordError`` of one line, naming the
file Spark could not read where it says which.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlparse

from fleetwatch.core.records.schema import RecordError
from fleetwatch.core.records.write import PARQUET_SUFFIXES
from fleetwatch.records.engine import COLUMNS, LABELS, REQUIRED, implausible, view_columns

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from fleetwatch.records.filters import RecordFilter

__all__ = [
    "INSTALL_HINT",
    "SESSION_CONF",
    "SparkEngine",
    "location",
    "session_kind",
    "spark_session",
]

INSTALL_HINT = "pip install 'fleetwatch[spark]' (PySpark with its Spark Connect client)"
SESSION_CONF: Mapping[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    # ${...} in SQL text is a value, never a substitution (a filter's literal is the user's)
    "spark.sql.variable.substitute": "false",
}
"""What every session the engine uses is set to, so its SQL reads as DuckDB's does."""
_DRIVER_CONF: Mapping[str, str] = {
    "spark.app.name": "fleetwatch",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}
_DRIVER_JAVA = "spark.driver.extraJavaOptions"
_TYPES = {"VARCHAR": "string", "DOUBLE": "double", "BIGINT": "long"}
# The driver's own log: warnings and errors, less what comes back as the exception anyway (a
# failed task, a missing path looked up as a stream's folder) and the note that Hadoop's native
# library is absent. At warn (the level PySpark's shell sets) the shell does not announce it.
_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = off
logger.sink.name = org.apache.spark.sql.execution.streaming
logger.sink.level = error
"""
_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")
_CONDITION = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\] ([^\n]*)")
_FILE = re.compile(r"(?:while reading file|Path does not exist:) (\S+?)\.?(?:\s|$)")
_PLAIN = {
    "MALFORMED_RECORD_IN_PARSING": "a line is not a JSON object with the record's field types",
    "PATH_NOT_FOUND": "no such file",
    "FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER": "not a Parquet file",
}


def session_kind(master: str) -> Literal["classic", "connect"]:
    """Which session ``master`` asks for: ``connect`` for ``sc://``, ``classic`` for a
    standalone master (``spark://``) or ``local[N]``; anything else is a ``RecordError``."""
    if master.startswith("sc://"):
        return "connect"
    if master.startswith("spark://") or re.fullmatch(r"local(\[(\d+|\*)\])?", master):
        return "classic"
    raise RecordError(
        f"--spark-master {master!r}: give a standalone master (spark://host:7077), "
        "a Spark Connect server (sc://host:15002) or local[N]"
    )


def location(file: str | os.PathLike[str]) -> str:
    """The name Spark is given for a file: a URL (``s3a://``, ``abfss://``, ``dbfs:/``) unchanged,
    a local path made absolute (the executors do not share this process's directory)."""
    text = os.fspath(file)
    if _URL.match(text):
        return text
    return os.path.abspath(text)


def _is_parquet(name: str) -> bool:
    return (
        Path(urlparse(name).path if _URL.match(name) else name).suffix.lower() in PARQUET_SUFFIXES
    )


def _local(name: str) -> str:
    """A ``file:`` URL as the path it names; any other name as it is."""
    parsed = urlparse(name)
    return unquote(parsed.path) if parsed.scheme == "file" else name


def _context_loggers() -> list[logging.Logger]:
    """PySpark's loggers of a failed query's context (made as PySpark makes them: they are
    called with its own keywords)."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # a release without them
        return []
    return [PySparkLogger.getLogger(name) for name in _CONTEXT_LOGGERS]


@contextmanager
def _quiet() -> Iterator[None]:
    """Without PySpark's warnings about this pandas release and about its Arrow path, and without
    its log of a failed query's context: the error comes back as the exception."""
    loggers = _context_loggers()
    before = [logger.disabled for logger in loggers]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
        warnings.filterwarnings("ignore", message="toPandas attempted Arrow optimization")
        warnings.filterwarnings("ignore", module=r"pyspark(\.|$)")  # its own pandas calls
        for logger in loggers:
            logger.disabled = True
        try:
            yield
        finally:
            for logger, was in zip(loggers, before, strict=True):
                logger.disabled = was


def _pyspark_errors() -> tuple[type[BaseException], ...]:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JError)


def _session_class() -> type[SparkSession]:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise RecordError(f"the spark engine needs PySpark: {INSTALL_HINT}") from None
    return SparkSession  # type: ignore[no-any-return]  # Any where PySpark is not installed


def _running(master: str) -> SparkSession | None:
    """The classic session this process already runs (a process has one driver), if any; one
    on another master than ``master`` is a ``RecordError``."""
    if session_kind(master) != "classic":
        return None
    running = _session_class().getActiveSession()
    if running is not None and running.sparkContext.master != master:
        raise RecordError(
            f"--spark-master {master}: this process already runs a Spark driver on "
            f"{running.sparkContext.master}"
        )
    return running


def spark_session(master: str, *, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A session on ``master`` (see ``session_kind``) with ``SESSION_CONF`` and ``conf`` set. A
    classic session starts a driver in this process: no web UI, app name ``fleetwatch``, the
    driver's log at warnings, less the noise (unless ``conf``'s ``spark.driver.extraJavaOptions``
    names a ``log4j2.configurationFile`` of its own)."""
    kind = session_kind(master)
    SparkSession = _session_class()
    settings = {**SESSION_CONF, **(conf or {})}
    errors = _pyspark_errors()
    if kind == "connect":
        builder = SparkSession.builder.remote(master)
        for key, value in settings.items():
            builder = builder.config(key, value)
        try:
            with _quiet():
                return builder.create()  # its own, never another engine's
        except ImportError as exc:
            raise RecordError(f"a Spark Connect session needs {exc}: {INSTALL_HINT}") from None
        except errors as exc:
            raise _record_error(exc, f"no session on the Spark Connect server {master}") from None
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RecordError(
            f"--spark-master {master}: a Spark driver needs Java 17 or later on PATH or in "
            "JAVA_HOME (Debian: apt-get install default-jre-headless)"
        )
    with tempfile.TemporaryDirectory(prefix="fleetwatch-spark-") as tmp:
        log4j = Path(tmp, "log4j2.properties")
        log4j.write_text(_LOG4J)
        java = settings.get(_DRIVER_JAVA, "")
        if "log4j2.configurationFile" not in java:
            settings[_DRIVER_JAVA] = f"-Dlog4j2.configurationFile=file:{log4j} {java}".strip()
        builder = SparkSession.builder.master(master)
        for key, value in {**_DRIVER_CONF, **settings}.items():
            builder = builder.config(key, value)
        try:
            with _quiet():
                return builder.getOrCreate()
        except errors as exc:
            raise _record_error(exc, f"no Spark session on {master}") from None


class SparkEngine:
    """The ``records`` view of ``files`` (only rows ``where`` keeps) in a Spark session: one
    made on ``master`` (stopped by ``close``), or ``session``, a caller's, or the classic
    session this process already runs on ``master``: on a session not its own the engine works
    in a new one that shares its driver (its own views and settings) and leaves it running."""

    name = "spark"
    in_file_order = False

    def __init__(
        self,
        files: Sequence[str | os.PathLike[str]],
        *,
        where: RecordFilter | None = None,
        columns: Sequence[str] | None = None,
        master: str | None = None,
        session: SparkSession | None = None,
        conf: Mapping[str, str] | None = None,
    ) -> None:
        if (master is None) == (session is None):
            raise TypeError("SparkEngine takes a master or a session, one of them")
        self.files = tuple(location(f) for f in files)
        self.where = where
        self.counted: tuple[int, int] | None = None
        filtered = () if where is None else where.columns()
        wanted = (
            list(COLUMNS)
            if columns is None
            else list(dict.fromkeys([*REQUIRED, *columns, *filtered]))
        )
        self.columns = tuple(wanted)
        if session is None and master is not None:
            session = _running(master)
        self._owned = session is None
        if session is None:
            assert master is not None
            self.spark: SparkSession = spark_session(master, conf=conf)
        else:
            # its own temporary views and settings; a Connect session starts from the
            # server's defaults, so SESSION_CONF is set on either
            self.spark = session.newSession()
            for key, value in {**SESSION_CONF, **(conf or {})}.items():
                self.spark.conf.set(key, value)
        self._cached: DataFrame | None = None
        try:
            self._views(wanted)
        except BaseException:
            self.close()
            raise

    def _views(self, wanted: list[str]) -> None:
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        errors = _pyspark_errors()
        kinds = {"string": T.StringType(), "double": T.DoubleType(), "long": T.LongType()}
        types = {c: _TYPES[COLUMNS[c]] for c in wanted}
        jsonl = [f for f in self.files if not _is_parquet(f)]
        parquet = [f for f in self.files if _is_parquet(f)]
        parts: list[DataFrame] = []
        schema = T.StructType([T.StructField(c, kinds[types[c]]) for c in wanted])
        try:
            if jsonl:
                frame = self.spark.read.schema(schema).option("mode", "FAILFAST").json(jsonl)
                parts.append(frame.select(*wanted, F.input_file_name().alias("filename")))
            if parquet:
                parts.append(self._parquet(parquet, wanted, schema))
            if not parts:
                nulls = [F.lit(None).cast(types[c]).alias(c) for c in wanted]
                filename = F.lit(None).cast("string").alias("filename")
                parts.append(self.spark.range(0).select(*nulls, filename))
            everything = parts[0]
            for part in parts[1:]:
                everything = everything.unionByName(part)
            if jsonl:
                everything = self._persisted(everything)
            everything.createOrReplaceTempView("everything")
            cond = "TRUE" if self.where is None else self.where.sql()
            self.spark.sql(
                f"CREATE OR REPLACE TEMP VIEW records AS SELECT * FROM (SELECT "
                f"{view_columns(wanted)} FROM everything) AS filled WHERE {cond}"
            )
        except errors as exc:
            raise _record_error(exc) from None

    def _parquet(self, files: list[str], wanted: list[str], schema: Any) -> DataFrame:
        """The Parquet files' ``wanted`` columns, each cast to its type, a column no file holds
        NULL, with the file each row came from. The files' schemas are merged, so a column
        stored as another type (integer times, numbers as text) is cast as DuckDB casts it.
        Where they do not merge (a column not read typed a list of gaps in one file and null in
        another, as batches without gaps were written before ``record_schema``), the columns
        read are given their types instead: a column a file lacks reads as NULL, a narrower
        integer or float is widened, and any other type is a read error naming the file."""
        from pyspark.sql import functions as F

        filename = F.input_file_name().alias("filename")
        try:
            frame = self.spark.read.option("mergeSchema", "true").parquet(*files)
            have = {f.name for f in frame.schema.fields}  # a Connect session merges here
        except _pyspark_errors() as exc:
            if "CANNOT_MERGE_SCHEMAS" not in str(exc):
                raise
            return self.spark.read.schema(schema).parquet(*files).select(*wanted, filename)
        types = {c: _TYPES[COLUMNS[c]] for c in wanted}
        cols = [(F.col(c) if c in have else F.lit(None)).cast(types[c]).alias(c) for c in wanted]
        return frame.select(*cols, filename)

    def _persisted(self, frame: DataFrame) -> DataFrame:
        from pyspark import StorageLevel

        try:
            frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        except _pyspark_errors():
            return frame  # a server that keeps nothing (serverless): each query reads again
        self._cached = frame
        return frame

    def query(self, sql: str) -> pd.DataFrame:
        try:
            with _quiet():
                frame: pd.DataFrame = self.spark.sql(sql).toPandas()
        except _pyspark_errors() as exc:
            raise _record_error(exc) from None
        return frame

    def batches(self, sql: str, rows: int) -> Iterator[pd.DataFrame]:
        """The result of ``sql`` brought to this process, ``rows`` rows at a time (Spark's
        partitions streamed one by one: the driver holds one partition, not the result)."""
        import pandas as pd

        try:
            frame = self.spark.sql(sql)
            names = frame.columns
            chunk: list[Any] = []
            with _quiet():
                for row in frame.toLocalIterator(prefetchPartitions=True):
                    chunk.append(tuple(row))
                    if len(chunk) >= rows:
                        yield pd.DataFrame.from_records(chunk, columns=names)
                        chunk = []
            if chunk:
                yield pd.DataFrame.from_records(chunk, columns=names)
        except _pyspark_errors() as exc:
            raise _record_error(exc) from None

    def frames(
        self,
        columns: Sequence[str],
        where: str | None = None,
        order: Sequence[str] = (),
        rows: int = 1 << 18,
        replicas: Sequence[str] = (),
    ) -> Iterator[pd.DataFrame]:
        """``records``' ``columns`` (stored or ``DERIVED``) as ``DuckEngine.frames`` gives them
        (``replicas`` left to Spark's own pruning by ``where``),
        brought in one piece by Spark's Arrow transfer (a row-by-row stream costs more than
        the rows: a caller bounds a call by ``where``, ``rows`` is not used), the label
        columns categorical."""
        from fleetwatch.records.engine.reductions import DERIVED

        select = ", ".join(f"{DERIVED[c]} AS {c}" if c in DERIVED else c for c in columns)
        cond = "" if where is None else f" WHERE {where}"
        sort = f" ORDER BY {', '.join(order)}" if order else ""
        out = self.query(f"SELECT {select} FROM records{cond}{sort}")
        for c in columns:
            if c in LABELS:
                out[c] = out[c].astype("category")
        yield out

    def scalar(self, sql: str) -> Any:
        """The one value ``sql`` returns."""
        try:
            rows = self.spark.sql(sql).take(1)
        except _pyspark_errors() as exc:
            raise _record_error(exc) from None
        return rows[0][0] if rows else None

    def vouched(self) -> int | None:
        """None: the cluster checks every row (its files may lie where this process cannot read
        their footers)."""
        return None

    def finished_range(self) -> tuple[float, float] | None:
        """None: a query finds the first and last finish."""
        return None

    def check(self) -> tuple[int, int]:
        """Rows in the dataset and rows the filter keeps; a file whose rows lack a column every
        record has is a ``RecordError`` naming it."""
        missing = " OR ".join(f"{c} IS NULL" for c in REQUIRED)
        try:
            row = self.spark.sql(
                f"SELECT count(*), count(*) FILTER (WHERE {missing}), "
                f"min(filename) FILTER (WHERE {missing}) FROM everything"
            ).take(1)[0]
        except _pyspark_errors() as exc:
            raise _record_error(exc) from None
        total, bad, where = int(row[0]), int(row[1]), row[2]
        if bad:
            raise RecordError(
                f"{bad:,} row(s) lack one of {', '.join(REQUIRED)}: not request records",
                path=_local(str(where)),
            )
        odd = self.scalar(f"SELECT min(filename) FROM everything WHERE {implausible(self.columns)}")
        if odd is not None:
            local = Path(_local(str(odd)))
            if local.is_file():
                from fleetwatch.records.io import read_records

                try:
                    read_records(local)
                except RecordError as exc:
                    raise exc from None
        kept = int(self.scalar("SELECT count(*) FROM records"))
        self.counted = (total, kept)
        return total, kept

    def share_memory(self, parts: int) -> None:
        """Nothing to share: the work and its memory are the cluster's; this process holds
        one partition at a time."""

    def close(self) -> None:
        spark = getattr(self, "spark", None)
        if spark is None:
            return
        try:
            if self._cached is not None:
                self._cached.unpersist()
            if self._owned:
                spark.stop()
            else:
                spark.catalog.dropTempView("records")
                spark.catalog.dropTempView("everything")
        except _pyspark_errors():
            pass  # a session already gone has nothing left to release
        finally:
            self._cached = None
            del self.spark

    def __enter__(self) -> SparkEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _record_error(exc: BaseException, lead: str = "records could not be read") -> RecordError:
    """Spark's error as one line: its condition, said plainly where it is a known one, and the
    file it names (a ``file:`` URL as its path)."""
    text = str(exc)
    found = _FILE.search(text)
    path = _local(found.group(1)) if found else None
    conditions = _CONDITION.findall(text)
    # the cause, not the wrapper that only says a file failed
    specific = [c for c in conditions if not c[0].startswith("FAILED_READ_FILE.NO_HINT")]
    if specific or conditions:
        condition, message = (specific or conditions)[0]
        message = re.sub(r"\s*SQLSTATE: \w+.*$", "", message).strip()
        plain = _PLAIN.get(condition) or _PLAIN.get(condition.split(".")[0])
        said = f"{plain} (Spark: {condition})" if plain else f"{message} ({condition})"
    else:
        lines = [line.strip(" :") for line in text.splitlines() if line.strip(" :")]
        said = lines[0] if lines else type(exc).__name__
    return RecordError(f"{lead}: {' '.join(said.split())[:400]}", path=path)
