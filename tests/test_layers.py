"""The layer math written once (`prd_jax.model.layers`) against independent numpy references.

The stacked forward and the decode step both run `layers.decoder_layer`; that the two paths
agree end to end is `tests/test_rollout_batching.py::test_decode_step_equals_the_scanned_forward`,
and that they agree with transformers is `tests/test_hf_tiny_peer.py` / `tests/test_gpt_oss_peer.py`.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax.model import layers
from prd_jax.model.config import ModelConfig
from prd_jax.model.decode import _apply
from prd_jax.model.decoder import _tokens
from prd_jax.model.moe import moe_tokens

D, N, K, DH, F = 16, 4, 2, 8, 24
BASE = dict(vocab_size=32, hidden=D, intermediate=F, num_layers=1, num_heads=N, num_kv_heads=K, head_dim=DH)


def _np_rms(x, scale, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def _np_rope(x, pos, theta):
    """Rotary embedding as complex multiplication: pair (x_i, x_{i+Dh/2}) is x_i + 1j x_{i+Dh/2},
    turned by pos * theta^(-2i/Dh) (the half-split layout of HF Llama/Qwen)."""
    half = x.shape[-1] // 2
    z = x[..., :half] + 1j * x[..., half:]
    angle = pos[..., None, None] * theta ** (-np.arange(half) * 2.0 / x.shape[-1])
    z = z * np.exp(1j * angle)
    return np.concatenate([z.real, z.imag], axis=-1)


def _weights(cfg, rng):
    """One layer's weights in the stacked forward's layout (`decoder.Attention` / `decoder.MLP`)."""
    r = lambda *s: rng.normal(size=s).astype(np.float32) / math.sqrt(s[0])  # noqa: E731
    p = {"attn_norm": 1 + 0.1 * rng.normal(size=D), "mlp_norm": 1 + 0.1 * rng.normal(size=D),
         "q": r(D, N, DH), "k": r(D, K, DH), "v": r(D, K, DH), "o": r(N * DH, D),
         "gate": r(D, F), "up": r(D, F), "down": r(F, D)}
    if cfg.qkv_bias:
        p.update(q_bias=rng.normal(size=(N, DH)), k_bias=rng.normal(size=(K, DH)), v_bias=rng.normal(size=(K, DH)))
    if cfg.qk_norm:
        p.update(q_norm=1 + 0.1 * rng.normal(size=DH), k_norm=1 + 0.1 * rng.normal(size=DH))
    return {name: np.asarray(w, np.float32) for name, w in p.items()}


def _decode_layout(p):
    """The same weights output-major with q/k/v and gate/up fused (`decode.decode_weights`)."""
    out = {name: w for name, w in p.items() if name not in ("q", "k", "v", "o", "gate", "up", "down")}
    out["qkv"] = np.concatenate([p[n].reshape(D, -1) for n in ("q", "k", "v")], axis=1).T
    out["gate_up"] = np.concatenate([p["gate"], p["up"]], axis=1).T
    out["o"], out["down"] = p["o"].T, p["down"].T
    return out


def _np_layer(cfg, p, x, pos):
    """A pre-norm layer written out in numpy (float64), causal grouped-query attention."""
    p = {name: w.astype(np.float64) for name, w in p.items()}
    b, t, _ = x.shape
    y = _np_rms(x, p["attn_norm"], cfg.rms_eps)
    q, k, v = (np.einsum("btd,dnh->btnh", y, p[n]) for n in ("q", "k", "v"))
    if cfg.qkv_bias:
        q, k, v = q + p["q_bias"], k + p["k_bias"], v + p["v_bias"]
    if cfg.qk_norm:
        q, k = _np_rms(q, p["q_norm"], cfg.rms_eps), _np_rms(k, p["k_norm"], cfg.rms_eps)
    q, k = _np_rope(q, pos, cfg.rope_theta), _np_rope(k, pos, cfg.rope_theta)
    k, v = np.repeat(k, N // K, axis=2), np.repeat(v, N // K, axis=2)  # head n reads kv head n // G
    s = np.einsum("bqnh,bknh->bnqk", q, k) / math.sqrt(DH)
    s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    att = np.einsum("bnqk,bknh->bqnh", w / w.sum(-1, keepdims=True), v).reshape(b, t, N * DH)
    x = x + att @ p["o"]
    y = _np_rms(x, p["mlp_norm"], cfg.rms_eps)
    gate = y @ p["gate"]
    return x + (gate / (1 + np.exp(-gate)) * (y @ p["up"])) @ p["down"]


def _causal_attend(q, k, v, sinks):
    """A plain causal attention core for `decoder_layer` (q `[B, T, N, Dh]`)."""
    t = q.shape[1]
    k, v = jnp.repeat(k, N // K, axis=2), jnp.repeat(v, N // K, axis=2)
    mask = jnp.tril(jnp.ones((t, t), bool))[None, None]
    return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=1 / math.sqrt(DH)), "state"


def test_rms_norm_and_rope_against_numpy():
    rng = np.random.default_rng(0)
    x, scale = rng.normal(size=(3, 5, D)).astype(np.float32), rng.normal(size=D).astype(np.float32)
    np.testing.assert_allclose(layers.rms_norm(jnp.asarray(x), jnp.asarray(scale), 1e-5),
                               _np_rms(x.astype(np.float64), scale, 1e-5), rtol=1e-5, atol=1e-6)
    cfg = ModelConfig("llama", **BASE, rope_theta=500.0)
    heads = rng.normal(size=(2, 5, N, DH)).astype(np.float32)
    pos = np.array([[0, 1, 2, 3, 4], [7, 9, 30, 100, 1000]])
    cos, sin = layers.rope_tables(cfg, jnp.asarray(pos))
    np.testing.assert_allclose(layers.apply_rope(jnp.asarray(heads), cos, sin), _np_rope(heads, pos, 500.0),
                               rtol=1e-4, atol=1e-4)
    # one token per row (the decode step's shapes): the same rotation
    np.testing.assert_allclose(layers.apply_rope(jnp.asarray(heads[:, 1]), cos[:, 1], sin[:, 1]),
                               _np_rope(heads[:, 1], pos[:, 1], 500.0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_decoder_layer_against_numpy(family):
    """`decoder_layer` in both layouts (the stacked forward's input-major weights through
    `_tokens`, the decode step's fused output-major weights through `_apply`) equals a numpy
    layer; Qwen2's q/k/v biases and Qwen3's q/k norms included."""
    cfg = ModelConfig(family, **BASE, rope_theta=100.0)
    rng = np.random.default_rng(1)
    p = _weights(cfg, rng)
    x = rng.normal(size=(2, 6, D)).astype(np.float32)
    pos = np.broadcast_to(np.arange(6) + 3, (2, 6))
    want = _np_layer(cfg, p, x.astype(np.float64), pos)
    cos, sin = layers.rope_tables(cfg, jnp.asarray(pos))
    for weights, matmul in ((p, _tokens), (_decode_layout(p), _apply)):
        got, state, router = layers.decoder_layer(cfg, jax.tree.map(jnp.asarray, weights), jnp.asarray(x), cos, sin,
                                                  _causal_attend, matmul)
        assert state == "state" and router is None
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_moe_feed_forward_is_moe_tokens():
    """A mixture-of-experts layer's feed-forward is `moe.moe_tokens` over the flattened tokens,
    with its router handed back for the load-balancing loss."""
    cfg = ModelConfig("gpt_oss", **dict(BASE, intermediate=8), num_experts=4, experts_per_token=2)
    rng = np.random.default_rng(2)
    e, f = 4, 8
    moe = {"router": rng.normal(size=(D, e)), "router_bias": rng.normal(size=e),
           "gate_up": rng.normal(size=(e, D, 2 * f)) / 4, "gate_up_bias": rng.normal(size=(e, 2 * f)),
           "down": rng.normal(size=(e, f, D)) / 3, "down_bias": rng.normal(size=(e, D))}
    moe = {name: jnp.asarray(w, jnp.float32) for name, w in moe.items()}
    y = jnp.asarray(rng.normal(size=(2, 3, D)), jnp.float32)
    out, (logits, chosen) = layers.feed_forward(cfg, {"moe": moe}, y, _tokens, None, ("batch", "length"))
    want, want_logits, want_chosen = moe_tokens(y.reshape(6, D), moe, 2, cfg.swiglu_limit, cfg.swiglu_alpha)
    np.testing.assert_allclose(out, want.reshape(2, 3, D), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(chosen, want_chosen)
    assert logits.shape == (6, e) and float(jnp.abs(out).sum()) > 0


def test_missing_weight_names_the_field():
    cfg = ModelConfig("qwen2", **BASE)
    p = jax.tree.map(jnp.asarray, _weights(cfg, np.random.default_rng(3)))
    del p["k_bias"]
    x = jnp.zeros((1, 2, D))
    cos, sin = layers.rope_tables(cfg, jnp.zeros((1, 2), jnp.int32))
    with pytest.raises(ValueError, match=r"qwen2 layer weights lack \['k_bias'\]"):
        layers.decoder_layer(cfg, p, x, cos, sin, _causal_attend, _tokens)
