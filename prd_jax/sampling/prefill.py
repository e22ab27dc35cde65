"""Prefill: left-padded prompts into a fresh KV cache, and the sampler's three strategies
(one prefill under a mesh, row chunks on one device, length-sorted row groups over their
own slot windows), the prefill-once fan-out to M samples, and `next_logits` (a prefill whose
cache is dropped)."""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from prd_jax.mesh import batch_size_multiple, named_sharding
from prd_jax.model.config import ModelConfig
from prd_jax.model.decode import CACHE_AXES, KVCache, init_cache
from prd_jax.model.decoder import forward
from prd_jax.sampling.buckets import row_chunks, split_rows
from prd_jax.sampling.settings import SamplingConfig

Array = jax.Array


def repeat_rows(x: Array, m: int, axis: int = 0) -> Array:
    """Each row (along `axis`) repeated `m` times in place: row b becomes rows b*m .. b*m+m-1."""
    return x if m == 1 else jnp.repeat(x, m, axis=axis)


def prefill(cfg: ModelConfig, params, prompts: Array, prompt_lengths: Array, capacity: int,
            *, mesh: Optional[Mesh] = None):
    """Run left-padded prompts `[B, P]` into a fresh cache of `capacity` slots.

    Returns the fp32 next-token logits `[B, V]` after each prompt and the cache.
    """
    rows, plen = prompts.shape
    cache = init_cache(cfg, rows, capacity)
    if mesh is not None:
        cache = jax.lax.with_sharding_constraint(cache, _cache_sharding(cache, mesh))
    start = (plen - prompt_lengths).astype(jnp.int32)
    cache = cache.replace(start=start)
    positions = jnp.maximum(jnp.arange(plen, dtype=jnp.int32)[None, :] - start[:, None], 0)
    logits, cache = forward(cfg, params, prompts, positions, cache,
                            logits_index=jnp.full((rows,), plen - 1), mesh=mesh, prefill=True)
    return logits[:, 0], cache


PREFILL_ROWS = 32  # rows per prefill chunk on one device (`chunked_prefill`)


def chunked_prefill(cfg: ModelConfig, params, prompts: Array, prompt_lengths: Array, capacity: int,
                    rows_per_chunk: int = PREFILL_ROWS):
    """`prefill` of contiguous row chunks of `rows_per_chunk` rows, one after another (a
    `lax.map`), merged into one cache; one prefill when the rows do not split evenly.

    Each row's logits and cache equal `prefill`'s to fp32 rounding (other matmul shapes;
    tested). Why chunks: docs/results/2026-12-01-rollout-throughput.md.
    """
    rows, plen = prompts.shape
    chunks = rows // rows_per_chunk
    if chunks <= 1 or rows % rows_per_chunk:
        return prefill(cfg, params, prompts, prompt_lengths, capacity)
    logits, cache = jax.lax.map(lambda xs: prefill(cfg, params, xs[0], xs[1], capacity),
                                (prompts.reshape(chunks, rows_per_chunk, plen),
                                 prompt_lengths.reshape(chunks, rows_per_chunk)))
    merge = lambda x: x.swapaxes(0, 1).reshape(x.shape[1], rows, *x.shape[3:])  # noqa: E731  [C, L, b, ...]
    return (logits.reshape(rows, -1),
            KVCache(merge(cache.k), merge(cache.v), (plen - prompt_lengths).astype(jnp.int32),
                    jnp.asarray(plen, jnp.int32)))


def prefill_windows(plen: int) -> tuple:
    """Slot windows a row group's prefill can take in a `plen`-slot prompt bucket: a quarter,
    a half, three quarters and all of it, rounded up to multiples of 8."""
    ceil = lambda a, b: -(-a // b)  # noqa: E731
    return tuple(sorted({min(plen, 8 * ceil(ceil(plen * q, 4), 8)) for q in (1, 2, 3, 4)}))


def grouped_prefill(cfg: ModelConfig, params, prompts: Array, prompt_lengths: Array, capacity: int,
                    groups: int):
    """`prefill`, with the rows sorted by prompt length and cut into `groups` groups, each
    prefilled over only the last `w` slots of the bucket, `w` the smallest of
    `prefill_windows(P)` that holds the group's longest prompt (a `lax.switch` inside a
    `lax.map` over the groups: one compiled prefill per window).

    Left padding makes the skipped slots padding for every row of the group, so the cache
    is the same at every slot a row attends (`>= start`); the skipped slots stay zero and
    are masked. Logits and cache equal `prefill`'s to fp32 rounding (other matmul shapes;
    tested). Outputs are in the input row order. Timings: docs/results/2026-12-01-rollout-throughput.md.
    """
    rows, plen = prompts.shape
    widths = prefill_windows(plen)
    if groups <= 1 or rows % groups or len(widths) == 1:
        return prefill(cfg, params, prompts, prompt_lengths, capacity)
    order = jnp.argsort(prompt_lengths, stable=True)
    per = rows // groups
    grouped = lambda x: jnp.take(x, order, axis=0).reshape(groups, per, *x.shape[1:])  # noqa: E731
    lengths = grouped(prompt_lengths)
    window = jnp.minimum(jnp.searchsorted(jnp.asarray(widths), jnp.max(lengths, axis=1)), len(widths) - 1)

    def over(w):
        def run(p, n):
            logits, cache = prefill(cfg, params, p[:, plen - w:], n, capacity - (plen - w))
            slots = ((0, 0), (0, 0), (plen - w, 0), (0, 0), (0, 0))
            return logits, jnp.pad(cache.k, slots), jnp.pad(cache.v, slots)
        return run

    branches = [over(w) for w in widths]
    logits, k, v = jax.lax.map(lambda xs: jax.lax.switch(xs[0], branches, xs[1], xs[2]),
                               (window, grouped(prompts), lengths))
    back = jnp.argsort(order)
    merge = lambda x: jnp.take(x.swapaxes(0, 1).reshape(x.shape[1], rows, *x.shape[3:]), back, axis=1)  # noqa: E731
    cache = KVCache(merge(k), merge(v), (plen - prompt_lengths).astype(jnp.int32), jnp.asarray(plen, jnp.int32))
    return jnp.take(logits.reshape(rows, -1), back, axis=0), cache


def next_logits(cfg: ModelConfig, params, prompts: Array, prompt_lengths: Array, *, max_rows: int = 0,
                mesh: Optional[Mesh] = None) -> Array:
    """fp32 next-token logits `[B, V]` after left-padded prompts `[B, P]` (a prefill whose cache
    is dropped), run as sequential row chunks of at most `max_rows` rows like `generate`, so
    a judge's rating read over thousands of rows holds one chunk's cache at a time."""
    multiple = 1 if mesh is None else batch_size_multiple(mesh)
    batch, plen = prompts.shape
    chunks = row_chunks(batch, 1, max_rows, multiple)
    one = lambda xs: prefill(cfg, params, *xs, plen, mesh=mesh)[0]
    if chunks == 1:
        return one((prompts, prompt_lengths))
    out = jax.lax.map(one, (split_rows(prompts, chunks), split_rows(prompt_lengths, chunks)))
    return out.swapaxes(0, 1).reshape(batch, -1)


def sampler_prefill(cfg: ModelConfig, params, prompts: Array, prompt_lengths: Array, capacity: int,
                    scfg: SamplingConfig, mesh: Optional[Mesh]):
    """The sampler's prefill: grouped (`prefill_groups`), row-chunked, or one under a mesh."""
    if scfg.prefill_groups > 1 and mesh is None:
        return grouped_prefill(cfg, params, prompts, prompt_lengths, capacity, scfg.prefill_groups)
    if mesh is None:
        return chunked_prefill(cfg, params, prompts, prompt_lengths, capacity)
    return prefill(cfg, params, prompts, prompt_lengths, capacity, mesh=mesh)  # rows already split over devices


def fan_out(logits: Array, cache: KVCache, m: int):
    """Prefill-once fan-out: the logits and cache of B prompts as B*M rows (prompt-major, the
    PDR drafts' shared prefill)."""
    if m == 1:
        return logits, cache
    return repeat_rows(logits, m), KVCache(repeat_rows(cache.k, m, 1), repeat_rows(cache.v, m, 1),
                                           repeat_rows(cache.start, m), cache.index)


def _cache_sharding(cache: KVCache, mesh: Mesh) -> KVCache:
    kv = named_sharding(CACHE_AXES, mesh, cache.k.shape)
    return KVCache(kv, kv, named_sharding(("batch",), mesh, cache.start.shape),
                   NamedSharding(mesh, P()))
