"""Every stage is the same on several processes: 2 processes x 2 CPU devices (jax.distributed on
127.0.0.1, gloo collectives) against 1 process x 4 devices, on one (data=4) mesh each.

Stages, each run once per layout (the single- and two-process runs go concurrently) and shared
by the assertions through module fixtures; every run is 2-3 steps of a 1-layer model:
- SFT (configs/sft/tiny.py);
- V1-PairRL (configs/rl/tiny_pairrl.py): standard rollouts (the configs/rl/tiny.py path) plus
  pairwise verifier rows;
- continual PDR-RL (configs/rl/tiny_continual_pdr.py) from the PairRL run: the baseline check
  reads config.json, params come from its checkpoint, then operator rollouts only (PDR rounds
  through `runner.run_operator`; standard rollouts are PairRL's);
- `prd-jax eval` of a tiny random HF-format model: results.jsonl is written once, by process 0;
  its operators include two with host callbacks inside the compiled program (the Swiss
  tournament's pairing and majority vote's answer ids).

Rows are multiples of the 4 devices, so sampler and operator outputs are sharded across the
two processes: reading them without `host.to_host` raises there. Tiny models are rarely right,
so RL runs use a parity reward (every advantage group moves); it is set in the subprocesses.
Params and metrics must agree to fp32 reduction noise (gloo all-reduce vs in-process).
"""

import json
import os
import re
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from prd_jax.checkpoint import describe, latest_params

pytestmark = pytest.mark.slow  # each test launches jax.distributed processes

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CONFIGS = os.path.join(ROOT, "configs")
MODEL = ["--config.model.overrides.hidden=32", "--config.model.overrides.intermediate=64",
         "--config.model.overrides.num_layers=1", "--config.data.difficulty=(1,)"]
SFT = MODEL + ["--config.data.num_train=100", "--config.data.num_eval=8", "--config.data.seq_len=96",
               "--config.batch_size=8", "--config.steps=3", "--config.checkpoint_every=3", "--config.eval_every=0"]
RL = MODEL + ["--config.data.num_train=64", "--config.rl.max_new_tokens=16", "--config.optim.weight_decay=0.0",
              "--config.steps=2", "--config.checkpoint_every=2"]
PAIRRL = RL + ["--config.rl.prompts_per_step=4", "--config.rl.samples_per_prompt=2",
               "--config.rl.verifier_pairs_per_prompt=1", "--config.rl.verifier_max_new_tokens=8",
               "--config.rl.verifier_candidate_max_tokens=16"]
CONTINUAL = RL + ["--config.rl.prompts_per_step=2", "--config.rl.samples_per_prompt=2",
                  "--config.rl.operator_fraction=1.0", "--config.rl.operator.schedule=(2,1)",
                  "--config.rl.operator.max_new_tokens=16", "--config.rl.operator.candidate_max_tokens=16",
                  "--config.rl.operator.kappa=16"]
# `prd-jax ARGS`, with the RL reward swapped for the parity of the completion's characters.
ENTRY = ("import sys; import prd_jax.train.rl as rl; rl.TaskReward.grades = lambda self, texts, keys: "
         "[dict(reward=float(sum(map(ord, t)) % 2), correct=float(sum(map(ord, t)) % 2)) for t in texts]; "
         "from prd_jax.cli import main; main(sys.argv[1:])")
RTOL, ATOL = 1e-5, 1e-6  # fp32 reduction-order noise
# The programs are tiny and compiling dominates: XLA's CPU backend without LLVM optimisation
# compiles about a fifth faster. Both layouts use the same flags.
FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


def _env(devices, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PRD_COORDINATOR", "PRD_NUM_PROCESSES", "PRD_PROCESS_ID")}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices} {FAST_COMPILE}",
               **extra)
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_both(tmp, name, args, single_init=None, multi_init=None):
    """Run `prd-jax args` in `tmp/name_single` (1 process, 4 devices) and `tmp/name_multi`
    (2 processes x 2 devices) at the same time; returns (single, multi, logs of the 3 processes)."""
    dirs = {k: str(tmp / f"{name}_{k}") for k in ("single", "multi")}
    inits = {"single": single_init, "multi": multi_init}

    def cmd(kind):
        init = [f"--config.model.init_workdir={inits[kind]}"] if inits[kind] else []
        return [sys.executable, "-c", ENTRY, *args, "--workdir", dirs[kind], *init]

    port = _free_port()
    launch = [("single", _env(4))] + [("multi", _env(2, PRD_COORDINATOR=f"127.0.0.1:{port}", PRD_NUM_PROCESSES="2",
                                                      PRD_PROCESS_ID=str(i))) for i in range(2)]
    procs = [subprocess.Popen(cmd(kind), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
             for kind, env in launch]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=900)[0].decode(errors="replace"))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    assert [p.returncode for p in procs] == [0, 0, 0], "\n=====\n".join(log[-4000:] for log in logs)
    return dirs["single"], dirs["multi"], logs


def _train_args(config):
    return ["train", "--config", os.path.join(CONFIGS, config), "--no-progress"]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("multiprocess")


@pytest.fixture(scope="module")
def sft(tmp):
    return run_both(tmp, "sft", _train_args("sft/tiny.py") + SFT)


@pytest.fixture(scope="module")
def pairrl(tmp, sft):
    init = sft[0]  # both layouts start from the same params
    return run_both(tmp, "pairrl", _train_args("rl/tiny_pairrl.py") + PAIRRL, init, init)


@pytest.fixture(scope="module")
def continual(tmp, pairrl):
    # each layout continues from its own PairRL run (a baseline: RL stage, no operator rollouts)
    return run_both(tmp, "continual", _train_args("rl/tiny_continual_pdr.py") + CONTINUAL, pairrl[0], pairrl[1])


def _metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def assert_same_run(single, multi, steps, stage):
    """Equal step, params and metrics (timings aside) within fp32 noise; one metrics line a step."""
    a, b = describe(single), describe(multi)
    assert a["latest_step"] == b["latest_step"] == steps
    for info in (a, b):  # config.json, written by process 0; the runs differ only in where they start from
        info["config"]["model"].pop("init_workdir")
    assert a["config"] == b["config"]
    (_, pa), (_, pb) = latest_params(single), latest_params(multi)
    diff = max(float(np.max(np.abs(x - y))) for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb)))
    print(f"{stage}: max |param diff| single vs 2 processes = {diff:.3g}")
    for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb)):
        np.testing.assert_allclose(y, x, rtol=RTOL, atol=ATOL)
    la, lb = _metrics(single), _metrics(multi)
    assert [m["step"] for m in la] == [m["step"] for m in lb] == list(range(1, steps + 1))  # not written twice
    for ma, mb in zip(la, lb):
        keys = sorted(k for k in ma if not k.startswith("time/") and not k.endswith("per_s"))
        assert keys == sorted(k for k in mb if not k.startswith("time/") and not k.endswith("per_s"))
        np.testing.assert_allclose([mb[k] for k in keys], [ma[k] for k in keys], rtol=RTOL, atol=ATOL,
                                   err_msg=f"{stage} step {ma['step']} metrics {keys}")
    return la


def test_sft_equals_single_process(sft):
    la = assert_same_run(sft[0], sft[1], 3, "sft")
    assert all(m["tokens"] > 0 for m in la)


def test_pairrl_standard_and_verifier_rollouts_equal_single_process(pairrl):
    la = assert_same_run(pairrl[0], pairrl[1], 2, "pairrl")
    # the rows exist and carry gradient: sampled rewards with spread, verifier rows on strict pairs
    assert all(m["verifier/rows"] > 0 and m["grad_norm"] > 0 for m in la)
    assert 0 < np.mean([m["reward/standard"] for m in la]) < 1


def test_continual_pdr_rl_equals_single_process(continual, pairrl):
    la = assert_same_run(continual[0], continual[1], 2, "continual_pdr")
    assert all(m["operator/b_seq"] < m["operator/b_total"] and m["workspace_length"] > 0 for m in la)
    assert all(m["grad_norm"] > 0 for m in la)
    # continual initialisation: every process read its baseline RL run's final step
    for log, init in zip(continual[2], (pairrl[0], pairrl[1], pairrl[1])):
        assert f"initialising params from {init} step 2" in log


@pytest.fixture(scope="module")
def tiny_hf_model(tmp):
    """A random 1-layer Llama in HF format (safetensors + config.json) with SmolLM2's tokenizer."""
    from prd_jax.checkpoint import export_hf
    from prd_jax.model.config import NAMED_CONFIGS
    from prd_jax.model.decoder import init_params
    from prd_jax.model.loader import smollm2_gguf_path
    from prd_jax.model.tokenizer import Tokenizer

    out = str(tmp / "tiny_hf")
    tok = Tokenizer.from_gguf(smollm2_gguf_path())
    cfg = NAMED_CONFIGS["tiny"].replace(vocab_size=tok.vocab_size, hidden=32, intermediate=64, num_layers=1,
                                        num_heads=2, num_kv_heads=1, max_position=1024)
    export_hf(cfg, init_params(cfg, jax.random.key(0)), out)
    tok._tok.save(os.path.join(out, "tokenizer.json"))
    special = {k: tok.id_to_token(i) for k, i in (("bos_token", tok.bos_id), ("eos_token", tok.eos_id),
                                                  ("pad_token", tok.pad_id))}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({**special, "chat_template": tok.chat_template}, f)
    return out


EVAL_CONFIG = '''
from prd_jax.config_io import load_config


def get_config(arg=None):
    c = load_config({base!r})
    c.model, c.model_path, c.mesh = "tiny", {model!r}, "data=4"
    c.num_problems, c.batch_size, c.k_samples = 3, 4, 2
    c.operators = [dict(type="pdr", schedule=(2, 1), distill="shared_topk", k=2, selector="random",
                        max_new_tokens=8, candidate_max_tokens=8, truncation_head=2, kappa=8),
                   # host callbacks inside the program: the Swiss tournament's pairing and majority's answer ids
                   dict(type="best_of_n", n=4, selector="pairwise_v1", max_new_tokens=8, candidate_max_tokens=8,
                        truncation_head=2, judge=dict(max_new_tokens=4)),
                   dict(type="best_of_n", n=4, selector="majority", max_new_tokens=8, candidate_max_tokens=8,
                        truncation_head=2)]
    return c
'''


def test_eval_results_written_once_and_equal_single_process(tmp, tiny_hf_model):
    config = tmp / "eval_config.py"
    config.write_text(EVAL_CONFIG.format(base=os.path.join(CONFIGS, "eval", "smollm2_gsm8k.py"), model=tiny_hf_model))
    single, multi, _ = run_both(tmp, "eval", ["eval", "--config", str(config)])
    files = {}
    for name in ("results.jsonl", "summary.md", "settings.json", "config.json"):
        with open(os.path.join(single, name)) as fa, open(os.path.join(multi, name)) as fb:
            files[name] = tuple(re.sub(r', "run_id": "[^"]*"', "", f.read()) for f in (fa, fb))  # one id per run
        assert files[name][0] == files[name][1], name
    rows = [json.loads(line) for line in files["results.jsonl"][0].splitlines()]
    assert len(rows) == 3 * 2 * 3  # problems x samples x operators: once, not once per process
    judged = [r for r in rows if "pairwise_v1" in r["operator"]]
    assert all(sum(c["name"] == "judge" for c in r["calls"]) >= 2 for r in judged)  # the tournament ran
    assert len({(r["problem_id"], r["operator"], r["sample"]) for r in rows}) == len(rows)
    assert len({r["completion"] for r in rows}) > 1  # sampled: rows differ


HELPERS = '''
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from prd_jax import host
from prd_jax.mesh import init_distributed, make_mesh

init_distributed()
mesh = make_mesh("data=4")
x = np.arange(24, dtype=np.float32).reshape(8, 3)
sharded = jax.device_put(x, NamedSharding(mesh, P("data")))
tree = {"sharded": sharded, "replicated": jax.device_put(x, NamedSharding(mesh, P())),
        "scalar": jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(sharded),
        "local": jnp.full((2,), jax.process_index()), "numpy": x, "int": 7}
out = host.to_host(tree)
errors = []
try:
    host.on_main(lambda: 1 // 0)
except Exception as e:
    errors.append(f"{type(e).__name__}: {e}")
print("RESULT " + json.dumps({
    "addressable": [bool(tree[k].is_fully_addressable) for k in ("sharded", "replicated", "scalar", "local")],
    "types": sorted({type(v).__name__ for v in out.values()}), "numpy_passed": out["numpy"] is x,
    **{k: np.asarray(v).tolist() for k, v in out.items()},
    "main": host.on_main(lambda: {"pid": jax.process_index()}), "errors": errors}))
host.sync("helpers_done")
'''


def test_gather_and_main_helpers_across_processes():
    """`to_host` gathers sharded, replicated and scalar global arrays on both processes, leaves
    a process's own arrays and host values alone; `on_main` hands process 0's value (or its
    error) to every process."""
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-c", HELPERS], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT,
                              env=_env(2, PRD_COORDINATOR=f"127.0.0.1:{port}", PRD_NUM_PROCESSES="2",
                                       PRD_PROCESS_ID=str(i))) for i in range(2)]
    logs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n=====\n".join(log[-3000:] for log in logs)
    results = [json.loads(next(ln for ln in log.splitlines() if ln.startswith("RESULT "))[7:]) for log in logs]
    x = np.arange(24, dtype=np.float32).reshape(8, 3).tolist()
    for pid, r in enumerate(results):
        assert r["addressable"] == [False, False, False, True]  # the first three span both processes
        assert r["sharded"] == r["replicated"] == r["numpy"] == x and r["scalar"] == 276.0 and r["int"] == 7
        assert r["local"] == [pid, pid] and r["numpy_passed"] and r["types"] == ["int", "ndarray"]
        assert r["main"] == {"pid": 0}
    error = "ZeroDivisionError: integer division or modulo by zero"
    assert results[0]["errors"] == [error] and results[1]["errors"] == [f"RuntimeError: process 0 failed: {error}"]
