"""Long-CoT, SR and PDR as pure functions `(lm, problems, keys, spec, ctx) -> OperatorResult`.

`keys` holds one PRNG key per problem, so each problem's result is independent of the
batch it runs in (use `run`, which also accepts one key and splits it).

PDR (arXiv 2510.01123 §3.2): round 1 drafts M_1 solutions with the sampler's
prefill-once fan-out; each later round distils the previous round's outputs into a
bounded workspace (a summary, or k selected candidates) and runs M_r refine calls
conditioned on (problem, workspace). The workspace is rebuilt every round. All rounds
are unrolled inside one jitted program, so prompts are assembled from token segments on
device and nothing is decoded between calls.

Accepted path (B_seq): the final call is accepted; walking back, each round's accepted
call is the *parent* of the next accepted one: the top-ranked candidate in its
workspace (shared/per-sample top-k: the first listed; random-k: the first drawn;
global summary: draft `m mod M_{r-1}`). A round's summary call and the selector's rating
call of the accepted candidate are on the path too.
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np

from prd_jax.operators.assembly import assemble, literal, truncate_head_tail
from prd_jax.operators.budget import CallLog, group, one_hot_accepted
from prd_jax.operators.specs import PDR, SR, LongCoT, Sampling
from prd_jax.sampling import SamplingConfig

Array = jax.Array


@flax.struct.dataclass
class Problems:
    """A batch of tokenized problems (right-padded) and their gold answers (for oracles)."""

    tokens: Array
    lengths: Array
    answer_tokens: Array
    answer_lengths: Array


@dataclasses.dataclass(frozen=True, eq=False)
class Context:
    """Static, per-tokenizer pieces: compiled templates, digit ids, oracle grader."""

    templates: dict
    digit_ids: tuple
    sampling: Sampling
    pad_id: int = 0
    grader: Any = None  # host object with .correct(cand_tok, cand_len, ans_tok, ans_len) -> bool[R]


@flax.struct.dataclass
class OperatorResult:
    """Final completions, every call's budget record, and the final call's workspace."""

    final_tokens: Array
    final_lengths: Array
    calls: CallLog
    workspace_tokens: Array
    workspace_lengths: Array
    truncations: Array
    round_tokens: tuple
    round_lengths: tuple

    @property
    def b_seq(self) -> Array:
        return self.calls.b_seq

    @property
    def b_total(self) -> Array:
        return self.calls.b_total


def _scfg(ctx: Context, max_new: int, num_samples: int = 1) -> SamplingConfig:
    s = ctx.sampling
    return SamplingConfig(max_new, s.temperature, s.top_p, s.top_k, num_samples, s.stop_ids)


def _fill(tpl, rows: int, fills: dict) -> list:
    segs = [literal(tpl.pieces[0], rows)]
    for i, slot in enumerate(tpl.slots):
        if slot not in fills:
            raise ValueError(f"template {tpl.name!r} has slot {{{slot}}} that this call cannot fill")
        segs += fills[slot]
        segs.append(literal(tpl.pieces[i + 1], rows))
    return segs


def _fold(keys: Array, tag: int) -> Array:
    """Per-row keys `[R]` with `tag` folded in (one key per problem keeps rows batch-independent)."""
    return jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, tag)


def _per_sample(keys: Array, m: int) -> Array:
    """Keys `[B]` -> `[B*m]`: row (b, j) gets `fold_in(keys[b], j)`."""
    return jax.vmap(lambda k: jax.vmap(lambda j: jax.random.fold_in(k, j))(jnp.arange(m)))(keys).reshape(-1)


def _call(lm, segments, keys, ctx: Context, max_new: int, num_samples: int):
    """One batched model call with one key per prompt row.

    Returns (tokens [R*M, N], lengths, in_tokens [R*M], overflow [R]).
    """
    capacity = sum(s[0].shape[1] for s in segments)
    prompts, plen, overflow = assemble(segments, capacity, ctx.pad_id)
    out = lm.generate(prompts, plen, keys, _scfg(ctx, max_new, num_samples))
    return out.tokens, out.lengths, jnp.repeat(plen, num_samples), overflow


def _rows(x: Array, per: int) -> Array:
    return jnp.repeat(x, per, axis=0) if per > 1 else x


def _candidate_list(tpl, cand_tok, cand_len, idx, admitted, spec):
    """Segments "header_j candidate_j footer" for j < k from `idx [R, k]` into `cand [R, M, N]`."""
    rows, k = idx.shape
    segs, truncs = [], jnp.zeros((rows,), jnp.int32)
    footer = literal(tpl.footer, rows)
    for j in range(k):
        tok = jnp.take_along_axis(cand_tok, idx[:, j, None, None], axis=1)[:, 0]
        length = jnp.take_along_axis(cand_len, idx[:, j:j + 1], axis=1)[:, 0] * admitted[:, j]
        tok, length, cut = truncate_head_tail(tok, length, spec.candidate_max_tokens, spec.truncation_head)
        header = literal(tpl.headers[j], rows)
        on = admitted[:, j].astype(jnp.int32)
        segs += [(header[0], header[1] * on), (tok, length), (footer[0], footer[1] * on)]
        truncs = truncs + cut.astype(jnp.int32)
    return segs, truncs


def _single(cand_tok, cand_len, spec):
    tok, length, cut = truncate_head_tail(cand_tok, cand_len, spec.candidate_max_tokens, spec.truncation_head)
    return (tok, length), cut.astype(jnp.int32)


def long_cot(lm, problems: Problems, key: Array, spec: LongCoT, ctx: Context) -> OperatorResult:
    """Single pass: one call with `spec.max_new_tokens` (paper's Long-CoT baseline)."""
    b = problems.tokens.shape[0]
    segs = _fill(ctx.templates["solve"], b, {"problem": [(problems.tokens, problems.lengths)]})
    tok, length, in_tok, overflow = _call(lm, segs, _fold(key, 1), ctx, spec.max_new_tokens, 1)
    calls = CallLog.from_groups([group(in_tok[:, None], length[:, None], jnp.ones((b, 1), bool), "solve")])
    empty = jnp.zeros((b, 1), jnp.int32)
    return OperatorResult(tok, length, calls, empty, jnp.zeros((b,), jnp.int32), overflow.astype(jnp.int32),
                          (tok[:, None],), (length[:, None],))


def sr(lm, problems: Problems, key: Array, spec: SR, ctx: Context) -> OperatorResult:
    """Sequential refinement (paper §3.1): solve, then refine the previous answer `rounds` times.

    Every call is on the accepted path, so B_seq = B_total.
    """
    b = problems.tokens.shape[0]
    problem = [(problems.tokens, problems.lengths)]
    segs = _fill(ctx.templates["solve"], b, {"problem": problem})
    tok, length, in_tok, overflow = _call(lm, segs, _fold(key, 1), ctx, spec.max_new_tokens, 1)
    groups = [group(in_tok[:, None], length[:, None], jnp.ones((b, 1), bool), "solve")]
    truncs, rounds_t, rounds_l = overflow.astype(jnp.int32), [tok[:, None]], [length[:, None]]
    refine = ctx.templates["sr_error_analysis" if spec.error_analysis else "sr_refine"]
    workspace = (jnp.zeros((b, 1), jnp.int32), jnp.zeros((b,), jnp.int32))
    for r in range(2, spec.rounds + 2):
        workspace, cut = _single(tok, length, spec)
        segs = _fill(refine, b, {"problem": problem, "previous": [workspace]})
        tok, length, in_tok, overflow = _call(lm, segs, _fold(key, r), ctx, spec.max_new_tokens, 1)
        groups.append(group(in_tok[:, None], length[:, None], jnp.ones((b, 1), bool), "refine"))
        truncs = truncs + cut + overflow
        rounds_t.append(tok[:, None])
        rounds_l.append(length[:, None])
    return OperatorResult(tok, length, CallLog.from_groups(groups), workspace[0], workspace[1], truncs,
                          tuple(rounds_t), tuple(rounds_l))


# ----------------------------------------------------------------------------- selection

def _pointwise_scores(lm, problems, cand_tok, cand_len, ctx, spec):
    """Model's own 1-9 rating per candidate: expected digit under the next-token distribution."""
    b, m, n = cand_tok.shape
    flat_t, flat_l = cand_tok.reshape(b * m, n), cand_len.reshape(b * m)
    cand, _ = _single(flat_t, flat_l, spec)
    segs = _fill(ctx.templates["pointwise_judge"], b * m,
                 {"problem": [(_rows(problems.tokens, m), _rows(problems.lengths, m))], "candidate": [cand]})
    capacity = sum(s[0].shape[1] for s in segs)
    prompts, plen, _ = assemble(segs, capacity, ctx.pad_id)
    logits = lm.next_logits(prompts, plen)
    digits = jax.nn.softmax(logits[:, jnp.asarray(ctx.digit_ids)], axis=-1)  # [B*M, 9]
    rating = jnp.sum(digits * jnp.arange(1, 10), axis=-1)
    return rating.reshape(b, m), plen.reshape(b, m)


def _oracle_correct(problems, cand_tok, cand_len, ctx):
    if ctx.grader is None:
        raise ValueError("oracle selectors need Context.grader (ground-truth grading)")
    b, m, n = cand_tok.shape

    def host(ct, cl, at, al):
        return np.asarray(ctx.grader.correct(ct, cl, at, al), dtype=bool)

    return jax.pure_callback(host, jax.ShapeDtypeStruct((b * m,), jnp.bool_),
                             cand_tok.reshape(b * m, n), cand_len.reshape(b * m),
                             _rows(problems.answer_tokens, m), _rows(problems.answer_lengths, m)).reshape(b, m)


def select(lm, problems, cand_tok, cand_len, key, spec: PDR, ctx: Context):
    """Scores `[B, M]` (higher first), admission mask, and the rating calls (or None)."""
    b, m, _ = cand_tok.shape
    tie_break = -jnp.arange(m)[None, :] * 1e-6  # equal scores: lower index first
    if spec.selector == "random":
        return jax.vmap(lambda k: jax.random.uniform(k, (m,)))(key), jnp.ones((b, m), bool), None
    if spec.selector == "self_pointwise":
        rating, in_tok = _pointwise_scores(lm, problems, cand_tok, cand_len, ctx, spec)
        return rating + tie_break, jnp.ones((b, m), bool), (in_tok, jnp.ones_like(in_tok))
    correct = _oracle_correct(problems, cand_tok, cand_len, ctx)
    admitted = correct if spec.selector == "oracle_correct" else ~correct
    return admitted.astype(jnp.float32) + tie_break, admitted, None


# ----------------------------------------------------------------------------- PDR

def _distill_indices(scores, admitted, key, spec: PDR, m_prev: int, m_next: int):
    """Workspace candidate indices `[B, m_next, k]`, their admission, and each call's parent."""
    b = scores.shape[0]
    k = spec.k
    if spec.distill == "shared_topk":
        order = jnp.argsort(-scores, axis=1)[:, :k]
        idx = jnp.broadcast_to(order[:, None, :], (b, m_next, k))
    elif spec.distill == "per_sample_topk":
        own = jnp.broadcast_to(jnp.arange(m_next)[None, :] % m_prev, (b, m_next))
        others = jnp.where(jnp.arange(m_prev)[None, None, :] == own[:, :, None], -jnp.inf, scores[:, None, :])
        rest = jnp.argsort(-others, axis=2)[:, :, :k - 1]
        idx = jnp.concatenate([own[:, :, None], rest], axis=2)
    else:  # random_k: each refine call draws its own k distinct candidates
        noise = jax.vmap(lambda k: jax.random.uniform(k, (m_next, m_prev)))(key)
        idx = jnp.argsort(noise, axis=2)[:, :, :k]
    adm = jnp.take_along_axis(jnp.broadcast_to(admitted[:, None, :], (b, m_next, m_prev)), idx, axis=2)
    return idx, adm, idx[:, :, 0]


def pdr(lm, problems: Problems, key: Array, spec: PDR, ctx: Context) -> OperatorResult:
    """Parallel-Distill-Refine over `spec.schedule`; see the module docstring for B_seq."""
    b = problems.tokens.shape[0]
    problem = [(problems.tokens, problems.lengths)]
    sched = spec.schedule
    segs = _fill(ctx.templates["solve"], b, {"problem": problem})
    tok, length, in_tok, overflow = _call(lm, segs, _fold(key, 1), ctx, spec.max_new_tokens, sched[0])
    n = tok.shape[1]
    cand_t, cand_l = tok.reshape(b, sched[0], n), length.reshape(b, sched[0])
    gen = [(in_tok.reshape(b, sched[0]), cand_l, "draft")]
    parents: List[Optional[Array]] = [None]
    extra: List[tuple] = []  # (round, kind, in [B, W], out [B, W])
    truncs = overflow.astype(jnp.int32)
    rounds_t, rounds_l = [cand_t], [cand_l]
    workspace = None
    for r in range(2, len(sched) + 1):
        m_prev, m_next = sched[r - 2], sched[r - 1]
        rkey = _fold(key, r)
        if spec.distill == "global_summary":
            all_idx = jnp.broadcast_to(jnp.arange(m_prev)[None, :], (b, m_prev))
            cands, cut = _candidate_list(ctx.templates["distill_summary"], cand_t, cand_l, all_idx,
                                         jnp.ones((b, m_prev), bool), spec)
            segs = _fill(ctx.templates["distill_summary"], b, {"problem": problem, "candidates": cands})
            s_tok, s_len, s_in, s_over = _call(lm, segs, _fold(rkey, 7), ctx, spec.kappa, 1)
            extra.append((r, "summary", s_in[:, None], s_len[:, None]))
            workspace_rows = [(s_tok, s_len)]
            segs = _fill(ctx.templates["pdr_summary"], b, {"problem": problem, "summary": workspace_rows})
            tok, length, in_tok, over = _call(lm, segs, rkey, ctx, spec.max_new_tokens, m_next)
            parent = jnp.broadcast_to(jnp.arange(m_next)[None, :] % m_prev, (b, m_next))
            truncs = truncs + cut + s_over + over
            workspace = assemble(workspace_rows, workspace_rows[0][0].shape[1], ctx.pad_id)[:2]
        else:
            scores, admitted, rating = select(lm, problems, cand_t, cand_l, _fold(rkey, 11), spec, ctx)
            if rating is not None:
                extra.append((r - 1, "rating", rating[0], rating[1]))
            idx, adm, parent = _distill_indices(scores, admitted, _fold(rkey, 13), spec, m_prev, m_next)
            shared = spec.distill == "shared_topk"
            rows = b if shared else b * m_next
            sel_idx = idx[:, 0] if shared else idx.reshape(b * m_next, spec.k)
            sel_adm = adm[:, 0] if shared else adm.reshape(b * m_next, spec.k)
            src_t = cand_t if shared else _rows(cand_t, m_next)
            src_l = cand_l if shared else _rows(cand_l, m_next)
            prob = problem if shared else [(_rows(problems.tokens, m_next), _rows(problems.lengths, m_next))]
            if spec.refine_template == "previous":
                top_t = jnp.take_along_axis(src_t, sel_idx[:, :1, None], axis=1)[:, 0]
                top_l = jnp.take_along_axis(src_l, sel_idx[:, :1], axis=1)[:, 0] * sel_adm[:, 0]
                seg, cut = _single(top_t, top_l, spec)
                workspace_rows = [seg]
                segs = _fill(ctx.templates["sr_refine"], rows, {"problem": prob, "previous": workspace_rows})
            else:
                tpl = ctx.templates["pdr_topk"]
                workspace_rows, cut = _candidate_list(tpl, src_t, src_l, sel_idx, sel_adm, spec)
                segs = _fill(tpl, rows, {"problem": prob, "candidates": workspace_rows})
            width = sum(s[0].shape[1] for s in workspace_rows)
            ws_t, ws_l, _ = assemble(workspace_rows, width, ctx.pad_id)
            if shared:
                tok, length, in_tok, over = _call(lm, segs, rkey, ctx, spec.max_new_tokens, m_next)
                truncs = truncs + cut + over
            else:
                tok, length, in_tok, over = _call(lm, segs, _per_sample(rkey, m_next), ctx,
                                                  spec.max_new_tokens, 1)
                truncs = truncs + (cut + over).reshape(b, m_next).sum(axis=1)
                ws_t, ws_l = ws_t.reshape(b, m_next, -1)[:, 0], ws_l.reshape(b, m_next)[:, 0]
            workspace = (ws_t, ws_l)
        cand_t, cand_l = tok.reshape(b, m_next, n), length.reshape(b, m_next)
        gen.append((in_tok.reshape(b, m_next), cand_l, "refine"))
        parents.append(parent)
        rounds_t.append(cand_t)
        rounds_l.append(cand_l)

    # Walk the accepted path back from the single final call.
    accepted_idx = [None] * len(sched)
    accepted_idx[-1] = jnp.zeros((b,), jnp.int32)
    for r in range(len(sched) - 1, 0, -1):
        accepted_idx[r - 1] = jnp.take_along_axis(parents[r], accepted_idx[r][:, None], axis=1)[:, 0]
    groups = []
    for r, (g_in, g_out, name) in enumerate(gen, start=1):
        for (er, kind, e_in, e_out) in extra:  # a round's summary precedes its refine calls
            if er == r and kind == "summary":
                groups.append(group(e_in, e_out, jnp.ones_like(e_in, bool), kind))
        groups.append(group(g_in, g_out, one_hot_accepted(accepted_idx[r - 1], g_in.shape[1]), name))
        for (er, kind, e_in, e_out) in extra:
            if er == r and kind == "rating":
                groups.append(group(e_in, e_out, one_hot_accepted(accepted_idx[r - 1], e_in.shape[1]), kind))
    return OperatorResult(cand_t[:, 0], cand_l[:, 0], CallLog.from_groups(groups), workspace[0], workspace[1],
                          truncs, tuple(rounds_t), tuple(rounds_l))


OPERATORS = {LongCoT: long_cot, SR: sr, PDR: pdr}


def run(lm, problems: Problems, key: Array, spec, ctx: Context) -> OperatorResult:
    """Dispatch on the spec's type (the eval harness and RL rollouts both call this).

    `key` is one key per problem `[B]` (a problem's result then does not depend on the
    rest of the batch) or a single key, split into B.
    """
    b = problems.tokens.shape[0]
    if key.shape != (b,):
        key = jax.random.split(key, b)
    if type(spec) not in OPERATORS:
        raise ValueError(f"unknown operator spec {type(spec).__name__}; allowed: {[t.__name__ for t in OPERATORS]}")
    return OPERATORS[type(spec)](lm, problems, key, spec, ctx)
