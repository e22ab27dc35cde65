"""Parallel-Distill-Refine: its settings (`PDR`) and its run function.

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
thinking block unless `spec.budget.quote_thinking` (`calls.quotable`).
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

import jax
import jax.numpy as jnp

from prd_jax.operators import verify
from prd_jax.operators.assembly import assemble
from prd_jax.operators.calls import (ExtraCalls, call, candidate_list, fill, fold, path_calls, per_sample,
                                     problem_rows, quotable, rows, single)
from prd_jax.operators.core import Context, OperatorResult, Problems, empty_workspace, make_result
from prd_jax.operators.registry import register_operator
from prd_jax.operators.specs import (DISTILL_VARIANTS, MODEL_SELECTORS, ORACLE_SELECTORS, PDR_KAPPA, PDR_SELECTORS,
                                     CallBudget, Judge, OperatorSpec, as_judge, check_bool, check_positive, check_think,
                                     flat_budget, judge_roles, labelled, thinking_label)

Array = jax.Array


@flat_budget("schedule", "distill", "k", "selector", "kappa", "max_new_tokens", "candidate_max_tokens",
             "truncation_head", "refine_template", "judge", "summary_vote_counts", "quote_thinking", "think_budget",
             "kappa_think")
@dataclasses.dataclass(frozen=True)
class PDR(OperatorSpec):
    """Parallel-Distill-Refine with schedule (M_1, ..., M_R), M_R = 1 (paper §3.2).

    Distill variants (paper §3.2, Fig. 2b) and the `selector` each one takes (`SELECTORS`
    says what each name means; PDR takes `PDR_SELECTORS`):
    - `shared_topk` / `per_sample_topk`: the k candidates `selector` ranks first. A model
      ranker (`self_pointwise`, or `pairwise_v1`, our V1 extension) is the paper's top-k;
      `random` picks k uniformly at random, so the workspace is a random k (labelled
      `random-k`); `majority` (ours, no model calls) ranks by how many candidates share
      each one's final answer; an oracle admits only (in)correct candidates (paper §4.1
      and App. D.1, Figs. 6 and 8).
    - `random_k`: each refine call draws its own k at random; no selector runs, so
      `selector` must be "random".
    - `global_summary`: one summary of at most `kappa` tokens over every candidate
      (`selector="random"`, the default), or over the candidates an oracle admits
      (`oracle_correct` / `oracle_incorrect`, paper Figs. 6 and 8). Model rankers are
      refused: the summary would not use their ranking.

    `summary_vote_counts` (ours; off by default, the paper's summary keeps agreements,
    contradictions, intermediate results and open subgoals, §3.1) asks the summary to also
    list every final answer with how many candidates reached it (`distill_summary_votes`).
    `refine_template` "topk" uses the numbered-candidates prompt; "previous" feeds the
    top-1 candidate through the SR prompt (so schedule (1, ..., 1) is SR).
    """

    schedule: Tuple[int, ...] = (8, 4, 1)
    distill: str = "shared_topk"
    k: int = 2
    selector: str = "random"
    kappa: int = PDR_KAPPA
    refine_template: str = "topk"
    judge: Judge = Judge()
    summary_vote_counts: bool = False
    kappa_think: int = 0  # > 0: the summary call's thinking is closed after this many of its kappa tokens
    budget: CallBudget = CallBudget()  # drafts and refines (the summary's is `kappa`)

    TEMPLATES = ("solve", "pdr_topk", "sr_refine", "pdr_summary", "distill_summary", "distill_summary_votes",
                 "pointwise", "pairwise")

    def __post_init__(self):
        object.__setattr__(self, "schedule", tuple(int(m) for m in self.schedule))
        if len(self.schedule) < 2 or self.schedule[-1] != 1 or min(self.schedule) < 1:
            raise ValueError(f"PDR.schedule={self.schedule}; must have >= 2 rounds of positive sizes "
                             "and end with M_R = 1, e.g. (8, 4, 1)")
        if self.distill not in DISTILL_VARIANTS:
            raise ValueError(f"PDR.distill={self.distill!r}; allowed: {DISTILL_VARIANTS}")
        if self.selector not in PDR_SELECTORS:
            raise ValueError(f"PDR.selector={self.selector!r}; allowed: {PDR_SELECTORS}")
        if self.distill == "random_k" and self.selector != "random":
            raise ValueError(f"PDR.selector={self.selector!r} with distill='random_k': random-k draws its "
                             "candidates at random and runs no selector; allowed: 'random'")
        if self.distill == "global_summary" and self.selector not in ("random",) + ORACLE_SELECTORS:
            raise ValueError(f"PDR.selector={self.selector!r} with distill='global_summary': the summary "
                             f"reads its candidates unranked; allowed: 'random' (all candidates), "
                             f"{ORACLE_SELECTORS} (oracle selection into the summary)")
        check_positive(self, "k", "kappa")
        check_think(self, "kappa_think", self.kappa)
        if self.distill != "global_summary" and self.k > min(self.schedule[:-1]):
            raise ValueError(f"PDR.k={self.k} exceeds the smallest distilled round M="
                             f"{min(self.schedule[:-1])} of schedule {self.schedule}; need k <= M")
        object.__setattr__(self, "judge", as_judge(self.judge))
        if self.refine_template not in ("topk", "previous"):
            raise ValueError(f"PDR.refine_template={self.refine_template!r}; allowed: 'topk', 'previous'")
        if self.refine_template == "previous" and (self.k != 1 or self.distill == "global_summary"):
            raise ValueError("PDR.refine_template='previous' needs k=1 and an extractive distill")
        check_bool(self, "summary_vote_counts")
        if self.summary_vote_counts and self.distill != "global_summary":
            raise ValueError(f"PDR.summary_vote_counts=True needs distill='global_summary' "
                             f"(got distill={self.distill!r})")

    def template_roles(self) -> tuple:
        if self.distill == "global_summary":
            refine = ("distill_summary_votes" if self.summary_vote_counts else "distill_summary", "pdr_summary")
        else:
            refine = ("sr_refine",) if self.refine_template == "previous" else ("pdr_topk",)
        judged = judge_roles(self.selector) if self.distill != "random_k" else ()
        return ("solve",) + refine + judged

    @property
    def k_max(self) -> int:
        """A global summary lists up to a round's M candidates (top-k lists k <= M)."""
        return max(self.schedule)

    def round_sizes(self) -> tuple:
        return self.schedule

    @property
    def label(self) -> str:
        """`pdr(schedule,distill,...)`: kappa for a summary, k and the selector for top-k
        ("random-k" for a random top-k), the judge when a model ranks, then every other
        non-default field (refine template, candidate truncation, ...)."""
        shown = {"schedule", "distill", "quote_thinking"}
        if self.distill == "global_summary":
            core = [f"kappa={self.kappa}", f"sel={self.selector}" if self.selector in ORACLE_SELECTORS else "",
                    "vote_counts" if self.summary_vote_counts else ""]
            shown |= {"kappa", "selector", "summary_vote_counts"}
        elif self.distill == "random_k":
            core = [f"k={self.k}"]
            shown |= {"k", "selector"}
        elif self.selector == "random":  # a uniformly random pick: the "top-k" is a random k
            core = [f"k={self.k}", "random-k"]
            shown |= {"k", "selector"}
        else:
            judged = f"[{self.judge.label}]" if self.selector in MODEL_SELECTORS else ""
            core = [f"k={self.k}", f"sel={self.selector}{judged}"]
            shown |= {"k", "selector"} | ({"judge"} if judged else set())
        sched = "-".join(map(str, self.schedule))
        return labelled(self, "pdr", [sched, self.distill] + core + [thinking_label(self)[1:]], shown)


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
    out = call(lm, segs, rkey, ctx, spec.budget.max_new_tokens, m_next, "pdr.refine", spec.budget.think_budget)
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
        out = call(lm, segs, rkey, ctx, spec.budget.max_new_tokens, m_next, "pdr.refine", spec.budget.think_budget)
        truncs = cut + out.overflow
    else:
        out = call(lm, segs, per_sample(rkey, m_next), ctx, spec.budget.max_new_tokens, 1, "pdr.refine",
                   spec.budget.think_budget)
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
    out = call(lm, segs, fold(key, 1), ctx, spec.budget.max_new_tokens, sched[0], "pdr.draft", spec.budget.think_budget)
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
