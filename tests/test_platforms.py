"""A CPU run of the CLI never initialises libtpu (installed by the `tpu-aot` extra), so it never
takes the host-wide `/tmp/libtpu_lockfile` that a concurrent `prd-jax compile` for a TPU
topology needs (libtpu holds it as a POSIX record lock, `lockf`)."""

import fcntl
import os
import subprocess
import sys

import pytest

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
