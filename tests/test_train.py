"""Training stack: accumulation, sharding, memorisation, non-finite guard, configs, RL batches,
exact resume after SIGKILL. (Loss and advantage formulas: test_train_losses.py.)"""

import functools
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from fakes import kill_mid_run
from prd_jax.checkpoint import describe
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.mesh import make_mesh
from prd_jax.model import get_model_config
from prd_jax.train.optim import OptimConfig, make_optimizer, make_schedule
from prd_jax.train.rl import RLConfig, rl_loss_fn, sequences_to_batch
from prd_jax.train.sft import sft_loss_fn
from prd_jax.train.state import abstract_state, create_state, state_shardings
from prd_jax.train.step import compile_step, split_microbatches, train_step

ROOT = os.path.join(os.path.dirname(__file__), "..")
SFT_TINY = os.path.join(ROOT, "configs", "sft", "tiny.py")
RL_TINY = os.path.join(ROOT, "configs", "rl", "tiny.py")
CFG = get_model_config("tiny", vocab_size=64, hidden=32, intermediate=64, num_heads=2, num_kv_heads=1,
                       head_dim=16, max_position=64)
SMALL = ["--config.model.overrides.hidden=32", "--config.model.overrides.intermediate=64",
         "--config.model.overrides.num_layers=1", "--config.data.num_train=200", "--config.data.num_eval=8",
         "--config.data.seq_len=96", "--config.batch_size=8", "--config.data.difficulty=(1,)"]


def random_batch(rng, b=8, t=12):
    return dict(inputs=rng.integers(3, 60, (b, t)).astype(np.int32), targets=rng.integers(3, 60, (b, t)).astype(np.int32),
                positions=np.tile(np.arange(t, dtype=np.int32), (b, 1)), segment_ids=np.ones((b, t), np.int32),
                weights=(rng.random((b, t)) < 0.6).astype(np.float32))


def run_steps(mesh, batch, accum, steps=2, loss=None, lr=1e-2):
    oc = OptimConfig(lr, 0, 10, schedule="constant")
    opt = make_optimizer(oc)
    state = create_state(CFG, opt, mesh, jax.random.key(0))
    step = functools.partial(train_step, loss_fn=loss or sft_loss_fn(CFG, mesh), optimizer=opt,
                             schedule=make_schedule(oc))
    mb = split_microbatches(batch, accum)
    abstract_batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), mb)
    exe, sh = compile_step(step, abstract_state(CFG, opt, mesh), abstract_batch, mesh, state_shardings(CFG, opt, mesh))
    metrics = []
    for _ in range(steps):
        state, m = exe(state, jax.device_put(mb, sh))
        metrics.append(jax.device_get(m))
    return jax.tree.map(np.asarray, state.params), metrics, int(state.step)


@pytest.fixture(scope="module")
def reference():
    return run_steps(make_mesh("data=1", jax.devices()[:1]), random_batch(np.random.default_rng(0)), 1)


def max_diff(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.slow
def test_accumulation_equals_one_batch(reference):
    params, metrics, _ = run_steps(make_mesh("data=1", jax.devices()[:1]), random_batch(np.random.default_rng(0)), 4)
    assert max_diff(params, reference[0]) < 1e-5
    assert abs(metrics[0]["loss"] - reference[1][0]["loss"]) < 1e-6
    assert metrics[0]["tokens"] == reference[1][0]["tokens"]  # the true token count, not per microbatch


@pytest.mark.slow
def test_step_on_2x2x2_mesh_equals_single_device(reference):
    params, metrics, _ = run_steps(make_mesh("data=2,fsdp=2,tensor=2"), random_batch(np.random.default_rng(0)), 2)
    assert max_diff(params, reference[0]) < 1e-5
    assert abs(metrics[1]["loss"] - reference[1][1]["loss"]) < 1e-5


@pytest.mark.slow
def test_loss_falls_on_memorisation():
    rng = np.random.default_rng(1)
    batch = random_batch(rng, b=4, t=10)
    _, metrics, _ = run_steps(make_mesh("data=1", jax.devices()[:1]), batch, 1, steps=40, lr=3e-2)
    assert metrics[0]["loss"] > 3.5  # ~ln(64) at init
    assert metrics[-1]["loss"] < 0.5 * metrics[0]["loss"]


@pytest.mark.slow
def test_nonfinite_loss_rejects_the_update():
    mesh = make_mesh("data=1", jax.devices()[:1])
    good = sft_loss_fn(CFG, mesh)

    def nan_loss(params, batch):
        s, c, m = good(params, batch)
        return s * np.nan, c, m

    batch = random_batch(np.random.default_rng(0))
    params, metrics, step = run_steps(mesh, batch, 1, steps=2, loss=nan_loss)
    init = jax.tree.map(np.asarray, create_state(CFG, make_optimizer(OptimConfig(1e-2, 0, 10)), mesh,
                                                 jax.random.key(0)).params)
    assert max_diff(params, init) == 0.0 and step == 0
    assert [m["nonfinite"] for m in metrics] == [1.0, 1.0]


def test_sequences_to_batch_hand_checked():
    prompt = np.array([[0, 0, 7, 8]])  # left-padded, length 2
    comp = np.array([[5, 6, 9]])  # 2 valid tokens
    out = sequences_to_batch(prompt, np.array([2]), comp, np.array([2]), np.array([[-0.5, -1.5, -9.0]]))
    assert out["inputs"].tolist() == [[0, 0, 7, 8, 5, 6]]
    assert out["targets"].tolist() == [[0, 7, 8, 5, 6, 9]]
    assert out["positions"].tolist() == [[0, 0, 0, 1, 2, 3]]
    assert out["segment_ids"].tolist() == [[0, 0, 1, 1, 1, 1]]
    assert out["weights"].tolist() == [[0, 0, 0, 1, 1, 0]]  # targets 5 and 6 are completion tokens
    assert out["old_logp"].tolist() == [[0, 0, 0, -0.5, -1.5, 0]]


@pytest.mark.slow
def test_rl_loss_on_policy_cispo_equals_advantage_weighted_nll():
    mesh = make_mesh("data=1", jax.devices()[:1])
    params = create_state(CFG, make_optimizer(OptimConfig(1e-2, 0, 10)), mesh, jax.random.key(0)).params
    rng = np.random.default_rng(0)
    b = random_batch(rng, b=4)
    from prd_jax.train.losses import token_logprobs
    from prd_jax.model.decoder import forward

    logp = np.asarray(token_logprobs(forward(CFG, params, b["inputs"], b["positions"], segment_ids=b["segment_ids"])[0],
                                     b["targets"]))
    adv = np.array([1.0, -1.0, 0.5, 0.0], np.float32)
    batch = dict(b, old_logp=logp, ref_logp=logp, advantages=adv, correct=np.array([1, 0, 1, 0], np.float32))
    w = b["weights"]
    correct_nll = (-(logp * w)[[0, 2]]).sum()
    # aux normaliser "policy": the SFT sum shares the policy loss's denominator (all tokens);
    # "correct_token_mean" (default): after that one division it is the mean over correct tokens
    for normaliser, aux in (("policy", correct_nll), ("correct_token_mean", correct_nll * w.sum() / w[[0, 2]].sum())):
        rl = RLConfig(aux_sft_coef=0.1, aux_sft_normaliser=normaliser)
        total, count, metrics = rl_loss_fn(CFG, None, rl)(params, batch)
        expected = -(adv[:, None] * logp * w).sum() + 0.1 * aux
        assert abs(float(total) - expected) < 1e-3 and float(count) == w.sum()
        assert abs(float(metrics["ratio"][0] / metrics["ratio"][1]) - 1.0) < 1e-6


@pytest.mark.parametrize("overrides,message", [
    (["--config.optim.learning_rat=1.0"], "no field 'optim.learning_rat'"),
    (["--config.model.init=warm"], "config.model.init='warm'"),
    (["--config.optim.schedule=cyclic"], "OptimConfig.schedule"),
])
def test_bad_config_is_named(tmp_path, overrides, message):
    from prd_jax.train.run import train

    with pytest.raises(ValueError, match=message.replace("(", "\\(")):
        train(apply_overrides(load_config(SFT_TINY), overrides), str(tmp_path / "w"), progress=False)


def test_bad_rl_config_is_named():
    config = load_config(RL_TINY)
    config.rl.loss = "reinforce"
    with pytest.raises(ValueError, match="config.rl.loss='reinforce'"):
        RLConfig.from_config(config)


def _train_cmd(workdir, extra=()):
    return [sys.executable, "-m", "prd_jax.cli", "train", "--config", SFT_TINY, "--workdir", workdir,
            "--no-progress", *SMALL, "--config.steps=6", "--config.checkpoint_every=2", "--config.eval_every=0",
            *extra]


def _env():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)  # one device, as in the reference run
    return env


@pytest.mark.slow
def test_exact_resume_after_sigkill(tmp_path):
    ref, killed = str(tmp_path / "ref"), str(tmp_path / "killed")
    subprocess.run(_train_cmd(ref), check=True, env=_env(), capture_output=True, cwd=ROOT, timeout=600)
    metrics = os.path.join(killed, "metrics.jsonl")
    assert 3 <= kill_mid_run(_train_cmd(killed), _env(), ROOT, killed, 3) < 6, "the run must be killed mid-way"
    subprocess.run(_train_cmd(killed), check=True, env=_env(), capture_output=True, cwd=ROOT, timeout=600)
    a, b = describe(ref), describe(killed)
    assert a["latest_step"] == b["latest_step"] == 6
    assert a["params_digest"] == b["params_digest"]
    assert [json.loads(x)["step"] for x in open(metrics)] == [1, 2, 3, 4, 5, 6]  # no duplicate lines
    assert json.loads(open(metrics).readlines()[-1])["loss"] == a["last_metrics"]["loss"]


@pytest.mark.slow
def test_rl_step_changes_params_and_logs_metrics(tmp_path):
    from prd_jax.train import rl as rl_mod
    from prd_jax.train.run import train

    sft = str(tmp_path / "sft")
    train(apply_overrides(load_config(SFT_TINY), SMALL + ["--config.steps=2", "--config.eval_every=0"]), sft,
          progress=False)
    config = apply_overrides(load_config(RL_TINY), SMALL[:5] + [
        "--config.steps=1", f"--config.model.init_workdir={sft}", "--config.rl.prompts_per_step=2",
        "--config.rl.samples_per_prompt=4", "--config.rl.max_new_tokens=16", "--config.optim.weight_decay=0.0"])
    original = rl_mod.TaskReward.grades
    rl_mod.TaskReward.grades = lambda self, texts, keys: [  # a reward with spread
        {"reward": float(len(t) % 2), "correct": float(len(t) % 2)} for t in texts]
    try:
        train(config, str(tmp_path / "rl"), progress=False)
    finally:
        rl_mod.TaskReward.grades = original
    before, after = describe(sft), describe(str(tmp_path / "rl"))
    assert after["latest_step"] == 1 and after["params_digest"] != before["params_digest"]
    m = after["last_metrics"]
    for key in ("reward/mean", "accuracy", "response_length", "clip_fraction", "entropy", "kl",
                "rollout/tokens_per_s", "time/rollout_s", "time/train_s", "rollout/compilations"):
        assert key in m
    assert 0.0 < m["reward/mean"] < 1.0


@pytest.mark.slow
def test_run_halts_after_consecutive_nonfinite_steps(tmp_path):
    from prd_jax.train import setup
    from prd_jax.train.sft import SFTStage
    from prd_jax.train.trainer import fit

    config = apply_overrides(load_config(SFT_TINY), SMALL + ["--config.steps=10", "--config.max_nonfinite_steps=3",
                                                             "--config.eval_every=0"])
    mesh = setup.build_mesh(config)
    cfg, params, tok = setup.build_model(config, mesh)

    class NaNStage(SFTStage):
        def loss_fn(self):
            good = super().loss_fn()

            def loss(p, b):
                s, c, m = good(p, b)
                return s + np.inf, c, m
            return loss

    with pytest.raises(FloatingPointError, match="halting at step 3: 3 steps in a row had a non-finite loss"):
        fit(config, str(tmp_path / "w"), NaNStage(config, cfg, tok, mesh), mesh=mesh, cfg=cfg, progress=False)
    assert [json.loads(x)["nonfinite"] for x in open(tmp_path / "w" / "metrics.jsonl")] == [1.0, 1.0, 1.0]
