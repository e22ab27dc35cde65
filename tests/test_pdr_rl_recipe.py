"""The PDR paper's RL recipe (arXiv 2510.01123, App. B.3) in the paper-scale configs, and the
RL loss's CISPO bound and auxiliary SFT normaliser as `rl_loss_fn` applies them."""

import os

import jax
import numpy as np
import pytest

from prd_jax.config_io import load_config
from prd_jax.model import get_model_config
from prd_jax.model.decoder import forward
from prd_jax.train import losses
from prd_jax.train.rl import RLConfig, rl_loss_fn

ROOT = os.path.join(os.path.dirname(__file__), "..")
RL = os.path.join(ROOT, "configs", "rl")
ARGS = ("v5p-128", "8xh200")
CFG = get_model_config("tiny", vocab_size=64, hidden=32, intermediate=64, num_layers=1, num_heads=2,
                       num_kv_heads=1, head_dim=16, max_position=64)


# ---------------------------------------------------------------- configs


@pytest.mark.parametrize("arg", ARGS)
@pytest.mark.parametrize("name", ["qwen3_8b_pdr.py", "qwen3_8b_continual_pdr.py", "qwen3_8b_baseline.py",
                                  "qwen3_8b.py", "llama31_8b.py"])
def test_b3_learning_rate_and_steps(name, arg):
    c = load_config(os.path.join(RL, name) + f":{arg}")
    assert (c.optim.learning_rate, c.steps) == (5e-7, 800)
    rl = RLConfig.from_config(c)
    assert (rl.loss, rl.cispo_lower_clip, rl.aux_sft_coef, rl.aux_sft_normaliser) == (
        "cispo", False, 0.1, "correct_token_mean")


@pytest.mark.parametrize("arg", ARGS)
@pytest.mark.parametrize("name", ["qwen3_8b_pdr.py", "qwen3_8b_continual_pdr.py"])
def test_pdr_rl_workspace_is_model_ranked(name, arg):
    c = load_config(os.path.join(RL, name) + f":{arg}")
    op = RLConfig.from_config(c).operator
    assert op.selector == "self_pointwise" and "sel=random" not in op.label
    assert (op.schedule, op.distill, op.k) == ((4, 1), "shared_topk", 2)
    assert 0 < op.judge.max_new_tokens <= 1024  # a modest judge budget (stated in the docstring)
    # the pod-scale rollout settings (docs/scaling.md; their fit in docs/results/)
    assert (c.sampling.max_rows, c.rl.max_problem_tokens) == ({"v5p-128": 1024, "8xh200": 64}[arg], 1024)
    assert (c.rollout.mesh, c.sampling.cache_window) == ("tensor=8", 2048)
    float8 = arg == "v5p-128"  # where the compiled decode step reads half the cache bytes for it
    assert c.sampling.kv_cache_dtype == ("float8_e4m3fn" if float8 else "")
    assert RLConfig.from_config(c).decoupled is float8  # a lossy cache's log-probabilities: the behaviour policy's
    assert c.target == {"v5p-128": "v5p:4x4x4", "8xh200": "h200:8"}[arg]


def test_sft_starts_from_the_base_model():
    c = load_config(os.path.join(ROOT, "configs", "sft", "qwen3_8b.py") + ":v5p-128")
    assert c.model.name == "qwen3-8b" and c.model.init == "pretrained"
    assert c.model.path.endswith("Qwen3-8B-Base")


@pytest.mark.parametrize("field,value,message", [
    ("aux_sft_normaliser", "token_mean", r"config\.rl\.aux_sft_normaliser='token_mean'.*correct_token_mean.*policy"),
    ("cispo_lower_clip", "yes", r"config\.rl\.cispo_lower_clip='yes'; allowed: True, False"),
])
def test_rl_config_names_bad_fields(field, value, message):
    with pytest.raises(ValueError, match=message):
        RLConfig(**{field: value})
    with pytest.raises(ValueError, match=r"cispo_lower_clip=True needs config\.rl\.loss='cispo'; got 'ppo'"):
        RLConfig(loss="ppo", cispo_lower_clip=True)


# ---------------------------------------------------------------- the loss as RL applies it


@pytest.fixture(scope="module")
def model_batch():
    """Tiny model params, a batch of 6 rows and the model's own token logprobs."""
    from prd_jax.model.decoder import init_params

    params = init_params(CFG, jax.random.key(0))
    rng = np.random.default_rng(0)
    b, t = 6, 10
    lengths = np.array([10, 3, 7, 5, 1, 8])
    batch = dict(inputs=rng.integers(3, 60, (b, t)).astype(np.int32),
                 targets=rng.integers(3, 60, (b, t)).astype(np.int32),
                 positions=np.tile(np.arange(t, dtype=np.int32), (b, 1)), segment_ids=np.ones((b, t), np.int32),
                 weights=(np.arange(t)[None, :] < lengths[:, None]).astype(np.float32),
                 advantages=np.array([1.0, -0.5, 0.3, -1.2, 0.8, 0.0], np.float32),
                 correct=np.array([1, 0, 1, 0, 0, 1], np.float32))
    logits, _ = forward(CFG, params, batch["inputs"], batch["positions"], segment_ids=batch["segment_ids"])
    logp = np.asarray(losses.token_logprobs(logits, batch["targets"]), np.float64)
    # sampler logprobs: ratios exp(logp - old) of 0.5 (row 1), 1.5 (row 3), 1 elsewhere
    shift = np.array([0.0, np.log(2.0), 0.0, -np.log(1.5), 0.0, 0.0])[:, None]
    batch.update(old_logp=(logp + shift).astype(np.float32), ref_logp=logp.astype(np.float32))
    return params, batch, logp


def _micro(batch, rows):
    return {k: v[rows] for k, v in batch.items()}


@pytest.mark.parametrize("normaliser", ["correct_token_mean", "policy"])
@pytest.mark.parametrize("lower_clip", [False, True])
@pytest.mark.slow
def test_rl_loss_by_hand(model_batch, normaliser, lower_clip):
    params, batch, logp = model_batch
    w, adv, correct = batch["weights"], batch["advantages"], batch["correct"]
    rl = RLConfig(aux_sft_coef=0.1, aux_sft_normaliser=normaliser, cispo_lower_clip=lower_clip)
    total, count, metrics = rl_loss_fn(CFG, None, rl)(params, batch)
    # CISPO weight min(r, 1.28) [and max(., 0.8)]: row 1 has r = 0.5, row 3 has r = 1.5
    is_w = np.array([1.0, 0.8 if lower_clip else 0.5, 1.0, 1.28, 1.0, 1.0])[:, None]
    policy = -(is_w * adv[:, None] * logp * w).sum()
    n, c = w.sum(), (w * correct[:, None]).sum()  # 34 completion tokens, 25 of correct rollouts
    nll = -(logp * w * correct[:, None]).sum()
    aux = nll * n / c if normaliser == "correct_token_mean" else nll
    np.testing.assert_allclose(float(total), policy + 0.1 * aux, rtol=1e-5)
    assert float(count) == n == 34.0 and c == 25.0
    np.testing.assert_allclose([float(x) for x in metrics["aux_sft_nll"]], [nll, c], rtol=1e-5)
    clipped = 5 + (3 if lower_clip else 0)  # row 3's 5 tokens; row 1's 3 only with the lower clip
    assert float(metrics["clip_fraction"][0]) == clipped
    if normaliser == "correct_token_mean":
        np.testing.assert_allclose(0.1 * aux / n, 0.1 * nll / c, rtol=1e-12)  # the term after / N


@pytest.mark.slow
def test_rl_loss_global_scale_is_exact_over_microbatches(model_batch):
    """Microbatches [0, 1, 2] and [3, 4, 5] (2 and 1 correct rows): with the batch's global
    `aux_sft_scale` their summed (sum, count) is the whole batch's; per-microbatch scales are not."""
    params, batch, _ = model_batch
    loss = rl_loss_fn(CFG, None, RLConfig(aux_sft_coef=0.1))
    full_total, full_count, _ = loss(params, batch)
    scale = np.asarray(losses.aux_sft_scale(batch["weights"], batch["correct"]))
    scaled = dict(batch, aux_sft_scale=scale)
    halves = [loss(params, _micro(scaled, rows)) for rows in (slice(0, 3), slice(3, 6))]
    np.testing.assert_allclose(sum(float(h[0]) for h in halves), float(full_total), rtol=1e-5)
    assert sum(float(h[1]) for h in halves) == float(full_count)
    local = sum(float(loss(params, _micro(batch, rows))[0]) for rows in (slice(0, 3), slice(3, 6)))
    assert abs(local - float(full_total)) > 1e-3
