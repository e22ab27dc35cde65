"""Chunked cross-entropy: token logprobs without materialising `[B, T, V]` fp32 logits.

The SFT loss (PDR paper §3.3) needs only each target's logprob, and the token accuracy only
whether the target is the argmax. The head (tied embedding or `lm_head`) is applied to
`chunk` sequence positions of every row at a time inside a `lax.map`, each chunk under
`jax.checkpoint`: the forward keeps only `[B, T]` outputs and the backward recomputes one
chunk's `[B, chunk, V]` logits at a time. Chunks split the sequence, not the batch, so a
batch sharded over the mesh stays sharded. Values and gradients equal
`losses.token_logprobs(forward(...)[0], targets)` (tests/test_chunked_xent.py).

The SFT loss knows each token's weight in its sum before the backward pass, so
`chunked_weighted_nll` forms the head's gradient in the forward pass itself (a fused linear
cross-entropy): three head matmuls per chunk instead of four, and no logits recomputed.
The logsumexp and argmax over the vocabulary run per 128-token block, then over the blocks
(`sampling.vocab_blocks`: faster on XLA:CPU than one reduction over a 49,152-wide row).
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from prd_jax.mesh import named_sharding
from prd_jax.model.chunks import join_chunks, split_chunks
from prd_jax.model.config import ModelConfig
from prd_jax.sampling import blocked_argmax, vocab_blocks

Array = jax.Array

CHUNK = 128  # sequence positions per chunk: [B, 128, V] fp32 logits live at a time
HEAD_AXES = {1: ("vocab", "embed"), 0: ("embed", "vocab")}  # logical axes of the head, by contracting axis


def head_weights(cfg: ModelConfig, params) -> tuple:
    """(head, contracting axis): the tied table `[V, D]` (axis 1) or `lm_head [D, V]` (axis 0)."""
    return (params["embed"], 1) if cfg.tie_embeddings else (params["lm_head"], 0)


def _lse_argmax(logits: Array) -> tuple:
    """logsumexp and first argmax over the last (vocabulary) axis, block by block."""
    flat = logits.reshape(-1, logits.shape[-1])
    lse = jax.nn.logsumexp(jax.nn.logsumexp(vocab_blocks(flat), axis=-1), axis=-1)
    return lse.reshape(logits.shape[:-1]), blocked_argmax(flat).reshape(logits.shape[:-1])


def _logits(h: Array, head: Array, axis: int, mesh: Optional[Mesh]) -> Array:
    """One chunk's fp32 logits `[B, chunk, V]`."""
    dims = (((2,), (axis,)), ((), ()))
    logits = jax.lax.dot_general(h, head.astype(h.dtype), dims, preferred_element_type=jnp.float32)
    if mesh is not None:
        logits = jax.lax.with_sharding_constraint(logits, named_sharding(("batch", "length", "vocab"), mesh, logits.shape))
    return logits


def chunked_token_logprobs(cfg: ModelConfig, params, hidden: Array, targets: Array, chunk: int = CHUNK,
                           mesh: Optional[Mesh] = None, with_entropy: bool = False):
    """`hidden [B, T, D]` (final-normed), `targets [B, T]` -> (logprob `[B, T]` fp32,
    argmax hit `[B, T]` fp32), applying the head to `chunk` positions of every row at a time.
    With `with_entropy`, a third output: each position's next-token entropy (no gradient;
    the RL loss logs it, `losses.token_entropy`)."""
    t = hidden.shape[1]
    head, axis = head_weights(cfg, params)
    chunk = min(chunk, t)
    hs, ts = split_chunks(hidden, chunk), split_chunks(targets.astype(jnp.int32), chunk)

    @jax.checkpoint
    def one(h, tgt):
        logits = _logits(h, head, axis, mesh)
        lse, arg = _lse_argmax(logits)
        logp = jnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0] - lse
        hit = (arg == tgt).astype(jnp.float32)
        out = (logp, jax.lax.stop_gradient(hit))
        if with_entropy:
            probs = jnp.exp(logits - lse[..., None])  # the softmax, from the lse already computed
            out += (jax.lax.stop_gradient(lse - jnp.sum(probs * logits, axis=-1)),)
        return out

    outs = jax.lax.map(lambda xs: one(*xs), (hs, ts))  # each [C, B, chunk]
    return tuple(join_chunks(x, t) for x in outs)


def chunked_weighted_nll(cfg: ModelConfig, params, hidden: Array, targets: Array, weights: Array,
                         chunk: int = CHUNK, mesh: Optional[Mesh] = None) -> tuple:
    """(sum of `-weights * log p(targets)`, sum of `weights * [argmax == target]`), scalars,
    for `hidden [B, T, D]` (final-normed): the SFT loss's token-mean numerator (PDR paper
    §3.3) and its accuracy, with the head's gradient formed in the forward pass.

    Each token's weight in the sum is known before the backward pass, so the forward
    computes, chunk by chunk, `dlogits = w * (softmax - onehot(target))`, the hidden
    state's gradient `dlogits . head` and the head's `hidden^T . dlogits` (accumulated); the
    backward only scales them by the loss's cotangent. That is three head matmuls per chunk
    instead of the checkpointed chunk's four, and the `[B, chunk, V]` logits are never
    recomputed. Values and gradients (params, hidden, weights: `-log p`) equal a full-logits
    log-softmax's, and a mesh run equals one device's (tests/test_chunked_xent.py).
    """
    head, axis = head_weights(cfg, params)
    chunk = min(chunk, hidden.shape[1])
    xs = (split_chunks(hidden, chunk), split_chunks(targets.astype(jnp.int32), chunk),
          split_chunks(weights.astype(jnp.float32), chunk))
    return _fused_nll(axis, mesh, head, *xs)


def _nll_chunk(h, head, tgt, w, axis, mesh):
    """One chunk's logits, per-token logprobs and (nll, hit) sums."""
    logits = _logits(h, head, axis, mesh)
    lse, arg = _lse_argmax(logits)
    logp = jnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0] - lse
    return logits, lse, logp, (-jnp.sum(w * logp), jnp.sum(w * (arg == tgt)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _fused_nll(axis, mesh, head, hs, ts, ws):
    def body(acc, x):
        *_, sums = _nll_chunk(x[0], head, x[1], x[2], axis, mesh)
        return (acc[0] + sums[0], acc[1] + sums[1]), None

    return jax.lax.scan(body, (jnp.float32(0), jnp.float32(0)), (hs, ts, ws))[0]


def _fused_nll_fwd(axis, mesh, head, hs, ts, ws):
    contract = (((0,), (0,)), ((), ()))  # over the chunk's B * chunk tokens

    def body(carry, x):
        (nll, hits), dhead = carry
        h, tgt, w = x
        logits, lse, logp, sums = _nll_chunk(h, head, tgt, w, axis, mesh)
        onehot = jax.lax.broadcasted_iota(jnp.int32, logits.shape, 2) == tgt[..., None]
        dlogits = w[..., None] * (jnp.exp(logits - lse[..., None]) - onehot)  # d(-w log p) / d logits
        dh = jax.lax.dot_general(dlogits.astype(h.dtype), head.astype(h.dtype), (((2,), (1 - axis,)), ((), ())),
                                 preferred_element_type=jnp.float32)
        flat_d, flat_h = dlogits.reshape(-1, dlogits.shape[-1]), h.reshape(-1, h.shape[-1]).astype(jnp.float32)
        step = jax.lax.dot_general(flat_d, flat_h, contract) if axis == 1 else jax.lax.dot_general(flat_h, flat_d, contract)
        return ((nll + sums[0], hits + sums[1]), dhead + step), (dh.astype(h.dtype), logp)

    dhead = jnp.zeros(head.shape, jnp.float32)
    if mesh is not None:  # the head's own layout, not a replicated [V, D] accumulator
        dhead = jax.lax.with_sharding_constraint(dhead, named_sharding(HEAD_AXES[axis], mesh, head.shape))
    init = ((jnp.float32(0), jnp.float32(0)), dhead)
    (sums, dhead), (dhs, logps) = jax.lax.scan(body, init, (hs, ts, ws))
    return sums, (dhs, dhead.astype(head.dtype), logps)


def _fused_nll_bwd(axis, mesh, res, cotangents):
    dhs, dhead, logps = res
    g = cotangents[0]  # the hit count has no gradient
    return (g * dhead).astype(dhead.dtype), (g * dhs).astype(dhs.dtype), None, -g * logps


_fused_nll.defvjp(_fused_nll_fwd, _fused_nll_bwd)
