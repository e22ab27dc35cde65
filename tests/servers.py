"""Servers that tests start on loopback: a free port, waiting for `/health`, and `prd-jax serve`
in a child process (stopped with SIGTERM, which must drain and exit 0)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import httpx


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float, what: str = "server") -> None:
    """Poll `url`/health until it answers 200; fail at once if `proc` exits, or after `timeout` s."""
    deadline = time.time() + timeout
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            err = proc.stderr.read()[-3000:] if proc.stderr is not None else ""
            raise AssertionError(f"{what} exited with {proc.returncode}: {err}")
        assert time.time() < deadline, f"{what} did not answer /health within {timeout:.0f} s"
        time.sleep(0.5)


@contextlib.contextmanager
def prd_serve(*args: str, timeout: float = 300):
    """`prd-jax serve ARGS --port P` on the CPU; yields its base URL (no /v1). On exit it is sent
    SIGTERM and must exit 0 (uvicorn drains in-flight requests)."""
    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="", JAX_DEFAULT_MATMUL_PRECISION="highest")
    proc = subprocess.Popen([sys.executable, "-m", "prd_jax.cli", "serve", *args, "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout, "prd-jax serve")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
