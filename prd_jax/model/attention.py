"""Causal self-attention for training and scoring (no cache), in query blocks.

Queries of one kv head are laid out as rows `[B, K, T * G, Dh]` (position-major, then the
G query heads that share the kv head), so a block of positions is one contiguous slab of
`block * G` rows and every score matmul is a plain `[rows, Dh] x [Dh, keys]` product per
(row, kv head) pair.

The program's size does not grow with T: the query blocks are split into at most
`MAX_BLOCK_GROUPS` contiguous groups (plus a short last block when T is not a multiple of
`block`), and a group of several blocks runs as one `lax.scan` over its blocks. Every block
of a group reads the keys `[0, group end)`; keys after a query are masked anyway by
causality, so the result is the same as reading `[0, block end)`, at about
`(C + 1) / (2 C)` of a dense call's score work for C groups (`(nb + 1) / (2 nb)` when each
of the nb blocks is its own group, as for T <= MAX_BLOCK_GROUPS * block).

The backward is written out (`jax.custom_vjp`, as FlashAttention's): the forward keeps each
row's output and log-sum-exp (`checkpoint_name` "attn_out" / "attn_lse", which the
"dots" / "dots_no_batch" / "none" remat policies keep), and the backward recomputes the
probabilities from them, `dS = P * (dP - rowsum(dO * O))`. Under full remat (nothing kept)
that custom backward would rerun the forward, so there the same blocks run under
autodiff (`fused=False`), each scanned block under `jax.checkpoint` so that its
probabilities are recomputed in the backward rather than stacked for all blocks. Timings
against the forms it replaced: docs/results/2026-12-01-train-step-mfu.md and
docs/results/2026-12-03-aot-fit-2.md.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

Array = jax.Array
TRAIN_QUERY_BLOCK = 128  # positions per query block
MAX_BLOCK_GROUPS = 16  # groups of query blocks; a group of several blocks is one lax.scan
SAVED_NAMES = ("attn_out", "attn_lse")  # kept by the non-full remat policies
_MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)  # as jax.nn.dot_product_attention's


def causal_block_attention(q: Array, key: Array, val: Array, mask: Array, scale: float,
                           block: int = TRAIN_QUERY_BLOCK, fused: bool = True,
                           max_groups: int = MAX_BLOCK_GROUPS) -> Array:
    """Attention of q `[B, T, N, Dh]` over key/val `[B, T, K, Dh]` under `mask [B, 1, T, T]`
    (causal, and block-diagonal for packed rows), in query blocks of `block` positions.

    Equals one dense `jax.nn.dot_product_attention` call, values and gradients (a masked
    key's weight is exactly 0; a query with no visible key averages the keys up to its
    group's end). `fused`: the written-out backward (module docstring); False
    differentiates the blocks. `max_groups`: the most groups of whole blocks (`block_groups`).
    """
    if block < 1 or max_groups < 1:
        raise ValueError(f"causal_block_attention: block ({block}) and max_groups ({max_groups}) "
                         "must be >= 1")
    b, t, n, dh = q.shape
    k = key.shape[2]
    g = n // k
    rows = (q * jnp.asarray(scale, q.dtype)).reshape(b, t, k, g, dh).transpose(0, 2, 1, 3, 4).reshape(b, k, t * g, dh)
    kh, vh = key.transpose(0, 2, 1, 3), val.transpose(0, 2, 1, 3)  # [B, K, T, Dh]
    if fused:
        out = _fused(rows, kh, vh, mask, block, max_groups)
    else:
        out = _blocks(rows, kh, vh, mask, block, max_groups, remat_scanned=True)[0]
    return out.reshape(b, k, t, g, dh).transpose(0, 2, 1, 3, 4).reshape(b, t, n, dh)


def block_groups(t: int, block: int, max_groups: int = MAX_BLOCK_GROUPS) -> list:
    """Groups `(start, num_blocks, key_end)` of query positions: `num_blocks` blocks of
    `block` positions from `start` (the last group may be one short block), each reading the
    keys `[0, key_end)`. At most `max_groups` groups of whole blocks, plus the short one."""
    full, rest = divmod(t, block)
    n_groups = min(full, max_groups)
    groups = []
    for c in range(n_groups):
        first, last = c * full // n_groups, (c + 1) * full // n_groups
        groups.append((first * block, last - first, last * block))
    if rest:
        groups.append((full * block, 1, t))
    return groups


def _split(x: Array, start: int, n: int, size: int) -> Array:
    """Rows `[B, K, R, ...]` from `start` -> `[n, B, K, size, ...]`: one slab per block."""
    b, k = x.shape[:2]
    x = x[:, :, start:start + n * size].reshape(b, k, n, size, *x.shape[3:])
    return jnp.moveaxis(x, 2, 0)


def _merge(x: Array) -> Array:
    """`[n, B, K, size, ...]` -> `[B, K, n * size, ...]` (the inverse of `_split`)."""
    n, b, k, size = x.shape[:4]
    return jnp.moveaxis(x, 0, 2).reshape(b, k, n * size, *x.shape[4:])


def _scores(rows: Array, kh: Array, mask: Array) -> Array:
    """Masked fp32 scores `[B, K, q*G, S]` of a block's rows `[B, K, q*G, Dh]` over keys
    `kh [B, K, S, Dh]` under the block's mask `[B, 1, q, S]` (broadcast over the G heads)."""
    b, k, r, _ = rows.shape
    q, s_len = mask.shape[2], kh.shape[2]
    s = jnp.einsum("bkrd,bksd->bkrs", rows, kh, preferred_element_type=jnp.float32)
    s = s.reshape(b, k, q, r // q, s_len)  # [B, K, q, G, S]
    return jnp.where(mask[:, :, :, None, :], s, _MASKED).reshape(b, k, r, s_len)


def _block_fwd(rows: Array, kh: Array, vh: Array, mask: Array) -> tuple:
    """One block: (out rows `[B, K, q*G, Dh]`, fp32 log-sum-exp `[B, K, q*G]`)."""
    s = _scores(rows, kh, mask)
    m = jax.lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True))
    p = jnp.exp(s - m)
    total = jnp.sum(p, axis=-1, keepdims=True)
    o = jnp.einsum("bkrs,bksd->bkrd", p.astype(vh.dtype), vh, preferred_element_type=jnp.float32)
    return (o / total).astype(rows.dtype), (m + jnp.log(total))[..., 0]


def _block_bwd(rows, kh, vh, mask, dout, lse, delta) -> tuple:
    """One block's backward from its saved log-sum-exp: (d rows, fp32 dK, fp32 dV over its keys)."""
    p = jnp.exp(_scores(rows, kh, mask) - lse[..., None])
    dv = jnp.einsum("bkrs,bkrd->bksd", p.astype(dout.dtype), dout, preferred_element_type=jnp.float32)
    dp = jnp.einsum("bkrd,bksd->bkrs", dout, vh, preferred_element_type=jnp.float32)
    ds = p * (dp - delta[..., None])
    drows = jnp.einsum("bkrs,bksd->bkrd", ds.astype(kh.dtype), kh, preferred_element_type=jnp.float32)
    dk = jnp.einsum("bkrs,bkrd->bksd", ds.astype(rows.dtype), rows, preferred_element_type=jnp.float32)
    return drows.astype(rows.dtype), dk, dv


def _blocks(rows: Array, kh: Array, vh: Array, mask: Array, block: int, max_groups: int,
            remat_scanned: bool = False) -> tuple:
    """Forward over all groups: (out rows `[B, K, T*G, Dh]`, fp32 log-sum-exp `[B, K, T*G]`).
    `remat_scanned`: a scanned block recomputes its probabilities when differentiated."""
    g = rows.shape[2] // kh.shape[2]
    outs, lses = [], []
    for start, n, end in block_groups(kh.shape[2], block, max_groups):
        ke, ve, me = kh[:, :, :end], vh[:, :, :end], mask[:, :, :, :end]
        if n == 1:
            o, lse = _block_fwd(rows[:, :, start * g:end * g], ke, ve, me[:, :, start:end])
        else:
            def body(carry, xs, ke=ke, ve=ve, me=me, start=start):
                r, j = xs
                mb = jax.lax.dynamic_slice_in_dim(me, start + j * block, block, axis=2)
                return carry, _block_fwd(r, ke, ve, mb)

            if remat_scanned:
                body = jax.checkpoint(body, prevent_cse=False)
            _, (o, lse) = jax.lax.scan(body, None, (_split(rows, start * g, n, block * g), jnp.arange(n)))
            o, lse = _merge(o), _merge(lse)
        outs.append(o)
        lses.append(lse)
    return jnp.concatenate(outs, axis=2), jnp.concatenate(lses, axis=2)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _fused(rows, kh, vh, mask, block, max_groups):
    return _blocks(rows, kh, vh, mask, block, max_groups)[0]


def _fused_fwd(rows, kh, vh, mask, block, max_groups):
    out, lse = _blocks(rows, kh, vh, mask, block, max_groups)
    out, lse = checkpoint_name(out, SAVED_NAMES[0]), checkpoint_name(lse, SAVED_NAMES[1])
    return out, (rows, kh, vh, mask, out, lse)


def _fused_bwd(block, max_groups, res, dout):
    rows, kh, vh, mask, out, lse = res
    g = rows.shape[2] // kh.shape[2]
    delta = jnp.sum(dout.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)  # rowsum(dO * O)
    drows, dk, dv = [], jnp.zeros(kh.shape, jnp.float32), jnp.zeros(vh.shape, jnp.float32)
    for start, n, end in block_groups(kh.shape[2], block, max_groups):
        ke, ve, me = kh[:, :, :end], vh[:, :, :end], mask[:, :, :, :end]
        if n == 1:
            r = slice(start * g, end * g)
            dr, dke, dve = _block_bwd(rows[:, :, r], ke, ve, me[:, :, start:end], dout[:, :, r], lse[:, :, r],
                                      delta[:, :, r])
        else:
            def body(carry, xs, ke=ke, ve=ve, me=me, start=start):
                r, do, lse_b, delta_b, j = xs
                mb = jax.lax.dynamic_slice_in_dim(me, start + j * block, block, axis=2)
                dr, dke, dve = _block_bwd(r, ke, ve, mb, do, lse_b, delta_b)
                return (carry[0] + dke, carry[1] + dve), dr

            zeros = jnp.zeros(ke.shape, jnp.float32)
            xs = tuple(_split(x, start * g, n, block * g) for x in (rows, dout, lse, delta)) + (jnp.arange(n),)
            (dke, dve), dr = jax.lax.scan(body, (zeros, zeros), xs)
            dr = _merge(dr)
        drows.append(dr)
        dk, dv = dk.at[:, :, :end].add(dke), dv.at[:, :, :end].add(dve)
    return jnp.concatenate(drows, axis=2), dk.astype(kh.dtype), dv.astype(vh.dtype), None


_fused.defvjp(_fused_fwd, _fused_bwd)
