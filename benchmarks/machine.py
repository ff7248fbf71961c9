"""The machine line every benchmark prints beside its results: CPU model, CPUs, load now."""

from __future__ import annotations

import os


def cpu() -> str:
    """``<CPU model>, <n> CPUs`` ('unknown CPU' without cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            models = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
    except OSError:
        models = []
    return f"{models[0] if models else 'unknown CPU'}, {os.cpu_count()} CPUs"


def load() -> str:
    """``load average <1> <5> <15>``."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def machine() -> str:
    """``<CPU model>, <n> CPUs; load average <1> <5> <15>``."""
    return f"{cpu()}; {load()}"
