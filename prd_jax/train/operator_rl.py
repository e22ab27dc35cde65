"""Operator-consistent RL rollouts and V1 self-verification rows (PDR paper §3.3, §4.2; V1 §5).

- PDR-round rollouts call `prd_jax.operators.runner.run_operator`, the very function the
  eval harness calls (with `Context.trace` on, it also returns each round's prompts and
  sampler logprobs). The refine call's completion is trained on with its reward; with
  `gradient_targets="drafts_and_refine"` the drafts are trained on too, each kind in its
  own advantage group. Prompts (template, problem, workspace) carry weight 0: only
  completion tokens get gradient.
- V1-PairRL / PointRL rows: verifier prompts built from the step's own standard rollouts,
  answered by the policy (reasoning + rating tags), rewarded by the threshold reward of
  `verifier_reward`. Strict pairing: only pairs with at least one correct solution. The
  verifier advantage is the reward minus the mean of the same prompt's verifier rows
  (`rl.verifier_baseline="group"`, Dr. GRPO's group baseline) or of the whole step's
  (`"batch"`). `rl.verifier_samples="frozen_base"` quotes the initial model's rollouts instead
  of the policy's (the non-co-evolving ablation; `rl.RLStage` draws them).
"""

from __future__ import annotations

import jax
import numpy as np

from prd_jax.host import to_host
from prd_jax.operators.assembly import assemble, truncate_head_tail
from prd_jax.operators.calls import fill, strip_stop, strip_thinking, width
from prd_jax.operators.judges import RatingParser
from prd_jax.operators.lm import ModelLM
from prd_jax.operators.runner import answer_texts, encode_problems, make_context, run_operator, thinking_marker
from prd_jax.tasks.grading import TaskGrader, TaskGrouper
from prd_jax.train import advantages as adv_lib
from prd_jax.train.rl_rows import sequences_to_batch, verifier_rows_per_prompt


# V1-PairRL objective. From the V1 paper (§5 summary in ../shared/papers/): the pairwise verifier,
# the sparsity threshold 0.2 and strict pairing. Ours (not stated there): Dr.GRPO advantages and loss aggregation (the constant
# normaliser, arXiv 2503.20783 §3: every row of the batch x the row width, so a verifier slot
# left without an admissible pair, zero weight, still counts and the denominator is the same
# every step; `losses.aggregate`), PPO clip-higher 0.2 / 0.28, no KL and no auxiliary SFT,
# lambda = 1, the verifier baseline per prompt group as Dr.GRPO's. The PairRL configs apply it with `c.rl.update(PAIRRL_OBJECTIVE)`
# (and set `rl.minibatches` to suit their grad_accum_steps).
PAIRRL_OBJECTIVE = dict(advantage="dr_grpo", loss="ppo", eps_low=0.2, eps_high=0.28, kl_coef=0.0, aux_sft_coef=0.0,
                        aggregation="seq_mean_token_sum_norm", verifier="pairwise", verifier_coef=1.0,
                        verifier_threshold=0.2, verifier_pairs_per_prompt=4, verifier_baseline="group")


def verifier_reward(ratings: np.ndarray, labels: np.ndarray, threshold: float = 0.2) -> np.ndarray:
    """V1 §5's sparsity-threshold reward (threshold 0.2 in the paper); its form
    r = (1/|S|) sum_s 1(|v_s - y_s| <= threshold) (1 - |v_s - y_s|) and the map v = (rating - 1) / 9
    are ours (the summary in ../shared/papers/ states neither).

    `ratings [R, S]` in 1..10 (0 = unparsed: that slot earns 0), `labels [R, S]` in {0, 1};
    S = 2 (pairwise, the paper's 1/2 sum over A and B) or 1 (pointwise).
    """
    ratings = np.asarray(ratings, np.float64)
    v = (ratings - 1.0) / 9.0
    gap = np.abs(v - np.asarray(labels, np.float64))
    per_slot = np.where((ratings >= 1) & (gap <= threshold + 1e-12), 1.0 - gap, 0.0)
    return per_slot.mean(axis=1)


def strict_pairs(correct: np.ndarray, rng: np.random.Generator, num_pairs: int) -> list:
    """Up to `num_pairs` distinct pairs (i, j), i < j, of a group's rollouts drawn uniformly from
    the admissible ones (at least one correct; V1 §5 strict pairing). Slot order (A, B) is a
    fair coin, so the verifier cannot learn a position shortcut."""
    g = len(correct)
    admissible = [(i, j) for i in range(g) for j in range(i + 1, g) if correct[i] or correct[j]]
    if not admissible:
        return []
    chosen = rng.choice(len(admissible), size=min(num_pairs, len(admissible)), replace=False)
    out = []
    for c in sorted(chosen):
        i, j = admissible[c]
        out.append((j, i) if rng.random() < 0.5 else (i, j))
    return out


def pointwise_subset(g: int, rng: np.random.Generator, num: int) -> list:
    """`num` of a group's `g` rollouts, uniformly without replacement, in index order (all of
    them, without drawing, when num >= g): the rollouts PointRL verifies."""
    return list(range(g)) if num >= g else sorted(rng.choice(g, size=num, replace=False).tolist())


def verifier_advantages(reward: np.ndarray, valid: np.ndarray, per_prompt: int, baseline: str) -> np.ndarray:
    """Verifier advantages `[P * per_prompt]`: reward minus the mean over the valid rows of the
    same prompt ("group": Dr. GRPO, arXiv 2503.20783 §3, applied to the verifier rows) or over
    all valid rows ("batch"); invalid rows (padding slots) get 0."""
    kind = {"group": "dr_grpo", "batch": "batch_mean"}.get(baseline)
    if kind is None:
        raise ValueError(f"verifier baseline={baseline!r}; allowed: ('group', 'batch')")
    r = np.asarray(reward, np.float32).reshape(-1, per_prompt)
    return np.asarray(adv_lib.compute(kind, r, np.asarray(valid, bool).reshape(-1, per_prompt))).reshape(-1)


def pairwise_winner_agrees(ratings: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Whether the pair's higher-rated side is a correct one (ties and unparsed: no), per row."""
    a, b = ratings[:, 0], ratings[:, 1]
    parsed = (a >= 1) & (b >= 1)
    return parsed & (((a > b) & (labels[:, 0] == 1)) | ((b > a) & (labels[:, 1] == 1)))


def parse_ratings(tokenizer, tokens: np.ndarray, lengths: np.ndarray, pairwise: bool) -> np.ndarray:
    tags = ("rating_A", "rating_B") if pairwise else ("rating",)
    return RatingParser(tokenizer)(tokens, lengths, tags=tags)


class OperatorRollouts:
    """Operator rollouts through the eval operator (`runner.run_operator` with traces), PDR §3.3.

    Any registered operator whose spec declares trainable rounds (`OperatorSpec.round_sizes`,
    `.trainable_rounds`) trains here: for PDR the final refine round ("operator"), and with
    `gradient_targets="drafts_and_refine"` also the first round ("draft")."""

    def __init__(self, rl, cfg, tokenizer, mesh, spec, num_problems: int, *, task="gsm8k", rows=()):
        self.rl, self.cfg, self.tok, self.mesh, self.spec = rl, cfg, tokenizer, mesh, spec
        self.num_problems, self.g = num_problems, rl.samples_per_prompt
        # the grader (oracle selectors, PDR §4.1 and App. D.1) and majority grouper are the task's (tasks.grading);
        # `rows` are the run's problems, which a code task's grader looks up by task id
        self.ctx = make_context(tokenizer, rl.call_sampling(tokenizer.stop_ids),
                                grader=TaskGrader(task, tokenizer, rows), grouper=TaskGrouper(task, tokenizer),
                                k_max=spec.k_max, kappa=spec.kappa, trace=True, templates=rl.templates)
        last = len(spec.round_sizes()) - 1
        # (round index, metric name) of each trained round, as the spec declares them
        self.trained = [(r, "operator" if r == last else "draft" if r == 0 else f"round{r}")
                        for r in spec.trainable_rounds(rl.gradient_targets)]

    def _problems(self, chosen):
        texts = [p for p, _ in chosen for _ in range(self.g)]
        answers = [a for _, a in chosen for _ in range(self.g)]
        width = self.rl.problem_tokens
        return encode_problems(self.tok, texts, answers, width, width=width)[0]

    def _run(self, params, problems, keys):
        lm = ModelLM(params, self.cfg, self.tok.pad_id, self.mesh, self.ctx.sampling.max_rows)
        return run_operator(lm, problems, keys, self.spec, self.ctx)

    def widths(self, params) -> list:
        """Sequence widths `prompt + completion - 1` of the trained rounds (from shapes only)."""
        fake = [("x", "0")] * self.num_problems
        keys = jax.random.split(jax.random.key(0), self.num_problems * self.g)
        out = jax.eval_shape(self._run, params, self._problems(fake), keys)
        return [out.round_traces[r].prompts.shape[2] + out.round_tokens[r].shape[2] - 1 for r, _ in self.trained]

    @property
    def rows(self) -> int:
        sizes = self.spec.round_sizes()
        return self.num_problems * self.g * sum(sizes[r] for r, _ in self.trained)

    def launch(self, params, key, chosen):
        """Dispatch the G operator runs of each of `chosen` (device arrays; `__call__(out=)` grades them)."""
        return self._run(params, self._problems(chosen), jax.random.split(key, len(chosen) * self.g))

    def __call__(self, params, key, chosen, reward_fn, advantage, samples=None, out=None):
        """Row groups (refine [, drafts]) and metrics for `chosen` problems (G runs each), or for
        `out`, the runs `launch` dispatched; each trained round's rows also go to `samples`
        (`rollout_log.StepSamples`) when given."""
        out = to_host(self.launch(params, key, chosen) if out is None else out)
        answers = [a for _, a in chosen for _ in range(self.g)]
        groups, metrics = [], {}
        for r, name in self.trained:
            tr = out.round_traces[r]
            tok, lens = np.asarray(out.round_tokens[r]), np.asarray(out.round_lengths[r])  # [R, M, N]
            rr, m = lens.shape
            flat_t, flat_l = tok.reshape(rr * m, -1), lens.reshape(-1)
            texts = answer_texts(self.tok, flat_t, flat_l)  # graded after any thinking block
            keys = [answers[i // m] for i in range(rr * m)]  # a batch grader (rl.TaskReward) grades at once
            correct = np.array(reward_fn.many(texts, keys) if hasattr(reward_fn, "many")
                               else [reward_fn(t, k) for t, k in zip(texts, keys)], np.float32)
            # one advantage group per problem: its G runs (x M drafts)
            adv = np.asarray(advantage(correct.reshape(len(chosen), self.g * m))).reshape(-1)
            if samples is not None:
                samples.add(name, np.asarray(tr.prompts).reshape(rr * m, -1), np.asarray(tr.prompt_lengths).reshape(-1),
                            flat_t, flat_l, texts, correct, keys)
            batch = sequences_to_batch(np.asarray(tr.prompts).reshape(rr * m, -1),
                                       np.asarray(tr.prompt_lengths).reshape(-1), flat_t, flat_l,
                                       np.asarray(tr.logprobs).reshape(rr * m, -1))
            batch.update(advantages=adv.astype(np.float32), correct=correct)
            groups.append(batch)
            metrics.update({f"reward/{name}": float(correct.mean()), f"accuracy/{name}": float(correct.mean()),
                            f"length/{name}": float(flat_l.mean())})
        metrics["workspace_length"] = float(np.asarray(out.workspace_lengths).mean())
        for name in ("b_seq", "b_total", "b_seq_io", "b_total_io"):  # generated; in + out (PDR §3.1)
            metrics[f"operator/{name}"] = float(np.asarray(getattr(out, name)).mean())
        return groups, metrics


class VerifierRollouts:
    """V1-PairRL (pairwise) or V1-PointRL (pointwise) verifier rows for one RL step (V1 §5)."""

    def __init__(self, rl, cfg, tokenizer, mesh, num_prompts: int, *, task="gsm8k"):
        self.rl, self.cfg, self.tok, self.mesh = rl, cfg, tokenizer, mesh
        self.pairwise = rl.verifier == "pairwise"
        self.g = rl.samples_per_prompt
        self.per_prompt = verifier_rows_per_prompt(rl)
        self.rows = num_prompts * self.per_prompt
        ctx = make_context(tokenizer, rl.call_sampling(tokenizer.stop_ids), k_max=1,
                           templates=rl.templates)
        # the template set's judge roles (V1 §5): the task's set (`rl.templates`) holds its own wording
        self.template = ctx.templates["pairwise" if self.pairwise else "pointwise"]
        self.pad_id = tokenizer.pad_id
        self._generate = jax.jit(self._generate_fn)

    def _generate_fn(self, params, problem, cand_a, cand_b, keys):
        fills = {"problem": [problem], "candidate_a": [cand_a], "candidate_b": [cand_b], "candidate": [cand_a]}
        segs = fill(self.template, problem[0].shape[0], {k: fills[k] for k in self.template.slots})
        prompts, plen, _ = assemble(segs, width(segs), self.pad_id)
        scfg = self.rl.sampler_config(self.rl.verifier_max_new_tokens, 1, self.tok.stop_ids)
        out = ModelLM(params, self.cfg, self.pad_id, self.mesh).generate(prompts, plen, keys, scfg,
                                                                         name=f"verifier.{self.rl.verifier}")
        return prompts, plen, out

    def _inputs(self, problem_ids: list, a_tok, a_len, b_tok, b_len):
        pw = self.rl.problem_tokens
        prob = np.zeros((self.rows, pw), np.int32)
        plen = np.zeros((self.rows,), np.int32)
        for i, ids in enumerate(problem_ids):
            prob[i, :len(ids)] = ids
            plen[i] = len(ids)
        return (prob, plen), (a_tok, a_len), (b_tok, b_len)

    def width(self, params) -> int:
        c = self.rl.verifier_candidate_max_tokens
        z = lambda w: (np.zeros((self.rows, w), np.int32), np.zeros((self.rows,), np.int32))
        keys = jax.random.split(jax.random.key(0), self.rows)
        prompts, _, out = jax.eval_shape(self._generate, params, z(self.rl.problem_tokens), z(c), z(c), keys)
        return prompts.shape[1] + out.tokens.shape[1] - 1

    def __call__(self, params, key, problem_ids: list, comp_tok, comp_len, correct, rng):
        """Verifier rows and metrics from the step's standard rollouts `[P*G, N]`."""
        g, c = self.g, self.rl.verifier_candidate_max_tokens
        # quoted as the operators quote a candidate (calls.quotable): final stop token and
        # thinking block dropped, head + tail kept
        comp_tok = jax.numpy.asarray(comp_tok)
        lengths = strip_stop(comp_tok, jax.numpy.asarray(comp_len), tuple(self.tok.stop_ids))
        comp_tok, lengths = strip_thinking(comp_tok, lengths, *thinking_marker(self.tok))
        cand_t, cand_l, _ = to_host(truncate_head_tail(comp_tok, lengths, c, c // 4))
        slots = []  # (prompt index, i, j or None, valid)
        admissible = total = 0
        for p in range(len(problem_ids)):
            ok = correct[p * g:(p + 1) * g]
            if self.pairwise:
                total += g * (g - 1) // 2
                admissible += sum(1 for i in range(g) for j in range(i + 1, g) if ok[i] or ok[j])
                pairs = strict_pairs(ok, rng, self.per_prompt)
                slots += [(p, p * g + i, p * g + j, True) for i, j in pairs]
                slots += [(p, p * g, p * g, False)] * (self.per_prompt - len(pairs))
            else:
                slots += [(p, p * g + i, p * g + i, True) for i in pointwise_subset(g, rng, self.per_prompt)]
        idx = np.array([[s[1], s[2]] for s in slots])
        valid = np.array([s[3] for s in slots])
        labels = correct[idx] if self.pairwise else correct[idx[:, :1]]
        inputs = self._inputs([problem_ids[s[0]] for s in slots], cand_t[idx[:, 0]], cand_l[idx[:, 0]] * valid,
                              cand_t[idx[:, 1]], cand_l[idx[:, 1]] * valid)
        prompts, plen, out = to_host(self._generate(params, *inputs, jax.random.split(key, self.rows)))
        ratings = parse_ratings(self.tok, out.tokens, out.lengths, self.pairwise)
        reward = verifier_reward(ratings, labels, self.rl.verifier_threshold) * valid
        n_valid = max(int(valid.sum()), 1)
        adv = verifier_advantages(reward, valid, self.per_prompt, self.rl.verifier_baseline) * self.rl.verifier_coef
        batch = sequences_to_batch(prompts, plen, out.tokens, out.lengths, out.logprobs)
        # a slot without an admissible pair trains on nothing (weight 0, advantage 0); under
        # "seq_mean_token_sum_norm" it still counts in the constant denominator
        batch["weights"] = batch["weights"] * valid[:, None]
        batch.update(advantages=adv.astype(np.float32), correct=np.zeros((self.rows,), np.float32))
        unparsed = (ratings == 0).any(axis=1) & valid
        if self.pairwise:
            agree = pairwise_winner_agrees(ratings, labels)
        else:
            agree = (ratings[:, 0] >= 1) & ((ratings[:, 0] > 5.5) == (labels[:, 0] == 1))
        metrics = {"verifier/reward": float(reward.sum() / n_valid),
                   "verifier/accuracy": float((agree & valid).sum() / n_valid),
                   "verifier/parse_failure_rate": float(unparsed.sum() / n_valid),
                   "verifier/rows": float(valid.sum())}
        if self.pairwise:
            metrics["verifier/strict_pairs"] = admissible / max(total, 1)
        return batch, metrics
