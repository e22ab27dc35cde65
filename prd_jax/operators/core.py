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
call is the *parent* of the next accepted one: the first candidate of its workspace that
was admitted (shared top-k: the top-ranked; per-sample top-k: the call's own candidate
if admitted, else its top-ranked admitted other; random-k: the first drawn; global
summary: the `m mod A`-th of the A admitted candidates, in index order, so draft
`m mod M_{r-1}` when all are). Only oracle selectors admit fewer than all. A call whose
workspace admitted none refines from an empty workspace (a summary over no candidate);
its parent on the path is then the previous round's latency-bound call, the one that
generated the most tokens (our choice; the paper is silent; `calls.path_calls`). A round's
summary call and the selector's rating call of the accepted candidate are on the path too.

Random-k runs no selector (no judge calls, nothing paid). Quoted candidates drop their
thinking block unless `spec.quote_thinking` (`calls.quotable`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional

import flax
import jax
import jax.numpy as jnp

from prd_jax.operators import verify
from prd_jax.operators.assembly import assemble
from prd_jax.operators.budget import CallLog, group
from prd_jax.operators.calls import (ExtraCalls, call, candidate_list, fill, fold, path_calls, per_sample,
                                     problem_rows, quotable, rows, single)
from prd_jax.operators.registry import register_operator
from prd_jax.operators.specs import ORACLE_SELECTORS, PDR, SR, LongCoT, Sampling

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
    """Static, per-tokenizer pieces: compiled templates, rating tokens, host callbacks.

    `parser` reads judge rating tags from decoded text, `answer_ids` groups candidates by
    extracted answer (majority vote), `grader` grades against gold (oracle selectors).
    `think_end` holds the end-of-thinking marker's token ids (() : the tokenizer has no
    thinking block, nothing is stripped) and `think_skip` the newline / space ids dropped
    after it (`calls.strip_thinking`; `runner.thinking_marker` reads both from a tokenizer).
    `templates` maps a role ("solve", "pdr_topk", "pairwise", ...) to its compiled template.
    """

    templates: dict
    ratings: Any
    sampling: Sampling
    pad_id: int = 0
    grader: Any = None  # host object with .correct(cand_tok, cand_len, ans_tok, ans_len) -> bool[R]
    parser: Any = None  # host callable (tokens, lengths, *, tags) -> int32 [R, T], 0 = missing
    answer_ids: Any = None  # host callable (cand_tok [B, N, L], cand_len [B, N]) -> int32 [B, N]
    trace: bool = False  # return each round's prompts and logprobs (RL rollouts)
    think_end: tuple = ()
    think_skip: tuple = ()
    domain: str = ""  # the template set's domain (prompts.SET_DOMAINS); a Judge.domain must match it


@flax.struct.dataclass
class OperatorResult:
    """Final completions, every call's budget record, the final call's workspace (left-padded,
    `workspace_lengths` valid tokens at the end), and the number of judge calls whose rating
    tags did not parse and were forced (`judges.py`)."""

    final_tokens: Array
    final_lengths: Array
    calls: CallLog
    workspace_tokens: Array
    workspace_lengths: Array
    truncations: Array
    round_tokens: tuple
    round_lengths: tuple
    judge_unparsed: Array
    round_traces: tuple = ()  # RoundTrace per round when Context.trace (Long-CoT, SR, PDR)

    @property
    def b_seq(self) -> Array:
        return self.calls.b_seq

    @property
    def b_total(self) -> Array:
        return self.calls.b_total

    @property
    def b_seq_io(self) -> Array:
        return self.calls.b_seq_io

    @property
    def b_total_io(self) -> Array:
        return self.calls.b_total_io


def make_result(final_t, final_l, calls, workspace, truncs, rounds_t, rounds_l, unparsed=None,
                traces=()) -> OperatorResult:
    """An OperatorResult with int32 counters (shared by every operator)."""
    b = final_t.shape[0]
    unparsed = jnp.zeros((b,), jnp.int32) if unparsed is None else unparsed.astype(jnp.int32)
    return OperatorResult(final_t, final_l, calls, workspace[0], workspace[1], truncs.astype(jnp.int32),
                          tuple(rounds_t), tuple(rounds_l), unparsed, tuple(traces))


def empty_workspace(b: int):
    """The workspace of an operator that has none: one pad token, length 0, per problem."""
    return jnp.zeros((b, 1), jnp.int32), jnp.zeros((b,), jnp.int32)


@register_operator("long_cot", spec=LongCoT)
def long_cot(lm, problems: Problems, key: Array, spec: LongCoT, ctx: Context) -> OperatorResult:
    """Single pass: one call with `spec.max_new_tokens` (paper's Long-CoT baseline)."""
    b = problems.tokens.shape[0]
    segs = fill(ctx.templates["solve"], b, {"problem": problem_rows(problems, 1)})
    out = call(lm, segs, fold(key, 1), ctx, spec.max_new_tokens, 1, "long_cot.solve", spec.think_budget)
    tok, length, in_tok, overflow = out
    calls = CallLog.from_groups([group(in_tok[:, None], out.bill_out[:, None], jnp.ones((b, 1), bool), "solve")])
    return make_result(tok, length, calls, empty_workspace(b), overflow, [tok[:, None]], [length[:, None]],
                   traces=[out.trace(b, 1)] if ctx.trace else ())


@register_operator("sr", spec=SR)
def sr(lm, problems: Problems, key: Array, spec: SR, ctx: Context) -> OperatorResult:
    """Sequential refinement (paper §3.2.1): solve, then refine the previous answer `rounds` times.

    Every call is on the accepted path, so B_seq = B_total. With `ctx.trace`, one
    RoundTrace per call (M = 1), as Long-CoT and PDR return them.
    """
    b = problems.tokens.shape[0]
    problem = problem_rows(problems, 1)
    segs = fill(ctx.templates["solve"], b, {"problem": problem})
    out = call(lm, segs, fold(key, 1), ctx, spec.max_new_tokens, 1, "sr.solve", spec.think_budget)
    tok, length, in_tok, overflow = out
    groups = [group(in_tok[:, None], out.bill_out[:, None], jnp.ones((b, 1), bool), "solve")]
    truncs, rounds_t, rounds_l = overflow.astype(jnp.int32), [tok[:, None]], [length[:, None]]
    traces = [out.trace(b, 1)]
    refine = ctx.templates["sr_error_analysis" if spec.error_analysis else "sr_refine"]
    workspace = empty_workspace(b)
    for r in range(2, spec.rounds + 2):
        workspace, cut = single(tok, length, spec, ctx)
        segs = fill(refine, b, {"problem": problem, "previous": [workspace]})
        out = call(lm, segs, fold(key, r), ctx, spec.max_new_tokens, 1, "sr.refine", spec.think_budget)
        tok, length, in_tok, overflow = out
        groups.append(group(in_tok[:, None], out.bill_out[:, None], jnp.ones((b, 1), bool), "refine"))
        truncs = truncs + cut + overflow
        rounds_t.append(tok[:, None])
        rounds_l.append(length[:, None])
        traces.append(out.trace(b, 1))
    workspace = assemble([workspace], workspace[0].shape[1], ctx.pad_id)[:2]  # left-padded, as PDR's
    return make_result(tok, length, CallLog.from_groups(groups), workspace, truncs, rounds_t, rounds_l,
                       traces=traces if ctx.trace else ())


# ----------------------------------------------------------------------------- PDR

def _distill_indices(scores, admitted, key, spec: PDR, m_prev: int, m_next: int):
    """Workspace candidate indices `[B, m_next, k]`, their admission, and each call's parent
    (its first admitted candidate; -1 if it admitted none)."""
    b = scores.shape[0]
    k = spec.k
    if spec.distill == "shared_topk":
        order = jnp.argsort(-scores, axis=1, stable=True)[:, :k]
        idx = jnp.broadcast_to(order[:, None, :], (b, m_next, k))
    elif spec.distill == "per_sample_topk":
        own = jnp.broadcast_to(jnp.arange(m_next)[None, :] % m_prev, (b, m_next))
        others = jnp.where(jnp.arange(m_prev)[None, None, :] == own[:, :, None], -jnp.inf, scores[:, None, :])
        rest = jnp.argsort(-others, axis=2, stable=True)[:, :, :k - 1]
        idx = jnp.concatenate([own[:, :, None], rest], axis=2)
    else:  # random_k: each refine call draws its own k distinct candidates
        noise = jax.vmap(lambda k: jax.random.uniform(k, (m_next, m_prev)))(key)
        idx = jnp.argsort(noise, axis=2)[:, :, :k]
    adm = jnp.take_along_axis(jnp.broadcast_to(admitted[:, None, :], (b, m_next, m_prev)), idx, axis=2)
    first = jnp.take_along_axis(idx, jnp.argmax(adm, axis=2)[:, :, None], axis=2)[:, :, 0]
    return idx, adm, jnp.where(jnp.any(adm, axis=2), first, -1)


def _admission(problems, cand_t, cand_l, spec, ctx):
    """Which candidates a global summary reads `[B, M]`: all, or an oracle's choice."""
    if spec.selector in ORACLE_SELECTORS:
        return verify.oracle(problems, cand_t, cand_l, ctx, spec.selector == "oracle_correct").admitted
    return jnp.ones(cand_l.shape, bool)


def _summary_round(lm, problems, cand_t, cand_l, rkey, spec, ctx, r, m_prev, m_next):
    b = cand_t.shape[0]
    problem = problem_rows(problems, 1)
    admitted = _admission(problems, cand_t, cand_l, spec, ctx)
    order = jnp.argsort((~admitted).astype(jnp.int32), axis=1, stable=True)  # admitted first, by index
    tpl = ctx.templates["distill_summary_votes" if spec.summary_vote_counts else "distill_summary"]
    cands, cut = candidate_list(tpl, cand_t, cand_l, order, jnp.take_along_axis(admitted, order, axis=1), spec, ctx)
    segs = fill(tpl, b, {"problem": problem, "candidates": cands})
    summary = call(lm, segs, fold(rkey, 7), ctx, spec.kappa, 1, "pdr.summary", spec.kappa_think)
    s_tok, s_len, s_in, s_over = summary
    extra = ExtraCalls(r, "summary", s_in[:, None], summary.bill_out[:, None], before=True)
    s_tok, s_len = quotable(s_tok, s_len, spec, ctx)  # the summary as quoted
    segs = fill(ctx.templates["pdr_summary"], b, {"problem": problem, "summary": [(s_tok, s_len)]})
    out = call(lm, segs, rkey, ctx, spec.max_new_tokens, m_next, "pdr.refine", spec.think_budget)
    n_adm = jnp.sum(admitted, axis=1)
    pos = jnp.arange(m_next)[None, :] % jnp.maximum(n_adm, 1)[:, None]
    parent = jnp.where(n_adm[:, None] > 0, jnp.take_along_axis(order, pos, axis=1), -1)
    workspace = assemble([(s_tok, s_len)], s_tok.shape[1], ctx.pad_id)[:2]
    return out, parent, [extra], workspace, cut + s_over + out.overflow, jnp.zeros((b,), jnp.int32)


def _extractive_round(lm, problems, cand_t, cand_l, rkey, spec, ctx, r, m_prev, m_next):
    b = cand_t.shape[0]
    if spec.distill == "random_k":  # no selector runs: nothing is ranked or paid for
        sel = verify.Selection(jnp.zeros(cand_l.shape), jnp.ones(cand_l.shape, bool), [], jnp.zeros((b,), jnp.int32))
    else:
        sel = verify.select(spec.selector, lm, problems, cand_t, cand_l, fold(rkey, 11), spec.judge, ctx, spec)
    idx, adm, parent = _distill_indices(sel.scores, sel.admitted, fold(rkey, 13), spec, m_prev, m_next)
    shared = spec.distill == "shared_topk"
    n_rows = b if shared else b * m_next
    sel_idx = idx[:, 0] if shared else idx.reshape(b * m_next, spec.k)
    sel_adm = adm[:, 0] if shared else adm.reshape(b * m_next, spec.k)
    src_t = cand_t if shared else rows(cand_t, m_next)
    src_l = cand_l if shared else rows(cand_l, m_next)
    prob = problem_rows(problems, 1 if shared else m_next)
    if spec.refine_template == "previous":
        top_t = jnp.take_along_axis(src_t, sel_idx[:, :1, None], axis=1)[:, 0]
        top_l = jnp.take_along_axis(src_l, sel_idx[:, :1], axis=1)[:, 0] * sel_adm[:, 0]
        seg, cut = single(top_t, top_l, spec, ctx)
        workspace_rows = [seg]
        segs = fill(ctx.templates["sr_refine"], n_rows, {"problem": prob, "previous": workspace_rows})
    else:
        tpl = ctx.templates["pdr_topk"]
        workspace_rows, cut = candidate_list(tpl, src_t, src_l, sel_idx, sel_adm, spec, ctx)
        segs = fill(tpl, n_rows, {"problem": prob, "candidates": workspace_rows})
    ws_t, ws_l, _ = assemble(workspace_rows, sum(s[0].shape[1] for s in workspace_rows), ctx.pad_id)
    if shared:
        out = call(lm, segs, rkey, ctx, spec.max_new_tokens, m_next, "pdr.refine", spec.think_budget)
        truncs = cut + out.overflow
    else:
        out = call(lm, segs, per_sample(rkey, m_next), ctx, spec.max_new_tokens, 1, "pdr.refine", spec.think_budget)
        truncs = (cut + out.overflow).reshape(b, m_next).sum(axis=1)
        ws_t, ws_l = ws_t.reshape(b, m_next, -1)[:, 0], ws_l.reshape(b, m_next)[:, 0]
    # judge calls rate the previous round's candidates: they belong to round r - 1
    return out, parent, sel.extra(r - 1), (ws_t, ws_l), truncs, sel.unparsed


@register_operator("pdr", spec=PDR)
def pdr(lm, problems: Problems, key: Array, spec: PDR, ctx: Context) -> OperatorResult:
    """Parallel-Distill-Refine over `spec.schedule`; see the module docstring for B_seq."""
    b = problems.tokens.shape[0]
    sched = spec.schedule
    segs = fill(ctx.templates["solve"], b, {"problem": problem_rows(problems, 1)})
    out = call(lm, segs, fold(key, 1), ctx, spec.max_new_tokens, sched[0], "pdr.draft", spec.think_budget)
    tok, length, in_tok, overflow = out
    traces = [out.trace(b, sched[0])]
    n = tok.shape[1]
    cand_t, cand_l = tok.reshape(b, sched[0], n), length.reshape(b, sched[0])
    gen = [(in_tok.reshape(b, sched[0]), out.bill_out.reshape(b, sched[0]), "draft")]
    parents: List[Optional[Array]] = [None]
    extra: List[ExtraCalls] = []
    truncs, unparsed = overflow.astype(jnp.int32), jnp.zeros((b,), jnp.int32)
    rounds_t, rounds_l = [cand_t], [cand_l]
    workspace = empty_workspace(b)
    round_fn = _summary_round if spec.distill == "global_summary" else _extractive_round
    for r in range(2, len(sched) + 1):
        out, parent, calls, workspace, cut, bad = round_fn(
            lm, problems, cand_t, cand_l, fold(key, r), spec, ctx, r, sched[r - 2], sched[r - 1])
        tok, length, in_tok = out.tokens, out.lengths, out.bill_in
        traces.append(out.trace(b, sched[r - 1]))
        extra += calls
        truncs, unparsed = truncs + cut, unparsed + bad
        cand_t, cand_l = tok.reshape(b, sched[r - 1], n), length.reshape(b, sched[r - 1])
        gen.append((in_tok.reshape(b, sched[r - 1]), out.bill_out.reshape(b, sched[r - 1]), "refine"))
        parents.append(parent)
        rounds_t.append(cand_t)
        rounds_l.append(cand_l)
    calls = path_calls(gen, parents, extra, jnp.zeros((b,), jnp.int32))
    return make_result(cand_t[:, 0], cand_l[:, 0], calls, workspace, truncs, rounds_t, rounds_l, unparsed,
                   traces if ctx.trace else ())

