"""Splitting a `[B, T, ...]` array into chunks of positions and joining them back: the layout
of the memory-bounded loops that run `chunk` positions of every row at a time inside a
`lax.map` (the MoE dispatch, the sink attention's query blocks, the chunked cross-entropy)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def split_chunks(x: Array, chunk: int) -> Array:
    """`[B, T, ...]` -> `[C, B, chunk, ...]`, C = ceil(T / chunk), the tail zero-padded."""
    b, t = x.shape[:2]
    n = -(-t // chunk)
    pad = [(0, 0), (0, n * chunk - t)] + [(0, 0)] * (x.ndim - 2)
    return jnp.pad(x, pad).reshape(b, n, chunk, *x.shape[2:]).swapaxes(0, 1)


def join_chunks(x: Array, length: int) -> Array:
    """`[C, B, chunk, ...]` -> `[B, length, ...]` (`split_chunks` undone, the padding cut)."""
    c, b, chunk = x.shape[:3]
    return x.swapaxes(0, 1).reshape(b, c * chunk, *x.shape[3:])[:, :length]
