"""What the probe commands check before they send a request or print a figure: the URL is an
http(s) URL, every output path can be written, numbers are in range, and (for ``probe bound``)
the context fits the model named by ``--config``."""

from __future__ import annotations

import json
from pathlib import Path

from fleetwatch.core.preflight import http_url, output_file
from fleetwatch.engine_probe.probe.errors import ProbeError

__all__ = [
    "check_bound_options",
    "check_fingerprint_options",
    "check_reference_engine",
    "check_run_options",
    "parse_headers",
    "parse_meta",
]

_RECORD_SUFFIXES = (".jsonl", ".parquet")


def check_run_options(
    *,
    url: str | None,
    engine: str | None,
    outputs: dict[str, Path | None],
    timeout: float,
    ttft: float,
    tpot: float,
    burstiness: float,
) -> None:
    """``ProbeError`` (or an ``OSError`` naming the path) for the first bad option of
    ``probe run``; ``outputs`` maps each output option (``--json``) to its path."""
    if (url is None) == (engine is None):
        raise ProbeError("give either a URL or --engine reference")
    if engine is not None and engine != "reference":
        raise ProbeError(f"--engine: only 'reference' is built in, got {engine!r}")
    if url is not None:
        http_url(url, option="URL", error=ProbeError)
    for option, path in outputs.items():
        if path is None:
            continue
        output_file(path)
        if option == "--records" and path.suffix.lower() not in _RECORD_SUFFIXES:
            raise ProbeError(f"--records {path}: give a .jsonl or .parquet file name")
    for option, value in (("--timeout", timeout), ("--ttft", ttft), ("--tpot", tpot)):
        if not value > 0:
            raise ProbeError(f"{option} must be > 0 seconds, got {value:g}")
    if not burstiness > 0:
        raise ProbeError(f"--burstiness must be > 0, got {burstiness:g}")


def _max_positions(config: Path) -> int | None:
    p = config / "config.json" if config.is_dir() else config
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return None  # load_shape reports it, naming the file
    if not isinstance(data, dict):
        return None
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_bound_options(
    *,
    config: Path,
    context: int,
    utilisation: float,
    price: float | None,
    json_out: Path | None,
) -> None:
    """``ProbeError`` for the first bad option of ``probe bound``."""
    if not 0 < utilisation <= 1:
        raise ProbeError(f"--utilisation must be in (0, 1], got {utilisation:g}")
    if price is not None and not price >= 0:
        raise ProbeError(f"--price must be >= 0 US dollars per GPU-hour, got {price:g}")
    if context < 1:
        raise ProbeError(f"--context must be >= 1 token, got {context}")
    limit = _max_positions(config)
    if limit is not None and context > limit:
        raise ProbeError(
            f"--context {context} is beyond the model's maximum of {limit} tokens "
            f"(max_position_embeddings in {config})"
        )
    if json_out is not None:
        output_file(json_out)


def check_reference_engine(config: Path | None, *, request_tokens: int) -> None:
    """For ``--engine reference``: torch is installed, the model (``--config`` or the default)
    fits in memory, and its KV cache holds one probe request of ``request_tokens``."""
    from fleetwatch.engine_probe.engine.config import EngineConfig, ModelConfig
    from fleetwatch.engine_probe.engine.preflight import (
        check_fits_memory,
        check_holds_request,
        require_torch,
    )

    model = ModelConfig.from_hf_config(config) if config is not None else ModelConfig()
    engine = EngineConfig()
    check_holds_request(model, engine, request_tokens, "each probe request")
    require_torch()
    check_fits_memory(model, engine)


def parse_headers(header: list[str]) -> tuple[tuple[str, str], ...]:
    """``--header 'Name: value'`` options as pairs; ``ProbeError`` for one without a colon."""
    out = []
    for h in header:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            raise ProbeError(f"--header must look like 'Name: value', got {h!r}")
        out.append((name.strip(), value.strip()))
    return tuple(out)


_MAX_META = 50


def parse_meta(meta: list[str]) -> dict[str, str]:
    """``--meta key=value`` options (what a fingerprint file records beside the answers)."""
    if len(meta) > _MAX_META:
        raise ProbeError(f"--meta: {len(meta)} given, at most {_MAX_META}")
    out: dict[str, str] = {}
    for m in meta:
        key, sep, value = m.partition("=")
        if not sep or not key.strip() or len(m) > 500:
            raise ProbeError(
                f"--meta must look like 'key=value' (500 characters at most), got {m[:60]!r}"
            )
        out[key.strip()] = value.strip()
    return out


MAX_REPEAT = 20
"""The most times ``probe fingerprint --repeat`` asks the set over (each run is one request a
prompt, one at a time)."""


def check_fingerprint_options(
    *,
    urls: list[str],
    against: Path | None,
    json_out: Path | None,
    tolerance: float,
    timeout: float,
    repeat: int = 1,
) -> None:
    """``ProbeError`` (or an ``OSError`` naming the path) for the first bad option of
    ``probe fingerprint``."""
    if not 1 <= repeat <= MAX_REPEAT:
        raise ProbeError(f"--repeat must be in 1..{MAX_REPEAT}, got {repeat}")
    if not urls:
        raise ProbeError("give the URLs of the replicas to fingerprint")
    for u in urls:
        http_url(u, option="URL", error=ProbeError)
    from fleetwatch.engine_probe.probe.chat import base_url

    roots = [base_url(u) for u in urls]
    dup = next((u for i, u in enumerate(roots) if u in roots[:i]), None)
    if dup is not None:
        raise ProbeError(f"URL {dup} is given twice")
    if len(urls) < 2 and against is None:
        raise ProbeError("one URL has nothing to compare with: give two or more, or --against FILE")
    if against is not None and against.is_dir():
        raise ProbeError(f"--against {against}: is a directory, not a fingerprint file")
    if against is not None and not against.exists():
        raise ProbeError(f"--against {against}: no such file")
    if json_out is not None:
        output_file(json_out)
    if not 0 <= tolerance < float("inf"):
        raise ProbeError(f"--logprob-tolerance must be >= 0 nats, got {tolerance:g}")
    if not timeout > 0:
        raise ProbeError(f"--timeout must be > 0 seconds, got {timeout:g}")
