"""Where finished requests' records go: memory (tests, in-process analysis) or rotating files."""

from fleetwatch.telemetry.sink.records import (
    MemoryRecordSink,
    RecordSink,
    RecordSinkError,
    RotatingRecordSink,
)

__all__ = ["MemoryRecordSink", "RecordSink", "RecordSinkError", "RotatingRecordSink"]
