"""In-graph judge calls with ratings on 1..10 (V1-Infer, arXiv 2603.04304 §4).

A judge call reasons up to `Judge.max_new_tokens` and should close with rating tags
(`<rating_A>n</rating_A> <rating_B>n</rating_B>` pairwise, `<rating>n</rating>`
pointwise). Tags are read on the host from the decoded output: the last `<tag>n</tag>`
with n in 1..10, per tag.

Parse failures and forced ratings (the papers are silent; our rules):
- A call is *unparsed* when at least one of its tags is missing or out of 1..10 in its
  output, whether the judge stopped on its own or ran into its reasoning budget. It is
  counted once (`Ratings.forced`, summed per problem into `OperatorResult.judge_unparsed`).
- An unparsed call is *forced*: after its output (final stop token dropped) each tag's
  prefix ("\n<rating_A>", then "</rating_A> <rating_B>", ...) is appended in turn, and a
  missing tag's rating is the argmax of the next-token distribution restricted to
  "1".."10" (its expected value is kept as `confidence`); a tag that did parse keeps its
  value and is restated in the forced suffix. The forced suffix counts as output tokens.
- A forced rating is used like a parsed one (pointwise score, tournament mu): no judge
  call is dropped in-graph. (`tournament.py`'s "unparsed" outputs, None or non-finite,
  come only from host-side judges such as the simulation.)
- With `max_new_tokens = 0` every rating is forced at once (a cheap judge with no
  reasoning) and nothing is counted as unparsed.

"10" is one token for some tokenizers (Llama 3) and "1" "0" for others (SmolLM2, Qwen).
In the second case a second forward pass with "1" appended gives P("0" | "1"), and
P(10) = P("1") P("0" | "1"), P(1) = P("1") (1 - P("0" | "1")) over the digit-restricted
first step. Forced suffix tokens count as the call's output tokens.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np

from prd_jax.operators.assembly import assemble, literal
from prd_jax.operators.calls import billed, sampling_config, width
from prd_jax.prompts import FORCED_PREFIXES

Array = jax.Array

TAGS = {"pairwise": ("rating_A", "rating_B"), "pointwise": ("rating",)}


@dataclasses.dataclass(frozen=True, eq=False)
class RatingTokens:
    """Token ids for forced ratings: "1".."9", "0", a single-token "10" if any, the token
    sequence of each rating 1..10 and the forced tag prefixes per judge kind."""

    digit_ids: tuple
    zero_id: int
    ten_id: Optional[int]
    values: tuple
    prefixes: dict

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "RatingTokens":
        digits = []
        for d in "0123456789":
            ids = tokenizer.encode(d)
            if len(ids) != 1:
                raise ValueError(f"tokenizer encodes digit {d!r} as {ids}; judges need one token per digit")
            digits.append(ids[0])
        ten = tokenizer.encode("10")
        prefixes = {kind: tuple(tuple(tokenizer.encode(p)) for p in ps) for kind, ps in FORCED_PREFIXES.items()}
        values = tuple(tuple(tokenizer.encode(str(r))) for r in range(1, 11))
        return cls(tuple(digits[1:]), digits[0], ten[0] if len(ten) == 1 else None, values, prefixes)


class RatingParser:
    """Host side: read the last `<tag>n</tag>` with n in 1..10 from decoded judge outputs."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, tokens, lengths, *, tags) -> np.ndarray:
        out = np.zeros((len(lengths), len(tags)), np.int32)
        for i, (row, n) in enumerate(zip(np.asarray(tokens), np.asarray(lengths))):
            text = self.tokenizer.decode(row[:n].tolist())
            for t, tag in enumerate(tags):
                found = re.findall(rf"<{tag}>\s*(\d{{1,2}})\s*</{tag}>", text)
                if found and 1 <= int(found[-1]) <= 10:
                    out[i, t] = int(found[-1])
        return out


@flax.struct.dataclass
class Ratings:
    """Per judge call: ratings and confidences `[R, T]` (T tags), parse failures `forced`
    (a tag missing from the judge's reasoning), and the call's in/out token counts."""

    rating: Array
    confidence: Array
    forced: Array
    in_tokens: Array
    out_tokens: Array


def rating_distribution(lm, segments, rt: RatingTokens, pad_id: int, live=None) -> Array:
    """P(rating = 1..10) `[R, 10]` for the token after `segments` (restricted to ratings).
    `live [R]`: the rows whose rating is read (a remote LM sends no request for the rest)."""
    n_rows = segments[0][0].shape[0]
    live = jnp.ones((n_rows,), bool) if live is None else live
    if rt.ten_id is not None:
        prompts, plen, _ = assemble(segments, width(segments), pad_id)
        logits = lm.next_logits(prompts, plen, name="judge.rating", live=live)
        return jax.nn.softmax(logits[:, jnp.asarray(rt.digit_ids + (rt.ten_id,))], axis=-1)
    one = literal(rt.digit_ids[:1], n_rows)
    doubled = [(jnp.concatenate([t, t]), jnp.concatenate([n, n])) for t, n in segments]
    doubled.append((jnp.concatenate([one[0], one[0]]),
                    jnp.concatenate([jnp.zeros_like(one[1]), one[1]])))
    prompts, plen, _ = assemble(doubled, width(doubled), pad_id)
    logits = lm.next_logits(prompts, plen, name="judge.rating", live=jnp.concatenate([live, live]))
    first = jax.nn.softmax(logits[:n_rows, jnp.asarray(rt.digit_ids)], axis=-1)  # "1".."9"
    zero = jax.nn.softmax(logits[n_rows:], axis=-1)[:, rt.zero_id]  # P("0" | "1")
    return jnp.concatenate([first[:, :1] * (1 - zero)[:, None], first[:, 1:], (first[:, 0] * zero)[:, None]],
                           axis=1)


def _value_segment(rt: RatingTokens, rating: Array):
    """Token segment of the integer rating (1..10) per row."""
    table = np.zeros((10, 2), np.int32)
    lens = np.zeros((10,), np.int32)
    for r, ids in enumerate(rt.values):
        table[r, :len(ids)] = ids[:2]
        lens[r] = len(ids)
    idx = rating.astype(jnp.int32) - 1
    return jnp.asarray(table)[idx], jnp.asarray(lens)[idx]


def rate(lm, segments, keys, ctx, judge, kind: str, name: str = "", live=None) -> Ratings:
    """One batched judge call on prompt `segments` (rows R); see the module docstring.
    `name` names the model call (default `judge.<kind>`); `live [R]` marks the rows that are
    real calls (a tournament batch's unused slots are not; a remote LM skips them)."""
    rt: RatingTokens = ctx.ratings
    tags, prefixes = TAGS[kind], rt.prefixes[kind]
    n_rows = segments[0][0].shape[0]
    live = jnp.ones((n_rows,), bool) if live is None else live
    prompts, plen, _ = assemble(segments, width(segments), ctx.pad_id)
    if judge.max_new_tokens > 0:
        out = lm.generate(prompts, plen, keys, sampling_config(ctx, judge.max_new_tokens, think=judge.think_budget),
                          name=name or f"judge.{kind}", live=live)
        reasoning = (out.tokens, out.lengths - out.stopped.astype(jnp.int32))
        parse = functools.partial(ctx.parser, tags=tags)
        parsed = jax.pure_callback(parse, jax.ShapeDtypeStruct((n_rows, len(tags)), jnp.int32),
                                   out.tokens, out.lengths)
        plen, out_tokens = billed(out, plen)
    else:
        reasoning = (jnp.zeros((n_rows, 1), jnp.int32), jnp.zeros((n_rows,), jnp.int32))
        parsed = jnp.zeros((n_rows, len(tags)), jnp.int32)
        out_tokens = jnp.zeros((n_rows,), jnp.int32)
    missing = parsed == 0

    def forced(_):
        segs, ratings, confs = list(segments) + [reasoning], [], []
        extra = jnp.zeros((n_rows,), jnp.int32)
        for t in range(len(tags)):
            segs.append(literal(prefixes[t], n_rows))
            probs = rating_distribution(lm, segs, rt, ctx.pad_id, live & missing[:, t])
            values = jnp.arange(1, 11, dtype=jnp.float32)
            r = jnp.where(missing[:, t], jnp.argmax(probs, axis=1) + 1, parsed[:, t]).astype(jnp.float32)
            ratings.append(r)
            confs.append(jnp.where(missing[:, t], probs @ values, r))
            segs.append(_value_segment(rt, r))
            extra = extra + len(prefixes[t]) + segs[-1][1]
        return jnp.stack(ratings, 1), jnp.stack(confs, 1), extra

    def parsed_only(_):
        as_float = parsed.astype(jnp.float32)
        return as_float, as_float, jnp.zeros((n_rows,), jnp.int32)

    need = jnp.any(missing, axis=1)
    rating, confidence, extra = jax.lax.cond(jnp.any(need), forced, parsed_only, None)
    failed = need if judge.max_new_tokens > 0 else jnp.zeros_like(need)  # no reasoning: nothing to parse
    return Ratings(rating, confidence, failed, plen, out_tokens + jnp.where(need, extra, 0))
