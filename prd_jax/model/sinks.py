"""Attention with a learned sink logit per head (GPT-OSS).

Each head h has a scalar `sink_h` that joins the softmax denominator as one extra key with
no value (OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", 2025, Sec. 2.1):

    p_j = exp(s_j) / (exp(sink_h) + sum_i exp(s_i)),    out = sum_j p_j v_j

so a head can put weight on "nothing" and the weights of the real keys sum to less than 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array
_MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)


def sink_attention(q: Array, key: Array, val: Array, mask: Array, sinks: Array, scale: float) -> Array:
    """q `[B, T, N, Dh]` over key/val `[B, S, K, Dh]` under `mask [B, 1, T, S]` (bool), with
    `sinks [N]`; dense scores `[B, K, G, T, S]` in fp32 (G = N / K query heads per kv head).
    A query with no visible key returns zeros (all weight on the sink)."""
    b, t, n, dh = q.shape
    k = key.shape[2]
    g = n // k
    f32 = jnp.float32
    s = jnp.einsum("btkgd,bskd->bkgts", q.reshape(b, t, k, g, dh), key, preferred_element_type=f32) * scale
    s = jnp.where(mask[:, :, None], s, _MASKED)
    sink = jnp.broadcast_to(sinks.astype(f32).reshape(1, k, g, 1, 1), (b, k, g, t, 1))
    m = jax.lax.stop_gradient(jnp.maximum(jnp.max(s, axis=-1, keepdims=True), sink))
    p = jnp.exp(s - m)
    total = jnp.sum(p, axis=-1, keepdims=True) + jnp.exp(sink - m)
    out = jnp.einsum("bkgts,bskd->btkgd", (p / total).astype(val.dtype), val, preferred_element_type=f32)
    return out.reshape(b, t, n, dh).astype(q.dtype)
