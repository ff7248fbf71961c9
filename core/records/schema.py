"""The one record of a finished request that every analysis in fleetwatch reads.

Times are seconds on one clock per file (wall-clock Unix seconds for live engines and the probe,
the engine's injected clock in tests). Durations are derived, never stored, so they cannot disagree
with the timestamps:

- queue     = scheduled - arrival        (time waiting before the first step that touched it)
- prefill   = first_token - scheduled    (includes chunked-prefill steps and any preemption before it)
- decode    = finished - first_token
- ttft      = first_token - arrival
- e2e       = finished - arrival
- tpot      = (e2e - ttft) / (output_tokens - 1), defined only when output_tokens >= 2

``preemption_stall_s`` is the time the request spent preempted (between a preemption and its
resume); it lies inside prefill or decode, as in vLLM.

Plausibility, checked on each record before anything is built from a file: a timestamp is at most
``MAX_TIMESTAMP_S`` in magnitude (seconds: a millisecond epoch, about 1.7e12, is refused with a
hint), a request lasts at most ``MAX_REQUEST_S`` (a record finished 1e7 s late is refused), and
integers fit in 64 bits. So no analysis sizes its arrays from an absurd span.

``trace_id`` (optional) is the W3C trace id of the request's span where one was exported, so a
record, a histogram exemplar and a trace name the same request.

``itl_buckets`` (optional) counts the request's inter-token gaps per bucket of ``ITL_BOUNDS``: entry
``i`` holds the gaps in (ITL_BOUNDS[i-1], ITL_BOUNDS[i]] seconds, the last entry those above the
largest bound. It is what an exporter's per-gap ITL histogram saw of this request, so an ITL SLO
can be evaluated offline gap by gap; files written before it existed leave it out (None).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from fleetwatch.core.brief import brief

__all__ = [
    "DEFAULTS",
    "DERIVED_COLUMNS",
    "FIELDS",
    "INT64_MAX",
    "INT64_MIN",
    "ITL_BOUNDS",
    "MAX_REQUEST_S",
    "MAX_TIMESTAMP_S",
    "TIME_EPS",
    "TRACE_ID",
    "TRACE_ID_PROBLEM",
    "FieldSpec",
    "RecordError",
    "RequestRecord",
    "Status",
    "is_trace_id",
]


ITL_BOUNDS: Final[tuple[float, ...]] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
"""Upper bounds (seconds, inclusive) of the inter-token-gap buckets ``itl_buckets`` counts in: the
fleetwatch exporter's ITL histogram buckets. Part of the file format: never change them."""


class Status(StrEnum):
    """How a request ended."""

    OK = "ok"
    ERROR = "error"
    ABORTED = "aborted"
    REJECTED = "rejected"


class RecordError(ValueError):
    """A record or record file is malformed; names the file, row (1-based) and field."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        row: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.row = row
        self.field = field
        where = ", ".join(
            part
            for part in (
                path,
                f"row {row}" if row is not None else None,
                f"field '{field}'" if field is not None else None,
            )
            if part
        )
        super().__init__(f"{where}: {message}" if where else message)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One stored column: its name, its Python type, whether it may be missing, its pandas dtype."""

    name: str
    kind: type
    optional: bool
    dtype: str


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """A finished request.

    >>> r = RequestRecord(request_id="r1", replica="a", model="m", arrival_s=10.0,
    ...                   scheduled_s=10.5, first_token_s=11.0, finished_s=13.0,
    ...                   prompt_tokens=100, output_tokens=5)
    >>> r.ttft_s, r.e2e_s, r.tpot_s
    (1.0, 3.0, 0.5)
    """

    request_id: str
    replica: str
    model: str
    arrival_s: float
    finished_s: float
    scheduled_s: float | None = None
    first_token_s: float | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_prompt_tokens: int = 0
    preemptions: int = 0
    preemption_stall_s: float = 0.0
    max_itl_s: float | None = None
    status: Status = Status.OK
    finish_reason: str | None = None
    error_type: str | None = None
    traffic_class: str = "default"
    tenant: str | None = None
    intended_s: float | None = None
    """When an open-loop client meant to send the request (None: the same as arrival)."""
    itl_buckets: tuple[int, ...] | None = None
    """Inter-token gaps per ``ITL_BOUNDS`` bucket, ``len(ITL_BOUNDS) + 1`` counts (None: not
    recorded)."""
    trace_id: str | None = None
    """The W3C trace id (32 lowercase hex digits) of the request's exported span, the one its
    histogram exemplars carry (None: no span, or not sampled)."""

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):
            object.__setattr__(self, "status", Status(self.status))
        gaps = self.itl_buckets
        if gaps is not None and not isinstance(gaps, tuple) and _check_buckets(gaps) is None:
            object.__setattr__(self, "itl_buckets", tuple(int(x) for x in gaps))
        problem = check_values({f.name: getattr(self, f.name) for f in FIELDS})
        if problem is not None:
            field, message = problem
            raise RecordError(message, field=field)

    # Derived durations (seconds); None where the phase did not happen.
    @property
    def queue_s(self) -> float | None:
        return None if self.scheduled_s is None else self.scheduled_s - self.arrival_s

    @property
    def prefill_s(self) -> float | None:
        if self.scheduled_s is None or self.first_token_s is None:
            return None
        return self.first_token_s - self.scheduled_s

    @property
    def decode_s(self) -> float | None:
        return None if self.first_token_s is None else self.finished_s - self.first_token_s

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finished_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        if self.first_token_s is None or self.output_tokens < 2:
            return None
        return (self.finished_s - self.first_token_s) / (self.output_tokens - 1)

    def to_dict(self) -> dict[str, Any]:
        """Stored fields only, JSON-ready (status as its string value)."""
        out = {f.name: getattr(self, f.name) for f in FIELDS}
        out["status"] = self.status.value
        if self.itl_buckets is not None:
            out["itl_buckets"] = list(self.itl_buckets)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestRecord:
        return cls(**{f.name: data[f.name] for f in FIELDS if f.name in data})


_STRING = "string"
FIELDS: Final[tuple[FieldSpec, ...]] = (
    FieldSpec("request_id", str, False, _STRING),
    FieldSpec("replica", str, False, _STRING),
    FieldSpec("model", str, False, _STRING),
    FieldSpec("traffic_class", str, False, _STRING),
    FieldSpec("tenant", str, True, _STRING),
    FieldSpec("arrival_s", float, False, "float64"),
    FieldSpec("scheduled_s", float, True, "float64"),
    FieldSpec("first_token_s", float, True, "float64"),
    FieldSpec("finished_s", float, False, "float64"),
    FieldSpec("intended_s", float, True, "float64"),
    FieldSpec("prompt_tokens", int, False, "int64"),
    FieldSpec("output_tokens", int, False, "int64"),
    FieldSpec("cached_prompt_tokens", int, False, "int64"),
    FieldSpec("preemptions", int, False, "int64"),
    FieldSpec("preemption_stall_s", float, False, "float64"),
    FieldSpec("max_itl_s", float, True, "float64"),
    FieldSpec("status", str, False, "category"),
    FieldSpec("finish_reason", str, True, _STRING),
    FieldSpec("error_type", str, True, _STRING),
    FieldSpec("itl_buckets", tuple, True, "object"),
    FieldSpec("trace_id", str, True, _STRING),
)
FIELD_BY_NAME: Final[Mapping[str, FieldSpec]] = {f.name: f for f in FIELDS}

DERIVED_COLUMNS: Final[tuple[str, ...]] = (
    "queue_s",
    "prefill_s",
    "decode_s",
    "ttft_s",
    "e2e_s",
    "tpot_s",
)

# Small tolerance for clock arithmetic: float timestamps subtract with rounding error.
TIME_EPS = 1e-9

MAX_TIMESTAMP_S: Final = 1e11
"""Largest plausible timestamp magnitude in seconds (the year 5138 as a Unix time)."""
MAX_REQUEST_S: Final = 7 * 86400.0
"""Longest plausible request, arrival to finish (and longest stall or inter-token gap)."""
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
TIME_FIELDS: Final = ("arrival_s", "scheduled_s", "first_token_s", "finished_s", "intended_s")


def implausible_time(value: float) -> str | None:
    """The message for a timestamp that cannot be seconds, else None."""
    if abs(value) <= MAX_TIMESTAMP_S:
        return None
    hint = " (milliseconds since the epoch?)" if 1e11 < abs(value) < 1e14 else ""
    return f"is {value:.6g}: not plausible as seconds{hint}; record times are in seconds"


def check_type(spec: FieldSpec, value: Any) -> str | None:
    """Return a message when ``value`` does not fit ``spec``, else None."""
    if value is None:
        return None if spec.optional else "is missing (null)"
    if spec.kind is tuple:
        return _check_buckets(value)
    if spec.kind is int:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be an integer, got {type(value).__name__} {brief(value)}"
        if isinstance(value, float) and not value.is_integer():
            return f"must be an integer, got float {brief(value)}"
        if not INT64_MIN <= value <= INT64_MAX:
            return f"is {brief(value)}: out of range (integers are 64-bit signed)"
        return None
    if spec.kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a number, got {type(value).__name__} {brief(value)}"
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an integer beyond every double
            finite = False
        if not finite:
            return f"must be finite, got {brief(value)}"
        return None
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__} {brief(value)}"
    if spec.name == "status" and value not in Status._value2member_map_:
        return f"must be one of {', '.join(s.value for s in Status)}, got {brief(value)}"
    return None


def _check_buckets(value: Any) -> str | None:
    if isinstance(value, str | bytes | Mapping) or not hasattr(value, "__len__"):
        return f"must be a list of {len(ITL_BOUNDS) + 1} gap counts, got {type(value).__name__}"
    if len(value) != len(ITL_BOUNDS) + 1:
        return f"must hold {len(ITL_BOUNDS) + 1} gap counts (one per ITL bucket), got {len(value)}"
    for x in value:
        if isinstance(x, bool) or not isinstance(x, numbers.Real):
            return f"gap counts must be non-negative integers, got {x!r}"
        if isinstance(x, int):  # exact, however large
            if x < 0:
                return f"gap counts must be non-negative integers, got {x!r}"
            continue
        v = float(x)
        if not math.isfinite(v) or v != math.floor(v) or v < 0:
            return f"gap counts must be non-negative integers, got {x!r}"
    return None


def check_values(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """Check one record's values; return (field, message) for the first problem, else None."""
    for spec in FIELDS:
        if spec.name not in row:
            if spec.optional or spec.name in DEFAULTS:
                continue
            return spec.name, "is missing"
        message = check_type(spec, row[spec.name])
        if message is not None:
            return spec.name, message
    for name in ("prompt_tokens", "output_tokens", "cached_prompt_tokens", "preemptions"):
        if row.get(name, 0) < 0:
            return name, f"must not be negative, got {row[name]}"
    if row.get("cached_prompt_tokens", 0) > row.get("prompt_tokens", 0):
        return "cached_prompt_tokens", "exceeds prompt_tokens"
    for name in ("preemption_stall_s", "max_itl_s"):
        v = row.get(name)
        if v is not None and v < 0:
            return name, f"must not be negative, got {v}"
        if v is not None and v > MAX_REQUEST_S:
            return name, f"is {v:.6g} s: longer than {MAX_REQUEST_S:g} s is not plausible"
    for name in TIME_FIELDS:
        v = row.get(name)
        problem = None if v is None else implausible_time(v)
        if problem is not None:
            return name, problem
    arrival = row["arrival_s"]
    scheduled = row.get("scheduled_s")
    first = row.get("first_token_s")
    finished = row["finished_s"]
    if finished - arrival > MAX_REQUEST_S:
        return "finished_s", (
            f"is {finished - arrival:.6g} s after arrival_s: a request longer than "
            f"{MAX_REQUEST_S:g} s is not plausible (a clock or unit mix-up?)"
        )
    if scheduled is not None and scheduled < arrival - TIME_EPS:
        return "scheduled_s", "is before arrival_s (negative queue time)"
    if first is not None and first < arrival - TIME_EPS:
        return "first_token_s", "is before arrival_s (first token before arrival)"
    if first is not None and scheduled is not None and first < scheduled - TIME_EPS:
        return "first_token_s", "is before scheduled_s (negative prefill time)"
    if finished < arrival - TIME_EPS:
        return "finished_s", "is before arrival_s (negative end-to-end time)"
    if first is not None and finished < first - TIME_EPS:
        return "finished_s", "is before first_token_s (negative decode time)"
    if scheduled is not None and finished < scheduled - TIME_EPS:
        return "finished_s", "is before scheduled_s"
    buckets = row.get("itl_buckets")
    if buckets is not None and sum(int(x) for x in buckets) > max(
        row.get("output_tokens", 0) - 1, 0
    ):
        return "itl_buckets", "counts more inter-token gaps than output_tokens - 1"
    trace = row.get("trace_id")
    if trace is not None and not is_trace_id(trace):
        return "trace_id", TRACE_ID_PROBLEM
    return None


TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")
TRACE_ID_PROBLEM: Final = "is not a trace id (32 lowercase hex digits, not all zero)"


def is_trace_id(value: str) -> bool:
    """Whether ``value`` is a valid W3C trace id."""
    return TRACE_ID.fullmatch(value) is not None and value != "0" * 32


DEFAULTS: Final[Mapping[str, Any]] = {
    f.name: f.default.value if isinstance(f.default, Status) else f.default
    for f in dataclasses.fields(RequestRecord)
    if f.name in FIELD_BY_NAME and f.default not in (None, dataclasses.MISSING)
}
"""Stored values a file may leave out (the record's non-None defaults, status as its string)."""
