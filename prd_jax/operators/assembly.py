"""On-device ragged concatenation of token segments (PDR paper §3, "bounded workspace").

A segment is `(tokens [B, L], lengths [B])`, valid tokens first. `assemble` packs a list
of segments into a fixed-capacity, left-padded buffer `[B, C]` with per-row lengths,
which is the sampler's prompt layout. It is fully jittable: position p of the raw
concatenation goes to output slot `C - total[b] + rank[b, p]`, where rank is the
running count of valid tokens. Tokens never round-trip through strings.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import jax
import jax.numpy as jnp

Array = jax.Array
Segment = Tuple[Array, Array]


def literal(tokens: Sequence[int], batch: int) -> Segment:
    """A fixed template piece broadcast to `batch` rows."""
    arr = jnp.asarray(list(tokens) or [0], jnp.int32)
    n = len(tokens)
    return jnp.broadcast_to(arr, (batch, arr.shape[0])), jnp.full((batch,), n, jnp.int32)


def truncate_head_tail(tokens: Array, lengths: Array, max_len: int, head: int) -> tuple:
    """Cap rows at `max_len` tokens, keeping the first `head` and the last `max_len - head`.

    The tail keeps the final answer (`\\boxed{}`) of an over-long candidate. Returns
    `(tokens [B, max_len], lengths, truncated [B] bool)`.
    """
    if not 0 <= head <= max_len:
        raise ValueError(f"head={head}; must lie in [0, max_len={max_len}]")
    j = jnp.arange(max_len)[None, :]
    over = lengths[:, None] > max_len
    src = jnp.where(over & (j >= head), lengths[:, None] - (max_len - j), j)
    src = jnp.clip(src, 0, tokens.shape[1] - 1)
    out = jnp.take_along_axis(tokens, src, axis=1)
    new_len = jnp.minimum(lengths, max_len)
    return out, new_len, lengths > max_len


def assemble(segments: Sequence[Segment], capacity: int, pad_id: int = 0) -> tuple:
    """Concatenate segments row-wise into a left-padded `[B, capacity]` buffer.

    Returns `(tokens, lengths, overflow)`. A row longer than `capacity` keeps its first
    `capacity` tokens and is flagged in `overflow` (callers count it as a truncation).
    """
    toks = jnp.concatenate([s[0] for s in segments], axis=1)  # [B, sum L]
    valid = jnp.concatenate(
        [jnp.arange(s[0].shape[1])[None, :] < s[1][:, None] for s in segments], axis=1)
    rank = jnp.cumsum(valid, axis=1) - 1
    total = jnp.sum(valid, axis=1)
    kept = jnp.minimum(total, capacity)
    slot = capacity - kept[:, None] + rank
    slot = jnp.where(valid & (rank < capacity), slot, capacity)  # invalid -> dropped
    rows = jnp.arange(toks.shape[0])[:, None]
    out = jnp.full((toks.shape[0], capacity), pad_id, jnp.int32)
    out = out.at[rows, slot].set(toks.astype(jnp.int32), mode="drop")
    return out, kept.astype(jnp.int32), total > capacity
