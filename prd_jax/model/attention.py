"""Causal self-attention for training and scoring (no cache), in query blocks.

Queries of one kv head are laid out as rows `[B, K, T * G, Dh]` (position-major, then the
G query heads that share the kv head), so a block of positions is one contiguous slab of
`block * G` rows and every score matmul is a plain `[rows, Dh] x [Dh, keys]` product per
(row, kv head) pair; query block i reads only the keys `[0, end_i)` (the later ones are
masked anyway by causality).

The backward is written out (`jax.custom_vjp`, as FlashAttention's): the forward keeps each
row's output and log-sum-exp (`checkpoint_name` "attn_out" / "attn_lse", which the
"dots" / "dots_no_batch" / "none" remat policies keep), and the backward recomputes the
probabilities from them, `dS = P * (dP - rowsum(dO * O))`. Under full remat (nothing kept)
that custom backward would rerun the forward, so there the same blocks run under
autodiff (`fused=False`). Timings against the forms it replaced:
docs/results/2026-12-01-train-step-mfu.md.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

Array = jax.Array
TRAIN_QUERY_BLOCK = 128  # positions per query block
SAVED_NAMES = ("attn_out", "attn_lse")  # kept by the non-full remat policies
_MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)  # as jax.nn.dot_product_attention's


def causal_block_attention(q: Array, key: Array, val: Array, mask: Array, scale: float,
                           block: int = TRAIN_QUERY_BLOCK, fused: bool = True) -> Array:
    """Attention of q `[B, T, N, Dh]` over key/val `[B, T, K, Dh]` under `mask [B, 1, T, T]`
    (causal, and block-diagonal for packed rows), in query blocks of `block` positions.

    Equals one dense `jax.nn.dot_product_attention` call, values and gradients (a masked
    key's weight is exactly 0; a query with no visible key averages the keys up to its
    block's end), at about `(nb + 1) / (2 nb)` of its score work for `nb = T / block`.
    `fused`: the written-out backward (module docstring); False differentiates the blocks.
    """
    b, t, n, dh = q.shape
    k = key.shape[2]
    g = n // k
    rows = (q * jnp.asarray(scale, q.dtype)).reshape(b, t, k, g, dh).transpose(0, 2, 1, 3, 4).reshape(b, k, t * g, dh)
    kh, vh = key.transpose(0, 2, 1, 3), val.transpose(0, 2, 1, 3)  # [B, K, T, Dh]
    if fused:
        out = _fused(rows, kh, vh, mask, block)
    else:
        out = _blocks(rows, kh, vh, mask, block)[0]
    return out.reshape(b, k, t, g, dh).transpose(0, 2, 1, 3, 4).reshape(b, t, n, dh)


def _bounds(t: int, block: int) -> list:
    return [(i, min(i + block, t)) for i in range(0, t, block)]


def _scores(rows: Array, kh: Array, mask: Array, i: int, end: int) -> Array:
    """Masked fp32 scores `[B, K, (end - i) * G, end]` of the block's rows over keys `[0, end)`."""
    b, k, r, _ = rows.shape
    s = jnp.einsum("bkrd,bksd->bkrs", rows, kh[:, :, :end], preferred_element_type=jnp.float32)
    s = s.reshape(b, k, end - i, r // (end - i), end)  # [B, K, q, G, S]: the mask broadcasts over G
    return jnp.where(mask[:, :, i:end, None, :end], s, _MASKED).reshape(b, k, r, end)


def _blocks(rows: Array, kh: Array, vh: Array, mask: Array, block: int) -> tuple:
    """Forward over all blocks: (out rows `[B, K, T*G, Dh]`, fp32 log-sum-exp `[B, K, T*G]`)."""
    g = rows.shape[2] // kh.shape[2]
    outs, lses = [], []
    for i, end in _bounds(kh.shape[2], block):
        s = _scores(rows[:, :, i * g:end * g], kh, mask, i, end)
        m = jax.lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True))
        p = jnp.exp(s - m)
        total = jnp.sum(p, axis=-1, keepdims=True)
        o = jnp.einsum("bkrs,bksd->bkrd", p.astype(vh.dtype), vh[:, :, :end], preferred_element_type=jnp.float32)
        outs.append((o / total).astype(rows.dtype))
        lses.append((m + jnp.log(total))[..., 0])
    return jnp.concatenate(outs, axis=2), jnp.concatenate(lses, axis=2)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _fused(rows, kh, vh, mask, block):
    return _blocks(rows, kh, vh, mask, block)[0]


def _fused_fwd(rows, kh, vh, mask, block):
    out, lse = _blocks(rows, kh, vh, mask, block)
    out, lse = checkpoint_name(out, SAVED_NAMES[0]), checkpoint_name(lse, SAVED_NAMES[1])
    return out, (rows, kh, vh, mask, out, lse)


def _fused_bwd(block, res, dout):
    rows, kh, vh, mask, out, lse = res
    g = rows.shape[2] // kh.shape[2]
    delta = jnp.sum(dout.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)  # rowsum(dO * O)
    drows, dk, dv = [], jnp.zeros(kh.shape, jnp.float32), jnp.zeros(vh.shape, jnp.float32)
    for i, end in _bounds(kh.shape[2], block):
        r = slice(i * g, end * g)
        p = jnp.exp(_scores(rows[:, :, r], kh, mask, i, end) - lse[:, :, r, None])
        do = dout[:, :, r]
        dv = dv.at[:, :, :end].add(jnp.einsum("bkrs,bkrd->bksd", p.astype(do.dtype), do,
                                              preferred_element_type=jnp.float32))
        dp = jnp.einsum("bkrd,bksd->bkrs", do, vh[:, :, :end], preferred_element_type=jnp.float32)
        ds = p * (dp - delta[:, :, r, None])
        drows.append(jnp.einsum("bkrs,bksd->bkrd", ds.astype(kh.dtype), kh[:, :, :end],
                                preferred_element_type=jnp.float32).astype(rows.dtype))
        dk = dk.at[:, :, :end].add(jnp.einsum("bkrs,bkrd->bksd", ds.astype(rows.dtype), rows[:, :, r],
                                              preferred_element_type=jnp.float32))
    return jnp.concatenate(drows, axis=2), dk.astype(kh.dtype), dv.astype(vh.dtype), None


_fused.defvjp(_fused_fwd, _fused_bwd)
