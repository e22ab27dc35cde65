"""In-graph sampler: prefill once, fan out to M samples, decode in `lax.while_loop`.

`generate(...)` is the pure, jitted core over padded arrays. `Sampler` is the thin host
edge: it pads prompts into (batch, prompt, generation) buckets, compiles each bucket
once with `.lower().compile()` (logging every compilation), and trims the outputs.

Randomness: each prompt has its own key; sample m of prompt b uses
`split(key_b, M)[m]`, and step t folds t into it. A row's tokens therefore depend only
on its own prompt and key, never on the rest of the batch.

Logprobs are the model's log-softmax (temperature 1, no top-p/top-k filtering) of the
chosen token: the sampling policy's logprob when sampling at temperature 1 (computed as
logit minus logsumexp, without materialising the [R, V] log-softmax). Draws at T > 0 are
exact two-stage Gumbel-max draws over 128-token vocabulary blocks (`blocked_categorical`),
and the argmax and logsumexp run per block too (`vocab_blocks`): same results, a fraction
of the cost on XLA:CPU (docs/results/2026-12-01-decode-profile.md).

Decode (`SamplingConfig.decode_layers`): "unrolled" (default) runs the loop body over
per-layer weights sliced once per call, with fused q/k/v and gate/up matmuls and per-layer
caches updated in place (`decoder.decode_step`); "scan" is the stacked `nn.scan` forward,
which dynamic-slices every layer's weights and cache on every step (kept for comparison).
Prefill always uses the scanned forward; with `prefill_groups`, length-sorted row groups
take only their own slot windows (`grouped_prefill`); otherwise, on one device, rows are
prefilled 32 at a time (`chunked_prefill`). With `compact_min_rows`, the decode
batch shrinks (by `compact_ratio`, half by default) whenever few enough rows are live
(`_decode_unrolled`): same tokens per row. With `cache_window`, the first decode phase's
cache starts at the prompt plus `cache_window` slots and grows by as many when full. With
`prompt_groups`, `Sampler` sorts a one-device call's prompts by length and cuts them into
that many equal groups, each prefilled and attended over its own prompt width (a compile
key: the widths come from the length buckets); outputs return in the caller's order.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Optional, Sequence

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from prd_jax.mesh import batch_size_multiple, named_sharding
from prd_jax.model.config import ModelConfig
from prd_jax.model.decoder import (CACHE_AXES, DECODE_CACHE_AXES, KVCache, decode_cache, decode_step_groups,
                                   decode_weights, forward, grow_decode_cache, init_cache, ring_windows)

log = logging.getLogger(__name__)
Array = jax.Array


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sampling:
    """The one sampling config: how tokens are drawn, and the sampler's cost options.

    Declared here once. Eval and RL read it from `config.sampling` (`from_config`), the
    operators' context carries it, and every sampler call is a `SamplingConfig`: this plus
    the call's own budget. The draw: `temperature` (0 = greedy), `top_p` (1.0 = off),
    `top_k` (0 = off), `stop_ids` (the tokenizer's, filled in when a run starts; not a
    config key). The PDR paper samples at T = 1.0, top-p 1.0 (arXiv 2510.01123 §4); V1 at
    T = 0.6 (code) or 1.0 (math), top-p 0.95 (arXiv 2603.04304 §4).

    The cost options change no row's tokens (tested), only memory and time:
    - `max_rows`: most decode rows (prompts x samples) in flight per call; 0 = all;
    - `compact_min_rows` > 0: shrink the decode batch as rows finish, down to this many
      rows, each phase `compact_ratio` of the previous one's rows;
    - `prefill_groups` > 1: prefill length-sorted row groups over their own slot windows;
    - `cache_window` > 0: the first decode phase's cache grows this many slots at a time;
    - `prompt_groups` > 1: length-sorted prompt groups, each over its own width (`Sampler`
      on one device: `prd-jax generate` and `prd-jax serve`);
    - `decode_layers`: "unrolled" (per-layer weights and caches) or "scan" (stacked).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_ids: tuple = ()
    max_rows: int = 0
    compact_min_rows: int = 0
    compact_ratio: float = 0.5
    prefill_groups: int = 0
    cache_window: int = 0
    prompt_groups: int = 0
    decode_layers: str = "unrolled"

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"sampling.temperature={self.temperature}; must be >= 0 (0 = greedy)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"sampling.top_p={self.top_p}; allowed range (0, 1]")
        if self.top_k < 0:
            raise ValueError(f"sampling.top_k={self.top_k}; must be >= 0 (0 = off)")
        if self.max_rows < 0:
            raise ValueError(f"sampling.max_rows={self.max_rows}; must be >= 0 (0 = no limit)")
        if self.compact_min_rows < 0:
            raise ValueError(f"sampling.compact_min_rows={self.compact_min_rows}; must be >= 0 (0 = no compaction)")
        if not 0.0 < self.compact_ratio < 1.0:
            raise ValueError(f"sampling.compact_ratio={self.compact_ratio}; allowed range (0, 1) (0.5 = halve per phase)")
        if self.prefill_groups < 0:
            raise ValueError(f"sampling.prefill_groups={self.prefill_groups}; must be >= 0 (0 or 1 = one prefill)")
        if self.prompt_groups < 0:
            raise ValueError(f"sampling.prompt_groups={self.prompt_groups}; must be >= 0 (0 or 1 = one prompt width)")
        if self.cache_window < 0:
            raise ValueError(f"sampling.cache_window={self.cache_window}; must be >= 0 (0 = all generation slots at once)")
        if self.decode_layers not in DECODE_LAYERS:
            raise ValueError(f"sampling.decode_layers={self.decode_layers!r}; allowed: {DECODE_LAYERS}")
        object.__setattr__(self, "stop_ids", tuple(int(s) for s in self.stop_ids))

    def check_in_graph(self) -> None:
        """Raise unless every option applies to in-graph calls (eval, RL): `prompt_groups`
        belongs to the host `Sampler` (`prd-jax generate`, `prd-jax serve`)."""
        if self.prompt_groups > 1:
            raise ValueError(f"sampling.prompt_groups={self.prompt_groups} applies to the host `Sampler` only "
                             "(prd-jax generate, prd-jax serve); eval and RL calls run in-graph: allowed 0 or 1")

    def settings(self) -> dict:
        """The fields of `Sampling` alone, by name (a `SamplingConfig`'s call fields left out)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(Sampling)}

    def to_config(self):
        """`config.sampling` for a config file: every config key (all but `stop_ids`)."""
        return ml_collections.ConfigDict({k: v for k, v in self.settings().items() if k in CONFIG_KEYS})

    @classmethod
    def from_config(cls, node, stop_ids=()) -> "Sampling":
        """Validated `Sampling` from `config.sampling` (a ConfigDict or dict; None: the
        defaults) and the tokenizer's `stop_ids`. An unknown key raises, naming the keys allowed."""
        if isinstance(node, Sampling):
            return dataclasses.replace(node, stop_ids=tuple(stop_ids) or node.stop_ids)
        values = {} if node is None else dict(node.to_dict() if hasattr(node, "to_dict") else node)
        unknown = sorted(set(values) - set(CONFIG_KEYS))
        if unknown:
            raise ValueError(f"config.sampling: unknown keys {unknown}; allowed: {list(CONFIG_KEYS)}")
        return cls(**values, stop_ids=tuple(stop_ids))


DECODE_LAYERS = ("unrolled", "scan")
CONFIG_KEYS = tuple(f.name for f in dataclasses.fields(Sampling) if f.name != "stop_ids")  # config.sampling.*


@dataclasses.dataclass(frozen=True)
class SamplingConfig(Sampling):
    """One sampler call: the run's `Sampling` plus the call's generation budget
    `max_new_tokens`, its samples per prompt and its thinking budget. Static: part of the
    compile key. Only `max_new_tokens` is positional; build one from a run's settings with
    `SamplingConfig.of(sampling, max_new_tokens, num_samples=...)`.
    """

    max_new_tokens: int
    num_samples: int = dataclasses.field(default=1, kw_only=True)
    # > 0: a row still thinking after this many tokens gets `think_end` (the end-of-thinking
    # marker ids, e.g. Qwen3's `</think>`) forced in, then answers (`force_think_end`)
    think_budget: int = dataclasses.field(default=0, kw_only=True)
    think_end: tuple = dataclasses.field(default=(), kw_only=True)

    def __post_init__(self):
        super().__post_init__()
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}; must be >= 1")
        if self.num_samples < 1:
            raise ValueError(f"num_samples={self.num_samples}; must be >= 1")
        if self.max_rows and self.max_rows < self.num_samples:
            raise ValueError(f"max_rows={self.max_rows}; must be 0 (no limit) or >= num_samples="
                             f"{self.num_samples} (one prompt's samples run together)")
        if self.think_budget < 0:
            raise ValueError(f"think_budget={self.think_budget}; must be >= 0 (0 = no forced end of thinking)")
        if self.think_budget and not self.think_end:
            raise ValueError(f"think_budget={self.think_budget} needs think_end, the end-of-thinking marker ids "
                             "(the tokenizer has no `</think>`: allowed think_budget=0)")
        if self.think_budget and self.think_budget + len(self.think_end) >= self.max_new_tokens:
            raise ValueError(f"think_budget={self.think_budget} + the {len(self.think_end)}-token marker leaves no "
                             f"answer tokens in max_new_tokens={self.max_new_tokens}; allowed: think_budget < "
                             f"{self.max_new_tokens - len(self.think_end)}")
        object.__setattr__(self, "think_end", tuple(int(t) for t in self.think_end))

    @classmethod
    def of(cls, sampling: Sampling, max_new_tokens: int, **call) -> "SamplingConfig":
        """The call of `max_new_tokens` under the run's `sampling`; `call` sets `num_samples`,
        `think_budget`, `think_end` or overrides a `Sampling` field for this call alone."""
        return cls(max_new_tokens, **{**sampling.settings(), **call})


@flax.struct.dataclass
class SampleOutput:
    """Generated rows `[R = B*M]`: tokens/logprobs `[R, N]`, padded after each row's end.

    `lengths` counts generated tokens including the stop token; `stopped` says whether a
    stop id ended the row (else it hit `max_new_tokens`). A remote LM
    (`prd_jax.backends.remote_lm`) also returns what its server billed per row,
    `billed_in` (usage.prompt_tokens) and `billed_out` (usage.completion_tokens, hidden
    reasoning included); None means the budgets count the prompt and `lengths` themselves.
    """

    tokens: Array
    logprobs: Array
    lengths: Array
    stopped: Array
    billed_in: Optional[Array] = None
    billed_out: Optional[Array] = None


def top_k_mask(logits: Array, k: int) -> Array:
    """Keep the k largest logits per row (ties at the k-th value kept), others -> -inf."""
    kth = jax.lax.top_k(logits, k)[0][..., -1:]
    return jnp.where(logits >= kth, logits, -jnp.inf)


def top_p_mask(logits: Array, p: float) -> Array:
    """Nucleus filter: keep the smallest set of top tokens whose probability reaches p.

    A token is kept when the probability mass strictly above it is < p, so the top token
    is always kept.
    """
    order = jnp.argsort(-logits, axis=-1)
    sorted_logits = jnp.take_along_axis(logits, order, axis=-1)
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep_sorted = mass_before < p
    threshold = jnp.min(jnp.where(keep_sorted, sorted_logits, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(logits >= threshold, logits, -jnp.inf)


def choose_tokens(logits: Array, keys: Array, scfg: SamplingConfig) -> Array:
    """One token per row from fp32 logits `[R, V]` with per-row keys `[R]`."""
    if scfg.temperature == 0.0:
        return blocked_argmax(logits)
    scaled = logits / scfg.temperature
    if scfg.top_k > 0:
        scaled = top_k_mask(scaled, scfg.top_k)
    if scfg.top_p < 1.0:
        scaled = top_p_mask(scaled, scfg.top_p)
    return blocked_categorical(keys, scaled)


def force_think_end(tok: Array, lp: Array, think: Array, step, scfg: SamplingConfig) -> tuple:
    """Budget forcing of a thinking block, as thinking-model APIs apply it (ours: the papers are silent).

    `think [R]` counts how much of the marker `scfg.think_end` the row has written last
    (the marker's length once the block is closed). From step `think_budget` on, a row whose
    block is still open gets the marker's next id instead of its sample (logprob 0: not
    sampled), so the block closes at exactly `think_budget + len(marker)` tokens and the
    row goes on into its answer. A row that writes the marker itself is never forced.
    Returns (tokens, logprobs, think) `[R]`."""
    if not scfg.think_budget:
        return tok, lp, think
    marker = jnp.asarray(scfg.think_end, jnp.int32)
    n = len(scfg.think_end)
    force = (think < n) & (step >= scfg.think_budget)
    tok = jnp.where(force, marker[jnp.minimum(think, n - 1)], tok)
    lp = jnp.where(force, 0.0, lp)
    matched = jnp.where(tok == marker[jnp.minimum(think, n - 1)], think + 1, (tok == marker[0]).astype(jnp.int32))
    return tok, lp, jnp.where(think >= n, n, matched)


SAMPLE_BLOCK = 128  # vocabulary block of `blocked_categorical`


def vocab_blocks(logits: Array, block: int = SAMPLE_BLOCK) -> Array:
    """`[R, V]` -> `[R, ceil(V / block), block]`, the tail padded with `-inf`. Reductions over
    128-wide blocks and then over the blocks are cheaper on XLA:CPU than one reduction over
    a whole row (docs/results/2026-12-01-decode-profile.md)."""
    rows, vocab = logits.shape
    nb = -(-vocab // block)
    if nb * block != vocab:
        logits = jnp.pad(logits, ((0, 0), (0, nb * block - vocab)), constant_values=-jnp.inf)
    return logits.reshape(rows, nb, block)


def blocked_argmax(logits: Array, block: int = SAMPLE_BLOCK) -> Array:
    """`jnp.argmax(logits, -1)` (the first maximum) through `vocab_blocks`: the first block
    holding the row's maximum, then the first maximum inside it."""
    blocks = vocab_blocks(logits, block)
    chosen = jnp.argmax(blocks.max(axis=-1), axis=-1)
    return _token(blocks, chosen, jnp.zeros((), blocks.dtype))


def _token(blocks: Array, chosen: Array, noise: Array) -> Array:
    """Token id of the argmax of `blocks[r, chosen[r]] + noise[r]`, the second stage of the
    blocked argmax and draw."""
    inner = jnp.take_along_axis(blocks, chosen[:, None, None], axis=1)[:, 0]  # [R, block]
    return (chosen * blocks.shape[2] + jnp.argmax(inner + noise, axis=-1)).astype(jnp.int32)


def blocked_categorical(keys: Array, logits: Array, block: int = SAMPLE_BLOCK) -> Array:
    """Exact draws from `softmax(logits [R, V])`, one per row, in two Gumbel-max stages.

    The vocabulary is cut into blocks of `block` tokens: a block is drawn from the block
    masses (`logsumexp` of its logits, Gumbel-max over V / block values), then a token
    inside it (Gumbel-max over `block` values). P(block) * P(token | block) = P(token), so
    the law is the categorical's; only V / block + block Gumbel variates are drawn per row
    instead of V (at V = 49,152: 512 instead of 49,152; the full draw was about 0.22 s of a
    0.92 s T = 1 decode step at batch 256 x 448 slots). Blocks of `-inf` logits (top-k/top-p filtered) are never drawn.
    Row r uses only `keys[r]`, so a row's draw does not depend on the batch.
    """
    blocks = vocab_blocks(logits, block)
    nb = blocks.shape[1]
    pair = jax.vmap(lambda k: jax.random.split(k, 2))(keys)
    gumbel = lambda k, n: jax.vmap(lambda kk: jax.random.gumbel(kk, (n,), jnp.float32))(k)
    chosen = jnp.argmax(jax.nn.logsumexp(blocks, axis=-1) + gumbel(pair[:, 0], nb), axis=-1)
    return _token(blocks, chosen, gumbel(pair[:, 1], block))


def sample_keys(prompt_keys: Array, num_samples: int) -> Array:
    """Per-row keys `[B*M]`: row (b, m) gets `split(prompt_keys[b], M)[m]`."""
    return jax.vmap(lambda k: jax.random.split(k, num_samples))(prompt_keys).reshape(-1)


def _repeat_rows(x: Array, m: int, axis: int = 0) -> Array:
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


def row_chunks(batch: int, num_samples: int, max_rows: int, multiple: int = 1) -> int:
    """Number of sequential chunks C for `batch` prompts x `num_samples` rows under `max_rows`.

    C divides `batch`; among such C it is the smallest with `batch / C * num_samples <=
    max_rows`, preferring chunks whose prompt count stays a multiple of the batch mesh
    axes (`multiple`), so every chunk is still spread over all devices.
    """
    if not max_rows or batch * num_samples <= max_rows:
        return 1
    divisors = [c for c in range(1, batch + 1) if batch % c == 0 and batch // c * num_samples <= max_rows]
    if not divisors:
        raise ValueError(f"max_rows={max_rows} < num_samples={num_samples}: one prompt's samples must fit")
    even = [c for c in divisors if (batch // c) % multiple == 0]
    return min(even or divisors)


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
    split = lambda x: _split_rows(x, chunks)
    one = lambda xs: _generate_rows(cfg, params, *xs, max_new, scfg, gen_len=gen_len, pad_id=pad_id,
                                    fanout=fanout, mesh=mesh)
    out = jax.lax.map(one, (split(prompts), split(prompt_lengths), split(prompt_keys)))
    m = scfg.num_samples

    def merge(x):  # [C, B/C * M, ...] -> [B * M, ...] in prompt-major order (b * M + m)
        x = x.reshape(chunks, batch // chunks, m, *x.shape[2:]).swapaxes(0, 1)
        return x.reshape(batch * m, *x.shape[3:])

    return jax.tree.map(merge, out)


def _split_rows(x: Array, chunks: int) -> Array:
    """`[B, ...]` -> `[C, B/C, ...]`, chunk c holding rows c, c + C, ... (a local re-layout)."""
    return x.reshape(x.shape[0] // chunks, chunks, *x.shape[1:]).swapaxes(0, 1)


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
    out = jax.lax.map(one, (_split_rows(prompts, chunks), _split_rows(prompt_lengths, chunks)))
    return out.swapaxes(0, 1).reshape(batch, -1)


def _prefill_rows(cfg: ModelConfig, params, prompts: Array, prompt_lengths: Array, capacity: int,
                  scfg: SamplingConfig, mesh: Optional[Mesh]):
    """The sampler's prefill: grouped (`prefill_groups`), row-chunked, or one under a mesh."""
    if scfg.prefill_groups > 1 and mesh is None:
        return grouped_prefill(cfg, params, prompts, prompt_lengths, capacity, scfg.prefill_groups)
    if mesh is None:
        return chunked_prefill(cfg, params, prompts, prompt_lengths, capacity)
    return prefill(cfg, params, prompts, prompt_lengths, capacity, mesh=mesh)  # rows already split over devices


def _fan_out(logits: Array, cache: KVCache, m: int):
    if m == 1:
        return logits, cache
    return _repeat_rows(logits, m), KVCache(_repeat_rows(cache.k, m, 1), _repeat_rows(cache.v, m, 1),
                                            _repeat_rows(cache.start, m), cache.index)


def _generate_rows(cfg: ModelConfig, params, prompts: Array, prompt_lengths: Array, prompt_keys: Array,
                   max_new: Array, scfg: SamplingConfig, *, gen_len: int, pad_id: int,
                   fanout: bool, mesh: Optional[Mesh], widths: tuple = ()) -> SampleOutput:
    m = scfg.num_samples
    batch, plen = prompts.shape
    if not fanout:
        prompts, prompt_lengths = _repeat_rows(prompts, m), _repeat_rows(prompt_lengths, m)
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
            lg, cache = _prefill_rows(cfg, params, prompts[part, plen - w:], prompt_lengths[part], w, scfg, mesh)
            if fanout:
                lg, cache = _fan_out(lg, cache, m)
            logits.append(lg)  # `decode_cache` adds the generation slots to the prompt-sized cache
            groups.append((decode_cache(cache, mesh, slots=w + gens[0], windows=ring_windows(cfg)), cache.start))
        weights = decode_weights(cfg, params, mesh)  # sliced (and fused) once, outside the loop
        multiple = 1 if mesh is None else batch_size_multiple(mesh)
        return _decode_unrolled(cfg, weights, tuple(c for c, _ in groups), jnp.concatenate([s for _, s in groups]),
                                widths, jnp.concatenate(logits), row_keys, max_new, scfg, gen_len=gen_len,
                                pad_id=pad_id, stop_ids=stop_ids,
                                sizes=compaction_sizes(rows, scfg.compact_min_rows, max(multiple, len(widths)),
                                                       scfg.compact_ratio),
                                gens=gens, mesh=mesh)
    logits, cache = _prefill_rows(cfg, params, prompts, prompt_lengths, plen + gen_len, scfg, mesh)
    if fanout:
        logits, cache = _fan_out(logits, cache, m)

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


def compaction_sizes(rows: int, min_rows: int, multiple: int = 1, ratio: float = 0.5) -> tuple:
    """Decode batch sizes of the compaction phases: `rows`, then each phase `ratio` of the one
    before, rounded down to a multiple of the batch mesh axes (`multiple`), while that is
    smaller than the phase before and >= `min_rows`; `(rows,)` when `min_rows` is 0.

    `ratio` 0.5 halves (256, 128, 64, ...); 0.75 gives 256, 192, 144, 108, ...: twice the
    phases (compiled loop bodies) for fewer decoded padding rows when most rows run long.
    """
    sizes = [rows]
    while min_rows:
        nxt = int(sizes[-1] * ratio) // multiple * multiple
        if nxt < min_rows or nxt < 1 or nxt >= sizes[-1]:
            break
        sizes.append(nxt)
    return tuple(sizes)


def cache_windows(gen_len: int, window: int) -> tuple:
    """Generation slots the first decode phase's cache grows through (after the prompt's):
    `window`, `2 window`, ..., ending at `gen_len`; `(gen_len,)` when `window` is 0."""
    if window <= 0:
        return (gen_len,)
    return tuple(min(gen_len, g) for g in range(window, gen_len + window, window))


def _chosen_logprob(logits: Array, tok: Array) -> Array:
    """log-softmax of `logits [R, V]` at `tok [R]`, without materialising the [R, V] log-softmax
    (the logsumexp taken per vocabulary block, then over the blocks: `vocab_blocks`)."""
    lse = jax.nn.logsumexp(jax.nn.logsumexp(vocab_blocks(logits), axis=-1), axis=-1)
    return jnp.take_along_axis(logits, tok[:, None], axis=-1)[:, 0] - lse


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
    and attends over its own slots only (`decoder.decode_step_groups`); compaction keeps each
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
    (`_compact`): a phase ends when every shard holds at most its share of the next size
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
            live = _compact(live, size, shards)
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
            lp = _chosen_logprob(lv["logits"], tok)
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


def _compact(live: dict, size: int, shards: int) -> dict:
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


def _cache_sharding(cache: KVCache, mesh: Mesh) -> KVCache:
    kv = named_sharding(CACHE_AXES, mesh, cache.k.shape)
    return KVCache(kv, kv, named_sharding(("batch",), mesh, cache.start.shape),
                   NamedSharding(mesh, P()))


def prompt_groups_apply(batch: int, scfg: SamplingConfig) -> bool:
    """Whether a one-device call of `batch` prompts decodes in `scfg.prompt_groups` groups:
    more than one group, equal blocks, unrolled decode, one row chunk."""
    g = scfg.prompt_groups
    return (g > 1 and batch % g == 0 and scfg.decode_layers == "unrolled"
            and row_chunks(batch, scfg.num_samples, scfg.max_rows) == 1)


def prompt_widths(sorted_lengths, plen: int, groups: int, minimum: int = 16) -> tuple:
    """Prompt widths of `groups` equal blocks of ascending prompt lengths: each block's
    longest prompt's `length_bucket`, the last block the whole bucket `plen` (a compile key:
    the widths come from the bucket ladder)."""
    per = len(sorted_lengths) // groups
    widths = [min(plen, length_bucket(int(sorted_lengths[(g + 1) * per - 1]), minimum)) for g in range(groups - 1)]
    return tuple(widths) + (plen,)


def bucket(n: int, minimum: int = 16) -> int:
    """Next power of two >= max(n, minimum): bounds the number of compiled shapes."""
    return max(minimum, 1 << max(0, math.ceil(math.log2(max(n, 1)))))


def length_bucket(n: int, minimum: int = 16) -> int:
    """Smallest of `2^j` and `3 * 2^(j-1)` that is >= max(n, minimum): the sampler's prompt and
    generation lengths. Half steps bound the padding at a third of the bucket (a power of two
    alone pads a 44-token prompt to 64) for at most twice the compiled shapes."""
    p = bucket(n, minimum)
    return max(minimum, 3 * p // 4) if 3 * p // 4 >= n and p % 4 == 0 else p


class Sampler:
    """Host edge of the sampler: bucketing, compile cache with logging, trimming.

    >>> sampler = Sampler(cfg, mesh)
    >>> out = sampler(params, [[1, 2, 3], [4, 5]], jax.random.key(0), SamplingConfig(32))
    """

    def __init__(self, cfg: ModelConfig, mesh: Optional[Mesh] = None, pad_id: int = 0,
                 min_bucket: int = 16, prompt_buckets: Sequence[int] = ()):
        """`prompt_buckets`: fixed prompt widths (ascending); a call's prompts are padded to the
        smallest that holds the longest, so a server meets only those shapes. Prompts longer
        than the last fall back to the `length_bucket` ladder. Empty: the ladder alone."""
        buckets = tuple(int(b) for b in prompt_buckets)
        if any(b < 1 for b in buckets) or list(buckets) != sorted(set(buckets)):
            raise ValueError(f"prompt_buckets={buckets}: must be strictly ascending positive widths")
        self.cfg, self.mesh, self.pad_id, self.min_bucket = cfg, mesh, pad_id, min_bucket
        self.prompt_buckets = buckets
        self._compiled: dict = {}

    def prompt_width(self, longest: int, max_new_tokens: int) -> int:
        """The padded prompt width of a call whose longest prompt has `longest` tokens."""
        fixed = [b for b in self.prompt_buckets if b >= longest]
        width = fixed[0] if fixed else length_bucket(longest, self.min_bucket)
        return max(longest, min(width, self.cfg.max_position - max_new_tokens))

    @property
    def num_compilations(self) -> int:
        return len(self._compiled)

    def _executable(self, params, batch: int, plen: int, gen_len: int, scfg: SamplingConfig,
                    fanout: bool, widths: tuple = ()):
        key = (batch, plen, gen_len, scfg, fanout, widths)
        if key not in self._compiled:
            log.info("sampler: compiling batch=%d prompt=%d gen=%d %s fanout=%s widths=%s (compilation #%d)",
                     batch, plen, gen_len, scfg, fanout, widths, len(self._compiled) + 1)
            fn = jax.jit(generate, static_argnames=("cfg", "scfg", "gen_len", "pad_id", "fanout", "mesh", "widths"),
                         static_argnums=(0,))
            args = (jax.ShapeDtypeStruct((batch, plen), jnp.int32, sharding=self._batch_sharding(2)),
                    jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=self._batch_sharding(1)),
                    jax.ShapeDtypeStruct((batch,), jax.random.key(0).dtype, sharding=self._batch_sharding(1)),
                    jax.ShapeDtypeStruct((), jnp.int32))
            self._compiled[key] = fn.lower(self.cfg, params, *args, scfg=scfg, gen_len=gen_len,
                                           pad_id=self.pad_id, fanout=fanout, mesh=self.mesh,
                                           widths=widths).compile()
        return self._compiled[key]

    def _batch_sharding(self, ndim: int):
        if self.mesh is None:
            return None
        return NamedSharding(self.mesh, P(*((("data", "fsdp"),) + (None,) * (ndim - 1))))

    def __call__(self, params, prompts: Sequence[Sequence[int]], rng: Array, scfg: SamplingConfig,
                 *, fanout: bool = True) -> SampleOutput:
        """Sample for a ragged list of token-id prompts; returns rows trimmed to the longest.

        `rng` is one key (split per prompt) or an array of one key per prompt.
        """
        prompts = [list(map(int, p)) for p in prompts]
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("prompts must be a non-empty list of non-empty token-id lists")
        longest = max(len(p) for p in prompts)
        if longest + scfg.max_new_tokens > self.cfg.max_position:
            raise ValueError(f"prompt of {longest} tokens + max_new_tokens={scfg.max_new_tokens} "
                             f"exceeds the model context of {self.cfg.max_position} tokens")
        n = len(prompts)
        keys = rng if (hasattr(rng, "shape") and rng.shape == (n,)) else jax.random.split(rng, n)
        multiple = 1 if self.mesh is None else batch_size_multiple(self.mesh)
        batch = -(-bucket(n, 1) // multiple) * multiple
        plen = self.prompt_width(longest, scfg.max_new_tokens)
        gen_len = length_bucket(scfg.max_new_tokens, self.min_bucket)
        tokens = np.full((batch, plen), self.pad_id, np.int32)
        lengths = np.ones((batch,), np.int32)
        for i, p in enumerate(prompts):  # left padding: the prompt ends at slot plen - 1
            tokens[i, plen - len(p):] = p
            lengths[i] = len(p)
        keys = jnp.concatenate([keys, jax.random.split(jax.random.key(0), batch - n)]) if batch > n else keys
        widths, order = (), None
        if self.mesh is None and prompt_groups_apply(batch, scfg):
            order = np.argsort(lengths, kind="stable")  # shortest first; each prompt keeps its key
            tokens, lengths, keys = tokens[order], lengths[order], keys[jnp.asarray(order)]
            widths = prompt_widths(lengths, plen, scfg.prompt_groups, self.min_bucket)
        exe = self._executable(params, batch, plen, gen_len, scfg, fanout, widths)
        put = (lambda x, nd: jax.device_put(x, self._batch_sharding(nd))) if self.mesh else (lambda x, nd: x)
        out = exe(params, put(jnp.asarray(tokens), 2), put(jnp.asarray(lengths), 1), put(keys, 1),
                  jnp.int32(scfg.max_new_tokens))
        # Trimmed on the host: slicing device arrays to a data-dependent width would compile
        # one small program per width.
        rows = n * scfg.num_samples
        host = jax.device_get(out)
        if order is not None:  # back to the callers' prompt order (rows prompt-major: b * M + m)
            back = np.argsort(order)
            row_back = (back[:, None] * scfg.num_samples + np.arange(scfg.num_samples)).reshape(-1)
            host = jax.tree.map(lambda x: x[row_back], host)
        width = max(1, int(host.lengths[:rows].max()))
        return SampleOutput(jnp.asarray(host.tokens[:rows, :width]), jnp.asarray(host.logprobs[:rows, :width]),
                            jnp.asarray(host.lengths[:rows]), jnp.asarray(host.stopped[:rows]))
