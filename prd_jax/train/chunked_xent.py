"""Chunked cross-entropy: token logprobs without materialising `[B, T, V]` fp32 logits.

The SFT loss (PDR paper §3.3) needs only each target's logprob, and the token accuracy only
whether the target is the argmax. The head (tied embedding or `lm_head`) is applied to
`chunk` sequence positions of every row at a time inside a `lax.map`, each chunk under
`jax.checkpoint`: the forward keeps only `[B, T]` outputs and the backward recomputes one
chunk's `[B, chunk, V]` logits at a time. Chunks split the sequence, not the batch, so a
batch sharded over the mesh stays sharded. Values and gradients equal
`losses.token_logprobs(forward(...)[0], targets)` (tests/test_chunked_xent.py).
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from prd_jax.mesh import named_sharding
from prd_jax.model.config import ModelConfig

Array = jax.Array

CHUNK = 128  # sequence positions per chunk: [B, 128, V] fp32 logits live at a time


def head_weights(cfg: ModelConfig, params) -> tuple:
    """(head, contracting axis): the tied table `[V, D]` (axis 1) or `lm_head [D, V]` (axis 0)."""
    return (params["embed"], 1) if cfg.tie_embeddings else (params["lm_head"], 0)


def chunked_token_logprobs(cfg: ModelConfig, params, hidden: Array, targets: Array, chunk: int = CHUNK,
                           mesh: Optional[Mesh] = None, with_entropy: bool = False):
    """`hidden [B, T, D]` (final-normed), `targets [B, T]` -> (logprob `[B, T]` fp32,
    argmax hit `[B, T]` fp32), applying the head to `chunk` positions of every row at a time.
    With `with_entropy`, a third output: each position's next-token entropy (no gradient;
    the RL loss logs it, `losses.token_entropy`)."""
    b, t, d = hidden.shape
    head, axis = head_weights(cfg, params)
    chunk = min(chunk, t)
    chunks = -(-t // chunk)
    pad = chunks * chunk - t
    hs = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, chunks, chunk, d).swapaxes(0, 1)
    ts = jnp.pad(targets.astype(jnp.int32), ((0, 0), (0, pad))).reshape(b, chunks, chunk).swapaxes(0, 1)

    @jax.checkpoint
    def one(h, tgt):
        dims = (((2,), (axis,)), ((), ()))
        logits = jax.lax.dot_general(h, head.astype(h.dtype), dims, preferred_element_type=jnp.float32)
        if mesh is not None:
            logits = jax.lax.with_sharding_constraint(
                logits, named_sharding(("batch", "length", "vocab"), mesh, logits.shape))
        lse = jax.nn.logsumexp(logits, axis=-1)
        logp = jnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0] - lse
        hit = (jnp.argmax(logits, axis=-1) == tgt).astype(jnp.float32)
        out = (logp, jax.lax.stop_gradient(hit))
        if with_entropy:
            probs = jnp.exp(logits - lse[..., None])  # the softmax, from the lse already computed
            out += (jax.lax.stop_gradient(lse - jnp.sum(probs * logits, axis=-1)),)
        return out

    outs = jax.lax.map(lambda xs: one(*xs), (hs, ts))  # each [C, B, chunk]
    return tuple(x.swapaxes(0, 1).reshape(b, chunks * chunk)[:, :t] for x in outs)
