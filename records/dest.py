"""Where compacted records are written: a local folder, or object storage (``s3://bucket/prefix``,
anything ``pyarrow.fs`` opens), behind the five steps a compaction batch takes.

Both write a batch's files under the deterministic names its journal gives them, so doing a batch
again replaces its files instead of adding a second copy. They differ in when a file becomes
visible to a reader:

- ``LocalFolder`` writes each file to a hidden temporary beside its final name (``.<name>.tmp``,
  which readers skip), fsyncs it, and ``publish`` renames it into place; ``sync`` fsyncs the
  folders so the renames survive a power cut.
- ``ObjectStore`` has no rename: ``write`` encodes the file in memory (one batch's compressed
  files at most) and ``publish`` uploads it under its final name, where it appears whole once
  the upload completes, never half; ``sync`` has nothing to do.

An object store is opened with ``pyarrow.fs.FileSystem.from_uri``: credentials come from the
usual places (``AWS_ACCESS_KEY_ID``, ``~/.aws``, an instance role), and options ride in the URL's
query (``s3://bucket/prefix?region=eu-west-1&endpoint_override=minio:9000&scheme=http``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from fleetwatch.core.atomic import fsync_directory
from fleetwatch.core.records.schema import RecordError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "Destination",
    "LocalFolder",
    "ObjectStore",
    "identity",
    "is_url",
    "open_destination",
]


def is_url(dest: str) -> bool:
    """Whether ``dest`` names object storage (``s3://…``, ``gs://…``) rather than a folder."""
    return "://" in dest


def identity(dest: str) -> str:
    """What names a destination whatever way it is written: a folder's absolute path (links
    resolved), a URL without its query."""
    return dest.split("?", 1)[0] if is_url(dest) else str(Path(dest).resolve())


class Destination(Protocol):
    """One compacted dataset's files, by paths relative to its root (``/``-separated)."""

    name: str
    """The destination as the user named it, for messages."""

    def write(self, rel: str, table: pa.Table) -> None: ...

    def publish(self, rel: str) -> None: ...

    def sync(self, rels: Iterable[str]) -> None: ...

    def exists(self, rel: str) -> bool: ...

    def discard(self, rel: str) -> None: ...


def _write_parquet(table: pa.Table, where: object) -> None:
    """A compacted file: its rows were checked when read from their segments, so it is stamped
    checked (``stamp_checked``), in the record files' layout (``parquet_layout``)."""
    import pyarrow.parquet as pq

    from fleetwatch.core.records.write import parquet_layout, stamp_checked

    pq.write_table(stamp_checked(table), where, **parquet_layout(table))


def write_checked(table: pa.Table, path: Path) -> None:
    """Write a compacted file (``_write_parquet``) to ``path`` and fsync it."""
    with open(path, "wb") as fh:
        _write_parquet(table, fh)
        fh.flush()
        os.fsync(fh.fileno())


class LocalFolder:
    """A compacted dataset in a local folder: temporary file, fsync, rename, fsync of the folder."""

    def __init__(self, root: Path, name: str | None = None) -> None:
        self.root = root
        self.name = name or str(root)

    def _temp(self, rel: str) -> Path:
        final = self.root / rel
        return final.with_name(f".{final.name}.tmp")

    def write(self, rel: str, table: pa.Table) -> None:
        """Write ``rel``'s hidden temporary file and fsync it (not yet visible)."""
        tmp = self._temp(rel)
        _make_folders(tmp.parent, self.root)
        write_checked(table, tmp)

    def publish(self, rel: str) -> None:
        os.replace(self._temp(rel), self.root / rel)

    def sync(self, rels: Iterable[str]) -> None:
        for folder in sorted({(self.root / rel).parent for rel in rels}):
            fsync_directory(folder)

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def discard(self, rel: str) -> None:
        """Remove ``rel`` and its temporary file (either may be missing), then the folders
        that leaves empty, up to the root."""
        final = self.root / rel
        final.unlink(missing_ok=True)
        self._temp(rel).unlink(missing_ok=True)
        folder = final.parent
        while folder != self.root and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:
                break  # not empty (or gone): leave it and the folders above
            folder = folder.parent
        fsync_directory(folder)


def _make_folders(folder: Path, root: Path) -> None:
    """``mkdir -p folder``, fsyncing the parent of each folder made so that it survives too."""
    missing: list[Path] = []
    p = folder
    while not p.is_dir():
        missing.append(p)
        if p == root or p.parent == p:
            break
        p = p.parent
    for made in reversed(missing):
        made.mkdir(exist_ok=True)
        fsync_directory(made.parent)


class ObjectStore:
    """A compacted dataset under an object-storage prefix, through ``pyarrow.fs``."""

    def __init__(self, url: str) -> None:
        import pyarrow.fs as pafs

        try:
            fs, root = pafs.FileSystem.from_uri(url)
        except (ValueError, OSError) as exc:
            raise RecordError(
                f"cannot open this object storage ({' '.join(str(exc).split())[:200]})",
                path=url.split("?", 1)[0],
            ) from None
        self._fs = fs
        self._root = root.rstrip("/")
        self._staged: dict[str, bytes] = {}
        self.name = url.split("?", 1)[0]

    def _path(self, rel: str) -> str:
        return f"{self._root}/{rel}"

    def write(self, rel: str, table: pa.Table) -> None:
        """Encode ``rel`` in memory, for ``publish`` to upload."""
        import pyarrow as pa

        out = pa.BufferOutputStream()
        _write_parquet(table, out)
        self._staged[rel] = out.getvalue().to_pybytes()

    def publish(self, rel: str) -> None:
        """Upload ``rel`` under its final name: visible, whole, once the upload completes."""
        with self._fs.open_output_stream(self._path(rel)) as out:
            out.write(self._staged.pop(rel))

    def sync(self, rels: Iterable[str]) -> None:
        return None

    def exists(self, rel: str) -> bool:
        import pyarrow.fs as pafs

        return bool(self._fs.get_file_info(self._path(rel)).type == pafs.FileType.File)

    def discard(self, rel: str) -> None:
        self._staged.pop(rel, None)
        if self.exists(rel):
            self._fs.delete_file(self._path(rel))


def open_destination(dest: str) -> Destination:
    """The destination ``dest`` names: a URL opens object storage, anything else a folder."""
    if is_url(dest):
        return ObjectStore(dest)
    return LocalFolder(Path(dest), dest)
