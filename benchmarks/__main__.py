"""Run every benchmark module (``bench_*.py``) in this folder, or those named on the command line.

Each module exposes ``main() -> None`` that prints its table; results are recorded by hand in
BENCHMARKS.md together with the command that produced them. ``readme [--check]`` is not a
benchmark: it copies the figures BENCHMARKS.md marks for the README into README.md
(``benchmarks/readme.py``).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    if argv[:1] == ["readme"]:
        from benchmarks.readme import main as readme

        return readme(argv[1:])
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    wanted = [a if a.startswith("bench_") else f"bench_{a}" for a in argv] or names
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        print(f"benchmarks: unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(names)}")
        return 2
    for name in wanted:
        print(f"\n=== {name} ===", flush=True)
        start = time.perf_counter()
        importlib.import_module(f"benchmarks.{name}").main()
        print(f"--- {name}: {time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
