"""Chunked cross-entropy: token logprobs without materialising `[B, T, V]` fp32 logits.

The head (tied embedding or `lm_head`) is applied to `chunk` tokens at a time inside a
`lax.map`, each chunk under `jax.checkpoint`, so the forward keeps only `[B, T]` outputs
and the backward recomputes one chunk's `[chunk, V]` logits at a time. Values and
gradients equal `losses.token_logprobs(forward(...)[0], targets)` (tested).

Wiring (owned by `train/sft.py` / `train/rl.py`):

    hidden, _ = forward(cfg, params, inputs, positions, segment_ids=..., return_hidden=True)
    logp, hits = chunked_token_logprobs(cfg, params, hidden, targets)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prd_jax.model.config import ModelConfig

Array = jax.Array


def head_weights(cfg: ModelConfig, params) -> tuple:
    """(head, contracting axis): the tied table `[V, D]` (axis 1) or `lm_head [D, V]` (axis 0)."""
    return (params["embed"], 1) if cfg.tie_embeddings else (params["lm_head"], 0)


def chunked_token_logprobs(cfg: ModelConfig, params, hidden: Array, targets: Array, chunk: int = 256):
    """`hidden [B, T, D]` (final-normed), `targets [B, T]` -> (logprob `[B, T]` fp32,
    argmax hit `[B, T]` fp32), applying the head to `chunk` tokens at a time."""
    b, t, d = hidden.shape
    head, axis = head_weights(cfg, params)
    n = b * t
    chunks = -(-n // chunk)
    pad = chunks * chunk - n
    flat_h = jnp.pad(hidden.reshape(n, d), ((0, pad), (0, 0))).reshape(chunks, chunk, d)
    flat_t = jnp.pad(targets.reshape(n).astype(jnp.int32), (0, pad)).reshape(chunks, chunk)

    @jax.checkpoint
    def one(h, tgt):
        dims = (((1,), (axis,)), ((), ()))
        logits = jax.lax.dot_general(h, head.astype(h.dtype), dims, preferred_element_type=jnp.float32)
        lse = jax.nn.logsumexp(logits, axis=-1)
        logp = jnp.take_along_axis(logits, tgt[:, None], axis=-1)[:, 0] - lse
        hit = (jnp.argmax(logits, axis=-1) == tgt).astype(jnp.float32)
        return logp, jax.lax.stop_gradient(hit)

    logp, hits = jax.lax.map(lambda xs: one(*xs), (flat_h, flat_t))
    return logp.reshape(-1)[:n].reshape(b, t), hits.reshape(-1)[:n].reshape(b, t)
