"""Record datasets in object storage (``s3://bucket/prefix``, ``gs://…``, anything
``pyarrow.fs`` opens), read by the query engines through ``pyarrow.dataset``: Parquet only (what
``records compact`` writes there; raw JSON-lines segments stay on their hosts' disks), listed
recursively, hidden and temporary objects skipped, hive partitions pruned by the filter like local
folders. Credentials come from the usual places (``AWS_ACCESS_KEY_ID``, ``~/.aws``, an instance
role); options ride in the URL's query (``?endpoint_override=minio:9000&scheme=http``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from fleetwatch.core.records.schema import RecordError
from fleetwatch.core.records.write import PARQUET_SUFFIXES

if TYPE_CHECKING:
    from fleetwatch.records.filters import RecordFilter

__all__ = ["Remote", "arrow_schema", "is_url", "location", "open_remote"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/+")


def location(path: str | os.PathLike[str]) -> str:
    """A path as given on the command line: a URL that a ``Path`` folded (``s3:/b/k``) restored
    to ``s3://b/k``; anything else as it is."""
    text = os.fspath(path)
    m = _SCHEME.match(text)
    if m is None or len(m[1]) < 2:  # C:/ is a drive, not a scheme
        return text
    return f"{m[1]}://{text[m.end() :]}"


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names object storage rather than a local file."""
    return "://" in location(path)


@dataclass(frozen=True)
class Remote:
    """The Parquet objects under one object-storage URL."""

    name: str
    """The URL without its query (what messages say)."""
    fs: Any
    keys: tuple[str, ...]


def open_remote(url: str, where: RecordFilter | None = None) -> Remote:
    """The Parquet objects under ``url``, less the partitions ``where`` cannot match; a
    ``RecordError`` naming the URL when it cannot be listed or holds none."""
    import pyarrow.fs as pafs

    from fleetwatch.records.hive import pruned

    name = url.split("?", 1)[0]
    try:
        fs, root = pafs.FileSystem.from_uri(url)
        infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True, recursive=True))
    except (ValueError, OSError) as exc:
        raise RecordError(
            f"cannot list this object storage ({' '.join(str(exc).split())[:200]})", path=name
        ) from None
    keys = []
    for info in infos:
        rel = PurePosixPath(info.path).relative_to(root.rstrip("/") or "/")
        hidden = any(p.startswith(".") for p in rel.parts)
        if info.type == pafs.FileType.File and not hidden and rel.suffix in PARQUET_SUFFIXES:
            keys.append(info.path)
    if not keys:
        raise RecordError(
            "holds no Parquet record files (object storage is read as Parquet)", path=name
        )
    kept = [str(p) for p in pruned([PurePosixPath(k) for k in sorted(keys)], where)]
    if not kept:
        raise RecordError(
            f"no records match {where.describe() if where else ''}: every partition folder of "
            f"the {len(keys):,} record files lies outside it",
            path=name,
        )
    return Remote(name, fs, tuple(kept))


def arrow_schema(columns: Sequence[str]) -> Any:
    """The Arrow schema of ``columns`` of the ``records`` view (``records.engine.COLUMNS``)."""
    import pyarrow as pa

    from fleetwatch.records.engine import COLUMNS

    kinds = {"VARCHAR": pa.string(), "DOUBLE": pa.float64(), "BIGINT": pa.int64()}
    return pa.schema([(c, kinds[COLUMNS[c]]) for c in columns])
