"""The KV block pool: fixed-size blocks, reference counts, and the prefix cache over them.

A block is free when its reference count is zero. Free blocks sit in one LRU order; a free block
may still hold a cached prefix (it has a hash) and is reused by a later request with the same
prefix, or evicted when the pool needs a block and it is the least recently freed. Invariant:
``num_free + num_used == num_blocks`` at all times. Pure Python, no torch: the tensors live in the
model runner and are indexed by the block ids handed out here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["BlockPool", "chain_hashes"]


def chain_hashes(
    tokens: Sequence[int], block_size: int, start: int, parent: int | None, end: int
) -> list[int]:
    """Chained hashes of the full blocks of ``tokens`` from block ``start`` up to token ``end``.

    Block i's hash covers its own tokens and the hash of block i-1, so equal hashes mean equal
    prefixes. ``parent`` is the hash of block ``start - 1`` (None for the first block).
    """
    out: list[int] = []
    prev = parent
    for b in range(start, end // block_size):
        prev = hash((prev, tuple(tokens[b * block_size : (b + 1) * block_size])))
        out.append(prev)
    return out


class BlockPool:
    """Allocates KV blocks by id and keeps the hash -> block map of the prefix cache."""

    __slots__ = ("_by_hash", "_free", "_hash_of", "_refcount", "caching", "num_blocks")

    def __init__(self, num_blocks: int, *, caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self._refcount = [0] * num_blocks
        self._hash_of: list[int | None] = [None] * num_blocks
        self._by_hash: dict[int, int] = {}
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))

    @property
    def num_free(self) -> int:
        """Blocks with no reference (cached-but-free blocks included: they can be evicted)."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def num_cached(self) -> int:
        """Blocks that currently hold a hashed prefix (used or free)."""
        return len(self._by_hash)

    def refcount(self, block: int) -> int:
        return self._refcount[block]

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` free blocks (least recently freed first), evicting cached prefixes they hold.

        The caller checks ``num_free`` first; asking for more raises ``RuntimeError``.
        """
        if n > len(self._free):
            raise RuntimeError(f"KV pool exhausted: asked {n}, free {len(self._free)}")
        out: list[int] = []
        for _ in range(n):
            block, _none = self._free.popitem(last=False)
            h = self._hash_of[block]
            if h is not None:
                self._hash_of[block] = None
                del self._by_hash[h]
            self._refcount[block] = 1
            out.append(block)
        return out

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference from each block; blocks reaching zero become free (most recent last).

        Blocks are released tail first so a sequence's deepest prefix blocks are evicted before
        the shared head of its prefix.
        """
        for block in reversed(blocks):
            rc = self._refcount[block] - 1
            if rc < 0:
                raise RuntimeError(f"block {block} freed more often than allocated")
            self._refcount[block] = rc
            if rc == 0:
                self._free[block] = None

    def lookup(self, hashes: Sequence[int]) -> list[int]:
        """The longest run of cached blocks matching ``hashes`` from the start (not yet referenced)."""
        out: list[int] = []
        if not self.caching:
            return out
        for h in hashes:
            block = self._by_hash.get(h)
            if block is None:
                break
            out.append(block)
        return out

    def touch(self, blocks: Sequence[int]) -> None:
        """Take a reference on cached blocks found by ``lookup`` (removing free ones from the LRU)."""
        for block in blocks:
            if self._refcount[block] == 0:
                del self._free[block]
            self._refcount[block] += 1

    def cache(self, block: int, h: int) -> None:
        """Record that a full, computed ``block`` holds the prefix with hash ``h``.

        A prefix already cached in another block keeps that block; this one stays unhashed.
        """
        if not self.caching or self._hash_of[block] is not None or h in self._by_hash:
            return
        self._hash_of[block] = h
        self._by_hash[h] = block

    def reset_prefix_cache(self) -> None:
        """Forget every cached prefix (blocks in use keep their contents but lose their hashes)."""
        self._by_hash.clear()
        self._hash_of = [None] * self.num_blocks

    def check(self) -> None:
        """Verify the pool's internal invariants; raise ``AssertionError`` on the first broken one."""
        free = set(self._free)
        assert len(free) == len(self._free)
        for b in range(self.num_blocks):
            rc = self._refcount[b]
            assert rc >= 0, f"block {b} refcount {rc}"
            assert (rc == 0) == (b in free), f"block {b} refcount {rc} but free={b in free}"
            h = self._hash_of[b]
            if h is not None:
                assert self._by_hash.get(h) == b, f"block {b} hash map mismatch"
        assert len(self._by_hash) == sum(h is not None for h in self._hash_of)
        assert self.num_free + self.num_used == self.num_blocks
