"""The in-graph sampler: prefill once, fan out to M samples, decode in `lax.while_loop`.

`generate(...)` is the pure, jitted core over padded arrays. Randomness: each prompt has its
own key; sample m of prompt b uses `split(key_b, M)[m]` (`sample_keys`), and step t folds t
into it. A row's tokens therefore depend only on its own prompt and key, never on the rest
of the batch.

Decode (`SamplingConfig.decode_layers`): "unrolled" (default) runs the loop body over
per-layer weights sliced once per call, with fused q/k/v and gate/up matmuls and per-layer
caches updated in place (`model.decode.decode_step`); "scan" is the stacked `nn.scan` forward,
which dynamic-slices every layer's weights and cache on every step (kept for comparison).
With `compact_min_rows`, the decode batch shrinks (by `compact_ratio`, half by default)
whenever few enough rows are live (`compact_rows`): same tokens per row. With
`cache_window`, the first decode phase's cache starts at the prompt plus `cache_window`
slots and grows by as many when full.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from prd_jax.mesh import batch_size_multiple, named_sharding
from prd_jax.model.config import ModelConfig
from prd_jax.model.decode import (DECODE_CACHE_AXES, decode_cache, decode_step_groups, decode_weights,
                                  grow_decode_cache, ring_windows)
from prd_jax.model.decoder import forward
from prd_jax.sampling.buckets import cache_windows, compaction_sizes, row_chunks, split_rows
from prd_jax.sampling.choose import chosen_logprob, choose_tokens, force_think_end
from prd_jax.sampling.prefill import fan_out, repeat_rows, sampler_prefill
from prd_jax.sampling.settings import SampleOutput, SamplingConfig

Array = jax.Array


def sample_keys(prompt_keys: Array, num_samples: int) -> Array:
    """Per-row keys `[B*M]`: row (b, m) gets `split(prompt_keys[b], M)[m]`."""
    return jax.vmap(lambda k: jax.random.split(k, num_samples))(prompt_keys).reshape(-1)


def generate(cfg: ModelConfig, params, prompts: Array, prompt_lengths: Array, prompt_keys: Array,
             max_new: Array, scfg: SamplingConfig, *, gen_len: int, pad_id: int = 0,
             fanout: bool = True, mesh: Optional[Mesh] = None, widths: tuple = ()) -> SampleOutput:
    """Pure sampler over padded arrays (jit with `cfg`, `scfg`, `gen_len`, `fanout`, `mesh`, `widths` static).

    prompts `[B, P]` left-padded (row b's tokens fill the last `prompt_lengths[b]` slots); `prompt_keys [B]`; `max_new`
    a traced scalar <= gen_len. With `fanout`, the prompt batch is prefilled once and its
    KV cache and last logits are repeated M times (the PDR drafts' prefill-once fan-out);
    without it, prompts are repeated first (M prefills, same result; for tests/benchmarks).

    Memory bound: with `scfg.max_rows`, the prompts run as C sequential chunks (a `lax.map`;
    `row_chunks`) of at most `max_rows` decode rows, so only one chunk's KV cache is live.
    Chunk c holds prompts c, c + C, c + 2C, ...: with the batch sharded in contiguous blocks
    this is a local re-layout, no communication. Each row keeps its own key, so the tokens
    equal one unchunked call's (tested).

    Prompt groups (static `widths`, ascending, the last the bucket's `P`; `prompt_widths`
    picks them): the prompts are cut into `len(widths)` contiguous equal blocks, block g's
    prompts no longer than `widths[g]`; each block is prefilled and decoded over its own
    width (`_decode_unrolled`). Unrolled decode, one device and one row chunk only.
    """
    multiple = 1 if mesh is None else batch_size_multiple(mesh)
    chunks = row_chunks(prompts.shape[0], scfg.num_samples, scfg.max_rows, multiple)
    if len(widths) > 1 and (chunks > 1 or mesh is not None or scfg.decode_layers != "unrolled"
                            or prompts.shape[0] % len(widths) or widths[-1] != prompts.shape[1]):
        raise ValueError(f"widths={widths}: prompt groups need one device, one row chunk, unrolled decode, "
                         f"a batch ({prompts.shape[0]}) they divide and the last width = the prompt bucket "
                         f"({prompts.shape[1]})")
    if chunks == 1:
        return _generate_rows(cfg, params, prompts, prompt_lengths, prompt_keys, max_new, scfg,
                              gen_len=gen_len, pad_id=pad_id, fanout=fanout, mesh=mesh, widths=widths)
    batch = prompts.shape[0]
    split = lambda x: split_rows(x, chunks)
    one = lambda xs: _generate_rows(cfg, params, *xs, max_new, scfg, gen_len=gen_len, pad_id=pad_id,
                                    fanout=fanout, mesh=mesh)
    out = jax.lax.map(one, (split(prompts), split(prompt_lengths), split(prompt_keys)))
    m = scfg.num_samples

    def merge(x):  # [C, B/C * M, ...] -> [B * M, ...] in prompt-major order (b * M + m)
        x = x.reshape(chunks, batch // chunks, m, *x.shape[2:]).swapaxes(0, 1)
        return x.reshape(batch * m, *x.shape[3:])

    return jax.tree.map(merge, out)


def _generate_rows(cfg: ModelConfig, params, prompts: Array, prompt_lengths: Array, prompt_keys: Array,
                   max_new: Array, scfg: SamplingConfig, *, gen_len: int, pad_id: int,
                   fanout: bool, mesh: Optional[Mesh], widths: tuple = ()) -> SampleOutput:
    m = scfg.num_samples
    batch, plen = prompts.shape
    if not fanout:
        prompts, prompt_lengths = repeat_rows(prompts, m), repeat_rows(prompt_lengths, m)
    unrolled = scfg.decode_layers == "unrolled"
    rows = batch * m
    row_keys = sample_keys(prompt_keys, m)
    stop_ids = jnp.asarray(scfg.stop_ids or (-1,), jnp.int32)
    if unrolled:
        # prompt groups (`prompt_widths`): contiguous equal row blocks, block g left-padded to widths[g]
        widths = widths or (plen,)
        per = prompts.shape[0] // len(widths)
        gens = cache_windows(gen_len, scfg.cache_window)
        logits, groups = [], []
        for g, w in enumerate(widths):
            part = slice(g * per, (g + 1) * per)
            lg, cache = sampler_prefill(cfg, params, prompts[part, plen - w:], prompt_lengths[part], w, scfg, mesh)
            if fanout:
                lg, cache = fan_out(lg, cache, m)
            logits.append(lg)  # `decode_cache` adds the generation slots to the prompt-sized cache
            groups.append((decode_cache(cache, mesh, slots=w + gens[0], windows=ring_windows(cfg),
                                        dtype=scfg.kv_cache_dtype or None), cache.start))
        weights = decode_weights(cfg, params, mesh)  # sliced (and fused) once, outside the loop
        multiple = 1 if mesh is None else batch_size_multiple(mesh)
        return _decode_unrolled(cfg, weights, tuple(c for c, _ in groups), jnp.concatenate([s for _, s in groups]),
                                widths, jnp.concatenate(logits), row_keys, max_new, scfg, gen_len=gen_len,
                                pad_id=pad_id, stop_ids=stop_ids,
                                sizes=compaction_sizes(rows, scfg.compact_min_rows, max(multiple, len(widths)),
                                                       scfg.compact_ratio),
                                gens=gens, mesh=mesh)
    logits, cache = sampler_prefill(cfg, params, prompts, prompt_lengths, plen + gen_len, scfg, mesh)
    if fanout:
        logits, cache = fan_out(logits, cache, m)

    def cond(state):
        step, _, _, _, _, _, finished, _ = state
        return (step < max_new) & ~jnp.all(finished)

    def body(state):
        step, cache, logits, tokens, logprobs, lengths, finished, think = state
        keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(row_keys, step)
        tok = choose_tokens(logits, keys, scfg)
        lp = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), tok[:, None], axis=-1)[:, 0]
        tok, lp, think = force_think_end(tok, lp, think, step, scfg)
        tok = jnp.where(finished, pad_id, tok)
        lp = jnp.where(finished, 0.0, lp)
        tokens = jax.lax.dynamic_update_index_in_dim(tokens, tok, step, 1)
        logprobs = jax.lax.dynamic_update_index_in_dim(logprobs, lp, step, 1)
        lengths = lengths + (~finished).astype(jnp.int32)
        finished = finished | jnp.isin(tok, stop_ids)
        positions = (cache.index - cache.start)[:, None]
        logits, cache = forward(cfg, params, tok[:, None], positions, cache, mesh=mesh)
        return step + 1, cache, logits[:, 0], tokens, logprobs, lengths, finished, think

    state = (jnp.int32(0), cache, logits,
             jnp.full((rows, gen_len), pad_id, jnp.int32), jnp.zeros((rows, gen_len), jnp.float32),
             jnp.zeros((rows,), jnp.int32), jnp.zeros((rows,), bool), jnp.zeros((rows,), jnp.int32))
    _, _, _, tokens, logprobs, lengths, finished, _ = jax.lax.while_loop(cond, body, state)
    return SampleOutput(tokens, logprobs, lengths, finished)


def _decode_unrolled(cfg: ModelConfig, weights, groups: tuple, start: Array, widths: tuple, logits: Array,
                     row_keys: Array, max_new: Array, scfg: SamplingConfig, *, gen_len: int, pad_id: int,
                     stop_ids: Array, sizes: tuple, gens: tuple, mesh: Optional[Mesh]) -> SampleOutput:
    """The decode loop over per-layer weights and caches (`decode_step`), in compaction phases.

    Phase p decodes `sizes[p]` rows in its own `lax.while_loop`. A non-final phase ends when
    at most `sizes[p + 1]` of its rows are live; the live rows (and, to fill the batch,
    finished ones) are then gathered into the next phase's batch with their caches, keys,
    logits and original row ids, so later steps cost what the live rows need. Every row
    keeps its key, position and cache, and step t folds t into its key in every phase, so
    each row's tokens equal the static loop's (`sizes == (rows,)`; tested in
    tests/test_rollout_batching.py).

    Prompt groups: `groups` holds one set of per-layer caches per contiguous, equal block of
    rows, block g's prompts left-padded to `widths[g]` slots (`SamplingConfig.prompt_groups`;
    one group of the bucket's width otherwise). Group g writes slot `widths[g] + t` at step t
    and attends over its own slots only (`decode.decode_step_groups`); compaction keeps each
    group's rows in its block, as it keeps a shard's.

    With `gens` longer than one (`SamplingConfig.cache_window`), the first phase runs as
    one loop per cache size: it starts with `gens[0]` generation slots and, whenever the write
    reaches them, pads every layer's cache with zero slots to the next size, so a step
    reads the slots written so far instead of all `plen + gen_len` (where a rollout step's
    time goes: docs/results/2026-12-01-rollout-throughput.md). The
    later phases start at the full size: a loop's cache shape is static, and a compaction can
    come at any step. Masked zero slots change no logit, so the tokens stay the static
    loop's (tested). Only the first phase grows: the cost is `len(gens)` more compiled
    loop bodies, and at the step of a growth both cache sizes are live.

    Under a mesh the rows are cut into the batch axes' S shards and compaction is shard-local
    (`compact_rows`): a phase ends when every shard holds at most its share of the next size
    live, and each shard keeps its own rows, so the gather moves no cache between devices.
    (A global gather of batch-sharded rows made XLA replicate the cache; docs/results/2026-11-30-aot-fit.md.)
    """
    rows = logits.shape[0]
    shards = max(1 if mesh is None else batch_size_multiple(mesh), len(groups))
    tokens = jnp.full((rows, gen_len), pad_id, jnp.int32)
    logprobs = jnp.zeros((rows, gen_len), jnp.float32)
    lengths_all, finished_all = jnp.zeros((rows,), jnp.int32), jnp.zeros((rows,), bool)
    live = dict(ids=jnp.arange(rows, dtype=jnp.int32), keys=row_keys, start=start, logits=logits,
                caches=groups, lengths=lengths_all, finished=finished_all, think=jnp.zeros((rows,), jnp.int32))
    step = jnp.int32(0)
    full = gens[-1]
    cells = [(0, g) for g in gens] + [(p, full) for p in range(1, len(sizes))]
    for c, (phase, gen) in enumerate(cells):
        size = sizes[phase]
        last = phase == len(sizes) - 1
        nxt = 0 if last else sizes[phase + 1]
        if c and phase != cells[c - 1][0]:
            live = compact_rows(live, size, shards)
            if mesh is not None:
                live = _constrain_rows(live, mesh)
        if c and gen != cells[c - 1][1]:
            live = dict(live, caches=tuple(grow_decode_cache(caches, w + gen, mesh, ring_windows(cfg))
                                           for caches, w in zip(live["caches"], widths)))
        identity = phase == 0  # ids are 0..rows-1: plain column writes
        base = jnp.repeat(jnp.asarray(widths, jnp.int32), size // len(widths))  # each row's first write slot

        def cond(state, nxt=nxt, last=last, gen=gen):
            step, _, _, lv = state
            go = (step < max_new) & ~jnp.all(lv["finished"])
            if not last:  # the fullest shard decides: every shard keeps its own rows
                go = go & (jnp.max(jnp.sum(~lv["finished"].reshape(shards, -1), axis=1)) > nxt // shards)
            if gen < full:  # the next write needs a free slot
                go = go & (step < gen)
            return go

        def body(state, identity=identity, base=base, size=size):
            step, tokens, logprobs, lv = state
            finished = lv["finished"]
            keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(lv["keys"], step)
            tok = choose_tokens(lv["logits"], keys, scfg)
            lp = chosen_logprob(lv["logits"], tok)
            tok, lp, think = force_think_end(tok, lp, lv["think"], step, scfg)
            tok = jnp.where(finished, pad_id, tok)
            lp = jnp.where(finished, 0.0, lp)
            if identity:
                tokens = jax.lax.dynamic_update_index_in_dim(tokens, tok, step, 1)
                logprobs = jax.lax.dynamic_update_index_in_dim(logprobs, lp, step, 1)
            else:
                tokens = tokens.at[lv["ids"], step].set(tok, unique_indices=True)
                logprobs = logprobs.at[lv["ids"], step].set(lp, unique_indices=True)
            lengths = lv["lengths"] + (~finished).astype(jnp.int32)
            finished = finished | jnp.isin(tok, stop_ids)
            per = size // len(widths)
            step_groups = tuple((caches, lv["start"][g * per:(g + 1) * per], w + step)
                                for g, (caches, w) in enumerate(zip(lv["caches"], widths)))
            new_logits, caches = decode_step_groups(cfg, weights, tok, base + step - lv["start"], step_groups,
                                                    mesh=mesh)
            lv = dict(lv, logits=new_logits, caches=caches, lengths=lengths, finished=finished, think=think)
            return step + 1, tokens, logprobs, lv

        step, tokens, logprobs, live = jax.lax.while_loop(cond, body, (step, tokens, logprobs, live))
        lengths_all = lengths_all.at[live["ids"]].set(live["lengths"], unique_indices=True)
        finished_all = finished_all.at[live["ids"]].set(live["finished"], unique_indices=True)
    return SampleOutput(tokens, logprobs, lengths_all, finished_all)


def compact_rows(live: dict, size: int, shards: int) -> dict:
    """The first `size / shards` rows of each of `shards` contiguous row blocks, live rows
    first (stable), for every leaf of `live` (rows on axis 0): a per-shard gather. Prompt
    groups' caches (`live["caches"]`, one per block when there are several) hold only their
    block's rows and take that block's selection."""
    n = live["finished"].shape[0] // shards
    order = jnp.argsort(live["finished"].reshape(shards, n), axis=1, stable=True)[:, :size // shards]

    def take(x):
        blocks = x.reshape(shards, n, *x.shape[1:])
        return jax.vmap(lambda b, i: jnp.take(b, i, axis=0))(blocks, order).reshape(size, *x.shape[1:])

    out = jax.tree.map(take, {k: v for k, v in live.items() if k != "caches"})
    groups = live.get("caches")
    if groups is not None and len(groups) > 1:  # one group per block
        out["caches"] = tuple(jax.tree.map(lambda x, i=order[g]: jnp.take(x, i, axis=0), caches)
                              for g, caches in enumerate(groups))
    elif groups is not None:
        out["caches"] = jax.tree.map(take, groups)
    return out


def _constrain_rows(live: dict, mesh: Mesh) -> dict:
    """Rows (leading axis) back over the batch mesh axes after a compaction gather."""
    def rows(x, names=None):
        names = names or ("batch",) + (None,) * (x.ndim - 1)
        return jax.lax.with_sharding_constraint(x, named_sharding(names, mesh, x.shape))
    out = {k: jax.tree.map(rows, v) for k, v in live.items() if k != "caches"}
    out["caches"] = tuple(tuple((rows(k, DECODE_CACHE_AXES[0]), rows(v, DECODE_CACHE_AXES[1])) for k, v in caches)
                          for caches in live["caches"])
    return out
