"""One-step-asynchronous RL (`rl.off_policy_steps=1`, `train.async_rollouts`): the setting's
check, the decoupled loss by hand, step t+1 trained on rollouts sampled with the step-t
weights, every RL flavour for two steps, and exact resume after SIGKILL; and the decoupled
loss on-policy under a float8 decode cache (`rl.decoupled_loss`)."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fakes import kill_mid_run
from prd_jax.checkpoint import describe
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.model.decoder import forward
from prd_jax.train import rl as rl_mod
from prd_jax.train.async_rollouts import decode_arrays, encode_arrays
from prd_jax.train.losses import policy_loss, token_logprobs
from prd_jax.train.rl_config import RLConfig

ROOT = os.path.join(os.path.dirname(__file__), "..")
CONFIGS = os.path.join(ROOT, "configs", "rl")
SMALL = ["--config.model.overrides.hidden=32", "--config.model.overrides.intermediate=64",
         "--config.model.overrides.num_layers=1", "--config.data.num_train=64", "--config.data.difficulty=(1,)",
         "--config.model.init=random", "--config.rl.prompts_per_step=2", "--config.rl.samples_per_prompt=2",
         "--config.rl.max_new_tokens=16", "--config.optim.weight_decay=0.0"]


def _config(name, extra=()):
    return apply_overrides(load_config(os.path.join(CONFIGS, f"{name}.py")), SMALL + list(extra))


# ----------------------------------------------------------------------------- setting and loss

@pytest.mark.parametrize("value", [2, -1, True])
def test_off_policy_steps_allows_only_zero_or_one(value):
    config = load_config(os.path.join(CONFIGS, "tiny.py"))
    config.rl.off_policy_steps = value
    with pytest.raises(ValueError, match=r"config.rl.off_policy_steps=.*; allowed: 0 \(on-policy\) or 1"):
        RLConfig.from_config(config)
    config = load_config(os.path.join(CONFIGS, "tiny.py"))
    config.rl.off_policy_steps, config.rl.off_policy_weight_cap = 1, 0.5
    with pytest.raises(ValueError, match="config.rl.off_policy_weight_cap=0.5; must be >= 1"):
        RLConfig.from_config(config)


def test_decoupled_loss_setting_and_its_auto_rule():
    base = load_config(os.path.join(CONFIGS, "tiny.py"))
    assert RLConfig.from_config(base).decoupled is False  # exact sampler, on-policy
    for overrides, expected in [(["--config.rl.off_policy_steps=1"], True),
                                (["--config.sampling.kv_cache_dtype=float8_e4m3fn"], True),
                                (["--config.sampling.kv_cache_dtype=float8_e5m2"], True),
                                (["--config.sampling.kv_cache_dtype=bfloat16"], False),
                                (["--config.rl.decoupled_loss=on"], True),
                                (["--config.sampling.kv_cache_dtype=float8_e4m3fn", "--config.rl.decoupled_loss=off"],
                                 False)]:
        config = apply_overrides(load_config(os.path.join(CONFIGS, "tiny.py")), overrides)
        assert RLConfig.from_config(config).decoupled is expected, overrides
    for overrides, match in [(["--config.rl.decoupled_loss=yes"], r"decoupled_loss='yes'; allowed: \('auto', 'on', 'off'\)"),
                             (["--config.rl.decoupled_loss=off", "--config.rl.off_policy_steps=1"],
                              "decoupled_loss='off' needs config.rl.off_policy_steps=0")]:
        config = apply_overrides(load_config(os.path.join(CONFIGS, "tiny.py")), overrides)
        with pytest.raises(ValueError, match=match):
            RLConfig.from_config(config)


def _arrays():
    new = jnp.log(jnp.array([[0.5, 0.30, 0.2, 0.1]]))
    prox = jnp.log(jnp.array([[0.4, 0.25, 0.2, 0.5]]))
    old = jnp.log(jnp.array([[0.4, 0.05, 0.3, 0.5]]))  # token 1: prox/old = 5 > C = 2 (truncated)
    return new, prox, old, jnp.array([[1.0, 1.0, 1.0, 0.0]])


@pytest.mark.parametrize("kind,adv", [("cispo", 1.5), ("ppo", 1.5), ("ppo", -1.0)])
def test_decoupled_loss_by_hand(kind, adv):
    new, prox, old, w = _arrays()
    total, count, m = policy_loss(new, old, jnp.array([adv]), w, kind=kind, eps_low=0.2, eps_high=0.28,
                                  prox_logp=prox, behaviour_weight_cap=2.0)
    p_new, p_prox, p_old = (np.exp(np.asarray(x, np.float64))[0] for x in (new, prox, old))
    weight = np.minimum(p_prox / p_old, 2.0)  # [1, 2 (5 truncated), 2/3, 1]
    u = p_new / p_prox  # the trust region's ratio: [1.25, 1.2, 1.0, 0.2]
    if kind == "cispo":
        per = -weight * np.minimum(u, 1.28) * adv * np.log(p_new)
    else:
        per = -weight * np.minimum(u * adv, np.clip(u, 0.8, 1.28) * adv)
    mask = np.asarray(w)[0]
    np.testing.assert_allclose(float(total), (per * mask).sum(), rtol=1e-6)
    assert float(count) == 3.0
    np.testing.assert_allclose(float(m["behaviour_weight"][0]) / 3, (weight * mask).sum() / 3, rtol=1e-6)
    assert float(m["behaviour_weight_truncated"][0]) == 1.0  # token 1 only (token 3 has weight 0)
    np.testing.assert_allclose(float(m["ratio"][0]) / 3, (u * mask).sum() / 3, rtol=1e-6)


def test_without_prox_logp_the_loss_is_the_on_policy_one_bit_for_bit():
    """`off_policy_steps=0` passes no `prox_logp`: the loss is today's PPO / CISPO, written out
    here; and a proximal policy equal to the behaviour one (weight 1) changes no bit of it."""
    new, _, old, w = _arrays()
    adv = jnp.array([0.7])
    for kind in ("cispo", "ppo"):
        total, _, _ = policy_loss(new, old, adv, w, kind=kind)
        same, _, _ = policy_loss(new, old, adv, w, kind=kind, prox_logp=old)
        r = jnp.exp(new - old)
        if kind == "cispo":
            per = -jax.lax.stop_gradient(jnp.minimum(r, 1.28)) * adv[:, None] * new
        else:
            clipped = ((adv[:, None] > 0) & (r > 1.28)) | ((adv[:, None] < 0) & (r < 0.8))
            per = jnp.where(clipped, -jnp.clip(r, 0.8, 1.28) * adv[:, None], -r * adv[:, None])
        assert float(total) == float(jnp.sum(w * per)) == float(same)


def test_in_flight_arrays_round_trip_and_name_a_wrong_leaf():
    tree = {"standard": {"tokens": np.arange(6, dtype=np.int32).reshape(2, 3),
                         "logprobs": np.array([[-0.5, -1.25]], jnp.bfloat16)}}
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
    back = decode_arrays(json.loads(json.dumps(encode_arrays(tree))), abstract)
    assert all(np.array_equal(a, b) and a.dtype == b.dtype
               for a, b in zip(jax.tree.leaves(tree), jax.tree.leaves(back)))
    wrong = {"standard": {**abstract["standard"], "tokens": jax.ShapeDtypeStruct((2, 4), np.int32)}}
    with pytest.raises(ValueError, match=r"leaf \['standard'\]\['tokens'\] is .*\[2, 3\].*\[2, 4\]"):
        decode_arrays(encode_arrays(tree), wrong)


# ----------------------------------------------------------------------------- the schedule

class _State:
    def __init__(self, params, rng):
        self.params, self.rng = params, rng


def _stage(off_policy_steps):
    from prd_jax.train import setup

    config = _config("tiny", [f"--config.rl.off_policy_steps={off_policy_steps}", "--config.rl.aux_sft_coef=0.0"])
    mesh = setup.build_mesh(config)
    cfg, _, tok = setup.build_model(config, mesh)
    return rl_mod.RLStage(config, cfg, tok, mesh), config, cfg, mesh


def test_an_on_policy_resume_of_an_async_checkpoint_retakes_the_in_flight_prompts():
    stage, _, _, _ = _stage(0)
    first = stage._take(2)
    stage.restore_data({"epoch": 0, "offset": 4, "in_flight": {"step": 1, "policy_step": 0, "epoch": 0, "offset": 0,
                                                               "arrays": {}}})
    assert (stage.epoch, stage.offset) == (0, 0) and stage._take(2) == first


@pytest.mark.slow
def test_step_t_plus_1_trains_on_rollouts_of_the_step_t_weights(spread_reward):
    off, config, cfg, mesh = _stage(1)
    on, _, _, _ = _stage(0)
    theta0 = rl_mod.initial_params(config, cfg, mesh)
    theta1 = jax.tree.map(lambda x: x * 1.1, theta0)  # stands in for step 0's update
    rng = jax.random.key(7)
    b0, m0 = off.next_batch(_State(theta0, rng), 0)
    b1, m1 = off.next_batch(_State(theta1, rng), 1)
    a0, _ = on.next_batch(_State(theta0, rng), 0)
    a1, _ = on.next_batch(_State(theta0, rng), 1)  # on-policy step 1 sampled with theta0
    assert (m0["rollout/policy_lag"], m1["rollout/policy_lag"]) == (0.0, 1.0)
    for k in a0:  # step 0 is on-policy; step 1's rollouts are theta0's
        np.testing.assert_array_equal(b0[k], a0[k], err_msg=k)
        np.testing.assert_array_equal(b1[k], a1[k], err_msg=k)

    logp = jax.jit(lambda p, b: token_logprobs(forward(cfg, p, b["inputs"], b["positions"],
                                                       segment_ids=b["segment_ids"], mesh=mesh)[0], b["targets"]))
    keys = ("inputs", "positions", "segment_ids", "targets")
    lp0, lp1 = (np.asarray(logp(p, {k: b1[k] for k in keys})) for p in (theta0, theta1))
    live = b1["weights"] > 0
    np.testing.assert_allclose(b1["old_logp"][live], lp0[live], atol=2e-4)  # behaviour: step 0's params
    assert np.abs(b1["old_logp"][live] - lp1[live]).max() > 0.05
    np.testing.assert_allclose(b1["prox_logp"][live], lp1[live], atol=2e-4)  # proximal: step 1's params

    total, count, metrics = jax.jit(off.loss_fn())(theta1, {k: jnp.asarray(v) for k, v in b1.items()})
    weight = np.minimum(np.exp(b1["prox_logp"] - b1["old_logp"]), 2.0)  # truncated behaviour weight
    per = -weight * np.minimum(np.exp(lp1 - b1["prox_logp"]), 1.28) * b1["advantages"][:, None] * lp1
    np.testing.assert_allclose(float(total), (per * b1["weights"]).sum(), rtol=2e-4, atol=1e-5)
    assert float(count) == b1["weights"].sum()
    assert abs(float(metrics["behaviour_weight"][0] / metrics["behaviour_weight"][1]) - 1.0) > 0.01


@pytest.mark.slow
def test_a_float8_cache_trains_on_policy_with_the_decoupled_loss(spread_reward):
    """On-policy with a float8 decode cache: the batch's `old_logp` is the sampler's (rounded
    cache), `prox_logp` the trainer's forward of the same params, and the loss weighs each token
    by min(exp(prox - old), 2), written out here. The exact sampler's batch has no `prox_logp`."""
    def stage(extra):
        from prd_jax.train import setup
        config = _config("tiny", ["--config.rl.aux_sft_coef=0.0", "--config.sampling.temperature=0.0"] + extra)
        mesh = setup.build_mesh(config)
        cfg, _, tok = setup.build_model(config, mesh)
        return rl_mod.RLStage(config, cfg, tok, mesh), config, cfg, mesh

    lossy, config, cfg, mesh = stage(["--config.sampling.kv_cache_dtype=float8_e4m3fn"])
    exact, _, _, _ = stage([])
    assert lossy.rl.decoupled and not exact.rl.decoupled
    assert "prox_logp" in lossy.abstract_batch() and "prox_logp" not in exact.abstract_batch()
    theta = rl_mod.initial_params(config, cfg, mesh)
    rng = jax.random.key(3)
    b, m = lossy.next_batch(_State(theta, rng), 0)
    a, _ = exact.next_batch(_State(theta, rng), 0)
    assert "prox_logp" not in a and m["time/prox_logp_s"] > 0
    logp = jax.jit(lambda p, x: token_logprobs(forward(cfg, p, x["inputs"], x["positions"],
                                                       segment_ids=x["segment_ids"], mesh=mesh)[0], x["targets"]))
    keys = ("inputs", "positions", "segment_ids", "targets")
    trainer = np.asarray(logp(theta, {k: b[k] for k in keys}))
    live = b["weights"] > 0
    np.testing.assert_allclose(b["prox_logp"][live], trainer[live], atol=2e-4)  # proximal: the trainer's
    gap = np.abs(b["old_logp"][live] - trainer[live])
    assert 0 < gap.max() < 0.5  # the rounded cache moves the sampler's record, a little

    total, count, metrics = jax.jit(lossy.loss_fn())(theta, {k: jnp.asarray(v) for k, v in b.items()})
    weight = np.minimum(np.exp(b["prox_logp"] - b["old_logp"]), 2.0)
    per = -weight * np.minimum(np.exp(trainer - b["prox_logp"]), 1.28) * b["advantages"][:, None] * trainer
    np.testing.assert_allclose(float(total), (per * b["weights"]).sum(), rtol=2e-4, atol=1e-5)
    assert float(count) == b["weights"].sum()
    np.testing.assert_allclose(float(metrics["behaviour_weight"][0]), (weight * b["weights"]).sum(), rtol=1e-4)


@pytest.mark.slow
def test_every_flavour_trains_two_steps_off_policy(tmp_path, spread_reward):
    """Two runs, two steps each (the second trains on stale rollouts): V1-PointRL (PPO
    clip-higher, Dr.GRPO); from it, continual PDR-RL with standard (CISPO, GRPO), PDR operator
    and V1-PairRL verifier rows in one batch. configs/rl/tiny.py (CISPO, GRPO) runs in the
    resume test below."""
    from prd_jax.train.run import train

    common = ["--config.steps=2", "--config.checkpoint_every=2", "--config.rl.off_policy_steps=1",
              "--config.rl.verifier_max_new_tokens=8", "--config.rl.verifier_candidate_max_tokens=16",
              "--config.rl.verifier_pairs_per_prompt=1"]
    point, continual = str(tmp_path / "pointrl"), str(tmp_path / "continual")
    train(_config("tiny_pointrl", common + ["--config.rl.verifier_pointwise_per_prompt=2"]), point, progress=False)
    config = apply_overrides(load_config(os.path.join(CONFIGS, "tiny_continual_pdr.py")), [
        *SMALL[:5], *SMALL[6:], *common, f"--config.model.init_workdir={point}", "--config.rl.verifier=pairwise",
        "--config.rl.operator.schedule=(2,1)", "--config.rl.operator.max_new_tokens=16",
        "--config.rl.operator.candidate_max_tokens=16", "--config.rl.operator.kappa=16"])
    train(config, continual, progress=False)
    for workdir, keys in ((point, ("verifier/reward", "reward/standard")),
                          (continual, ("reward/standard", "reward/operator", "verifier/strict_pairs"))):
        lines = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl"))]
        assert [x["rollout/policy_lag"] for x in lines] == [0.0, 1.0]
        assert all(np.isfinite(x["loss"]) and 0.0 < x["behaviour_weight"] <= 2.0 for x in lines)
        assert all(k in lines[1] for k in keys), sorted(lines[1])
    assert json.load(open(os.path.join(continual, "config.json")))["continual"] is True


# ----------------------------------------------------------------------------- resume

ENTRY = ("import sys; import prd_jax.train.rl as rl; rl.TaskReward.grades = lambda self, texts, keys: "
         "[dict(reward=float(len(t) % 2), correct=float(len(t) % 2)) for t in texts]; "
         "from prd_jax.cli import main; main(sys.argv[1:])")


def _train_cmd(workdir):
    return [sys.executable, "-c", ENTRY, "train", "--config", os.path.join(CONFIGS, "tiny.py"), "--workdir", workdir,
            "--no-progress", *SMALL, "--config.steps=4", "--config.checkpoint_every=1",
            "--config.rl.off_policy_steps=1", "--config.optim.learning_rate=1e-2"]


def _env():
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true")
    return env


@pytest.mark.slow
def test_off_policy_run_resumes_exactly_after_sigkill(tmp_path):
    """The checkpoint holds the in-flight rollouts (sampled with the previous step's params,
    which no checkpoint keeps): the resumed run trains on them and ends bit-identical."""
    ref, killed = str(tmp_path / "ref"), str(tmp_path / "killed")
    straight = subprocess.Popen(_train_cmd(ref), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                cwd=ROOT)
    assert 2 <= kill_mid_run(_train_cmd(killed), _env(), ROOT, killed, 2) < 4, "the run must be killed mid-way"
    assert straight.wait(timeout=600) == 0, straight.stderr.read().decode()[-3000:]
    subprocess.run(_train_cmd(killed), check=True, env=_env(), capture_output=True, cwd=ROOT, timeout=600)
    a, b = describe(ref), describe(killed)
    assert a["latest_step"] == b["latest_step"] == 4
    assert a["params_digest"] == b["params_digest"]
    lines = [json.loads(x) for x in open(os.path.join(killed, "metrics.jsonl"))]
    assert [x["step"] for x in lines] == [1, 2, 3, 4]
    assert [x["rollout/policy_lag"] for x in lines] == [0.0, 1.0, 1.0, 1.0]  # no step resampled on-policy
    assert lines[-1]["loss"] == a["last_metrics"]["loss"]
