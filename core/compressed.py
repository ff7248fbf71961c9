"""compressed-tensors checkpoints (``quant_method`` ``compressed-tensors``, as llm-compressor
writes them): which weight matrices each ``config_groups`` scheme converts and the bytes a
converted matrix takes, scales and zero points included.

A scheme's ``targets`` and the ``ignore`` list name modules as compressed-tensors matches them: a
module's full name, ``re:<pattern>`` matched from the start of the name, or a class name
(``Linear``). A module the ``ignore`` list names keeps the checkpoint's dtype; otherwise the
first scheme naming it by full name, then by pattern, then by class converts it. A converted
``rows × cols`` matrix stores ``num_bits`` a weight (packed), plus one scale per group of
``group_size`` (``strategy`` ``group``), per output row (``channel``), per block
(``block_structure``), per tensor, or per group and per tensor (``tensor_group``, NVFP4); an
asymmetric scheme (``symmetric`` false) stores a packed ``num_bits`` zero point beside each scale,
and activation ordering by group (``actorder`` ``group``) an int32 group index per input column.
Scales are ``scale_dtype`` when the config names it, else one byte for 4-bit floats (FP8 or E8M0
scales) and the checkpoint's dtype otherwise. Pure, the standard library only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CompressedTensors", "QuantConfigError", "Scheme", "read_compressed_tensors"]


class QuantConfigError(ValueError):
    """A ``quantization_config`` that cannot be sized (the model arithmetic names the file)."""


_SCALE_DTYPE_BYTES = {
    "torch.float32": 4,
    "torch.float16": 2,
    "torch.bfloat16": 2,
    "torch.float8_e4m3fn": 1,
    "torch.float8_e8m0fnu": 1,
    "torch.uint8": 1,
}
_STRATEGIES = ("group", "channel", "tensor", "block", "tensor_group")


@dataclass(frozen=True, slots=True)
class Scheme:
    """One ``config_groups`` entry's weight quantization."""

    name: str
    targets: tuple[str, ...]
    bits: int
    kind: str
    """``int`` or ``float``."""
    strategy: str
    group_size: int = 0
    block: tuple[int, int] | None = None
    symmetric: bool = True
    scale_bytes: float = 2.0
    group_index: bool = False
    """``actorder`` ``group``: an int32 group index per input column is stored."""

    def scales(self, rows: int, cols: int) -> int:
        """Scales one ``rows × cols`` matrix stores."""
        if self.strategy in ("group", "tensor_group"):
            return rows * math.ceil(cols / self.group_size)
        if self.strategy == "channel":
            return rows
        if self.strategy == "block" and self.block is not None:
            return math.ceil(rows / self.block[0]) * math.ceil(cols / self.block[1])
        return 1

    def bytes_of(self, rows: int, cols: int) -> float:
        """Bytes of one converted ``rows × cols`` matrix: weights, scales, zero points."""
        n = self.scales(rows, cols)
        out = rows * cols * self.bits / 8 + n * self.scale_bytes
        if not self.symmetric:
            out += n * self.bits / 8
        if self.strategy == "tensor_group":
            out += 4  # the per-tensor float32 global scale
        if self.group_index:
            out += 4 * cols
        return out

    def describe(self) -> str:
        """E.g. ``int4 groups of 128`` or ``float8 per channel, asymmetric``."""
        what = f"{self.kind}{self.bits}"
        if self.strategy in ("group", "tensor_group"):
            what += f" groups of {self.group_size}"
        elif self.strategy == "block" and self.block is not None:
            what += f" {self.block[0]}x{self.block[1]} blocks"
        else:
            what += f" per {self.strategy}"
        return what if self.symmetric else what + ", asymmetric"


def _matches(target: str, name: str, cls: str) -> int:
    """How specifically ``target`` names a module: 3 its full name, 2 a pattern, 1 its class,
    0 not at all."""
    if target.startswith("re:"):
        return 2 if re.match(target[3:], name) else 0
    if target == name:
        return 3
    return 1 if target == cls else 0


@dataclass(frozen=True, slots=True)
class CompressedTensors:
    """A checkpoint's ``config_groups`` and ``ignore`` list."""

    schemes: tuple[Scheme, ...]
    ignore: tuple[str, ...] = ()

    def scheme_for(self, name: str, cls: str) -> Scheme | None:
        """The scheme that converts module ``name`` of class ``cls`` (``None``: kept as is)."""
        if any(_matches(t, name, cls) for t in self.ignore):
            return None
        best, rank = None, 0
        for s in self.schemes:
            r = max((_matches(t, name, cls) for t in s.targets), default=0)
            if r > rank:
                best, rank = s, r
        return best

    def describe(self) -> str:
        return " + ".join(dict.fromkeys(s.describe() for s in self.schemes))


def _int(value: Any, where: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise QuantConfigError(f"{where} {key!r} must be a positive integer, got {value!r}")
    return value


def _scheme(name: str, group: Any, where: str, base_bytes: float) -> Scheme | None:
    at = f"{where} config_groups[{name!r}]"
    if not isinstance(group, Mapping):
        raise QuantConfigError(f"{at} must be an object")
    w = group.get("weights")
    if w is None:
        return None
    if not isinstance(w, Mapping):
        raise QuantConfigError(f"{at} 'weights' must be an object")
    targets = group.get("targets") or []
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise QuantConfigError(f"{at} 'targets' must be a list of names")
    bits = _int(w.get("num_bits"), at, "num_bits")
    kind = str(w.get("type") or "int")
    strategy = str(w.get("strategy") or "tensor")
    if kind not in ("int", "float") or strategy not in _STRATEGIES or bits > 8:
        raise QuantConfigError(
            f"{at}: weights of type {kind!r}, {bits} bits, strategy {strategy!r} are not "
            f"modelled (int or float of up to 8 bits, strategies {', '.join(_STRATEGIES)})"
        )
    group_size = 0
    if strategy in ("group", "tensor_group"):
        group_size = _int(w.get("group_size"), at, "group_size")
    block = None
    if strategy == "block":
        b = w.get("block_structure")
        if not isinstance(b, list) or len(b) != 2:
            raise QuantConfigError(f"{at} 'block_structure' must be two integers, got {b!r}")
        block = (_int(b[0], at, "block_structure"), _int(b[1], at, "block_structure"))
    scale = w.get("scale_dtype")
    if scale is not None and scale not in _SCALE_DTYPE_BYTES:
        raise QuantConfigError(
            f"{at} 'scale_dtype' {scale!r} is not known ({', '.join(_SCALE_DTYPE_BYTES)})"
        )
    scale_bytes = (
        _SCALE_DTYPE_BYTES[scale]
        if scale is not None
        else (1.0 if kind == "float" and bits == 4 else base_bytes)
    )
    return Scheme(
        name=name,
        targets=tuple(targets),
        bits=bits,
        kind=kind,
        strategy=strategy,
        group_size=group_size,
        block=block,
        symmetric=w.get("symmetric", True) is not False,
        scale_bytes=float(scale_bytes),
        group_index=w.get("actorder") == "group",
    )


def read_compressed_tensors(
    q: Mapping[str, Any], where: str, base_bytes: float
) -> CompressedTensors:
    """The schemes of a compressed-tensors ``quantization_config``; ``QuantConfigError`` naming
    the field when one cannot be sized. ``base_bytes``: the checkpoint dtype's bytes."""
    groups = q.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise QuantConfigError(f"{where}: compressed-tensors 'config_groups' must be an object")
    ignore = q.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(i, str) for i in ignore):
        raise QuantConfigError(f"{where}: compressed-tensors 'ignore' must be a list of names")
    schemes = tuple(
        s
        for name, g in groups.items()
        if (s := _scheme(str(name), g, where, base_bytes)) is not None
    )
    named = [*(t for s in schemes for t in s.targets), *ignore]
    for t in (t for t in named if t.startswith("re:")):
        try:
            re.compile(t[3:])
        except re.error as exc:
            raise QuantConfigError(f"{where}: target {t!r} is not a pattern: {exc}") from None
    return CompressedTensors(schemes, tuple(ignore))
