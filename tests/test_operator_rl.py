"""Operator-consistent RL and V1 PairRL/PointRL: rewards by hand, strict pairing, gradient
masks on operator rows, mixing ratio, continual mode, one step per tiny config, resume."""

import json
import os

import numpy as np
import pytest

from prd_jax.checkpoint import describe, latest_params
from prd_jax.config_io import apply_overrides, load_config
from prd_jax import prompts as P
from prd_jax.train import rl as rl_mod
from prd_jax.train.operator_rl import strict_pairs, verifier_reward

ROOT = os.path.join(os.path.dirname(__file__), "..")
CONFIGS = {n: os.path.join(ROOT, "configs", "rl", f"{n}.py")
           for n in ("tiny", "tiny_pdr", "tiny_continual_pdr", "tiny_pairrl", "tiny_pointrl")}
SMALL = ["--config.model.overrides.hidden=32", "--config.model.overrides.intermediate=64",
         "--config.model.overrides.num_layers=1", "--config.data.num_train=64", "--config.data.difficulty=(1,)"]
RL_SMALL = SMALL + ["--config.rl.prompts_per_step=2", "--config.rl.samples_per_prompt=2",
                    "--config.rl.max_new_tokens=16", "--config.optim.weight_decay=0.0"]


# ----------------------------------------------------------------------------- rewards and pairing

def test_verifier_reward_hand_computed_at_threshold_edges():
    # v = (r - 1) / 9; y = 1: r = 8.2 gives |v - y| = 0.2 exactly -> 1 - 0.2; just above -> 0
    r = verifier_reward(np.array([[8.2], [8.2 - 1e-6], [10.0], [1.0], [0.0]]), np.array([[1], [1], [1], [0], [1]]))
    np.testing.assert_allclose(r, [0.8, 0.0, 1.0, 1.0, 0.0], atol=1e-9)
    # integer ratings: 9 -> gap 1/9 (rewarded 8/9); 8 -> gap 2/9 > 0.2 (0); pairwise mean over A, B
    pair = verifier_reward(np.array([[9, 2], [8, 1]]), np.array([[1, 0], [1, 0]]))
    np.testing.assert_allclose(pair, [(8 / 9 + 8 / 9) / 2, (0 + 1) / 2])


def test_strict_pairing_excludes_incorrect_pairs_and_is_uniform():
    rng = np.random.default_rng(0)
    correct = np.array([0, 0, 1, 0])
    counts = {}
    for _ in range(3000):
        for i, j in strict_pairs(correct, rng, 1):
            key = tuple(sorted((i, j)))
            counts[key] = counts.get(key, 0) + 1
    assert set(counts) == {(0, 2), (1, 2), (2, 3)}  # every pair has the correct solution
    assert all(abs(c / 3000 - 1 / 3) < 0.04 for c in counts.values())
    assert strict_pairs(np.array([0, 0, 0]), rng, 4) == []
    assert len(strict_pairs(np.array([1, 0, 0]), rng, 10)) == 2  # all admissible, no repeats


# ----------------------------------------------------------------------------- stages

@pytest.fixture(scope="module")
def sft_workdir(tmp_path_factory):
    from prd_jax.train.run import train

    workdir = str(tmp_path_factory.mktemp("sft"))
    config = apply_overrides(load_config(os.path.join(ROOT, "configs", "sft", "tiny.py")),
                             SMALL + ["--config.steps=2", "--config.eval_every=0", "--config.data.seq_len=96",
                                      "--config.batch_size=8"])
    train(config, workdir, progress=False)
    return workdir


@pytest.fixture()
def spread_reward(monkeypatch):
    """A reward with spread (tiny models are rarely right), so every advantage group moves."""
    monkeypatch.setattr(rl_mod.TaskReward, "grades", lambda self, texts, keys: [
        {"reward": float(len(t) % 2), "correct": float(len(t) % 2)} for t in texts])


def stage_for(name, sft_workdir, extra=()):
    from prd_jax.train import setup
    from prd_jax.train.rl import RLStage

    config = apply_overrides(load_config(CONFIGS[name]), RL_SMALL + [f"--config.model.init_workdir={sft_workdir}",
                                                                     *extra])
    mesh = setup.build_mesh(config)
    cfg, params, tok = setup.build_model(config, mesh)
    return RLStage(config, cfg, tok, mesh), params, tok


class _State:
    def __init__(self, params):
        import jax

        self.params, self.rng = params, jax.random.key(3)


@pytest.mark.parametrize("fraction,standard,operator", [(0.5, 1, 1), (0.0, 2, 0), (1.0, 0, 2)])
@pytest.mark.slow
def test_mixing_ratio_and_operator_rows_train_only_completions(sft_workdir, spread_reward, fraction, standard,
                                                               operator):
    stage, params, tok = stage_for("tiny_pdr", sft_workdir, [f"--config.rl.operator_fraction={fraction}"])
    assert (stage.num_standard, stage.num_operator) == (standard, operator)
    batch, metrics = stage.next_batch(_State(params), 0)
    g = 2
    assert batch["inputs"].shape[0] == stage.rows == (standard + operator) * g
    assert ("reward/standard" in metrics) == bool(standard) and ("reward/operator" in metrics) == bool(operator)
    for r in range(stage.rows):
        w, seg = batch["weights"][r], batch["segment_ids"][r]
        first = int(np.argmax(w > 0)) if w.any() else len(w)
        prompt_text = tok.decode(batch["inputs"][r, :first + 1][seg[:first + 1] > 0].tolist())
        # weights: 0 on every prompt position (template, problem, workspace), 1 on completion targets only
        assert not w[:first].any() and set(np.unique(w[first:])) <= {0.0, 1.0}
        is_operator_row = r >= standard * g
        header = P.template_set(stage.rl.templates)["pdr_topk"].candidate_header.format(index=1)
        assert (header in prompt_text) == is_operator_row  # the workspace is in the prompt
    if operator:
        assert metrics["workspace_length"] > 0 and metrics["operator/b_seq"] < metrics["operator/b_total"]


@pytest.mark.slow
def test_drafts_and_refine_get_their_own_rows(sft_workdir, spread_reward):
    stage, params, _ = stage_for("tiny_pdr", sft_workdir, ["--config.rl.gradient_targets=drafts_and_refine"])
    batch, metrics = stage.next_batch(_State(params), 0)
    assert stage.rows == 1 * 2 + 1 * 2 * (1 + 4)  # standard G + operator G refines + G x M drafts
    assert "reward/draft" in metrics and batch["advantages"].shape == (stage.rows,)


@pytest.mark.slow
def test_rollout_compaction_changes_no_training_row(sft_workdir, spread_reward):
    """`sampling.compact_min_rows` reaches the standard rollouts and every operator call (PDR §3.3
    rows) and leaves each training row as the static sampler gives it (issue 16 §3)."""
    static, params, _ = stage_for("tiny_pdr", sft_workdir, ["--config.rl.operator_fraction=0.5"])
    compact, _, _ = stage_for("tiny_pdr", sft_workdir, ["--config.rl.operator_fraction=0.5",
                                                         "--config.sampling.compact_min_rows=2",
                                                         "--config.sampling.compact_ratio=0.75",
                                                         "--config.sampling.cache_window=16"])
    assert compact.operator.ctx.sampling.compact_min_rows == 2 and static.operator.ctx.sampling.compact_min_rows == 0
    assert compact.operator.ctx.sampling.compact_ratio == 0.75 == compact.rl.sampler_config(8, 2, (1,)).compact_ratio
    assert compact.operator.ctx.sampling.cache_window == 16 == compact.rl.sampler_config(8, 2, (1,)).cache_window
    a, _ = static.next_batch(_State(params), 0)
    b, _ = compact.next_batch(_State(params), 0)
    for key in ("inputs", "targets", "weights", "segment_ids"):
        np.testing.assert_array_equal(b[key], a[key])
    np.testing.assert_allclose(b["old_logp"], a["old_logp"], atol=1e-5)  # fp32 rounding of smaller batches
    with pytest.raises(ValueError, match="sampling.compact_min_rows=-1"):
        stage_for("tiny_pdr", sft_workdir, ["--config.sampling.compact_min_rows=-1"])
    with pytest.raises(ValueError, match="sampling.compact_ratio=1.0"):
        stage_for("tiny_pdr", sft_workdir, ["--config.sampling.compact_ratio=1.0"])
    with pytest.raises(ValueError, match="sampling.cache_window=-1"):
        stage_for("tiny_pdr", sft_workdir, ["--config.sampling.cache_window=-1"])


@pytest.mark.slow
def test_continual_mode_needs_and_loads_a_baseline_rl_checkpoint(sft_workdir, tmp_path, spread_reward):
    from prd_jax.train import setup
    from prd_jax.train.run import train

    with pytest.raises(ValueError, match="is not a baseline RL run"):
        stage_for("tiny_continual_pdr", sft_workdir)
    base = str(tmp_path / "base")
    train(apply_overrides(load_config(CONFIGS["tiny"]), RL_SMALL + ["--config.steps=1",
                                                                    f"--config.model.init_workdir={sft_workdir}"]),
          base, progress=False)
    config = apply_overrides(load_config(CONFIGS["tiny_continual_pdr"]), RL_SMALL + [
        f"--config.model.init_workdir={base}"])
    mesh = setup.build_mesh(config)
    _, params, _ = setup.build_model(config, mesh)
    _, expected = latest_params(base)
    import jax

    assert all(np.array_equal(np.asarray(a), b) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(expected)))


@pytest.mark.parametrize("name", ["tiny_pdr", "tiny_pairrl", "tiny_pointrl"])
@pytest.mark.slow
def test_one_step_per_config_changes_params_and_logs(sft_workdir, tmp_path, spread_reward, name):
    from prd_jax.train.run import train

    workdir = str(tmp_path / name)
    train(apply_overrides(load_config(CONFIGS[name]), RL_SMALL + [
        "--config.steps=1", f"--config.model.init_workdir={sft_workdir}", "--config.rl.verifier_max_new_tokens=8",
        "--config.rl.verifier_candidate_max_tokens=16", "--config.rl.samples_per_prompt=4"]), workdir, progress=False)
    after = describe(workdir)
    assert after["latest_step"] == 1 and after["params_digest"] != describe(sft_workdir)["params_digest"]
    m = after["last_metrics"]
    expected = {"tiny_pdr": ("reward/standard", "reward/operator", "length/operator", "workspace_length"),
                "tiny_pairrl": ("verifier/reward", "verifier/strict_pairs", "verifier/accuracy",
                                "verifier/parse_failure_rate"),
                "tiny_pointrl": ("verifier/reward", "verifier/accuracy", "verifier/parse_failure_rate")}[name]
    assert all(k in m for k in expected), sorted(m)
    assert 0.0 < m["reward/mean"] < 1.0  # the spread reward gives non-zero advantages


@pytest.mark.slow
def test_operator_rl_resumes_exactly(sft_workdir, tmp_path, spread_reward):
    from prd_jax.train.run import train

    def run(workdir, steps):
        train(apply_overrides(load_config(CONFIGS["tiny_pdr"]), RL_SMALL + [
            f"--config.steps={steps}", "--config.checkpoint_every=1", f"--config.model.init_workdir={sft_workdir}"]),
            workdir, progress=False)

    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    run(straight, 2)
    run(resumed, 1)
    run(resumed, 2)  # restarts from step 1: data position and RNG come back
    assert describe(straight)["params_digest"] == describe(resumed)["params_digest"]
    lines = [json.loads(x) for x in open(os.path.join(resumed, "metrics.jsonl"))]
    assert [x["step"] for x in lines] == [1, 2]


@pytest.mark.slow
def test_verifier_rows_quote_candidates_without_their_stop_token(sft_workdir):
    import jax

    stage, params, tok = stage_for("tiny_pairrl", sft_workdir)
    g, n_prompts = stage.rl.samples_per_prompt, stage.num_standard
    texts = ["4->4\n\\boxed{4}", "5->5\n\\boxed{5}"] * (g // 2)  # fit max_new_tokens = 16 with the EOS
    ids = [tok.encode(t) + [tok.eos_id] for t in texts] * n_prompts  # every rollout ends with its stop token
    comp = np.zeros((len(ids), stage.rl.max_new_tokens), np.int32)
    for i, row in enumerate(ids):
        comp[i, :len(row)] = row
    lens = np.asarray([len(r) for r in ids], np.int32)
    correct = np.asarray([t.endswith("{4}") for t in texts] * n_prompts, np.float32)
    batch, metrics = stage.verifier(params, jax.random.key(0), [tok.encode("Start at 3. Work mod 10. Apply +1. Answer?")]
                                    * n_prompts, comp, lens, correct, np.random.default_rng(0))
    assert metrics["verifier/rows"] > 0
    for r in range(batch["inputs"].shape[0]):
        w = batch["weights"][r]
        if not w.any():
            continue
        first = int(np.argmax(w > 0))
        prompt = batch["inputs"][r, :first + 1][batch["segment_ids"][r, :first + 1] > 0].tolist()
        text = tok.decode(prompt)
        assert tok.eos_id not in prompt  # before the fix each quoted candidate carried its EOS
        assert texts[0] + "\nB:\n" in text or texts[1] + "\nB:\n" in text  # candidate A, then B's header
