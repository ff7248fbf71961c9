"""Option checks the fleet commands run before reading any data: each failure is an
``AnalysisError`` naming the option and the value given."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fleetwatch.core.duration import parse_duration
from fleetwatch.core.preflight import http_url, input_dir, input_file, output_file
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers.config import NOISE_SHAPES

__all__ = ["check_canary_inputs", "check_duration", "check_outlier_inputs"]


def check_duration(text: str, option: str) -> int:
    """Seconds in a Prometheus duration (``5m``), or ``AnalysisError`` naming ``option``."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise AnalysisError(f"{option} {exc}") from None


def check_outlier_inputs(
    *,
    records: Sequence[Path] | None,
    prometheus: str | None,
    metrics_dir: Path | None,
    fingerprints: Path | None,
    window: str,
    quantile: float,
    min_requests: int,
    noise_shape: str,
) -> None:
    """Exactly one input, present and well formed (the records: each path names record files);
    numbers in range."""
    chosen = [s for s in (records, prometheus, metrics_dir) if s is not None]
    if len(chosen) != 1:
        raise AnalysisError(
            "give exactly one input: RECORDS, --prometheus URL or --metrics-dir DIR"
        )
    if prometheus is not None:
        http_url(prometheus, option="--prometheus", error=AnalysisError)
        check_duration(window, "--window")
    if metrics_dir is not None:
        input_dir(metrics_dir)
    if records is not None:
        from fleetwatch.records.dataset import check_paths
        from fleetwatch.records.remote import is_url

        local = [p for p in records if not is_url(p)]
        if local:
            check_paths(local)  # object storage is listed when the engine opens it
    if fingerprints is not None:
        input_file(fingerprints)
    if not 0 < quantile < 1:
        raise AnalysisError(f"--quantile must be between 0 and 1 (exclusive), got {quantile:g}")
    if min_requests < 1:
        raise AnalysisError(f"--min-requests must be >= 1, got {min_requests}")
    if noise_shape not in NOISE_SHAPES:
        raise AnalysisError(
            f"--noise-shape must be one of {', '.join(NOISE_SHAPES)}, got {noise_shape!r}"
        )


def check_canary_inputs(
    *,
    prometheus: str,
    window: str,
    min_requests: int,
    alpha: float,
    min_effect: float,
    confidence: float,
    json_out: Path | None,
    fingerprint: Path | None = None,
    max_error_rise: float | None = None,
) -> None:
    """``fleet canary``'s options well formed and in range, before a query is sent."""
    http_url(prometheus, option="--prometheus", error=AnalysisError)
    check_duration(window, "--window")
    if min_requests < 1:
        raise AnalysisError(f"--min-requests must be >= 1, got {min_requests}")
    if not 0 < alpha < 0.5:
        raise AnalysisError(f"--alpha must be in (0, 0.5), got {alpha:g}")
    if not 0 < min_effect < 1:
        raise AnalysisError(f"--min-effect must be in (0, 1), got {min_effect:g}")
    if not 0.5 < confidence < 1:
        raise AnalysisError(f"--confidence must be in (0.5, 1), got {confidence:g}")
    if max_error_rise is not None and not 0 < max_error_rise < 100:
        raise AnalysisError(
            f"--max-error-rise is in percentage points, in (0, 100), got {max_error_rise:g}"
        )
    if json_out is not None:
        output_file(json_out)
    if fingerprint is not None:
        input_file(fingerprint)
