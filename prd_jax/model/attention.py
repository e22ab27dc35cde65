"""Every attention core of the model: pure functions of queries, keys/values and a mask.
The callers write the caches and choose the core (`decoder._stacked_attention` on the stacked
forward, the `attend` of `decode.decode_step_groups` on the decode step):

- `causal_block_attention`: training and scoring (no cache), in groups of query blocks, with
  a written-out backward;
- `prefill_attention`: a left-padded prompt over its own keys, in query blocks;
- `cache_attention`: the decode step's one query per row over its decode cache (one form
  for XLA:CPU, one for TPU and GPU: `decode_form`);
- `sink_attention`: heads with a learned sink logit (GPT-OSS), on every stacked-forward call.

Training attention (`causal_block_attention`). Queries of one kv head are laid out as rows
`[B, K, T * G, Dh]` (position-major, then the G query heads that share the kv head), so a
block of positions is one contiguous slab of `block * G` rows and every score matmul is a
plain `[rows, Dh] x [Dh, keys]` product per (row, kv head) pair.

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

Sinks (`sink_attention`, `cache_attention(sinks=...)`). Each head h has a scalar `sink_h` that
joins the softmax denominator as one extra key with no value (OpenAI, "gpt-oss-120b &
gpt-oss-20b Model Card", 2025, Sec. 2.1):

    p_j = exp(s_j) / (exp(sink_h) + sum_i exp(s_i)),    out = sum_j p_j v_j

so a head can put weight on "nothing" and the weights of the real keys sum to less than 1.

Queries are independent rows of this softmax, so a long call (prefill, training) runs in
blocks of `block` queries (`SINK_QUERY_BLOCK`; a `lax.map` whose blocks are rematerialised):
the fp32 scores then take `[B, K, G, block, S]` at a time instead of `[B, K, G, T, S]`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Optional

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from prd_jax.model.chunks import join_chunks, split_chunks

Array = jax.Array
TRAIN_QUERY_BLOCK = 128  # positions per query block
MAX_BLOCK_GROUPS = 16  # groups of query blocks; a group of several blocks is one lax.scan
PREFILL_QUERY_BLOCK = 1024  # queries per block of a prefill
SINK_QUERY_BLOCK = 512  # queries per block of a long sink-attention call (ours)
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


def prefill_attention(q: Array, key: Array, val: Array, start: Array, scale: float,
                      block: int = PREFILL_QUERY_BLOCK) -> Array:
    """Causal attention of a left-padded prompt over its own keys, in query blocks.

    q `[B, T, N, Dh]`, key/val `[B, T, K, Dh]`, `start [B]`: row b's first real token. Query t
    sees keys `start[b] <= j <= t`. Scores are `[B, N, block, T]` per block (a `lax.map`), so
    prefill memory grows with T * block, not T * T, nor with the generation slots.
    """
    t = q.shape[1]
    keys = jnp.arange(t)[None, None, :]

    def one(q_blk, first):
        q_idx = first + jnp.arange(q_blk.shape[1])[None, :, None]
        mask = (keys <= q_idx) & (keys >= start[:, None, None])  # [B, block, T]
        return jax.nn.dot_product_attention(q_blk, key, val, mask=mask[:, None], scale=scale)

    if t <= block:
        return one(q, 0)
    b, _, n, dh = q.shape
    nb = -(-t // block)  # the last block is padded with queries past the prompt (sliced off)
    q = jnp.pad(q, ((0, 0), (0, nb * block - t), (0, 0), (0, 0)))
    blocks = q.reshape(b, nb, block, n, dh).swapaxes(0, 1)  # [T/block, B, block, N, Dh]
    out = jax.lax.map(lambda xs: one(*xs), (blocks, jnp.arange(0, nb * block, block)))
    return out.swapaxes(0, 1).reshape(b, nb * block, n, dh)[:, :t]


def sink_attention(q: Array, key: Array, val: Array, mask: Array, sinks: Array, scale: float,
                   block: Optional[int] = None) -> Array:
    """q `[B, T, N, Dh]` over key/val `[B, S, K, Dh]` under `mask [B, 1, T, S]` (bool), with
    `sinks [N]`; scores in fp32, `block` (None: `SINK_QUERY_BLOCK`) queries at a time when
    T > `block` (0: all at once). A query with no visible key returns zeros (all weight on the sink)."""
    block = SINK_QUERY_BLOCK if block is None else block
    t = q.shape[1]
    if not block or t <= block:
        return _dense_sink_attention(q, key, val, mask, sinks, scale)
    qs = split_chunks(q, block)  # [n, B, block, N, Dh]
    ms = split_chunks(mask[:, 0], block)[:, :, None]  # [n, B, 1, block, S]

    @jax.checkpoint  # the backward recomputes a block's scores from its queries
    def one(args):
        qb, mb = args
        return _dense_sink_attention(qb, key, val, mb, sinks, scale)

    return join_chunks(jax.lax.map(one, (qs, ms)), t)


def _dense_sink_attention(q: Array, key: Array, val: Array, mask: Array, sinks: Array, scale: float) -> Array:
    """`sink_attention` in one piece: scores `[B, K, G, T, S]` (G = N / K query heads per kv head)."""
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


DECODE_FORMS = ("products", "dots")
_TARGET_PLATFORM = contextvars.ContextVar("decode_target_platform", default=None)


@contextlib.contextmanager
def compiling_for(platform: str):
    """Within: `decode_form` answers for `platform` ("cpu", "gpu", "tpu"), whatever devices the
    programs are lowered on (`prd-jax compile` lowers a GPU target's programs on simulated CPU
    devices)."""
    token = _TARGET_PLATFORM.set(platform)
    try:
        yield
    finally:
        _TARGET_PLATFORM.reset(token)


def decode_form(mesh) -> str:
    """The `cache_attention` form for where the decode step runs: "products" on XLA:CPU,
    "dots" on TPU and GPU (the `compiling_for` platform, else the devices of `mesh`, else
    JAX's default backend)."""
    platform = _TARGET_PLATFORM.get() or (mesh.devices.flat[0].platform if mesh is not None
                                          else jax.default_backend())
    return "products" if platform == "cpu" else "dots"


def cache_attention(q: Array, cache_k: Array, cache_v: Array, mask: Array, scale: float,
                    sinks: Optional[Array] = None, form: str = "products") -> Array:
    """One query token per row over its cache (the decode step's attention), in fp32.

    q `[B, K, G, Dh]` (G query heads per kv head), keys `[B, K, Dh, S]`, values `[B, K, S, Dh]`
    (`decode.decode_cache` layout), `mask [B, S]` -> `[B, K, G, Dh]`.
    `sinks [K*G]`: each head's sink logit joins the softmax denominator (`sink_attention`).

    `form` (`decode_form` picks it):
    - "products": broadcast products reduced over Dh and then over S rather than batched dots.
      With G = 3 query rows per kv head the dots are B * K tiny matmuls, while XLA:CPU fuses
      the multiply-reduce into one streaming pass over the cache (`benchmarks/decode_floor.py`;
      figures in docs/results/2026-12-01-decode-profile.md).
    - "dots": two batched dots in the queries' dtype (a narrower cache, `kv_cache_dtype`, is
      widened as it is read) with fp32 accumulation, the values weighted by unnormalised
      probabilities in that dtype and divided by their fp32 sum afterwards, as
      `causal_block_attention` does. On TPU the products form materialises fp32 copies of the
      cache (the compiled step reads several times the cache's bytes); the dots read it once
      (docs/results/2026-12-05-rollout-estimate-2.md).
    """
    if form not in DECODE_FORMS:
        raise ValueError(f"cache_attention form={form!r}; allowed: {DECODE_FORMS}")
    f32 = jnp.float32
    if form == "dots":
        scores = jnp.einsum("bkgd,bkds->bkgs", q, cache_k.astype(q.dtype), preferred_element_type=f32) * scale
    else:
        scores = (q.astype(f32)[..., None] * cache_k.astype(f32)[:, :, None]).sum(axis=3) * scale  # [B, K, G, S]
    scores = jnp.where(mask[:, None, None, :], scores, jnp.finfo(f32).min)
    sink = None
    if sinks is not None:
        sink = jnp.broadcast_to(sinks.astype(f32).reshape(1, *scores.shape[1:3], 1), (*scores.shape[:3], 1))
    if form == "dots":
        top = jnp.max(scores, axis=-1, keepdims=True)
        if sink is not None:
            top = jnp.maximum(top, sink)
        p = jnp.exp(scores - top)
        total = p.sum(axis=-1, keepdims=True) + (0.0 if sink is None else jnp.exp(sink - top))
        out = jnp.einsum("bkgs,bksd->bkgd", p.astype(q.dtype), cache_v.astype(q.dtype), preferred_element_type=f32)
        return out / total
    if sink is not None:
        probs = jax.nn.softmax(jnp.concatenate([scores, sink], axis=-1), axis=-1)[..., :-1]
    else:
        probs = jax.nn.softmax(scores, axis=-1)
    return (probs[..., None] * cache_v.astype(f32)[:, :, None]).sum(axis=3)
