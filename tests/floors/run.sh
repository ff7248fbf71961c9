#!/usr/bin/env bash
# Test the declared dependency floors: install every direct dependency at the lowest version
# pyproject.toml allows (uv's --resolution lowest-direct; what they pull in resolves as usual) into
# a throwaway venv, print what was installed, then run the test suite against it.
#
#   bash tests/floors/run.sh                      # -> /tmp/fleetwatch-floors, suite as below
#   FLOORS_VENV=/path bash tests/floors/run.sh tests/slo -x   # other pytest arguments
#
# Not part of `make test` (it builds a second environment); `make floors` runs it.
# torch comes from constraints.txt (the CPU wheel): a local wheel folder in PIP_FIND_LINKS (or
# /opt/wheels), or PyTorch's CPU index through UV_EXTRA_INDEX_URL.
# FLOORS_TORCH=2.5.0 replaces that pin with another torch release (the engine extra's floor); with
# no CPU wheel of it at hand that is the index's default build (on Linux x86_64 from PyPI, the CUDA
# build with its nvidia-* wheels, gigabytes; it runs on CPU without a GPU), e.g.
#   FLOORS_TORCH=2.5.0 FLOORS_VENV=/tmp/torchfloor bash tests/floors/run.sh tests/engine -x -q
# Left out by default: tests/vllm (its own venv and vLLM pin), tests/acceptance and tests/abuse
# (minutes of real servers and kills; they exercise the same libraries as the rest).
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV="${FLOORS_VENV:-/tmp/fleetwatch-floors}"
PYTHON="${PYTHON:-python3}"
UV_PIN="uv==0.13.8"

if [ -e "$VENV" ] && [ ! -f "$VENV/pyvenv.cfg" ]; then
  echo "floors: $VENV exists and is not a virtual environment; set FLOORS_VENV to a new path" >&2
  exit 2
fi
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$UV_PIN"

find_links=()
for dir in ${PIP_FIND_LINKS:-} /opt/wheels; do
  [ -d "$dir" ] && find_links+=(--find-links "$dir")
done
# The CPU build of the pinned torch when a local wheel of it is at hand (uv would otherwise prefer
# the CUDA build of the same version from the index).
constraints=(-c constraints.txt)
torch_pin="$(sed -n 's/^torch==\([^ #]*\).*/\1/p' constraints.txt)"
if [ -n "${FLOORS_TORCH:-}" ]; then
  echo "torch==$FLOORS_TORCH" >"$VENV/torch-pin.txt"
  constraints=(-c "$VENV/torch-pin.txt")
  torch_pin="$FLOORS_TORCH"
fi
for dir in ${PIP_FIND_LINKS:-} /opt/wheels; do
  if [ -n "$torch_pin" ] && compgen -G "$dir/torch-$torch_pin+cpu-*.whl" >/dev/null; then
    echo "torch==$torch_pin+cpu" >"$VENV/torch-cpu.txt"
    constraints+=(-c "$VENV/torch-cpu.txt")
    break
  fi
done

"$VENV/bin/python" -m uv pip install --quiet --python "$VENV/bin/python" \
  "${find_links[@]}" "${constraints[@]}" --resolution lowest-direct -e './telemetry[parquet]' -e '.[engine,dev]'

echo "== installed at the floors (direct dependencies) =="
"$VENV/bin/python" - <<'EOF'
import re
import tomllib
from importlib.metadata import version

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
serving = tomllib.load(open("telemetry/pyproject.toml", "rb"))["project"]
wanted = serving["dependencies"] + serving["optional-dependencies"]["parquet"]
wanted += [r for r in project["dependencies"] if not r.startswith("fleetwatch-telemetry")]
wanted += project["optional-dependencies"]["engine"] + project["optional-dependencies"]["dev"]
seen = set()
for requirement in wanted:
    name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
    if name not in seen:
        seen.add(name)
        print(f"  {requirement:<48} {version(name)}")
EOF

if [ "$#" -eq 0 ]; then
  set -- -q -p no:cacheprovider --ignore=tests/vllm --ignore=tests/acceptance --ignore=tests/abuse
fi
exec "$VENV/bin/python" -m pytest "$@"
