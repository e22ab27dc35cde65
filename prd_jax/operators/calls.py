"""Building blocks shared by all operators: filling templates, batched model calls, keys,
candidate lists, and the accepted-path walk that turns calls into budgets.

Budgets follow the PDR paper (arXiv 2510.01123 §2): B_seq sums the calls on the accepted
path, B_total all calls (see `budget.py`).
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

import flax
import jax
import jax.numpy as jnp

from prd_jax.operators.assembly import assemble, literal, truncate_head_tail
from prd_jax.operators.budget import CallLog, group, one_hot_accepted
from prd_jax.sampling import SamplingConfig

Array = jax.Array


def sampling_config(ctx, max_new: int, num_samples: int = 1) -> SamplingConfig:
    s = ctx.sampling
    return SamplingConfig(max_new, s.temperature, s.top_p, s.top_k, num_samples, s.stop_ids,
                          max(s.max_rows, num_samples) if s.max_rows else 0)


def fill(tpl, rows: int, fills: dict) -> list:
    """Segments of `tpl` with its slots filled by `fills[slot]` (lists of segments)."""
    segs = [literal(tpl.pieces[0], rows)]
    for i, slot in enumerate(tpl.slots):
        if slot not in fills:
            raise ValueError(f"template {tpl.name!r} has slot {{{slot}}} that this call cannot fill")
        segs += fills[slot]
        segs.append(literal(tpl.pieces[i + 1], rows))
    return segs


def width(segments) -> int:
    return sum(s[0].shape[1] for s in segments)


def fold(keys: Array, tag) -> Array:
    """Per-row keys `[R]` with `tag` folded in (one key per problem keeps rows batch-independent)."""
    return jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, tag)


def per_sample(keys: Array, m: int) -> Array:
    """Keys `[B]` -> `[B*m]`: row (b, j) gets `fold_in(keys[b], j)`."""
    return jax.vmap(lambda k: jax.vmap(lambda j: jax.random.fold_in(k, j))(jnp.arange(m)))(keys).reshape(-1)


@dataclasses.dataclass
class CallOut:
    """A batched call's outputs `[R*M, ...]`; unpacks as (tokens, lengths, in_tokens, overflow).

    `prompts`/`prompt_lengths` (left-padded, repeated per sample) and the sampler's
    `logprobs` are what RL needs to train on the call (`RoundTrace`)."""

    tokens: Array
    lengths: Array
    in_tokens: Array
    overflow: Array
    prompts: Array
    logprobs: Array

    def __iter__(self):
        return iter((self.tokens, self.lengths, self.in_tokens, self.overflow))

    def trace(self, b: int, m: int) -> "RoundTrace":
        return RoundTrace(self.prompts.reshape(b, m, -1), self.in_tokens.reshape(b, m),
                          self.logprobs.reshape(b, m, -1))


@flax.struct.dataclass
class RoundTrace:
    """One round's M calls per problem as RL sees them: left-padded prompts `[B, M, C]`
    (template, problem and workspace), prompt lengths `[B, M]`, completion logprobs `[B, M, N]`."""

    prompts: Array
    prompt_lengths: Array
    logprobs: Array


def call(lm, segments, keys, ctx, max_new: int, num_samples: int, name: str = "operator call") -> CallOut:
    """One batched model call with one key per prompt row (M = `num_samples` per row).

    `name` ("pdr.refine", ...) is how a context-overflow refusal names the call."""
    prompts, plen, overflow = assemble(segments, width(segments), ctx.pad_id)
    out = lm.generate(prompts, plen, keys, sampling_config(ctx, max_new, num_samples), name=name)
    return CallOut(out.tokens, out.lengths, jnp.repeat(plen, num_samples), overflow,
                   rows(prompts, num_samples), out.logprobs)


def rows(x: Array, per: int) -> Array:
    return jnp.repeat(x, per, axis=0) if per > 1 else x


def strip_stop(tok, length, stop_ids):
    """Lengths `[R]` without a final stop token (EOS, end of turn): the stop ends a call and
    counts in its out_tokens, but it is not part of the text a later prompt quotes (a quoted
    end-of-turn token would end the quoting prompt's turn early)."""
    if not stop_ids:
        return length
    last = jnp.take_along_axis(tok, jnp.maximum(length - 1, 0)[:, None], axis=1)[:, 0]
    return length - (jnp.isin(last, jnp.asarray(stop_ids)) & (length > 0)).astype(length.dtype)


def single(cand_tok, cand_len, spec, stop_ids):
    """One candidate, final stop token dropped, capped head+tail at `spec.candidate_max_tokens`;
    (segment, cut [R])."""
    cand_len = strip_stop(cand_tok, cand_len, stop_ids)
    tok, length, cut = truncate_head_tail(cand_tok, cand_len, spec.candidate_max_tokens, spec.truncation_head)
    return (tok, length), cut.astype(jnp.int32)


def candidate_list(tpl, cand_tok, cand_len, idx, admitted, spec, stop_ids):
    """Segments "header_j candidate_j footer" for j < k from `idx [R, k]` into `cand [R, M, N]`."""
    n_rows, k = idx.shape
    segs, truncs = [], jnp.zeros((n_rows,), jnp.int32)
    footer = literal(tpl.footer, n_rows)
    for j in range(k):
        tok = jnp.take_along_axis(cand_tok, idx[:, j, None, None], axis=1)[:, 0]
        length = jnp.take_along_axis(cand_len, idx[:, j:j + 1], axis=1)[:, 0] * admitted[:, j]
        (tok, length), cut = single(tok, length, spec, stop_ids)
        header = literal(tpl.headers[j], n_rows)
        on = admitted[:, j].astype(jnp.int32)
        segs += [(header[0], header[1] * on), (tok, length), (footer[0], footer[1] * on)]
        truncs = truncs + cut
    return segs, truncs


def problem_rows(problems, per: int) -> list:
    return [(rows(problems.tokens, per), rows(problems.lengths, per))]


@dataclasses.dataclass
class ExtraCalls:
    """Non-generation calls tied to a round: a summary (`before` the round's calls, all
    accepted) or judge calls on the round's candidates (`accepted` None: the call of the
    accepted candidate; else an explicit mask `[B, W]`)."""

    round: int
    name: str
    in_tokens: Array
    out_tokens: Array
    accepted: Optional[Array] = None
    before: bool = False


def path_calls(gen: list, parents: list, extra: List[ExtraCalls], final_index: Array) -> CallLog:
    """Walk the accepted path back from `final_index [B]` of the last round.

    `gen[r]` is round r+1's (in [B, M], out [B, M], name); `parents[r] [B, M]` gives each
    call's parent candidate in round r (None for round 1). Returns the call log in
    round order with summaries before and judge calls after their round.
    """
    accepted_idx = [None] * len(gen)
    accepted_idx[-1] = final_index
    for r in range(len(gen) - 1, 0, -1):
        accepted_idx[r - 1] = jnp.take_along_axis(parents[r], accepted_idx[r][:, None], axis=1)[:, 0]
    groups = []
    for r, (g_in, g_out, name) in enumerate(gen, start=1):
        mine = [e for e in extra if e.round == r]
        for e in mine:
            if e.before:
                groups.append(group(e.in_tokens, e.out_tokens, jnp.ones_like(e.in_tokens, bool), e.name))
        groups.append(group(g_in, g_out, one_hot_accepted(accepted_idx[r - 1], g_in.shape[1]), name))
        for e in mine:
            if not e.before:
                acc = (one_hot_accepted(accepted_idx[r - 1], e.in_tokens.shape[1])
                       if e.accepted is None else e.accepted)
                groups.append(group(e.in_tokens, e.out_tokens, acc, e.name))
    return CallLog.from_groups(groups)
