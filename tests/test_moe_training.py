"""Training a mixture-of-experts model (issue 34, "Training"): the router load-balancing term
in the SFT and RL steps (`prd_jax.train.router_aux`), checked against a hand-written
Switch-Transformer loss (arXiv 2101.03961, Eqs. 4-6, top-k form) on router logits taken from
the dense all-experts path, exact over microbatches; with the coefficient at 0 the step is
the one it was; and RL / PairRL steps on a tiny random GPT-OSS config."""

import functools
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from prd_jax.model.config import ModelConfig
from prd_jax.model.decoder import Decoder, forward, init_params
from prd_jax.train.chunked_xent import chunked_token_logprobs, chunked_weighted_nll
from prd_jax.train.losses import aggregate, k3_kl, policy_loss
from prd_jax.train.rl import RLConfig, rl_loss_fn
from prd_jax.train.sft import sft_loss_fn
from prd_jax.train.state import TrainState
from prd_jax.train.step import split_microbatches, train_step
from fakes import RolloutState

ROOT = os.path.join(os.path.dirname(__file__), "..")


def tiny_moe(**kw) -> ModelConfig:
    """A few layers, 4 experts top-2, window 4 on the first layer."""
    return ModelConfig("gpt_oss", vocab_size=64, hidden=32, intermediate=16, num_layers=2, num_heads=4,
                       num_kv_heads=2, head_dim=8, num_experts=4, experts_per_token=2, sliding_window=4,
                       sliding_layers=(True, False), tie_embeddings=False, max_position=64, **kw)


@functools.lru_cache(maxsize=None)
def params_of(cfg: ModelConfig):
    return jax.jit(init_params, static_argnums=0)(cfg, jax.random.key(0))


def sft_batch(rng, b=4, t=10) -> dict:
    """Rows with different numbers of loss tokens (the second half carries more), so a split
    into two microbatches has unequal counts; packed segment ids on one row."""
    weights = np.zeros((b, t), np.float32)
    for i in range(b):
        weights[i, t - (2 + 3 * i):] = 1.0
    seg = np.ones((b, t), np.int32)
    seg[0, t // 2:] = 2
    return dict(inputs=rng.integers(1, 64, (b, t)).astype(np.int32), targets=rng.integers(1, 64, (b, t)).astype(np.int32),
                positions=np.tile(np.arange(t, dtype=np.int32), (b, 1)), segment_ids=seg, weights=weights)


def rl_batch(rng, b=4, t=10) -> dict:
    out = sft_batch(rng, b, t)
    out.update(old_logp=(-3.0 + 0.1 * rng.standard_normal((b, t))).astype(np.float32),
               ref_logp=(-3.0 + 0.1 * rng.standard_normal((b, t))).astype(np.float32),
               advantages=rng.standard_normal(b).astype(np.float32), correct=(np.arange(b) % 2).astype(np.float32))
    return out


# ----------------------------------------------------------------------------- the hand reference

def router_outputs(cfg, params, b) -> tuple:
    """Each layer's router logits `[L, N, E]` and chosen experts `[L, N, k]` from the dense
    all-experts path (`moe_dispatch="dense"`), as numpy."""
    dense = cfg.replace(moe_dispatch="dense", remat="none")
    _, state = Decoder(dense).apply({"params": params}, jnp.asarray(b["inputs"]), jnp.asarray(b["positions"]), None,
                                    jnp.asarray(b["segment_ids"]), None, True, mutable=["intermediates"])
    (logits, chosen), = state["intermediates"]["layers"]["router"]
    return np.asarray(logits, np.float64), np.asarray(chosen)


def hand_switch_loss(logits, chosen, mask, num_experts) -> float:
    """E * sum_e f_e P_e over the masked tokens of one layer, in float64 loops: f_e the
    tokens' assignments to e per token, P_e the mean full-softmax probability of e."""
    keep = [i for i in range(len(mask)) if mask[i]]
    f, p = np.zeros(num_experts), np.zeros(num_experts)
    for i in keep:
        for e in chosen[i]:
            f[e] += 1.0
        z = np.exp(logits[i] - logits[i].max())
        p += z / z.sum()
    return num_experts * float(np.sum(f / len(keep) * p / len(keep)))


def hand_router_term(cfg, params, batch, accum) -> float:
    """sum over microbatches of (layer-mean loss x loss tokens) / sum of loss tokens."""
    total = count = 0.0
    for a in range(accum):
        mb = {k: v.reshape(accum, -1, *v.shape[1:])[a] for k, v in batch.items()}
        logits, chosen = router_outputs(cfg, params, mb)
        mask = (mb["weights"] > 0).reshape(-1)
        per_layer = [hand_switch_loss(logits[l], chosen[l], mask, cfg.num_experts) for l in range(cfg.num_layers)]
        total += np.mean(per_layer) * mask.sum()
        count += mask.sum()
    return total / count


def run_step(cfg, loss_fn, batch, accum, lr=0.5):
    params = params_of(cfg.replace(router_aux_loss_coef=0.0))  # one init for every coef
    opt = optax.sgd(lr)
    state = TrainState(jnp.int32(0), params, opt.init(params), jax.random.key(1))
    step = jax.jit(functools.partial(train_step, loss_fn=loss_fn, optimizer=opt))
    new, metrics = step(state, split_microbatches(jax.tree.map(jnp.asarray, batch), accum))
    return jax.device_get(new.params), jax.device_get(metrics)


def max_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


# ----------------------------------------------------------------------------- coef 0: the step as it was

def old_sft_loss(cfg):
    """The SFT loss as it was before the router term (the reference of the coef-0 test)."""
    def loss(params, batch):
        hidden, _ = forward(cfg, params, batch["inputs"], batch["positions"], segment_ids=batch["segment_ids"],
                            return_hidden=True)
        w = batch["weights"].astype(jnp.float32)
        total, hits = chunked_weighted_nll(cfg, params, hidden, batch["targets"], w)
        count = jnp.sum(w)
        return total, count, {"token_accuracy": (hits, count)}
    return loss


def old_rl_loss(cfg, rl):
    """The RL loss as it was before the router term (KL and auxiliary SFT off)."""
    def loss(params, b):
        hidden, _ = forward(cfg, params, b["inputs"], b["positions"], segment_ids=b["segment_ids"], return_hidden=True)
        logp, _, entropy = chunked_token_logprobs(cfg, params, hidden, b["targets"], with_entropy=True)
        w = b["weights"]
        total, count, metrics = policy_loss(logp, b["old_logp"], b["advantages"], w, kind=rl.loss, eps_low=rl.eps_low,
                                            eps_high=rl.eps_high, aggregation=rl.aggregation,
                                            cispo_lower_clip=rl.cispo_lower_clip)
        metrics = dict(metrics)
        metrics["entropy"] = aggregate(entropy, w)
        metrics["kl"] = aggregate(jax.lax.stop_gradient(k3_kl(logp, b["ref_logp"])), w)
        return total, count, metrics
    return loss


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sft", "rl"])
def test_coef_zero_leaves_the_loss_program_and_numbers_unchanged(kind):
    cfg = tiny_moe()
    rl = RLConfig(aux_sft_coef=0.0, kl_coef=0.0)
    batch = jax.tree.map(jnp.asarray, (sft_batch if kind == "sft" else rl_batch)(np.random.default_rng(0)))
    new = sft_loss_fn(cfg) if kind == "sft" else rl_loss_fn(cfg, None, rl)
    old = old_sft_loss(cfg) if kind == "sft" else old_rl_loss(cfg, rl)
    assert not hasattr(new, "router_aux_counts")  # train_step adds nothing to the batch
    params = params_of(cfg)
    assert str(jax.make_jaxpr(new)(params, batch)) == str(jax.make_jaxpr(old)(params, batch))  # op for op
    grad = lambda f: jax.jit(jax.value_and_grad(lambda p: f(p, batch)[0]))(params)
    (v_new, g_new), (v_old, g_old) = grad(new), grad(old)
    assert float(v_new) == float(v_old)
    assert max_diff(g_new, g_old) == 0.0


# ----------------------------------------------------------------------------- coef > 0: the term and its accumulation

@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sft", "rl"])
def test_router_term_equals_the_hand_loss_exactly_over_microbatches(kind):
    """The step's `router_aux_loss` is the hand Switch loss over the loss tokens (count-weighted
    over microbatches); the step's loss moves by coef x that; and 1 and 2 microbatches (unequal
    token counts, RL with a per-sequence normaliser unlike the token count) give one update."""
    coef = 0.3
    cfg = tiny_moe(router_aux_loss_coef=coef)
    rl = RLConfig(aux_sft_coef=0.0, kl_coef=0.0, aggregation="seq_mean_token_mean")
    batch = (sft_batch if kind == "sft" else rl_batch)(np.random.default_rng(1))
    make = (lambda c: sft_loss_fn(c)) if kind == "sft" else (lambda c: rl_loss_fn(c, None, rl))
    p1, m1 = run_step(cfg, make(cfg), batch, 1)
    p2, m2 = run_step(cfg, make(cfg), batch, 2)
    _, m0 = run_step(cfg, make(cfg.replace(router_aux_loss_coef=0.0)), batch, 2)
    params = params_of(cfg.replace(router_aux_loss_coef=0.0))
    for accum, m in ((1, m1), (2, m2)):
        hand = hand_router_term(cfg, params, batch, accum)
        np.testing.assert_allclose(float(m["router_aux_loss"]), hand, rtol=2e-5)
    assert "router_aux_loss" not in m0
    np.testing.assert_allclose(float(m2["loss"]) - float(m0["loss"]), coef * float(m2["router_aux_loss"]),
                               rtol=1e-4, atol=1e-6)
    # f_e P_e is not linear in the tokens, so a microbatch's loss is its own: the update is
    # checked against the objective written out per split, sum task / sum N + coef *
    # sum aux_sum / sum aux_count, whose task part is the same for every split
    assert max_diff(p2, reference_update(cfg, make, batch, 2, coef)) < 1e-5
    assert max_diff(p1, reference_update(cfg, make, batch, 1, coef)) < 1e-5


def reference_update(cfg, make, batch, accum, coef, lr=0.5):
    """params - lr * grad of (sum task / sum N + coef * sum aux_sum / sum aux_count), the
    microbatch sums written out with `forward_with_router_loss` (no step machinery)."""
    from prd_jax.model.decoder import forward_with_router_loss

    params = params_of(cfg.replace(router_aux_loss_coef=0.0))
    task_loss = make(cfg.replace(router_aux_loss_coef=0.0))
    mbs = [jax.tree.map(lambda v: jnp.asarray(v.reshape(accum, -1, *v.shape[1:])[a]), batch) for a in range(accum)]

    def objective(p):
        task = n = aux = a_count = 0.0
        for mb in mbs:
            s, c, _ = task_loss(p, mb)
            _, (a_sum, a_c) = forward_with_router_loss(cfg, p, mb["inputs"], mb["positions"],
                                                       segment_ids=mb["segment_ids"], token_mask=mb["weights"] > 0,
                                                       return_hidden=True)
            task, n, aux, a_count = task + s, n + c, aux + a_sum, a_count + a_c
        return task / n + coef * aux / a_count

    g = jax.jit(jax.grad(objective))(params)
    return jax.device_get(jax.tree.map(lambda x, y: x - lr * y, params, g))


def test_negative_coef_is_refused_by_name():
    with pytest.raises(ValueError, match="router_aux_loss_coef"):
        tiny_moe(router_aux_loss_coef=-0.1)


# ----------------------------------------------------------------------------- RL and PairRL steps on the MoE model

def moe_rl_config(name: str, coef: float):
    from prd_jax.config_io import apply_overrides, load_config

    config = apply_overrides(load_config(os.path.join(ROOT, "configs", "rl", f"{name}.py")), [
        "--config.model.init=random", "--config.data.num_train=64", "--config.data.difficulty=(1,)",
        "--config.rl.prompts_per_step=2", "--config.rl.samples_per_prompt=4", "--config.rl.max_new_tokens=12",
        "--config.rl.verifier_max_new_tokens=8", "--config.rl.verifier_candidate_max_tokens=12",
        "--config.rl.verifier_pairs_per_prompt=2", "--config.optim.weight_decay=0.0"])
    config.model.name = "gpt-oss-20b"
    config.model.overrides = ml_collections.ConfigDict(dict(
        vocab_size=128, hidden=32, intermediate=16, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
        num_experts=4, experts_per_token=2, sliding_window=4, sliding_layers=(True, False), max_position=1024,
        router_aux_loss_coef=coef))
    return config


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny", "tiny_pairrl"])
def test_rl_and_pairrl_steps_run_on_the_moe_model(spread_reward, name):
    """One RL (CISPO) and one PairRL step on a tiny random GPT-OSS: rollouts through the MoE
    sampler, a finite loss, params that move, and the reported router term equal to the hand
    Switch loss of the same batch's loss tokens on the dense path."""
    from prd_jax.train import setup
    from prd_jax.train.rl import RLStage
    from prd_jax.train.state import create_state
    from prd_jax.train.trainer import optimizer_from

    config = moe_rl_config(name, coef=0.05)
    mesh = setup.build_mesh(config)
    cfg, _, tok = setup.build_model(config, mesh)
    assert cfg.is_moe and cfg.num_experts == 4 and cfg.router_aux_loss_coef == 0.05
    stage = RLStage(config, cfg, tok, mesh)
    optimizer, schedule = optimizer_from(config)
    state = create_state(cfg, optimizer, mesh, jax.random.key(config.seed))
    batch, host = stage.next_batch(RolloutState(state.params, state.rng), 0)
    if name == "tiny_pairrl":
        assert host["verifier/rows"] > 0
    before = jax.device_get(state.params)
    step = jax.jit(functools.partial(train_step, loss_fn=stage.loss_fn(), optimizer=optimizer, schedule=schedule))
    new, metrics = step(state, split_microbatches(jax.tree.map(jnp.asarray, batch), 1))
    metrics = jax.device_get(metrics)
    assert np.isfinite(metrics["loss"]) and metrics["nonfinite"] == 0.0
    assert max_diff(jax.device_get(new.params), before) > 0
    hand = hand_router_term(cfg, before, {k: batch[k] for k in ("inputs", "positions", "segment_ids", "weights")}, 1)
    np.testing.assert_allclose(float(metrics["router_aux_loss"]), hand, rtol=1e-4)
    assert metrics["router_aux_loss"] > 0
