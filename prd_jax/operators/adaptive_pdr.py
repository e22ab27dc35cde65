"""Uncertainty-adaptive PDR (ours): drafts and the refine go only where the drafts disagree.

The PDR paper (arXiv 2510.01123, §3.2 and its closing discussion) spends the same fan-out on
every problem and names "uncertainty-conditioned round and fan-out schedules, budget-aware
compute allocation" as future work. This operator is one such schedule over PDR's
draft -> distill -> refine round (§3.2, shared top-k):

- Drafts come in `waves`. Wave 1 draws `min_fanout` drafts per problem; each later wave
  draws, for each problem still going, the number of drafts `allocate` grants it (0, or
  `min_fanout`..`max_fanout`) within the batch's token cap.
- After each wave, all of a problem's drafts so far give its agreement:
  - `majority`: the largest answer group's share of its drafts (the task's answer key, as
    the `majority` selector groups them; a draft without an answer joins no group);
  - `v1_mu`: the mu gap between the top two drafts of a V1 Swiss tournament over its drafts
    (V1 arXiv 2603.04304 §4, Alg. 2-4), for tasks without answer keys.
  A problem whose agreement is >= `tau` stops: its answer is its top draft (the first of the
  largest group, or the top mu) and it makes no later call, so it never pays for a refine.
- A problem still going after the last wave gets PDR's refine: one call over the top-k of
  its drafts (ranked by the signal), whose output is its answer.

Static shapes: the drafts are `D = min_fanout + (waves - 1) x max_fanout` slots per problem,
drawn with one fan-out key per problem (slot m is sample m of the prompt, whichever wave
draws it; with D = M_1 and the same key the drafts are PDR's). Every wave is one call over all
D slots in which only the granted slots are live: a remote LM sends only those, the budgets
count only those; in-graph the other rows are computed and dropped.

Cap: `cap` is the mean B_total per problem of the generation calls, so a batch may generate
at most `cap x B` tokens. Calls are reserved at `max_new_tokens` before they run, and a
refine per problem still going is reserved before a wave is granted, so generation never
passes the cap. With `v1_mu` the judge calls come on top (counted in B_total). With a cap a
problem's result depends on its batch (that is the allocation); without one it does not.

B_seq (ours, after PDR §3.1): each wave a problem ran is one sequential step, so each puts one
call on its accepted path: the accepted draft when it is in that wave, else the wave's
longest call (as `calls.path_calls` does for a step whose output the path does not quote).
The accepted draft is the answer of a stopped problem, else the refine's top-1 workspace
candidate; the refine call is on the path. With `v1_mu`, each judged wave puts its
tournament batches' longest calls on the path.
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
from prd_jax.operators.calls import (billed, candidate_list, fill, fold, per_sample, problem_rows, sampling_config,
                                     single, width)
from prd_jax.operators.core import make_result
from prd_jax.operators.registry import register_operator
from prd_jax.operators.specs import CallBudget, Judge, OperatorSpec, as_judge, flat_budget, labelled

Array = jax.Array
SIGNALS = ("majority", "v1_mu")
UNLIMITED = 2 ** 30  # calls left when there is no cap


@flat_budget("waves", "min_fanout", "max_fanout", "tau", "cap", "signal", "k", "max_new_tokens", "candidate_max_tokens",
             "truncation_head", "judge", "quote_thinking", "think_budget")
@dataclasses.dataclass(frozen=True)
class AdaptivePDR(OperatorSpec):
    """Settings of uncertainty-adaptive PDR (module docstring).

    `waves` >= 1: draft waves before the refine; `min_fanout` / `max_fanout`: wave 1's drafts,
    and the fewest / most drafts a later wave grants a problem; `tau` in (0, 1]: the agreement
    at which a problem stops; `cap`: mean generated tokens per problem a batch may spend (0: no
    cap; else at least (min_fanout + 1) x max_new_tokens); `signal`: "majority" or "v1_mu";
    `k`: the refine's workspace size; `judge`: the pairwise judge of `v1_mu`."""

    waves: int = 2
    min_fanout: int = 4
    max_fanout: int = 4
    tau: float = 0.75
    cap: int = 0
    signal: str = "majority"
    k: int = 2
    judge: Judge = Judge()
    budget: CallBudget = CallBudget()

    TEMPLATES = ("solve", "pdr_topk", "pairwise")

    def __post_init__(self):
        for name, low in (("waves", 1), ("min_fanout", 1), ("k", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"AdaptivePDR.{name}={value!r}; must be an int >= {low}")
        if not isinstance(self.max_fanout, (int, np.integer)) or self.max_fanout < self.min_fanout:
            raise ValueError(f"AdaptivePDR.max_fanout={self.max_fanout!r}; must be an int >= "
                             f"min_fanout={self.min_fanout}")
        if isinstance(self.tau, bool) or not isinstance(self.tau, (int, float)) or not 0.0 < self.tau <= 1.0:
            raise ValueError(f"AdaptivePDR.tau={self.tau!r}; allowed: (0, 1]")
        if self.signal not in SIGNALS:
            raise ValueError(f"AdaptivePDR.signal={self.signal!r}; allowed: {SIGNALS}")
        if self.signal == "v1_mu" and self.min_fanout < 2:
            raise ValueError(f"AdaptivePDR.min_fanout={self.min_fanout} with signal='v1_mu'; a tournament "
                             "needs >= 2 drafts")
        if self.k > self.min_fanout:
            raise ValueError(f"AdaptivePDR.k={self.k} exceeds min_fanout={self.min_fanout}; need k <= min_fanout "
                             "(a problem has at least min_fanout drafts)")
        least = (self.min_fanout + 1) * self.budget.max_new_tokens
        if isinstance(self.cap, bool) or not isinstance(self.cap, (int, np.integer)) or (self.cap != 0 and
                                                                                          self.cap < least):
            raise ValueError(f"AdaptivePDR.cap={self.cap!r}; allowed: 0 (no cap) or an int >= (min_fanout + 1) x "
                             f"max_new_tokens = {least} (wave 1 and one refine per problem)")
        object.__setattr__(self, "judge", as_judge(self.judge))

    @property
    def drafts(self) -> int:
        """D: draft slots per problem over all waves."""
        return self.min_fanout + (self.waves - 1) * self.max_fanout

    def template_roles(self) -> tuple:
        return ("solve", "pdr_topk") + (("pairwise",) if self.signal == "v1_mu" else ())

    @property
    def k_max(self) -> int:
        return self.k

    @property
    def label(self) -> str:
        judged = f"[{self.judge.label}]" if self.signal == "v1_mu" else ""
        core = [f"waves={self.waves}", f"M={self.min_fanout}-{self.max_fanout}", f"tau={self.tau:g}",
                f"cap={self.cap}", f"sig={self.signal}{judged}", f"k={self.k}",
                "quote_thinking" if self.budget.quote_thinking else ""]
        shown = {"waves", "min_fanout", "max_fanout", "tau", "cap", "signal", "k", "quote_thinking"}
        return labelled(self, "adaptive_pdr", core, shown | ({"judge"} if judged else set()))


# ----------------------------------------------------------------------------- the allocation rule

def allocate(uncertainty: Array, live: Array, calls_left: Array, min_fanout: int, max_fanout: int) -> Array:
    """Drafts `[B]` granted in the next wave, never more than `calls_left` in total.

    The rule (ours): a live problem with uncertainty u in [0, 1] (1 - agreement) asks for
    `min_fanout + round(u x (max_fanout - min_fanout))` drafts. Problems are served in order
    of descending u (ties: lower index); each gets what it asks while calls are left, else
    what is left if that is at least `min_fanout`, else none (it skips the wave). Replace this
    function to change the rule."""
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
    """V1 tournament (pairwise_v1) over each problem's drafts that ran (a problem with none
    makes no call). Returns (scores [B, W]: mu, -1 where not run; agreement [B]: mu gap
    of the top two; judge in / out [B, T*Wj]; accepted [B, T*Wj]: each batch's longest call;
    the draft slots each call rated and its ratings [B, T*Wj, 2] (slot A, slot B); unparsed [B])."""
    b, w, _ = cand_t.shape
    judge = spec.judge
    counts = jnp.sum(ran, axis=1).astype(jnp.int32)
    perm = jnp.argsort(~ran, axis=1, stable=True)  # the drafts that ran first (the host judges 0..n-1)
    cand_t = jnp.take_along_axis(cand_t, perm[:, :, None], axis=1)
    cand_l = jnp.take_along_axis(cand_l, perm, axis=1)
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
    mu = jnp.take_along_axis(mu, jnp.argsort(perm, axis=1), axis=1)  # back to slot order
    top2 = jax.lax.top_k(jnp.where(ran, mu, -1.0), 2)[0]  # w >= min_fanout >= 2
    gap = jnp.where(counts >= 2, top2[:, 0] - jnp.maximum(top2[:, 1], 0.0), 1.0)
    longest = jnp.argmax(log_out, axis=2)
    accepted = (jnp.arange(wj)[None, None, :] == longest[:, :, None]) & (hc[:, :, None] > 0)
    slots = jnp.take_along_axis(perm, jnp.maximum(hp, 0).reshape(b, -1), axis=1).reshape(hp.shape)
    rated = jnp.where(hp >= 0, slots, -1)  # the host judged drafts 0..n-1 in `perm` order: back to slots
    return (jnp.where(ran, mu, -1.0), gap, log_in.reshape(b, -1), log_out.reshape(b, -1),
            accepted.reshape(b, -1), rated.reshape(b, -1, 2), hr.reshape(b, -1, 2), unparsed)


def _quoted(cand_t, cand_l, spec, ctx):
    """Candidates `[B, W, L]` as a judge quotes them (`calls.single`)."""
    b, w, length = cand_t.shape
    (tok, lens), cut = single(cand_t.reshape(b * w, length), cand_l.reshape(b * w), spec, ctx)
    return (tok.reshape(b, w, -1), lens.reshape(b, w)), cut.reshape(b, w)


# ----------------------------------------------------------------------------- the operator

def _generate(lm, segs, keys, ctx, spec, samples: int, live: Array, name: str):
    """One call: the prompt `segs` per problem, `samples` fan-out samples per prompt (sample m
    uses `split(key_b, samples)[m]`), of which only `live [B, samples]` are real: a remote LM
    sends only those, and the returned (in, out) budget counts `[B, samples]` are 0 elsewhere."""
    b = live.shape[0]
    prompts, plen, overflow = assemble(segs, width(segs), ctx.pad_id)
    out = lm.generate(prompts, plen, keys, sampling_config(ctx, spec.budget.max_new_tokens, samples,
                                                          spec.budget.think_budget),
                      name=name, live=live.reshape(-1))
    bill_in, bill_out = billed(out, jnp.repeat(plen, samples))
    tok = out.tokens.reshape(b, samples, -1)
    return (tok, out.lengths.reshape(b, samples), bill_in.reshape(b, samples) * live,
            bill_out.reshape(b, samples) * live, overflow & jnp.any(live, axis=1))


def _signal(lm, problems, cand_t, cand_l, ran, key, spec, ctx):
    """(scores [B, D], agreement [B], judge records or None, unparsed [B]) of the drafts that ran."""
    if spec.signal == "majority":
        scores, agree = _majority_signal(cand_t, cand_l, ran, ctx)
        return scores, agree, None, jnp.zeros(ran.shape[:1], jnp.int32)
    scores, agree, j_in, j_out, j_acc, rated, ratings, unparsed = _mu_signal(lm, problems, cand_t, cand_l, ran, key,
                                                                             spec, ctx)
    return scores, agree, (j_in, j_out, j_acc, rated, ratings), unparsed


@register_operator("adaptive_pdr", spec=AdaptivePDR)
def adaptive_pdr(lm, problems, keys, spec: AdaptivePDR, ctx):
    """Uncertainty-adaptive PDR (module docstring): draft waves, early stop by agreement,
    fan-out by `allocate`, one refine where the drafts disagree; budgets of the calls that ran."""
    b, n_tok, d = problems.tokens.shape[0], spec.budget.max_new_tokens, spec.drafts
    problem = problem_rows(problems, 1)
    solve = fill(ctx.templates["solve"], b, {"problem": problem})
    slot = jnp.arange(d)[None, :]
    cand_t = cand_l = None
    ran = jnp.zeros((b, d), bool)
    live = jnp.ones((b,), bool)
    uncertainty = jnp.ones((b,), jnp.float32)
    spent = jnp.int32(0)  # generation tokens of the batch so far (what the cap bounds)
    truncs = unparsed = jnp.zeros((b,), jnp.int32)
    waves = []  # per wave: (in [B, D], out [B, D], the wave's slots [B, D], judge records)
    stopped = jnp.zeros((b,), bool)
    answer = jnp.zeros((b,), jnp.int32)  # the accepted draft
    scores = jnp.zeros((b, d), jnp.float32)
    for w in range(1, spec.waves + 1):
        lo = 0 if w == 1 else spec.min_fanout + (w - 2) * spec.max_fanout
        if w == 1:
            grant = jnp.full((b,), spec.min_fanout, jnp.int32)
        else:
            calls_left = (spec.cap * b - spent) // n_tok if spec.cap else jnp.int32(UNLIMITED)
            grant = allocate(uncertainty, live, calls_left - jnp.sum(live), spec.min_fanout, spec.max_fanout)
        mine = (slot >= lo) & (slot < lo + grant[:, None]) & live[:, None]
        tok, length, w_in, w_out, over = _generate(lm, solve, fold(keys, 1), ctx, spec, d, mine, "adaptive_pdr.draft")
        cand_t = tok if cand_t is None else jnp.where(mine[:, :, None], tok, cand_t)
        cand_l = length if cand_l is None else jnp.where(mine, length, cand_l)
        ran = ran | mine
        spent = spent + jnp.sum(w_out)
        truncs = truncs + over
        drew = jnp.any(mine, axis=1)
        s, agree, judged, bad = _signal(lm, problems, cand_t, cand_l, ran & drew[:, None], fold(keys, 100 + w),
                                        spec, ctx)
        unparsed = unparsed + bad
        waves.append((w_in, w_out, mine, judged))
        scores = jnp.where(drew[:, None], s, scores)
        uncertainty = jnp.where(drew, 1.0 - jnp.clip(agree, 0.0, 1.0), uncertainty)
        stop = drew & live & (agree >= spec.tau)
        answer = jnp.where(stop, jnp.argmax(s, axis=1), answer)
        stopped = stopped | stop
        live = live & ~stop

    # the refine (PDR's last round, M = 1) where the drafts still disagree
    order = jnp.argsort(-jnp.where(ran, scores, -2.0), axis=1, stable=True)[:, :spec.k]
    admitted = jnp.take_along_axis(ran, order, axis=1)
    tpl = ctx.templates["pdr_topk"]
    cands, cut = candidate_list(tpl, cand_t, cand_l, order, admitted, spec, ctx)
    segs = fill(tpl, b, {"problem": problem, "candidates": cands})
    r_t, r_l, r_in, r_out, over = _generate(lm, segs, fold(keys, 2), ctx, spec, 1, live[:, None],
                                            "adaptive_pdr.refine")
    truncs = truncs + jnp.where(live, cut, 0) + over
    answer = jnp.where(live, order[:, 0], answer)  # the refine's parent: its workspace's top-1
    final_t = jnp.where(live[:, None], r_t[:, 0], jnp.take_along_axis(cand_t, answer[:, None, None], axis=1)[:, 0])
    final_l = jnp.where(live, r_l[:, 0], jnp.take_along_axis(cand_l, answer[:, None], axis=1)[:, 0])
    ws_t, ws_l, _ = assemble(cands, width(cands), ctx.pad_id)
    ws_l = jnp.where(live, ws_l, 0)
    calls = _call_log(waves, answer, (r_in, r_out, live), b)
    return make_result(final_t, final_l, calls, (ws_t, ws_l), truncs, [cand_t, r_t], [cand_l, r_l], unparsed)


def _call_log(waves: list, answer: Array, refine: tuple, b: int) -> CallLog:
    """Each wave's draft calls (and its judge calls), then the refine; the accepted path is
    described in the module docstring."""
    groups = []
    for w_in, w_out, mine, judged in waves:
        has = jnp.any(mine, axis=1)
        in_wave = jnp.take_along_axis(mine, answer[:, None], axis=1)[:, 0]
        pick = jnp.where(in_wave, answer, jnp.argmax(w_out, axis=1))  # the wave's longest: its latency
        accepted = has[:, None] & (jnp.arange(w_in.shape[1])[None, :] == pick[:, None])
        groups.append(group(w_in, w_out, accepted, "draft"))
        if judged is not None:
            j_in, j_out, j_acc, rated, ratings = judged  # rated: draft slots (budget.py)
            groups.append(group(j_in, j_out, j_acc & has[:, None], "judge", rated, ratings))
    r_in, r_out, live = refine
    groups.append(group(r_in, r_out, live[:, None], "refine"))
    return CallLog.from_groups(groups)
