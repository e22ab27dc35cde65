"""Token choice: one per-row chooser for the sampler and the serve engine.

A decode batch's draw settings are `RowSampling`: per-row temperature / top-p / top-k arrays
(so rows of one batch may differ, as the serve engine's do) and static flags saying which
paths the batch needs at all (every row greedy, no row greedy, top-k or top-p on anywhere),
so a batch compiles only the work its rows ask for. `choose_rows` draws one token per row:
temperature 0 is greedy (`blocked_argmax`), otherwise the scaled logits are filtered
(`filter_rows`: top-k, then the nucleus) and drawn by `blocked_categorical`. A run's
uniform settings are `RowSampling.uniform(sampling, rows)`.

Draws at T > 0 are exact two-stage Gumbel-max draws over 128-token vocabulary blocks, and
the argmax and logsumexp run per block too (`vocab_blocks`): same results, a fraction of the
cost on XLA:CPU (docs/results/2026-12-01-decode-profile.md). A row's draw uses only its own
key. Logprobs (`chosen_logprob`) are the model's log-softmax (temperature 1, unfiltered) of
the chosen token: the sampling policy's logprob at temperature 1.
"""

from __future__ import annotations

import flax
import jax
import jax.numpy as jnp

from prd_jax.sampling.settings import Sampling, SamplingConfig

Array = jax.Array


@flax.struct.dataclass
class RowSampling:
    """Per-row draw settings of `R` decode rows, plus static flags (part of the compile key).

    - `temperature [R]` (0 = greedy), `top_p [R]` (1 = off), `top_k [R]` (0 = off);
    - `all_greedy`: every row is greedy (no draw, no filter is traced);
    - `all_random`: no row is greedy (no argmax is traced);
    - `top_k_bound`: 0 = no row filters by top-k; else every row's k is at most this (the
      width of the `lax.top_k` taken; the vocabulary size when unknown);
    - `no_top_p`: no row filters by top-p (no sort is traced).
    A flag that claims less work than the rows ask for gives wrong draws; `uniform` and the
    serve engine's pool set them from the settings.
    """

    temperature: Array
    top_p: Array
    top_k: Array
    all_greedy: bool = flax.struct.field(pytree_node=False, default=False)
    all_random: bool = flax.struct.field(pytree_node=False, default=False)
    top_k_bound: int = flax.struct.field(pytree_node=False, default=0)
    no_top_p: bool = flax.struct.field(pytree_node=False, default=True)

    @classmethod
    def uniform(cls, sampling: Sampling, rows: int) -> "RowSampling":
        """Every one of `rows` rows at the run's `sampling` (temperature, top-p, top-k)."""
        full = lambda value, dtype: jnp.full((rows,), value, dtype)  # noqa: E731
        greedy = sampling.temperature == 0.0
        return cls(full(sampling.temperature, jnp.float32), full(sampling.top_p, jnp.float32),
                   full(sampling.top_k, jnp.int32), all_greedy=greedy, all_random=not greedy,
                   top_k_bound=sampling.top_k, no_top_p=sampling.top_p >= 1.0)


def filter_rows(scaled: Array, rows: RowSampling) -> Array:
    """Per-row top-k, then nucleus, filter of temperature-scaled logits `[R, V]` (others -> -inf).

    Top-k keeps the logits >= the row's k-th largest (ties at the k-th value kept). The
    nucleus keeps, in descending order, each token whose probability mass strictly above it
    (after top-k) is < p: the smallest prefix whose mass reaches p, the top token always kept.
    """
    vocab = scaled.shape[-1]
    kth = jnp.full(scaled.shape[:1], -jnp.inf, scaled.dtype)
    if rows.no_top_p and not rows.top_k_bound:
        return scaled
    if rows.no_top_p:  # top-k alone: the k largest, no full sort
        width = min(rows.top_k_bound, vocab)
        largest = jax.lax.top_k(scaled, width)[0]
    else:
        largest = -jnp.sort(-scaled, axis=-1)
    if rows.top_k_bound:
        k = jnp.clip(rows.top_k, 1, largest.shape[-1]) - 1
        kth = jnp.where(rows.top_k > 0, jnp.take_along_axis(largest, k[:, None], axis=-1)[:, 0], -jnp.inf)
    cut = kth
    if not rows.no_top_p:
        ordered = jnp.where(largest >= kth[:, None], largest, -jnp.inf)
        probs = jax.nn.softmax(ordered, axis=-1)
        keep = ((jnp.cumsum(probs, axis=-1) - probs) < rows.top_p[:, None]) | (rows.top_p[:, None] >= 1.0)
        cut = jnp.maximum(kth, jnp.min(jnp.where(keep, ordered, jnp.inf), axis=-1))
    return jnp.where(scaled >= cut[:, None], scaled, -jnp.inf)


def choose_rows(logits: Array, keys: Array, rows: RowSampling) -> Array:
    """One token per row from fp32 logits `[R, V]` with per-row keys `[R]`, each row at its
    own settings: greedy rows take the argmax, the others a draw from their filtered,
    temperature-scaled distribution."""
    greedy = blocked_argmax(logits) if not rows.all_random else None
    if rows.all_greedy:
        return greedy
    temperature = rows.temperature if rows.all_random else jnp.where(rows.temperature > 0, rows.temperature, 1.0)
    drawn = blocked_categorical(keys, filter_rows(logits / temperature[:, None], rows))
    return drawn if rows.all_random else jnp.where(rows.temperature > 0, drawn, greedy)


def choose_tokens(logits: Array, keys: Array, scfg: Sampling) -> Array:
    """`choose_rows` with every row at the run's settings `scfg`."""
    return choose_rows(logits, keys, RowSampling.uniform(scfg, logits.shape[0]))


def top_k_mask(logits: Array, k: int) -> Array:
    """Keep the k largest logits per row of `[R, V]` (ties at the k-th value kept), others -> -inf."""
    return filter_rows(logits, RowSampling.uniform(Sampling(top_k=k), logits.shape[0]))


def top_p_mask(logits: Array, p: float) -> Array:
    """Nucleus filter of `[R, V]`: keep the smallest set of top tokens whose probability reaches p."""
    return filter_rows(logits, RowSampling.uniform(Sampling(top_p=p), logits.shape[0]))


def chosen_logprob(logits: Array, tok: Array) -> Array:
    """log-softmax of `logits [R, V]` at `tok [R]`, without materialising the [R, V] log-softmax
    (the logsumexp taken per vocabulary block, then over the blocks: `vocab_blocks`)."""
    lse = jax.nn.logsumexp(jax.nn.logsumexp(vocab_blocks(logits), axis=-1), axis=-1)
    return jnp.take_along_axis(logits, tok[:, None], axis=-1)[:, 0] - lse


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
