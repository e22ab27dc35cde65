"""Static shapes of a sampler call: the power-of-two and half-step buckets of batch and
lengths, prompt-group widths, row chunks under `max_rows`, compaction phases and cache
windows. Plain integers (and one array re-layout, `split_rows`), decided before tracing."""

from __future__ import annotations

import math

import jax

from prd_jax.sampling.settings import SamplingConfig

Array = jax.Array


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


def split_rows(x: Array, chunks: int) -> Array:
    """`[B, ...]` -> `[C, B/C, ...]`, chunk c holding rows c, c + C, ... (a local re-layout)."""
    return x.reshape(x.shape[0] // chunks, chunks, *x.shape[1:]).swapaxes(0, 1)


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
