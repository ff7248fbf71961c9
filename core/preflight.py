"""Checks a command runs on its whole configuration before it does any work.

A path that cannot serve raises an ``OSError`` whose ``filename`` is the path at fault, so the
front door prints one line naming it (``is a directory, not a file (out/rules.yaml)``); a URL that
is not well formed raises the caller's own error type. None of these create anything: a command
that fails here leaves no file behind.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> output_file(d / "new" / "rules.yaml") == d / "new" / "rules.yaml"
True
>>> output_file(d)
Traceback (most recent call last):
...
IsADirectoryError: [Errno 21] is a directory, not a file: '...'
>>> http_url("http://127.0.0.1:9090", option="--prometheus", error=ValueError)
'http://127.0.0.1:9090'
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["http_url", "input_dir", "input_file", "output_dir", "output_file"]


def _error(kind: type[OSError], code: int, text: str, path: Path) -> OSError:
    return kind(code, text, str(path))


def _writable_parent(path: Path) -> None:
    """The nearest existing ancestor of ``path`` must be a directory this process may write in
    (``atomic_path`` creates the missing ones below it)."""
    ancestor = path.parent
    while not ancestor.exists():
        if ancestor.parent == ancestor:
            break
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise _error(NotADirectoryError, errno.ENOTDIR, "not a directory", ancestor)
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise _error(PermissionError, errno.EACCES, "cannot write in this directory", ancestor)


def output_file(path: str | os.PathLike[str]) -> Path:
    """A file the command will write (replacing it if present): not a directory, in a folder that
    exists or can be made and can be written."""
    p = Path(path)
    if p.is_dir():
        raise _error(IsADirectoryError, errno.EISDIR, "is a directory, not a file", p)
    if p.exists() and not p.is_file():
        raise _error(OSError, errno.EINVAL, "is not a regular file", p)
    _writable_parent(p)
    return p


def output_dir(path: str | os.PathLike[str]) -> Path:
    """A folder the command will write files into: a directory, or absent with a writable
    ancestor."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise _error(NotADirectoryError, errno.ENOTDIR, "is a file, not a directory", p)
        if not os.access(p, os.W_OK | os.X_OK):
            raise _error(PermissionError, errno.EACCES, "cannot write in this directory", p)
        return p
    _writable_parent(p)
    return p


def input_file(path: str | os.PathLike[str]) -> Path:
    """A file the command will read: present, a file, readable."""
    p = Path(path)
    if not p.exists():
        raise _error(FileNotFoundError, errno.ENOENT, "no such file", p)
    if p.is_dir():
        raise _error(IsADirectoryError, errno.EISDIR, "is a directory, not a file", p)
    if not os.access(p, os.R_OK):
        raise _error(PermissionError, errno.EACCES, "cannot read this file", p)
    return p


def input_dir(path: str | os.PathLike[str]) -> Path:
    """A folder the command will read: present, a directory, readable."""
    p = Path(path)
    if not p.exists():
        raise _error(FileNotFoundError, errno.ENOENT, "no such directory", p)
    if not p.is_dir():
        raise _error(NotADirectoryError, errno.ENOTDIR, "is a file, not a directory", p)
    if not os.access(p, os.R_OK | os.X_OK):
        raise _error(PermissionError, errno.EACCES, "cannot read this directory", p)
    return p


def http_url(url: str, *, option: str, error: type[Exception]) -> str:
    """``url`` if it is an absolute http(s) URL with a host (and a valid port); else ``error``
    naming ``option``."""
    example = "e.g. http://127.0.0.1:8000"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise error(f"{option}: {url!r} is not a well-formed URL ({exc}; {example})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise error(f"{option}: {url!r} is not an http(s) URL with a host ({example})")
    if port == 0:
        raise error(f"{option}: {url!r} has port 0 ({example})")
    return url
