"""Continuous batching for `prd-jax serve`: a pool of decode slots that rows enter and leave
between short decode chunks (issue 32 §5: "finished rows leave early").

The pool holds `S` slots. A slot is one row: its per-layer decode caches
(`decode.decode_cache` layout, `W` cache slots), its next-token logits, its key and where it
stands: `index` (the cache slot its next token is written to), `start` (its first valid cache
slot: 0 once `shift_row` has moved its prompt of n tokens to slots 0 .. n-1; P-n when a
prompt prefilled at width P keeps slots P-n .. P-1), `count` (tokens
generated), `limit` (its `max_tokens`), `active`, its own temperature / top-p / top-k, its
stop ids `stops` (padded with -1: the tokenizer's unless `ignore_eos`, plus `stop_token_ids`)
and `min_tokens` (its stop ids are masked out of its logits until it has generated that many).

- `decode_chunk` runs up to `steps` decode steps of all slots at once, every row writing at
  its own `index` (`decode.decode_step_groups` with a per-row write slot). A row stops when it
  emits a stop id or reaches its limit; its slot is free at the chunk's end, and a waiting
  request takes it before the next chunk. So a call never waits for the longest row of a
  batch, and the batch stays full while requests wait.
- Keys: a row's `count`-th token is drawn with `fold_in(key, count)`, the key `Sampler` uses
  at step `count`, so a row decodes the tokens the sampler decodes for it alone (up to the
  fp32 rounding of other batch shapes).
- `W` is a cache-width bucket covering what the live rows reach in the next chunk
  (`resize`: zero slots are masked, so padding changes no logit), so a step reads the slots
  the rows need, not the whole context. Sliding-window layers keep rings
  (`decode.ring_windows`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prd_jax.model.config import ModelConfig
from prd_jax.model.decode import decode_cache, decode_step_groups, grow_decode_cache, init_cache, ring_windows
from prd_jax.sampling import RowSampling, choose_rows, chosen_logprob, prefill

Array = jax.Array
ROW_FIELDS = ("index", "start", "count", "limit", "active", "temperature", "top_p", "top_k", "min_tokens", "stops")
MAX_TOP = 20  # the most top alternatives a position reports (vLLM's default max_logprobs)


def row_sampling(pool: dict, filtered: bool) -> RowSampling:
    """The slots' draw settings for `sampling.choose_rows`: each row's temperature / top-p /
    top-k (greedy and sampled rows mixed); `filtered` (static): some row filters by top-k or
    top-p, so the chooser sorts the vocabulary."""
    vocab = pool["logits"].shape[-1]
    return RowSampling(pool["temperature"], pool["top_p"], pool["top_k"], top_k_bound=vocab if filtered else 0,
                       no_top_p=not filtered)


def suppress_stops(logits: Array, count: Array, min_tokens: Array, stops: Array) -> Array:
    """`logits [S, V]` with each row's stop ids (`stops [S, K]`, -1 padded) at -inf while the
    row has generated fewer than its `min_tokens` (vLLM's `min_tokens`)."""
    early = (count < min_tokens)[:, None]
    rows = jnp.arange(logits.shape[0])[:, None]
    hit = jnp.zeros(logits.shape, jnp.int32).at[rows, jnp.maximum(stops, 0)].max(((stops >= 0) & early).astype(jnp.int32))
    return jnp.where(hit > 0, -jnp.inf, logits)


def top_alternatives(logits: Array, top: int) -> tuple:
    """(ids, logprobs) `[S, top]` of each row's `top` most likely tokens (log-softmax of `logits`)."""
    logprobs, ids = jax.lax.top_k(jax.nn.log_softmax(logits, axis=-1), top)
    return ids.astype(jnp.int32), logprobs


def decode_chunk(cfg: ModelConfig, weights, pool: dict, *, steps: int, pad_id: int,
                 filtered: bool, top: int = 0, mesh=None):
    """Up to `steps` decode steps of every slot; returns the pool, the chunk's tokens and
    logprobs `[S, steps]` (row s's new tokens are its first `count' - count` entries) and, with
    `top` > 0, every step's top alternatives (ids, logprobs) `[S, steps, top]`."""
    slots = pool["logits"].shape[0]

    def cond(state):
        t, _, _, _, p = state
        return (t < steps) & jnp.any(p["active"])

    def body(state):
        t, tokens, logprobs, alts, p = state
        p = dict(p, logits=suppress_stops(p["logits"], p["count"], p["min_tokens"], p["stops"]))
        active = p["active"]
        keys = jax.vmap(jax.random.fold_in)(p["keys"], p["count"])
        tok = choose_rows(p["logits"], keys, row_sampling(p, filtered))
        lp = jnp.where(active, chosen_logprob(p["logits"], tok), 0.0)
        tok = jnp.where(active, tok, pad_id)
        tokens = jax.lax.dynamic_update_index_in_dim(tokens, tok, t, 1)
        logprobs = jax.lax.dynamic_update_index_in_dim(logprobs, lp, t, 1)
        if top:
            alts = jax.tree.map(lambda all_, one: jax.lax.dynamic_update_index_in_dim(all_, one, t, 1), alts,
                                top_alternatives(p["logits"], top))
        count = p["count"] + active
        done = jnp.any(tok[:, None] == p["stops"], axis=-1) | (count >= p["limit"])
        logits, (caches,) = decode_step_groups(cfg, weights, tok, p["index"] - p["start"],
                                               ((p["caches"], p["start"], p["index"]),), mesh=mesh)
        p = dict(p, caches=caches, logits=logits, count=count, index=p["index"] + active, active=active & ~done)
        return t + 1, tokens, logprobs, alts, p

    alts = (jnp.zeros((slots, steps, top), jnp.int32), jnp.zeros((slots, steps, top), jnp.float32))
    init = (jnp.int32(0), jnp.full((slots, steps), pad_id, jnp.int32), jnp.zeros((slots, steps), jnp.float32),
            alts, pool)
    _, tokens, logprobs, alts, pool = jax.lax.while_loop(cond, body, init)
    return pool, tokens, logprobs, alts


def row_key(seed: int, sample: int) -> Array:
    """Row `sample` of a request with `seed`: the key `Sampler` gives it when called with
    `fold_in(key(seed), sample)` as its prompt key (`sampling.sample_keys`, one sample)."""
    return jax.random.split(jax.random.fold_in(jax.random.key(seed), sample), 1)[0]


def prefill_row(cfg: ModelConfig, params, prompt: Array, length: Array, width: int):
    """One left-padded prompt `[1, P]` -> (next-token logits `[1, V]`, per-layer decode caches
    of `width` >= P slots, sliding layers as rings)."""
    logits, cache = prefill(cfg, params, prompt, length, prompt.shape[1])
    return logits, decode_cache(cache, slots=width, windows=ring_windows(cfg))


def shift_row(caches: tuple, shift: Array, width: int) -> tuple:
    """One row's plain (no ring) decode caches of P slots moved `shift` slots toward slot 0
    and cut or zero-padded to `width`: a prompt left-padded to P (slots P-n .. P-1) then fills
    slots 0 .. n-1, so the row reaches n + t slots at step t instead of P + t. Slots past the
    prompt hold padding's keys: they are masked until the row writes them."""
    def move(x, axis):
        x = jnp.roll(x, -shift, axis=axis)
        size = x.shape[axis]
        if width < size:
            return jax.lax.slice_in_dim(x, 0, width, axis=axis)
        return jnp.pad(x, [(0, width - size if a == axis else 0) for a in range(x.ndim)])
    return tuple((move(k, 3), move(v, 2)) for k, v in caches)


def insert(pool: dict, slot: Array, logits: Array, caches: tuple, key: Array, fields: dict) -> dict:
    """The pool with slot `slot` holding a prefilled row: its caches (`prefill_row` at the
    pool's width), logits, key, and `fields` (`ROW_FIELDS`: scalars, `stops` a `[K]` vector)."""
    put = lambda whole, one: jax.lax.dynamic_update_index_in_dim(whole, one[0].astype(whole.dtype), slot, 0)  # noqa: E731
    out = dict(pool, logits=put(pool["logits"], logits), keys=pool["keys"].at[slot].set(key),
               caches=jax.tree.map(put, pool["caches"], caches))
    for name in ROW_FIELDS:
        out[name] = pool[name].at[slot].set(fields[name])
    return out


def resize(cfg: ModelConfig, pool: dict, width: int) -> dict:
    """The pool's caches at `width` slots: zero-padded when growing, cut when shrinking (only
    slots no live row reaches are cut: the caller checks)."""
    caches = grow_decode_cache(pool["caches"], width, None, ring_windows(cfg))
    windows = ring_windows(cfg) or (None,) * len(caches)
    cut = tuple((k[..., :min(width, w or width)], v[:, :, :min(width, w or width)])
                for (k, v), w in zip(caches, windows))
    return dict(pool, caches=cut)


def release(active: Array, cancel: Array) -> Array:
    """`active` with the rows `cancel` marks stopped (cancelled rows leave at the chunk's end)."""
    return active & ~cancel


def empty_pool(cfg: ModelConfig, slots: int, width: int, vocab: int, stop_width: int = 1) -> dict:
    """A pool of `slots` free slots with caches of `width` slots and room for `stop_width` stop
    ids per row."""
    caches = decode_cache(init_cache(cfg, slots, 1), slots=width, windows=ring_windows(cfg))
    zeros = lambda dtype: jnp.zeros((slots,), dtype)  # noqa: E731
    return dict(caches=caches, logits=jnp.zeros((slots, vocab), jnp.float32),
                keys=jax.random.split(jax.random.key(0), slots), index=zeros(jnp.int32), start=zeros(jnp.int32),
                count=zeros(jnp.int32), limit=jnp.ones((slots,), jnp.int32), active=zeros(bool),
                temperature=zeros(jnp.float32), top_p=jnp.ones((slots,), jnp.float32), top_k=zeros(jnp.int32),
                min_tokens=zeros(jnp.int32), stops=jnp.full((slots, stop_width), -1, jnp.int32))
