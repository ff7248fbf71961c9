"""Histogram bucket boundaries: each engine's defaults, and fleetwatch's own built from them."""

from __future__ import annotations

from typing import Final


def _b(*values: float) -> tuple[float, ...]:
    return tuple(sorted({float(v) for v in values}))


# vLLM 0.33 defaults (vllm/v1/metrics/buckets.py).
VLLM_TTFT_BUCKETS: Final = _b(
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
    20, 40, 80, 160, 640, 2560,
)  # fmt: skip
VLLM_TPOT_BUCKETS: Final = _b(
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
)  # fmt: skip
VLLM_REQUEST_TOKEN_BUCKETS: Final = _b(
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000,
)  # fmt: skip
"""vLLM's per-request token histograms (``build_1_2_5_buckets``): 1, 2, 5 times each power of
ten up to the model's ``max_model_len`` (100,000 here; a server stops at its own)."""
VLLM_PHASE_BUCKETS: Final = _b(
    0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680,
)  # fmt: skip

# OpenTelemetry GenAI server conventions.
GENAI_TTFT_BUCKETS: Final = _b(
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10
)
GENAI_TPOT_BUCKETS: Final = _b(
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5
)
GENAI_DURATION_BUCKETS: Final = _b(*(0.01 * 2**i for i in range(14)))

# fleetwatch's own: the union of the conventions' and vLLM's ranges, so a threshold that is a
# boundary in either is a boundary here, plus a few sub-10 ms ITL buckets for small models.
FLEETWATCH_TTFT_BUCKETS: Final = _b(*GENAI_TTFT_BUCKETS, *VLLM_TTFT_BUCKETS)
FLEETWATCH_TPOT_BUCKETS: Final = _b(0.001, 0.0025, 0.005, *GENAI_TPOT_BUCKETS, *VLLM_TPOT_BUCKETS)
FLEETWATCH_E2E_BUCKETS: Final = _b(0.005, *GENAI_DURATION_BUCKETS, *VLLM_PHASE_BUCKETS)
FLEETWATCH_PHASE_BUCKETS: Final = _b(
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, *VLLM_PHASE_BUCKETS
)
FLEETWATCH_STEP_BUCKETS: Final = _b(
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5
)
FLEETWATCH_STEP_TOKEN_BUCKETS: Final = _b(
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192
)
FLEETWATCH_MODEL_LOAD_BUCKETS: Final = _b(
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600
)  # a small model loads on a host in well under a second, a 70B one in minutes

# SGLang 0.5 defaults (override with Profile.with_buckets when the server sets its bucket envs).
SGLANG_TTFT_BUCKETS: Final = VLLM_TTFT_BUCKETS
SGLANG_ITL_BUCKETS: Final = _b(
    0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1,
    0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8,
)  # fmt: skip
SGLANG_E2E_BUCKETS: Final = _b(
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800
)
SGLANG_QUEUE_BUCKETS: Final = _b(
    0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300,
    400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
)  # fmt: skip
# TGI's router histograms (metrics-exporter-prometheus defaults on its exposition).
TGI_DURATION_BUCKETS: Final = _b(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
