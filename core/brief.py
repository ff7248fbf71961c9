"""``brief(value)``: a short, bounded ``repr`` for error messages about user input.

An error message must not cost more than the input that caused it: ``repr`` of a YAML alias bomb
(a few hundred bytes that expand to billions of list items) or of a megabyte string would hang or
exhaust memory before the message is printed. ``brief`` looks at most a few levels deep and a few
items wide, and cuts the result to ``limit`` characters.

>>> brief("x" * 1000, limit=20)
"'xxxxxxxxxxxxxxxx..."
>>> brief([[1, 2, 3, 4, 5, 6]] * 1000)
'[[1, 2, 3, 4, ...], [1, 2, 3, 4, ...], [1, 2, 3, 4, ...], [1, 2, 3, 4, ...], ...]'
"""

from __future__ import annotations

import reprlib

__all__ = ["brief"]

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = 4
_REPR.maxdict = 4
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlong = 40


def brief(value: object, limit: int = 100) -> str:
    """``repr(value)`` cut to about ``limit`` characters, looking at a bounded part of it."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a broken __repr__ of user data must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
