"""V1-PairRL recipe (arXiv 2603.04304 §5): Dr.GRPO's constant normaliser, mini-batch updates
that make the clip act, the per-prompt verifier baseline, PointRL budget-matched to PairRL,
the Qwen3-4B-Instruct-2507 alias, and the frozen-base (non-co-evolving) verifier candidates."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from prd_jax.config_io import apply_overrides, load_config
from prd_jax.train import rl as rl_mod
from prd_jax.train.losses import aggregate, policy_loss
from prd_jax.train.operator_rl import pointwise_subset, verifier_advantages
from prd_jax.train.rl import RLConfig, batch_rows, verifier_budget
from prd_jax.train.step import minibatch_updates
from fakes import RolloutState

ROOT = os.path.join(os.path.dirname(__file__), "..")
RL_DIR = os.path.join(ROOT, "configs", "rl")
TINY = ["--config.model.overrides.hidden=32", "--config.model.overrides.intermediate=64",
        "--config.model.overrides.num_layers=1", "--config.data.num_train=64", "--config.data.difficulty=(1,)",
        "--config.model.init=random", "--config.rl.prompts_per_step=2", "--config.rl.samples_per_prompt=4",
        "--config.rl.max_new_tokens=16", "--config.rl.verifier_max_new_tokens=8",
        "--config.rl.verifier_candidate_max_tokens=16"]


# ----------------------------------------------------------------------------- Dr.GRPO aggregation

def test_constant_normaliser_hand_computed():
    x = jnp.array([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [9.0, 9.0, 9.0, 9.0]])
    w = jnp.array([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    # sum = 1 + 2 + 3 + 4 = 10; three rows (the third, of no weight, counts too: a constant) x T = 4 -> 12
    s, c = aggregate(x, w, "seq_mean_token_sum_norm")
    assert (float(s), float(c)) == (10.0, 12.0)
    s, c = aggregate(x, w, "seq_mean_token_sum_norm", norm_tokens=16)  # e.g. the max generation length
    assert (float(s), float(c)) == (10.0, 48.0)
    # token mean divides by the 4 valid tokens, seq-mean-token-mean by 2 sequences of means 2 and 4
    assert [float(v) for v in aggregate(x, w, "token_mean")] == [10.0, 4.0]
    assert [float(v) for v in aggregate(x, w, "seq_mean_token_mean")] == [6.0, 2.0]
    # the denominator ignores lengths: a longer first sequence changes only the sum
    w_long = w.at[0, 3].set(1.0)
    assert float(aggregate(x, w_long, "seq_mean_token_sum_norm")[1]) == 12.0
    assert float(aggregate(x, w_long, "token_mean")[1]) == 5.0
    # (sum, count) stays exact under accumulation: two microbatches add up to the whole
    parts = [aggregate(x[i:i + 1], w[i:i + 1], "seq_mean_token_sum_norm") for i in range(3)]
    assert sum(float(p[0]) for p in parts) == 10.0 and sum(float(p[1]) for p in parts) == 12.0


def test_constant_normaliser_through_the_policy_loss():
    # on-policy (ratio 1), PPO per-token loss = -A; rows of 3 and 1 completion tokens, T = 5
    logp = jnp.full((2, 5), -1.0)
    w = jnp.array([[0.0, 1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]])
    total, count, _ = policy_loss(logp, logp, jnp.array([0.5, -2.0]), w, kind="ppo",
                                  aggregation="seq_mean_token_sum_norm")
    assert float(total) == -(0.5 * 3) + 2.0 * 1 and float(count) == 2 * 5


def test_unknown_aggregation_names_the_allowed_values():
    with pytest.raises(ValueError, match="seq_mean_token_sum_norm"):
        aggregate(jnp.zeros((1, 2)), jnp.ones((1, 2)), "dr_grpo")
    with pytest.raises(ValueError, match=r"config\.rl\.aggregation='sum'.*seq_mean_token_sum_norm"):
        RLConfig(aggregation="sum")


# ----------------------------------------------------------------------------- mini-batches

def _toy_problem():
    """A one-token policy: logits `w [V]` shared by 8 rows, each row one completion token.
    Rows choosing token 0 have advantage +1, rows choosing token 1 have -1."""
    from prd_jax.train.state import TrainState

    targets = jnp.array([0, 1, 0, 1, 0, 1, 0, 1])
    params = {"w": jnp.zeros((3,))}
    logp0 = jax.nn.log_softmax(params["w"])[targets][:, None]
    batch = {"targets": targets[:, None], "old_logp": logp0, "weights": jnp.ones((8, 1)),
             "advantages": jnp.where(targets == 0, 1.0, -1.0)}

    def loss_fn(p, b):
        new = jax.nn.log_softmax(p["w"])[b["targets"][:, 0]][:, None]
        return policy_loss(new, b["old_logp"], b["advantages"], b["weights"], kind="ppo")

    opt = optax.sgd(2.0)
    state = TrainState(jnp.int32(0), params, opt.init(params), jax.random.key(0))
    micro = jax.tree.map(lambda x: x.reshape(2, 4, *x.shape[1:]), batch)  # A = 2 microbatches of 4 rows
    return state, micro, loss_fn, opt


@pytest.mark.slow
def test_second_minibatch_update_sees_a_moved_ratio_and_clips():
    import functools

    from prd_jax.train.step import train_step

    state, micro, loss_fn, opt = _toy_problem()
    step = jax.jit(functools.partial(train_step, loss_fn=loss_fn, optimizer=opt))
    half = lambda k: jax.tree.map(lambda x: x[k:k + 1], micro)  # mini-batch k: microbatch k
    # independent reference: two updates, one per mini-batch, in order
    s1, m1 = step(state, half(0))
    s2, m2 = step(s1, half(1))
    assert float(m1["ratio"]) == 1.0 and float(m1["clip_fraction"]) == 0.0  # on-policy: nothing to clip
    assert float(m2["ratio"]) != 1.0 and float(m2["clip_fraction"]) > 0.0  # the policy moved: the clip acts
    out, m = jax.jit(minibatch_updates(functools.partial(train_step, loss_fn=loss_fn, optimizer=opt), 2))(state, micro)
    np.testing.assert_allclose(np.asarray(out.params["w"]), np.asarray(s2.params["w"]), rtol=1e-6)
    assert int(out.step) == 2
    np.testing.assert_allclose(float(m["clip_fraction"]), (float(m1["clip_fraction"]) + float(m2["clip_fraction"])) / 2)
    # one update on the whole batch (the old behaviour) never clips
    _, m_one = jax.jit(minibatch_updates(functools.partial(train_step, loss_fn=loss_fn, optimizer=opt), 1))(state,
                                                                                                           micro)
    assert float(m_one["clip_fraction"]) == 0.0 and float(m_one["ratio"]) == 1.0


def test_minibatch_epochs_equal_the_sequential_reference():
    import functools

    from prd_jax.train.step import train_step

    state, micro, loss_fn, opt = _toy_problem()
    step = jax.jit(functools.partial(train_step, loss_fn=loss_fn, optimizer=opt))
    ref = state
    for _ in range(2):  # 2 epochs x 2 mini-batches
        for k in range(2):
            ref, _ = step(ref, jax.tree.map(lambda x: x[k:k + 1], micro))
    out, _ = jax.jit(minibatch_updates(functools.partial(train_step, loss_fn=loss_fn, optimizer=opt), 2, 2))(state,
                                                                                                           micro)
    np.testing.assert_allclose(np.asarray(out.params["w"]), np.asarray(ref.params["w"]), rtol=1e-6)
    assert int(out.step) == 4
    with pytest.raises(ValueError, match="minibatches=3"):
        minibatch_updates(step, 3)(state, micro)  # 2 microbatches do not split into 3


def test_minibatches_must_divide_grad_accum_steps():
    with pytest.raises(ValueError, match=r"config\.rl\.minibatches=0"):
        RLConfig(minibatches=0)
    with pytest.raises(ValueError, match=r"config\.rl\.minibatches=2 must divide config\.grad_accum_steps=1"):
        _stage("tiny_pairrl", ["--config.rl.minibatches=2"])


# ----------------------------------------------------------------------------- verifier baseline

def test_verifier_group_baseline_hand_computed():
    reward = np.array([0.9, 0.5, 0.0, 0.8, 0.2, 0.2, 0.6, 0.0])
    valid = np.array([1, 1, 0, 1, 1, 1, 1, 0], bool)
    # prompt 1: mean of 0.9, 0.5, 0.8 = 11/15; prompt 2: mean of 0.2, 0.2, 0.6 = 1/3; padding slots -> 0
    group = verifier_advantages(reward, valid, 4, "group")
    np.testing.assert_allclose(group, [0.9 - 11 / 15, 0.5 - 11 / 15, 0, 0.8 - 11 / 15,
                                       0.2 - 1 / 3, 0.2 - 1 / 3, 0.6 - 1 / 3, 0], atol=1e-6)
    batch = verifier_advantages(reward, valid, 4, "batch")  # mean of the 6 valid rows = 3.2 / 6
    np.testing.assert_allclose(batch, np.where(valid, reward - 3.2 / 6, 0.0), atol=1e-6)
    with pytest.raises(ValueError, match="allowed"):
        verifier_advantages(reward, valid, 4, "global")
    with pytest.raises(ValueError, match=r"config\.rl\.verifier_baseline='mean'"):
        RLConfig(verifier_baseline="mean")


# ----------------------------------------------------------------------------- PointRL budget

@pytest.mark.parametrize("pair,point,args", [("tiny_pairrl", "tiny_pointrl", (None,)),
                                             ("qwen3_4b_pairrl", "qwen3_4b_pointrl", ("v5p-128", "8xh200"))])
def test_pointrl_is_budget_matched_to_pairrl(pair, point, args):
    for arg in args:
        suffix = "" if arg is None else f":{arg}"
        a = RLConfig.from_config(load_config(os.path.join(RL_DIR, f"{pair}.py") + suffix))
        b = RLConfig.from_config(load_config(os.path.join(RL_DIR, f"{point}.py") + suffix))
        assert (a.verifier, b.verifier) == ("pairwise", "pointwise")
        assert verifier_budget(a) == verifier_budget(b)
        assert verifier_budget(a)["rows"] == a.prompts_per_step * a.verifier_pairs_per_prompt > 0
        assert batch_rows(a) == batch_rows(b)


def test_pointwise_subset_is_uniform_and_distinct():
    rng = np.random.default_rng(0)
    counts = np.zeros(8)
    for _ in range(4000):
        s = pointwise_subset(8, rng, 4)
        assert len(set(s)) == 4 and s == sorted(s)
        counts[s] += 1
    np.testing.assert_allclose(counts / 4000, 0.5, atol=0.04)
    assert pointwise_subset(8, rng, 8) == list(range(8))


# ----------------------------------------------------------------------------- stages on the tiny model

def _stage(name, extra=()):
    from prd_jax.train import setup
    from prd_jax.train.rl import RLStage

    config = apply_overrides(load_config(os.path.join(RL_DIR, f"{name}.py")), TINY + list(extra))
    mesh = setup.build_mesh(config)
    cfg, _, tok = setup.build_model(config, mesh)
    return RLStage(config, cfg, tok, mesh), config, cfg, mesh


def _start(config, cfg, mesh):
    """The params and rng `trainer.fit` starts a random-init run from."""
    from prd_jax.train.state import create_state
    from prd_jax.train.trainer import optimizer_from

    state = create_state(cfg, optimizer_from(config)[0], mesh, jax.random.key(config.seed))
    return state.params, state.rng


@pytest.mark.slow
def test_pointrl_rows_and_group_baseline_on_the_stage(spread_reward):
    stage, config, cfg, mesh = _stage("tiny_pointrl", ["--config.rl.verifier_pointwise_per_prompt=2"])
    params, rng = _start(config, cfg, mesh)
    batch, metrics = stage.next_batch(RolloutState(params, rng), 0)
    v = slice(stage.num_standard * 4, None)  # verifier rows follow the 2 x 4 generator rows
    assert stage.verifier.rows == 2 * 2 == metrics["verifier/rows"]
    adv = batch["advantages"][v].reshape(2, 2)
    np.testing.assert_allclose(adv.sum(axis=1), 0.0, atol=1e-6)  # centred within each prompt's rows


@pytest.mark.slow
def test_frozen_base_candidates_come_from_the_initial_params(spread_reward):
    stage, config, cfg, mesh = _stage("tiny_pairrl_frozen")
    params, rng = _start(config, cfg, mesh)
    initial = jax.tree.map(np.asarray, params)
    calls, rollouts = [], []
    verifier, standard = stage.verifier, stage._standard

    class Recorder:
        def __call__(self, p, key, problem_ids, comp_tok, comp_len, correct, vrng):
            calls.append((p, np.asarray(comp_tok), np.asarray(comp_len)))
            return verifier(p, key, problem_ids, comp_tok, comp_len, correct, vrng)

    def record_standard(p, key, chosen, samples=None):
        out = standard(p, key, chosen, samples)
        rollouts.append((p, key, chosen, out[2]))
        return out

    stage.verifier, stage._standard = Recorder(), record_standard
    stage.next_batch(RolloutState(params, rng), 0)
    # a deliberately changed policy at step 1
    changed = jax.tree.map(lambda x: x + 0.5 * jax.random.normal(jax.random.key(7), x.shape, x.dtype), params)
    stage.next_batch(RolloutState(changed, rng), 1)
    (policy_p, _, chosen, policy_out), (base_p, base_key, _, base_out) = rollouts[-2:]
    verifier_p, cand_tok, cand_len = calls[-1]
    assert verifier_p is changed and policy_p is changed  # the policy generates and verifies
    np.testing.assert_array_equal(cand_tok, base_out[0])  # the verifier quotes the base-model rollouts
    # ... which are what the initial params sample with the same key, not what the policy samples
    step_key = jax.random.fold_in(rng, 1)
    assert jax.random.key_data(base_key).tolist() == jax.random.key_data(jax.random.fold_in(step_key, 3)).tolist()
    expected = standard(jax.tree.map(jnp.asarray, initial), base_key, chosen)[2]
    np.testing.assert_array_equal(cand_tok, expected[0])
    np.testing.assert_array_equal(cand_len, expected[1])
    assert not np.array_equal(standard(changed, base_key, chosen)[2][0], expected[0])
    assert not np.array_equal(policy_out[0], cand_tok)

    # a resumed run (no step 0 in this process) rebuilds the same initial params from the config
    fresh, *_ = _stage("tiny_pairrl_frozen")
    got = fresh._initial(RolloutState(changed, rng), 1)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(initial)):
        np.testing.assert_array_equal(np.asarray(a), b)


@pytest.mark.slow
def test_policy_mode_quotes_the_step_rollouts(spread_reward):
    stage, config, cfg, mesh = _stage("tiny_pairrl")
    params, rng = _start(config, cfg, mesh)
    calls, rollouts = [], []
    verifier, standard = stage.verifier, stage._standard
    stage.verifier = lambda p, key, ids, tok, lens, correct, vrng: (calls.append(np.asarray(tok)),
                                                                    verifier(p, key, ids, tok, lens, correct, vrng))[1]
    stage._standard = lambda p, key, chosen, samples=None: (lambda out: (rollouts.append(out[2]), out)[1])(
        standard(p, key, chosen, samples))
    _, metrics = stage.next_batch(RolloutState(params, rng), 0)
    assert len(rollouts) == 1  # no extra rollout
    np.testing.assert_array_equal(calls[0], rollouts[0][0])
    assert metrics["verifier/candidate_accuracy"] == float(np.mean(rollouts[0][2]))


def test_verifier_samples_validation():
    with pytest.raises(ValueError, match=r"config\.rl\.verifier_samples='base'.*frozen_base"):
        RLConfig(verifier="pairwise", verifier_samples="base")
    with pytest.raises(ValueError, match=r"verifier_samples='frozen_base' needs config\.rl\.verifier"):
        RLConfig(verifier_samples="frozen_base")
    with pytest.raises(ValueError, match=r"verifier_pointwise_per_prompt=9"):
        RLConfig(verifier="pointwise", samples_per_prompt=8, verifier_pointwise_per_prompt=9)


# ----------------------------------------------------------------------------- model names and configs

def test_instruct_2507_alias_is_the_qwen3_4b_architecture():
    from prd_jax.model.config import NAMED_CONFIGS
    from prd_jax.model.decoder import param_shapes

    alias, base = NAMED_CONFIGS["qwen3-4b-instruct-2507"], NAMED_CONFIGS["qwen3-4b"]
    same = ("family", "vocab_size", "hidden", "intermediate", "num_layers", "num_heads", "num_kv_heads", "head_dim",
            "tie_embeddings", "rms_eps")
    assert all(getattr(alias, f) == getattr(base, f) for f in same)
    assert jax.tree.map(lambda s: s.shape, param_shapes(alias)) == jax.tree.map(lambda s: s.shape, param_shapes(base))
    assert (alias.rope_theta, alias.max_position) == (5e6, 262144)  # the 2507 release's config.json


@pytest.mark.parametrize("arg", ["v5p-128", "8xh200"])
def test_v1_4b_configs(arg):
    names = ("qwen3_4b_pairrl", "qwen3_4b_pointrl", "qwen3_4b_rl_baseline", "qwen3_4b_pairrl_frozen")
    cs = {n: load_config(os.path.join(RL_DIR, f"{n}.py") + f":{arg}") for n in names}
    rls = {n: RLConfig.from_config(c) for n, c in cs.items()}
    for n, c in cs.items():
        rl = rls[n]
        assert c.model.name == "qwen3-4b-instruct-2507"
        assert c.target == {"v5p-128": "v5p:4x4x4", "8xh200": "h200:8"}[arg]
        assert (rl.advantage, rl.loss, rl.eps_low, rl.eps_high, rl.kl_coef, rl.aggregation) == (
            "dr_grpo", "ppo", 0.2, 0.28, 0.0, "seq_mean_token_sum_norm")
        assert rl.minibatches == 4 and c.grad_accum_steps % rl.minibatches == 0
        assert batch_rows(rl) % c.grad_accum_steps == 0
    base, pair = rls["qwen3_4b_rl_baseline"], rls["qwen3_4b_pairrl"]
    assert base.verifier == "none" and batch_rows(base) == 64 * 8
    generator = ("prompts_per_step", "samples_per_prompt", "max_prompt_tokens", "max_new_tokens", "sampling",
                 "advantage", "loss", "eps_low", "eps_high", "aggregation", "kl_coef", "aux_sft_coef",
                 "minibatches", "updates_per_batch")
    assert all(getattr(base, f) == getattr(pair, f) for f in generator)  # the same generator objective
    assert cs["qwen3_4b_rl_baseline"].optim.to_dict() == cs["qwen3_4b_pairrl"].optim.to_dict()
    frozen = rls["qwen3_4b_pairrl_frozen"]
    assert (frozen.verifier_samples, pair.verifier_samples) == ("frozen_base", "policy")
    assert dataclasses.replace(frozen, verifier_samples="policy") == pair  # only the candidates' source differs
    assert pair.verifier_baseline == "group"


# ----------------------------------------------------------------------------- PairRL on code (issue 14 §3)

CODE_SMALL = ["--config.model.overrides.num_layers=1", "--config.rl.samples_per_prompt=2",
              "--config.rl.max_new_tokens=8",
              "--config.rl.verifier_max_new_tokens=4", "--config.rl.verifier_candidate_max_tokens=16"]


def test_code_reward_modes_fraction_and_all_pass():
    from prd_jax.tasks import get_task

    config = apply_overrides(load_config(os.path.join(RL_DIR, "tiny_code_pairrl.py")), CODE_SMALL)
    rl = RLConfig.from_config(config)
    task = rl_mod.run_task(config, rl)
    assert (task.name, task.reward_mode) == ("humaneval", "fraction")
    row = get_task("humaneval").problems(limit=1)[0]  # has_close_elements: 7 asserts, 3 expect False
    fenced = lambda body: "```python\n" + row["prompt"] + body + "```"
    texts = [fenced(row["canonical_solution"]), fenced("    return False\n"), "no program"]
    keys = [row["task_id"]] * 3
    frac = rl_mod.TaskReward(task, [row]).grades(texts, keys)
    assert [g["reward"] for g in frac] == pytest.approx([1.0, 3 / 7, 0.0])
    assert [g["correct"] for g in frac] == [1.0, 0.0, 0.0]
    strict = rl_mod.TaskReward(rl_mod.run_task(config, dataclasses.replace(rl, code_reward="all_pass")), [row])
    assert strict.many(texts, keys) == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"config.rl.code_reward='most'; allowed: \('fraction', 'all_pass'\)"):
        dataclasses.replace(rl, code_reward="most")


@pytest.mark.slow
def test_code_pairrl_two_steps_log_generator_and_verifier_rewards(tmp_path):
    import json

    from prd_jax import prompts
    from prd_jax.train.run import train

    config = apply_overrides(load_config(os.path.join(RL_DIR, "tiny_code_pairrl.py")), CODE_SMALL)
    stage, _, _, _ = _stage("tiny_code_pairrl", CODE_SMALL)
    assert stage.task.name == "humaneval" and stage.problems and stage.problems[0][1] == "HumanEval/0"
    # the verifier quotes the code set's pairwise prompt (its literal text, tokenized)
    pieces = "".join(stage.tok.decode(list(p)) for p in stage.verifier.template.pieces)
    assert prompts.template_set("code")["pairwise"].user.split("{")[0].strip()[:40] in pieces
    train(config, str(tmp_path / "w"), progress=False)
    lines = [json.loads(x) for x in open(tmp_path / "w" / "metrics.jsonl")]
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        assert 0.0 <= m["reward/standard"] <= 1.0 and 0.0 <= m["verifier/reward"] <= 1.0
        # all-pass rows have reward 1 under "fraction", so the all-pass share never exceeds the mean reward
        assert 0.0 <= m["accuracy/standard"] <= m["reward/standard"] + 1e-9
        assert m["verifier/rows"] >= 0.0 and "verifier/strict_pairs" in m
