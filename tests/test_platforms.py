"""A CPU run of the CLI never initialises libtpu (installed by the `tpu-aot` extra), so it never
takes the host-wide `/tmp/libtpu_lockfile` that a concurrent `prd-jax compile` for a TPU
topology needs (libtpu holds it as a POSIX record lock, `lockf`); a compile and CPU runs on
one host both succeed, and the CPU runs print no TPU warnings (issue 35 §6)."""

import fcntl
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAS_LIBTPU = importlib.util.find_spec("libtpu") is not None

LOCK = "/tmp/libtpu_lockfile"
CHILD = ("import sys, time; from prd_jax.cli import cpu_or_gpu_host_platforms; cpu_or_gpu_host_platforms(); "
         "import jax; print(jax.devices()[0].platform, flush=True); sys.stdin.readline()")


def _lock_is_free() -> bool:
    with open(LOCK, "a") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        fcntl.lockf(f, fcntl.LOCK_UN)
        return True


@pytest.mark.skipif(not os.path.exists("/tmp") or sys.platform != "linux", reason="Linux record locks")
def test_a_cpu_cli_process_leaves_the_libtpu_lock_free():
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "cpu"  # jax is up, on the CPU
        assert _lock_is_free()
    finally:
        _, err = child.communicate("\n", timeout=60)
    assert "TPU" not in err and "libtpu" not in err


def _cpu_child(env):
    return subprocess.Popen([sys.executable, "-c", CHILD], env=env, cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_LIBTPU, reason="needs libtpu: pip install -e '.[tpu-aot]' (make test installs it)")
def test_tpu_compile_while_cpu_processes_run():
    """`prd-jax compile` of the tiny SFT config for a v5e:2x2 topology, with one CPU prd_jax
    process up before it starts (it would hold libtpu's lock if it loaded libtpu) and one
    started while it compiles: the compile fits (exit 0) and both CPU processes exit 0 with
    no TPU / libtpu line on stderr."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    before = _cpu_child(env)
    try:
        assert before.stdout.readline().strip() == "cpu"  # jax is up on the CPU before the compile starts
        compile_ = subprocess.Popen([sys.executable, "-m", "prd_jax.cli", "compile", "--config", "configs/sft/tiny.py",
                                     "--topology", "v5e:2x2", "--json"], env=env, cwd=ROOT,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        during = _cpu_child(env)
        try:
            assert during.stdout.readline().strip() == "cpu"
            out, err = compile_.communicate(timeout=900)
        finally:
            during_err = during.communicate("\n", timeout=120)[1]
    finally:
        before_err = before.communicate("\n", timeout=120)[1]
    assert compile_.returncode == 0, err[-3000:]
    record = json.loads(out.strip().splitlines()[-1])
    assert record["topology"] == "v5e:2x2" and record["fits"] is True, record
    assert [p["name"] for p in record["programs"]] == ["train_step"], record
    for child, child_err in ((before, before_err), (during, during_err)):
        assert child.returncode == 0, child_err
        assert "TPU" not in child_err and "libtpu" not in child_err, child_err
