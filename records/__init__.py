"""Request records on the analysis side: files read back as checked pandas DataFrames.

The record itself (``RequestRecord``, its fields and checks) is the serving side's, in
``fleetwatch.core.records``; it is re-exported here so an analysis imports one place. The
frame functions load pandas on first use, so ``fleetwatch --help`` does not. Many files (a
directory, a glob) read as one dataset through ``fleetwatch.records.dataset``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetwatch.core.lazy import lazy_attributes, lazy_dir
from fleetwatch.core.records.schema import (
    DERIVED_COLUMNS,
    FIELDS,
    RecordError,
    RequestRecord,
    Status,
)

if TYPE_CHECKING:
    from fleetwatch.records.io import (
        STATUS_DTYPE,
        add_derived,
        from_frame,
        read_records,
        to_frame,
        validate_frame,
        write_records,
    )

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

# The frame functions, defined in ``io`` (the names of __all__ not imported above): pandas loads
# with the first of them used.
__getattr__ = lazy_attributes(__name__, {n: "io" for n in __all__ if n not in globals()})
__dir__ = lazy_dir(__all__)
