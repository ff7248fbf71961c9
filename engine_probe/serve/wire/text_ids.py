"""Text to token ids and back, without a tokenizer: a deterministic byte-level scheme.

Encoding: each UTF-8 byte of the text is one token, id = byte value (folded into the vocabulary
with ``% vocab_size`` when the vocabulary is smaller than 256). Decoding: every id is exactly one
printable character (ids 32-126 are themselves, the rest map onto the 94 visible ASCII characters),
so a streamed chunk's text length equals its token count and any client can count tokens from text.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["decode", "encode"]

_VISIBLE = 94  # '!' (33) .. '~' (126)


def encode(text: str, vocab_size: int) -> list[int]:
    """Token ids of ``text``: one per UTF-8 byte.

    >>> encode("hi!", 2048)
    [104, 105, 33]
    """
    data = text.encode("utf-8")
    if vocab_size >= 256:
        return list(data)
    return [b % vocab_size for b in data]


def decode(token_ids: Sequence[int]) -> str:
    """One printable character per id.

    >>> decode([104, 105, 1000])
    'hi]'
    """
    return "".join(chr(t) if 32 <= t < 127 else chr(33 + t % _VISIBLE) for t in token_ids)
