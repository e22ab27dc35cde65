"""The GPT-OSS mixture-of-experts layer (`prd_jax.model.moe`): hand-computed router and
gated-unit values, the grouped (`ragged_dot`) dispatch against a per-token numpy loop and
against the dense all-experts path (values and gradients), the load-balancing loss, and a
training step on a tiny GPT-OSS."""

from __future__ import annotations

import math

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax.model.config import ModelConfig
from prd_jax.model.moe import (experts_dense, experts_grouped, gated_unit, load_balancing_loss, moe_sequence,
                               moe_tokens, route, split_gate_up)

LIMIT, ALPHA = 7.0, 1.702
_moe = jax.jit(moe_tokens, static_argnums=(2, 3, 4, 5))


def _params(e: int, d: int, f: int, seed: int = 0) -> dict:
    r = np.random.RandomState(seed)
    return {"router": r.randn(d, e).astype(np.float32), "router_bias": r.randn(e).astype(np.float32),
            "gate_up": (3 * r.randn(e, d, 2 * f) / math.sqrt(d)).astype(np.float32),
            "gate_up_bias": r.randn(e, 2 * f).astype(np.float32),
            "down": (r.randn(e, f, d) / math.sqrt(f)).astype(np.float32),
            "down_bias": r.randn(e, d).astype(np.float32)}


def _numpy_moe(x: np.ndarray, p: dict, k: int) -> np.ndarray:
    """Token by token, expert by expert, as the model card describes it (float64)."""
    p = {n: np.asarray(w, np.float64) for n, w in p.items()}
    out = np.zeros_like(x, dtype=np.float64)
    for n, tok in enumerate(np.asarray(x, np.float64)):
        logits = tok @ p["router"] + p["router_bias"]
        chosen = np.argsort(-logits, kind="stable")[:k]
        w = np.exp(logits[chosen] - logits[chosen].max())
        w /= w.sum()
        for e, we in zip(chosen, w):
            h = tok @ p["gate_up"][e] + p["gate_up_bias"][e]
            gate, up = np.minimum(h[0::2], LIMIT), np.clip(h[1::2], -LIMIT, LIMIT)
            act = (up + 1) * gate / (1 + np.exp(-ALPHA * gate))
            out[n] += we * (act @ p["down"][e] + p["down_bias"][e])
    return out


def test_clamped_swiglu_hand_values():
    # pairs (gate, up): (10 -> 7, -9 -> -7), (0.5, 2), (-3, 8 -> 7)
    h = jnp.array([10.0, -9.0, 0.5, 2.0, -3.0, 8.0])
    sig = lambda z: 1 / (1 + math.exp(-z))
    want = [(-7 + 1) * 7 * sig(7 * ALPHA), (2 + 1) * 0.5 * sig(0.5 * ALPHA), (7 + 1) * -3 * sig(-3 * ALPHA)]
    np.testing.assert_allclose(np.asarray(gated_unit(*split_gate_up(h), LIMIT, ALPHA)), want, rtol=1e-6)


def test_router_softmax_over_chosen_only():
    # identity router: logits are the token itself plus the bias
    x = jnp.array([[1.0, 3.0, 2.0, 0.0]])
    logits, chosen, weights = route(x, jnp.eye(4), jnp.array([0.0, 0.0, 0.0, 5.0]), k=2)
    assert chosen.tolist() == [[3, 1]]  # logits 1, 3, 2, 5
    e = math.exp(-2.0)  # softmax over (5, 3) only
    np.testing.assert_allclose(np.asarray(weights), [[1 / (1 + e), e / (1 + e)]], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(logits), [[1.0, 3.0, 2.0, 5.0]])


@pytest.mark.parametrize("e,k,n", [(4, 2, 9), (5, 5, 7), (8, 3, 1)])
def test_grouped_equals_token_loop_and_dense(e, k, n):
    d, f = 12, 10
    p = _params(e, d, f, seed=e * 10 + k)
    x = np.random.RandomState(n).randn(n, d).astype(np.float32)
    grouped = _moe(jnp.asarray(x), p, k, LIMIT, ALPHA, "grouped")[0]
    dense = _moe(jnp.asarray(x), p, k, LIMIT, ALPHA, "dense")[0]
    ref = _numpy_moe(x, p, k)
    np.testing.assert_allclose(np.asarray(grouped), ref, atol=2e-5 * np.abs(ref).max())
    np.testing.assert_allclose(np.asarray(grouped), np.asarray(dense), atol=1e-5 * np.abs(ref).max())


def test_grouped_gradients_equal_dense():
    e, k, d, f, n = 4, 2, 8, 6, 11
    p = jax.tree.map(jnp.asarray, _params(e, d, f, seed=3))
    x = jnp.asarray(np.random.RandomState(0).randn(n, d).astype(np.float32))
    _, chosen, weights = route(x, p["router"], p["router_bias"], k)

    def loss(params, xs, run):
        out = run(xs, chosen, weights, params, LIMIT, ALPHA)
        return jnp.sum(out * jnp.cos(jnp.arange(d, dtype=jnp.float32)))

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)
    g_grouped, g_dense = grad(p, x, experts_grouped), grad(p, x, experts_dense)
    for a, b in zip(jax.tree.leaves(g_grouped), jax.tree.leaves(g_dense)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4, rtol=1e-4)
    assert float(jnp.abs(g_grouped[0]["gate_up"]).sum()) > 0


def _interior_pads(jaxpr) -> list:
    """The `pad` equations with interior padding in a jaxpr, sub-jaxprs included."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pad" and any(c[2] for c in eqn.params["padding_config"]):
            found.append(eqn)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found += _interior_pads(sub)
    return found


@pytest.mark.parametrize("dispatch", [experts_grouped, experts_dense])
def test_expert_backward_has_no_interior_pad(dispatch):
    # The backward of a strided slice (`h[..., 0::2]`) is a pad with interior padding, which
    # XLA:TPU emits transfer by transfer (>20 GB of host memory to compile GPT-OSS-20B's train
    # step). The gate/up split must reach the gradients through dense ops only.
    p = _params(4, 8, 6)
    x = jnp.asarray(np.random.RandomState(1).randn(5, 8).astype(np.float32))
    _, chosen, weights = route(x, p["router"], p["router_bias"], 2)

    def loss(x, p):
        return jnp.sum(dispatch(x, chosen, weights, p, LIMIT, ALPHA) ** 2)

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(x, p).jaxpr
    assert _interior_pads(jaxpr) == []
    # the check itself sees the pad a strided slice's backward makes
    strided = jax.make_jaxpr(jax.grad(lambda h: jnp.sum(h[..., 0::2] * h[..., 1::2])))(jnp.ones((3, 12)))
    assert len(_interior_pads(strided.jaxpr)) == 2


@pytest.mark.parametrize("rows,s,chunk", [(3, 10, 4), (2, 8, 8), (1, 7, 2), (2, 9, 16)])
def test_chunked_sequence_equals_token_loop(rows, s, chunk):
    """`moe_sequence` in chunks of positions (a ragged last chunk included) gives every token
    the per-token loop's output, and the routing in the unchunked token order."""
    e, k, d, f = 5, 2, 12, 10
    p = _params(e, d, f, seed=rows + s)
    y = np.random.RandomState(chunk).randn(rows, s, d).astype(np.float32)
    run = jax.jit(moe_sequence, static_argnums=(2, 3, 4, 5, 6))
    out, logits, chosen = run(jnp.asarray(y), p, k, LIMIT, ALPHA, "grouped", chunk)
    assert out.shape == (rows, s, d)
    ref = _numpy_moe(y.reshape(-1, d), p, k).reshape(rows, s, d)
    np.testing.assert_allclose(np.asarray(out), ref, atol=2e-5 * np.abs(ref).max())
    want_logits, want_chosen, _ = route(jnp.asarray(y.reshape(-1, d)), p["router"], p["router_bias"], k)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(want_logits), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(chosen), np.asarray(want_chosen))


def test_chunked_sequence_gradients_equal_whole():
    """The chunked block's gradients (its remat'd chunks) equal the whole block's, for the
    input and every expert parameter."""
    e, k, d, f = 4, 2, 8, 6
    p = jax.tree.map(jnp.asarray, _params(e, d, f, seed=5))
    y = jnp.asarray(np.random.RandomState(1).randn(2, 11, d).astype(np.float32))
    w = jnp.cos(jnp.arange(d, dtype=jnp.float32))

    def loss(params, ys, chunk):
        out, logits, _ = moe_sequence(ys, params, k, LIMIT, ALPHA, "grouped", chunk)
        return jnp.sum(out * w) + 0.1 * jnp.sum(jnp.tanh(logits))

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)
    whole, chunked = grad(p, y, 0), grad(p, y, 3)
    for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(chunked)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-4, rtol=1e-4)
    assert float(jnp.abs(chunked[1]).sum()) > 0


def test_load_balancing_loss_hand_computed():
    # 2 tokens, 2 experts, top-1. Token 0: logits (0, ln 3) -> probs (1/4, 3/4), picks expert 1;
    # token 1: logits (0, 0) -> probs (1/2, 1/2), picks expert 0 (the first of a tie).
    logits = jnp.array([[0.0, math.log(3.0)], [0.0, 0.0]])
    chosen = jnp.array([[1], [0]])
    total, count = load_balancing_loss(logits, chosen, 2)
    f = np.array([0.5, 0.5])
    prob = np.array([(0.25 + 0.5) / 2, (0.75 + 0.5) / 2])
    assert float(count) == 2.0
    np.testing.assert_allclose(float(total) / float(count), 2 * np.sum(f * prob), rtol=1e-6)
    # a masked token drops out of both the fractions and the mean probabilities
    total, count = load_balancing_loss(logits, chosen, 2, mask=jnp.array([1, 0]))
    np.testing.assert_allclose(float(total) / float(count), 2 * (0 * 0.25 + 1 * 0.75), rtol=1e-6)


def test_config_errors_name_the_field():
    base = dict(vocab_size=32, hidden=16, intermediate=8, num_layers=2, num_heads=2, num_kv_heads=1,
                head_dim=8)
    with pytest.raises(ValueError, match="experts_per_token=5; allowed: 1..num_experts=4"):
        ModelConfig("gpt_oss", **base, num_experts=4, experts_per_token=5)
    with pytest.raises(ValueError, match="moe_dispatch='sparse'"):
        ModelConfig("gpt_oss", **base, num_experts=4, experts_per_token=2, moe_dispatch="sparse")
    with pytest.raises(ValueError, match="moe_chunk=-1; allowed: an int >= 0"):
        ModelConfig("gpt_oss", **base, num_experts=4, experts_per_token=2, moe_chunk=-1)
    with pytest.raises(ValueError, match="num_experts=4; only family 'gpt_oss'"):
        ModelConfig("llama", **base, num_experts=4, experts_per_token=2)
    with pytest.raises(ValueError, match="sliding_layers"):
        ModelConfig("gpt_oss", **base, num_experts=4, experts_per_token=2, sliding_window=4,
                    sliding_layers=(True,))


def _tiny_moe_cfg(**kw) -> ModelConfig:
    return ModelConfig("gpt_oss", vocab_size=64, hidden=32, intermediate=16, num_layers=2, num_heads=4,
                       num_kv_heads=2, head_dim=8, num_experts=4, experts_per_token=2, sliding_window=4,
                       sliding_layers=(True, False), tie_embeddings=False, **kw)


@pytest.mark.slow
def test_router_loss_uniform_router_is_k():
    """A zero router gives equal logits: probabilities 1/E and the first k experts chosen, so
    f = (1, .., 1, 0, .., 0) and E * sum_e f_e / E = k, in every layer."""
    from prd_jax.model.decoder import forward_with_router_loss, init_params

    cfg = _tiny_moe_cfg()
    params = jax.jit(init_params, static_argnums=0)(cfg, jax.random.key(0))
    mlp = params["layers"]["mlp"]
    params["layers"]["mlp"] = dict(mlp, router=jnp.zeros_like(mlp["router"]),
                                   router_bias=jnp.zeros_like(mlp["router_bias"]))
    tokens = jnp.arange(12, dtype=jnp.int32).reshape(2, 6)
    mask = jnp.array([[1] * 6, [0] * 2 + [1] * 4], bool)
    run = jax.jit(forward_with_router_loss, static_argnums=0)
    _, (total, count) = run(cfg, params, tokens, jnp.broadcast_to(jnp.arange(6), (2, 6)), token_mask=mask)
    assert float(count) == 10.0
    np.testing.assert_allclose(float(total) / float(count), cfg.experts_per_token, rtol=1e-6)


@pytest.mark.slow
def test_moe_train_step_reduces_loss():
    """SGD on next-token cross-entropy + 0.01 x the router loss of a tiny GPT-OSS (grouped
    dispatch, default remat): finite gradients, a nonzero router gradient, the loss falls."""
    from prd_jax.model.decoder import forward_with_router_loss, init_params

    cfg = _tiny_moe_cfg(router_aux_loss_coef=0.01)
    params = jax.jit(init_params, static_argnums=0)(cfg, jax.random.key(1))
    tokens = jax.random.randint(jax.random.key(2), (4, 12), 0, cfg.vocab_size)
    positions = jnp.broadcast_to(jnp.arange(11), (4, 11))

    def loss_fn(p):
        logits, (aux_sum, aux_count) = forward_with_router_loss(cfg, p, tokens[:, :-1], positions)
        logp = jax.nn.log_softmax(logits, axis=-1)
        xent = -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1))
        return xent + cfg.router_aux_loss_coef * aux_sum / aux_count

    step = jax.jit(jax.value_and_grad(loss_fn))
    losses = []
    for i in range(6):
        loss, grads = step(params)
        losses.append(float(loss))
        assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))
        if i == 0:
            assert float(jnp.abs(grads["layers"]["mlp"]["router"]).sum()) > 0
        params = jax.tree.map(lambda w, g: w - 0.5 * g, params, grads)
    assert losses[-1] < losses[0] - 0.1, losses


def test_model_moe_chunk_changes_no_logit_or_router_loss():
    """A tiny GPT-OSS with `moe_chunk` 4 (rows of 10 positions: chunks 4, 4, 2) gives the
    logits, router loss and input gradient of the unchunked model."""
    from prd_jax.model.decoder import forward_with_router_loss, init_params

    cfg = _tiny_moe_cfg(remat="full")
    params = jax.jit(init_params, static_argnums=0)(cfg, jax.random.key(3))
    tokens = jax.random.randint(jax.random.key(4), (2, 10), 0, cfg.vocab_size)
    positions = jnp.broadcast_to(jnp.arange(10), (2, 10))
    mask = jnp.array([[1] * 10, [0] * 3 + [1] * 7], bool)

    def run(c, p):
        logits, (total, count) = forward_with_router_loss(c, p, tokens, positions, token_mask=mask)
        return jnp.sum(jax.nn.log_softmax(logits)[..., 0]) + total / count, (logits, total / count)

    grad = jax.jit(jax.grad(run, argnums=1, has_aux=True), static_argnums=0)
    g0, (logits0, aux0) = grad(cfg, params)
    g4, (logits4, aux4) = grad(cfg.replace(moe_chunk=4), params)
    np.testing.assert_allclose(np.asarray(logits4), np.asarray(logits0), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(float(aux4), float(aux0), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g4)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-4, rtol=1e-4)


def test_checkpoint_loaded_under_a_name_keeps_the_named_run_settings():
    """A GPT-OSS-20B config.json (openai/gpt-oss-20b's keys, as published) read under the name
    `gpt-oss-20b` keeps the named config's settings that config.json lacks (moe_chunk,
    reasoning_effort), so a run uses what `prd-jax compile` fitted; the architecture is the file's."""
    from prd_jax.model.config import NAMED_CONFIGS, from_hf_config, with_named_settings

    hf = {"model_type": "gpt_oss", "vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880,
          "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
          "num_local_experts": 32, "num_experts_per_tok": 4, "sliding_window": 128, "rope_theta": 150000.0,
          "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
          "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(24)],
          "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                           "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}}
    loaded = from_hf_config(hf)
    assert (loaded.moe_chunk, loaded.reasoning_effort) == (0, None)
    named = with_named_settings("gpt-oss-20b", loaded)
    assert (named.moe_chunk, named.reasoning_effort) == (2048, "medium")
    assert named.moe_chunk == NAMED_CONFIGS["gpt-oss-20b"].moe_chunk
    assert (named.num_experts, named.sliding_window, named.hidden) == (32, 128, 2880)
    assert with_named_settings("my-own-model", loaded) is loaded
