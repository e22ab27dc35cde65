"""2 processes x 2 CPU devices (jax.distributed on 127.0.0.1, gloo) train 3 SFT steps; the
final params equal a 1-process run on 4 devices (to fp32 reduction-order noise)."""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np

from prd_jax.checkpoint import describe, latest_params

ROOT = os.path.join(os.path.dirname(__file__), "..")
SFT_TINY = os.path.join(ROOT, "configs", "sft", "tiny.py")
ARGS = ["--config.model.overrides.hidden=32", "--config.model.overrides.intermediate=64",
        "--config.model.overrides.num_layers=1", "--config.data.num_train=100", "--config.data.num_eval=8",
        "--config.data.seq_len=96", "--config.batch_size=8", "--config.data.difficulty=(1,)",
        "--config.steps=3", "--config.checkpoint_every=3", "--config.eval_every=0"]


def _cmd(workdir):
    return [sys.executable, "-m", "prd_jax.cli", "train", "--config", SFT_TINY, "--workdir", workdir,
            "--no-progress", *ARGS]


def _env(devices, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRD_")}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", **extra)
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_multiprocess_sft_equals_single_process(tmp_path):
    single, multi = str(tmp_path / "single"), str(tmp_path / "multi")
    subprocess.run(_cmd(single), env=_env(4), check=True, capture_output=True, cwd=ROOT, timeout=600)
    port = _free_port()
    procs = [subprocess.Popen(_cmd(multi), env=_env(2, PRD_COORDINATOR=f"127.0.0.1:{port}", PRD_NUM_PROCESSES="2",
                                                     PRD_PROCESS_ID=str(i)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT) for i in range(2)]
    outs = [p.communicate(timeout=600)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    a, b = describe(single), describe(multi)
    assert a["latest_step"] == b["latest_step"] == 3
    assert a["num_params"] == b["num_params"]
    # Same data and the same update; only the fp32 reduction order differs (gloo all-reduce
    # across processes vs. in-process), measured at ~6e-8.
    (_, pa), (_, pb) = latest_params(single), latest_params(multi)
    assert max(float(np.max(np.abs(x - y))) for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb))) < 1e-6
    la = [json.loads(x) for x in open(os.path.join(single, "metrics.jsonl"))]
    lb = [json.loads(x) for x in open(os.path.join(multi, "metrics.jsonl"))]
    assert [x["tokens"] for x in la] == [x["tokens"] for x in lb]
    assert max(abs(x["loss"] - y["loss"]) for x, y in zip(la, lb)) < 1e-5
