"""GPT-OSS sink attention (`prd_jax.model.attention.sink_attention`): the formula against a numpy loop, and the
query-blocked form of long calls against the one-piece form (values and gradients, and a
whole tiny GPT-OSS forward)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax.model import attention as A


def _inputs(b=2, t=13, s=13, n=4, k=2, dh=8, seed=0):
    r = np.random.RandomState(seed)
    q, key, val = r.randn(b, t, n, dh), r.randn(b, s, k, dh), r.randn(b, s, k, dh)
    causal = np.tril(np.ones((t, s), bool), k=s - t)
    window = causal & ~np.tril(np.ones((t, s), bool), k=s - t - 5)  # the 5 latest keys
    mask = np.stack([causal, window])[:, None]  # row 0 causal, row 1 a 5-key sliding window
    mask[1, 0, 0] = False  # a query that sees nothing
    return [jnp.asarray(x, jnp.float32) for x in (q, key, val)] + [jnp.asarray(mask), jnp.asarray(r.randn(n), jnp.float32)]


def _numpy(q, key, val, mask, sinks, scale):
    q, key, val, mask, sinks = (np.asarray(x, np.float64) if x.dtype != bool else np.asarray(x)
                                for x in (q, key, val, mask, sinks))
    b, t, n, dh = q.shape
    g = n // key.shape[2]
    out = np.zeros_like(q)
    for i in range(b):
        for h in range(n):
            for j in range(t):
                vis = mask[i, 0, j]
                s = q[i, j, h] @ key[i, :, h // g].T * scale
                e = np.exp(np.concatenate([s[vis], [sinks[h]]]) - max(s[vis].max(initial=-np.inf), sinks[h]))
                out[i, j, h] = (e[:-1] / e.sum()) @ val[i, vis, h // g]
    return out


@pytest.mark.parametrize("block", [0, 4, 5, 13, 64])
def test_sink_attention_equals_numpy(block):
    q, key, val, mask, sinks = _inputs()
    got = jax.jit(A.sink_attention, static_argnums=(5, 6))(q, key, val, mask, sinks, 0.35, block)
    want = _numpy(q, key, val, mask, sinks, 0.35)
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-6, rtol=2e-5)
    np.testing.assert_array_equal(np.asarray(got[1, 0]), 0.0)  # no visible key: all weight on the sink


def test_blocked_gradients_equal_one_piece():
    q, key, val, mask, sinks = _inputs(seed=1)
    w = jnp.asarray(np.random.RandomState(2).randn(*q.shape), jnp.float32)

    def loss(args, block):
        return jnp.sum(A.sink_attention(*args[:3], mask, args[3], 0.35, block) * w)

    grad = jax.jit(jax.grad(loss), static_argnums=1)
    whole, blocked = grad((q, key, val, sinks), 0), grad((q, key, val, sinks), 4)
    for a, b in zip(whole, blocked):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5, rtol=1e-5)
    assert float(jnp.abs(blocked[3]).sum()) > 0  # the sinks get a gradient


def test_model_forward_in_query_blocks_equals_one_piece(monkeypatch):
    """A tiny GPT-OSS (sliding window 4) over 11 tokens: logits with 3-query blocks equal the
    one-piece attention's (the peer tests check the one-piece form against transformers)."""
    from prd_jax.model.config import ModelConfig
    from prd_jax.model.decoder import forward, init_params

    cfg = ModelConfig("gpt_oss", vocab_size=64, hidden=32, intermediate=16, num_layers=2, num_heads=4,
                      num_kv_heads=2, head_dim=8, num_experts=4, experts_per_token=2, sliding_window=4,
                      sliding_layers=(True, False), tie_embeddings=False)
    params = jax.jit(init_params, static_argnums=0)(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 11), 0, 64)
    positions = jnp.broadcast_to(jnp.arange(11), (2, 11))
    monkeypatch.setattr(A, "SINK_QUERY_BLOCK", 0)
    whole = jax.jit(forward, static_argnums=0)(cfg, params, tokens, positions)[0]
    monkeypatch.setattr(A, "SINK_QUERY_BLOCK", 3)
    blocked = jax.jit(forward, static_argnums=0)(cfg, params, tokens, positions)[0]
    np.testing.assert_allclose(np.asarray(blocked), np.asarray(whole), atol=1e-5, rtol=1e-5)
