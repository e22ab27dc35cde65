"""Uncertainty-adaptive PDR (ours): rounds and drafts go only where the drafts disagree.

The PDR paper (arXiv 2510.01123, §3.2 and its closing discussion) spends the same fan-out and
rounds on every problem and names "uncertainty-conditioned round and fan-out schedules,
budget-aware compute allocation" as future work. This operator is one such schedule:

- Round 1: `min_fanout` drafts per problem (the `solve` prompt).
- After each round, the round's candidates give an agreement signal per problem:
  - `majority`: the largest answer group's share of the round's candidates (the task's
    answer key, as the `majority` selector groups them; unanswered candidates form no group);
  - `v1_mu`: the V1 pairwise mu gap between the top two candidates of a Swiss tournament
    over the round's candidates (V1 arXiv 2603.04304 §4, Alg. 2-4), for tasks without keys.
  A problem whose signal is >= `tau` stops: its answer is the round's top candidate (a member
  of the largest group, or the top mu), and it makes no later call.
- Rounds 2..R-1 refine (the `pdr_topk` prompt over the round's top-k by the signal's
  ranking, PDR §3.2 shared top-k) with a fan-out per problem chosen by `allocate`, within the
  batch's token cap; round R is one refine per problem still going, whose output is its answer.

Static shapes: every round has a fixed number of rows per problem (`min_fanout` drafts,
`max_fanout` refines, then 1); rows that do not run are masked. A masked row costs nothing in
the budgets and is not sent by a remote LM (`live`); in-graph it is still computed.

Cap: `cap` is the mean B_total per problem of the generation calls, so the batch may
generate at most `cap x B` tokens. Each call is reserved at `max_new_tokens` before it runs,
and one final refine per live problem is reserved before a middle round is granted, so the
generation tokens never pass the cap. `v1_mu` judge calls come on top (counted in B_total).

B_seq: the accepted path walks back from a problem's answer (the stop round's top
candidate, or the final refine) through each round's workspace top-1 (its parent); with
`v1_mu`, each judged round on the path puts its tournament batches' longest calls on it.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from prd_jax.operators import judges, verify
from prd_jax.operators.assembly import assemble
from prd_jax.operators.budget import CallLog, group
from prd_jax.operators.calls import (CallOut, billed, call, candidate_list, fill, fold, per_sample, problem_rows,
                                     rows, sampling_config, single, width)
from prd_jax.operators.core import make_result
from prd_jax.operators.registry import register_operator
from prd_jax.operators.specs import Judge, OperatorSpec, _check_bool, _check_think, _check_truncation, as_judge, labelled

Array = jax.Array
SIGNALS = ("majority", "v1_mu")
UNLIMITED = 2 ** 30  # calls left when there is no cap


@dataclasses.dataclass(frozen=True)
class AdaptivePDR(OperatorSpec):
    """Settings of uncertainty-adaptive PDR (module docstring).

    `rounds` R >= 2 (drafts, R-2 refine rounds of adaptive fan-out, one final refine);
    `min_fanout` / `max_fanout`: drafts in round 1, and the least / most refine calls a
    problem is granted in a middle round; `tau` in (0, 1]: the agreement at which a problem
    stops; `cap`: mean generated tokens per problem the batch may spend (0: no cap; else at
    least (min_fanout + 1) x max_new_tokens); `signal`: "majority" or "v1_mu"; `k`: the
    workspace's candidates; `judge`: the pairwise judge of `v1_mu`."""

    rounds: int = 3
    min_fanout: int = 2
    max_fanout: int = 8
    tau: float = 0.75
    cap: int = 0
    signal: str = "majority"
    k: int = 2
    max_new_tokens: int = 512
    candidate_max_tokens: int = 512
    truncation_head: int = 128
    judge: Judge = Judge()
    quote_thinking: bool = False
    think_budget: int = 0

    TEMPLATES = ("solve", "pdr_topk", "pairwise")

    def __post_init__(self):
        for name, low in (("rounds", 2), ("min_fanout", 1), ("k", 1), ("max_new_tokens", 1),
                          ("candidate_max_tokens", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"AdaptivePDR.{name}={value!r}; must be an int >= {low}")
        if not isinstance(self.max_fanout, (int, np.integer)) or self.max_fanout < self.min_fanout:
            raise ValueError(f"AdaptivePDR.max_fanout={self.max_fanout!r}; must be an int >= "
                             f"min_fanout={self.min_fanout}")
        if not isinstance(self.tau, (int, float)) or not 0.0 < self.tau <= 1.0:
            raise ValueError(f"AdaptivePDR.tau={self.tau!r}; allowed: (0, 1]")
        if self.signal not in SIGNALS:
            raise ValueError(f"AdaptivePDR.signal={self.signal!r}; allowed: {SIGNALS}")
        if self.signal == "v1_mu" and self.min_fanout < 2:
            raise ValueError(f"AdaptivePDR.min_fanout={self.min_fanout} with signal='v1_mu'; a tournament "
                             "needs >= 2 candidates")
        if self.k > self.min_fanout:
            raise ValueError(f"AdaptivePDR.k={self.k} exceeds min_fanout={self.min_fanout}; need k <= min_fanout "
                             "(every round a problem runs has at least min_fanout candidates)")
        least = (self.min_fanout + 1) * self.max_new_tokens
        if not isinstance(self.cap, (int, np.integer)) or (self.cap != 0 and self.cap < least):
            raise ValueError(f"AdaptivePDR.cap={self.cap!r}; allowed: 0 (no cap) or an int >= (min_fanout + 1) x "
                             f"max_new_tokens = {least} (the drafts and one final refine per problem)")
        _check_think(self, "think_budget", self.max_new_tokens)
        _check_truncation(self)
        object.__setattr__(self, "judge", as_judge(self.judge))
        _check_bool(self, "quote_thinking")

    def template_roles(self) -> tuple:
        return ("solve", "pdr_topk") + (("pairwise",) if self.signal == "v1_mu" else ())

    @property
    def k_max(self) -> int:
        return self.k

    @property
    def label(self) -> str:
        judged = f"[{self.judge.label}]" if self.signal == "v1_mu" else ""
        core = [f"R={self.rounds}", f"M={self.min_fanout}-{self.max_fanout}", f"tau={self.tau:g}",
                f"cap={self.cap}", f"sig={self.signal}{judged}", f"k={self.k}",
                "quote_thinking" if self.quote_thinking else ""]
        shown = {"rounds", "min_fanout", "max_fanout", "tau", "cap", "signal", "k", "quote_thinking"}
        return labelled(self, "adaptive_pdr", core, shown | ({"judge"} if judged else set()))


# ----------------------------------------------------------------------------- the allocation rule

def allocate(uncertainty: Array, live: Array, calls_left: Array, min_fanout: int, max_fanout: int) -> Array:
    """Refine calls `[B]` of the next middle round, never more than `calls_left` in total.

    The rule (ours): a live problem with uncertainty u in [0, 1] (1 - agreement) asks for
    `min_fanout + round(u x (max_fanout - min_fanout))` calls. Problems are served in order of
    descending u (ties: lower index); each gets what it asks while calls are left, else what
    is left if that is at least `min_fanout`, else none (it skips the round and keeps its
    candidates for the next). Replace this function to change the rule."""
    u = jnp.clip(uncertainty, 0.0, 1.0)
    want = jnp.where(live, min_fanout + jnp.round(u * (max_fanout - min_fanout)).astype(jnp.int32), 0)
    order = jnp.argsort(jnp.where(live, -u, 2.0), stable=True)

    def serve(left, i):
        grant = jnp.minimum(want[i], left)
        grant = jnp.where(grant >= min_fanout, grant, 0)
        return left - grant, grant

    _, granted = jax.lax.scan(serve, jnp.asarray(calls_left, jnp.int32), order)
    return jnp.zeros_like(want).at[order].set(granted)


# ----------------------------------------------------------------------------- signals

def _majority_signal(cand_t, cand_l, ran, ctx):
    """(scores [B, W]: votes of each candidate's answer, -1 where it did not run; agreement
    [B]: the largest group's share of the candidates that ran)."""
    b, w, _ = cand_t.shape
    ids = jax.pure_callback(ctx.answer_ids, jax.ShapeDtypeStruct((b, w), jnp.int32), cand_t, cand_l)
    ids = jnp.where(ran, ids, -1)
    votes = jnp.sum((ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] >= 0), axis=2)
    votes = jnp.where(ids >= 0, votes, 0).astype(jnp.float32)
    share = jnp.max(votes, axis=1) / jnp.maximum(jnp.sum(ran, axis=1), 1)
    return jnp.where(ran, votes, -1.0), share


def _tournament_step(judge, n_max, width_, seeds, counts, hp, hr, hc, t):
    """Host callback: each problem's next tournament batch over its own `counts[b]`
    candidates (`verify.replay`), padded to `[B, W, 2]` with -1, its size, and final mu."""
    seeds, counts, hp, hr, hc = map(np.asarray, (seeds, counts, hp, hr, hc))
    b = len(seeds)
    pairs = np.full((b, width_, 2), -1, np.int32)
    count = np.zeros((b,), np.int32)
    mu = np.full((b, n_max), -1.0, np.float32)
    for i in range(b):
        n = int(counts[i])
        if n < 2:
            mu[i, :n] = 0.5
            continue
        history = [([tuple(p) for p in hp[i, s, :hc[i, s]]], [tuple(float(x) for x in r) for r in hr[i, s, :hc[i, s]]])
                   for s in range(int(t))]
        batch, result = verify.replay("pairwise_v1", n, judge.budget_multiple * n, judge, int(seeds[i]), history)
        if batch:
            pairs[i, :len(batch)] = batch
            count[i] = len(batch)
        else:
            mu[i, :n] = result.mu
    return pairs, count, mu


def _mu_signal(lm, problems, cand_t, cand_l, ran, key, spec, ctx):
    """V1 tournament (pairwise_v1) over each problem's candidates that ran (a problem with
    none makes no call). Returns (scores [B, W]: mu, -1 where not run; agreement [B]: mu gap
    of the top two; judge in / out [B, T*Wj]; accepted [B, T*Wj]: each batch's longest call;
    unparsed [B])."""
    b, w, _ = cand_t.shape
    judge = spec.judge
    counts = jnp.sum(ran, axis=1).astype(jnp.int32)
    _, wj, t_max = verify.tournament_budget("pairwise_v1", w, judge)
    (tok, lens), _ = _quoted(cand_t, cand_l, spec, ctx)
    seeds = jax.vmap(lambda k: jax.random.randint(k, (), 0, 2 ** 31 - 1))(key)
    host = functools.partial(_tournament_step, judge, w, wj)
    shapes = (jax.ShapeDtypeStruct((b, wj, 2), jnp.int32), jax.ShapeDtypeStruct((b,), jnp.int32),
              jax.ShapeDtypeStruct((b, w), jnp.float32))
    tpl = verify.judge_template(ctx, judge, "pairwise")
    prob = problem_rows(problems, wj)

    def side(idx, valid):
        t = jnp.take_along_axis(tok, jnp.maximum(idx, 0)[:, :, None], axis=1)
        return t.reshape(b * wj, -1), (jnp.take_along_axis(lens, jnp.maximum(idx, 0), axis=1) * valid).reshape(-1)

    def body(state):
        t, pairs, count, hp, hr, hc, log_in, log_out, unparsed = state
        valid = jnp.arange(wj)[None, :] < count[:, None]
        segs = fill(tpl, b * wj, {"problem": prob, "candidate_a": [side(pairs[..., 0], valid)],
                                  "candidate_b": [side(pairs[..., 1], valid)]})
        r = judges.rate(lm, segs, per_sample(fold(key, t), wj), ctx, judge, "pairwise",
                        name="adaptive_pdr.judge", live=valid.reshape(-1))
        hp, hr, hc = hp.at[:, t].set(pairs), hr.at[:, t].set(r.rating.reshape(b, wj, 2)), hc.at[:, t].set(count)
        log_in = log_in.at[:, t].set(r.in_tokens.reshape(b, wj) * valid)
        log_out = log_out.at[:, t].set(r.out_tokens.reshape(b, wj) * valid)
        unparsed = unparsed + jnp.sum(r.forced.reshape(b, wj) & valid, axis=1)
        pairs, count, _ = jax.pure_callback(host, shapes, seeds, counts, hp, hr, hc, t + 1)
        return t + 1, pairs, count, hp, hr, hc, log_in, log_out, unparsed

    empty = (jnp.full((b, t_max, wj, 2), -1, jnp.int32), jnp.zeros((b, t_max, wj, 2), jnp.float32),
             jnp.zeros((b, t_max), jnp.int32))
    pairs, count, _ = jax.pure_callback(host, shapes, seeds, counts, *empty, 0)
    zeros = jnp.zeros((b, t_max, wj), jnp.int32)
    state = (jnp.int32(0), pairs, count, *empty, zeros, zeros, jnp.zeros((b,), jnp.int32))
    t, _, _, hp, hr, hc, log_in, log_out, unparsed = jax.lax.while_loop(
        lambda s: (s[0] < t_max) & jnp.any(s[2] > 0), body, state)
    _, _, mu = jax.pure_callback(host, shapes, seeds, counts, hp, hr, hc, t)
    top2 = jax.lax.top_k(jnp.where(ran, mu, -1.0), 2)[0]  # w >= min_fanout >= 2
    gap = jnp.where(counts >= 2, top2[:, 0] - jnp.maximum(top2[:, 1], 0.0), 1.0)
    longest = jnp.argmax(log_out, axis=2)
    accepted = (jnp.arange(wj)[None, None, :] == longest[:, :, None]) & (hc[:, :, None] > 0)
    return (jnp.where(ran, mu, -1.0), gap, log_in.reshape(b, -1), log_out.reshape(b, -1),
            accepted.reshape(b, -1), unparsed)


def _quoted(cand_t, cand_l, spec, ctx):
    """Candidates `[B, W, L]` as a judge quotes them (`calls.single`)."""
    b, w, length = cand_t.shape
    (tok, lens), cut = single(cand_t.reshape(b * w, length), cand_l.reshape(b * w), spec, ctx)
    return (tok.reshape(b, w, -1), lens.reshape(b, w)), cut.reshape(b, w)


# ----------------------------------------------------------------------------- calls

def _masked_call(lm, segs, keys, ctx, spec, per: int, ran: Array, name: str) -> CallOut:
    """`per` calls per problem, one prompt row each (`[B*per]`, keys `per_sample`), of which
    only `ran [B, per]` are real: a remote LM sends only those, and the budgets zero the rest."""
    prompts, plen, overflow = assemble(segs, width(segs), ctx.pad_id)
    prompts, plen = rows(prompts, per), rows(plen, per)
    out = lm.generate(prompts, plen, per_sample(keys, per), sampling_config(ctx, spec.max_new_tokens, 1,
                                                                           spec.think_budget),
                      name=name, live=ran.reshape(-1))
    bill_in, bill_out = billed(out, plen)
    live = ran.reshape(-1)
    return CallOut(out.tokens, out.lengths, plen, rows(overflow, per) & live, prompts, out.logprobs,
                   bill_in * live, bill_out * live)


def _signal(lm, problems, cand_t, cand_l, ran, key, spec, ctx):
    """(scores, agreement, judge records or None, unparsed) of one round's candidates."""
    if spec.signal == "majority":
        scores, agree = _majority_signal(cand_t, cand_l, ran, ctx)
        return scores, agree, None, jnp.zeros(ran.shape[:1], jnp.int32)
    scores, agree, j_in, j_out, j_acc, unparsed = _mu_signal(lm, problems, cand_t, cand_l, ran, key, spec, ctx)
    return scores, agree, (j_in, j_out, j_acc), unparsed


def _pad(x, w: int, value=0):
    """Pad axis 1 of `x` to `w` entries."""
    extra = w - x.shape[1]
    if extra <= 0:
        return x
    return jnp.pad(x, [(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2), constant_values=value)


@register_operator("adaptive_pdr", spec=AdaptivePDR)
def adaptive_pdr(lm, problems, keys, spec: AdaptivePDR, ctx):
    """Uncertainty-adaptive PDR (module docstring): early stop by agreement, fan-out by
    `allocate`, budgets of the calls that ran."""
    b, n_tok, w = problems.tokens.shape[0], spec.max_new_tokens, spec.max_fanout
    problem = problem_rows(problems, 1)
    cap_tokens = spec.cap * b
    truncs = jnp.zeros((b,), jnp.int32)
    unparsed = jnp.zeros((b,), jnp.int32)

    # round 1: min_fanout drafts for every problem
    first = jnp.ones((b, spec.min_fanout), bool)  # every problem drafts: one prompt, min_fanout samples
    out = call(lm, fill(ctx.templates["solve"], b, {"problem": problem}), fold(keys, 1), ctx, n_tok,
               spec.min_fanout, "adaptive_pdr.draft", spec.think_budget)
    cand_t = _pad(out.tokens.reshape(b, spec.min_fanout, -1), w)
    cand_l = _pad(out.lengths.reshape(b, spec.min_fanout), w)
    ran = _pad(first, w, False)
    truncs = truncs + out.overflow.reshape(b, -1).sum(axis=1)
    records = [dict(name="draft", in_=out.bill_in.reshape(b, -1), out=out.bill_out.reshape(b, -1),
                    parent=None, src=None, judge=None)]
    spent = jnp.sum(out.bill_out)  # generation tokens of the batch so far (the cap counts these)
    rounds_t, rounds_l = [cand_t], [cand_l]

    live = jnp.ones((b,), bool)
    stop_round = jnp.zeros((b,), jnp.int32)  # 1-based round each problem's answer comes from
    final_idx = jnp.zeros((b,), jnp.int32)
    final_t, final_l = cand_t[:, 0], cand_l[:, 0]
    pool_t, pool_l, pool_ran, pool_round = cand_t, cand_l, ran, jnp.ones((b,), jnp.int32)
    ws_t = ws_l = None

    def judge_round(r, cand_t, cand_l, ran, records, live, stop_round, final_idx, final_t, final_l, unparsed):
        """Signal of round r's candidates; problems that ran and agree stop with their top."""
        scores, agree, judged, bad = _signal(lm, problems, cand_t, cand_l, ran & live[:, None], fold(keys, 100 + r),
                                             spec, ctx)
        records[-1]["judge"] = judged
        ran_any = jnp.any(ran, axis=1) & live
        top = jnp.argmax(scores, axis=1)
        stop = ran_any & (agree >= spec.tau)
        top_t = jnp.take_along_axis(cand_t, top[:, None, None], axis=1)[:, 0]
        top_l = jnp.take_along_axis(cand_l, top[:, None], axis=1)[:, 0]
        final_t = jnp.where(stop[:, None], top_t, final_t)
        final_l = jnp.where(stop, top_l, final_l)
        stop_round = jnp.where(stop, r, stop_round)
        final_idx = jnp.where(stop, top, final_idx)
        return scores, 1.0 - jnp.clip(agree, 0.0, 1.0), live & ~stop, stop_round, final_idx, final_t, final_l, \
            unparsed + bad

    pool_scores, uncertainty, live, stop_round, final_idx, final_t, final_l, unparsed = judge_round(
        1, cand_t, cand_l, ran, records, live, stop_round, final_idx, final_t, final_l, unparsed)
    tpl = ctx.templates["pdr_topk"]
    for r in range(2, spec.rounds + 1):
        last = r == spec.rounds
        per = 1 if last else w
        calls_left = (cap_tokens - spent) // n_tok if spec.cap else jnp.int32(UNLIMITED)
        if last:
            grant = live.astype(jnp.int32)  # the reserve below guarantees these fit the cap
        else:
            grant = allocate(uncertainty, live, calls_left - jnp.sum(live), spec.min_fanout, spec.max_fanout)
        ran = jnp.arange(per)[None, :] < grant[:, None]
        order = jnp.argsort(-pool_scores, axis=1, stable=True)[:, :spec.k]  # [B, k] the workspace
        admitted = jnp.take_along_axis(pool_ran, order, axis=1)
        cands, cut = candidate_list(tpl, pool_t, pool_l, order, admitted, spec, ctx)
        segs = fill(tpl, b, {"problem": problem, "candidates": cands})
        out = _masked_call(lm, segs, fold(keys, r), ctx, spec, per, ran, f"adaptive_pdr.refine{r}")
        ran_any = jnp.any(ran, axis=1)
        truncs = truncs + jnp.where(ran_any, cut, 0) + out.overflow.reshape(b, -1).sum(axis=1)
        spent = spent + jnp.sum(out.bill_out)
        records.append(dict(name="refine", in_=out.bill_in.reshape(b, per), out=out.bill_out.reshape(b, per),
                            parent=jnp.broadcast_to(order[:, :1], (b, per)), src=pool_round, judge=None))
        r_t, r_l = out.tokens.reshape(b, per, -1), out.lengths.reshape(b, per)
        rounds_t.append(r_t)
        rounds_l.append(r_l)
        new_t, new_l, _ = assemble(cands, width(cands), ctx.pad_id)  # the workspace, left-padded
        ws_t = jnp.where(ran_any[:, None], new_t, 0 if ws_t is None else ws_t)
        ws_l = jnp.where(ran_any, new_l, 0 if ws_l is None else ws_l)
        if last:
            stop_round = jnp.where(live, r, stop_round)
            final_idx = jnp.where(live, 0, final_idx)
            final_t = jnp.where(live[:, None], r_t[:, 0], final_t)
            final_l = jnp.where(live, r_l[:, 0], final_l)
            break
        scores, uncertainty_new, live_new, stop_round, final_idx, final_t, final_l, unparsed = judge_round(
            r, r_t, r_l, ran, records, live, stop_round, final_idx, final_t, final_l, unparsed)
        pool_t = jnp.where(ran_any[:, None, None], r_t, pool_t)
        pool_l = jnp.where(ran_any[:, None], r_l, pool_l)
        pool_ran = jnp.where(ran_any[:, None], ran, pool_ran)
        pool_scores = jnp.where(ran_any[:, None], scores, pool_scores)
        pool_round = jnp.where(ran_any, r, pool_round)
        uncertainty = jnp.where(ran_any, uncertainty_new, uncertainty)
        live = live_new

    calls = _call_log(records, stop_round, final_idx, b)
    return make_result(final_t, final_l, calls, (ws_t, ws_l), truncs, rounds_t, rounds_l, unparsed)


def _call_log(records: list, stop_round: Array, final_idx: Array, b: int) -> CallLog:
    """Budget records in round order (each round's generation calls, then its judge calls),
    with the accepted path walked back from each problem's answer: (round, index) starts at
    (stop_round, final_idx) and moves to (src round, parent) at each round it passes."""
    accepted = [None] * len(records)
    cur_round, cur_idx = stop_round, final_idx
    for r in range(len(records), 0, -1):
        rec = records[r - 1]
        here = cur_round == r
        accepted[r - 1] = here
        width_ = rec["in_"].shape[1]
        acc = here[:, None] & (jnp.arange(width_)[None, :] == cur_idx[:, None])
        rec["accepted"] = acc
        if rec["parent"] is not None:
            parent = jnp.take_along_axis(rec["parent"], jnp.minimum(cur_idx, width_ - 1)[:, None], axis=1)[:, 0]
            cur_idx = jnp.where(here, parent, cur_idx)
            cur_round = jnp.where(here, rec["src"], cur_round)
    groups = []
    for r, rec in enumerate(records, start=1):
        groups.append(group(rec["in_"], rec["out"], rec["accepted"], rec["name"]))
        if rec["judge"] is not None:
            j_in, j_out, j_acc = rec["judge"]
            # the round's judging is on the path when the path passes through the round
            on_path = jnp.any(rec["accepted"], axis=1)
            groups.append(group(j_in, j_out, j_acc & on_path[:, None], "judge"))
    return CallLog.from_groups(groups)
