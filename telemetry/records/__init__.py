"""The request record: one finished request, shared by every analysis in fleetwatch."""

from telemetry.records.io import (
    STATUS_DTYPE,
    add_derived,
    from_frame,
    read_records,
    to_frame,
    validate_frame,
    write_records,
)
from telemetry.records.schema import DERIVED_COLUMNS, FIELDS, RecordError, RequestRecord, Status

__all__ = [
    "DERIVED_COLUMNS",
    "FIELDS",
    "STATUS_DTYPE",
    "RecordError",
    "RequestRecord",
    "Status",
    "add_derived",
    "from_frame",
    "read_records",
    "to_frame",
    "validate_frame",
    "write_records",
]
