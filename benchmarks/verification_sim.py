"""Selection accuracy of V1-Infer's Swiss tournament vs baselines, with a simulated judge.

    python benchmarks/verification_sim.py --trials 1000 --num-correct 4,1

Follows the V1 paper's verification setting (arXiv 2603.04304, Sec. 3 and Alg. 2-4):
N = 16 candidates, K of them correct, and a pairwise-judge budget of 1x, 2x, 3x N calls.
Each trial draws the correct set and then selects one candidate with:

- pointwise best-of-N: one score per candidate, round(mean + noise) clipped to 1..10, so
  correct and incorrect candidates both saturate at 10 (ties go to the lower index); it
  spends N calls whatever the budget;
- V1 Swiss tournament (prd_jax.operators.tournament.swiss_tournament);
- random pairing at the same budget (the reference: the ratio column is Swiss / random);
- round-robin over all C(N, 2) pairs (a fixed number of calls, shown in its header).

The pairwise judge (`simulated_judge`) prefers the correct side of a mixed pair with
probability --pairwise-accuracy, shifted toward the first slot by --position-bias.
Top-1 accuracy is the fraction of trials whose selected candidate is correct. Prints a
markdown table, then one JSON line. Runs in well under a minute on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time

import numpy as np

from prd_jax.operators.tournament import (pointwise_best, random_pairing, round_robin,
                                          simulated_judge, swiss_tournament)


def pointwise_scores(correct: np.ndarray, rng: np.random.Generator, args) -> np.ndarray:
    """Pointwise 1..10 scores: calibration noise around per-class means, clipped (saturating)."""
    mean = np.where(correct, args.pointwise_correct_mean, args.pointwise_incorrect_mean)
    raw = mean + args.pointwise_noise * rng.standard_normal(correct.shape)
    return np.clip(np.round(raw), 1, 10)


def run_setting(num_correct: int, args) -> tuple[list[dict], dict]:
    """All methods on `args.trials` shared correct sets for one K; one row per budget."""
    n = args.num_candidates
    mults = args.budgets
    hits = {name: np.zeros(len(mults)) for name in ("swiss", "random")}
    swiss_batches = np.zeros(len(mults))
    swiss_calls = np.zeros(len(mults))
    pointwise_hits = round_robin_hits = saturated = 0
    round_robin_calls = 0
    judge_kw = dict(pairwise_accuracy=args.pairwise_accuracy, position_bias=args.position_bias,
                    tie_prob=args.tie_prob)
    for trial in range(args.trials):
        seq = np.random.SeedSequence([args.seed, num_correct, trial])
        rngs = [np.random.default_rng(s) for s in seq.spawn(2 + 2 * len(mults) + 1)]
        correct = np.zeros(n, bool)
        correct[rngs[0].choice(n, num_correct, replace=False)] = True
        seed = int(rngs[0].integers(2**31))

        scores = pointwise_scores(correct, rngs[1], args)
        saturated += int(np.sum(scores == 10))
        pointwise_hits += correct[pointwise_best(scores)]

        for b, mult in enumerate(mults):
            judge = simulated_judge(correct, rng=rngs[2 + 2 * b], **judge_kw)
            res = swiss_tournament(n, judge, mult * n, seed=seed + b,
                                   both_orders=args.both_orders)
            hits["swiss"][b] += correct[res.best]
            swiss_batches[b] += len(res.batches)
            swiss_calls[b] += res.calls
            judge = simulated_judge(correct, rng=rngs[3 + 2 * b], **judge_kw)
            hits["random"][b] += correct[random_pairing(n, judge, mult * n, seed=seed + b).best]

        rr = round_robin(n, simulated_judge(correct, rng=rngs[-1], **judge_kw))
        round_robin_hits += correct[rr.best]
        round_robin_calls = rr.calls

    t = args.trials
    rows = []
    for b, mult in enumerate(mults):
        swiss, rand = hits["swiss"][b] / t, hits["random"][b] / t
        rows.append(dict(K=num_correct, budget_mult=mult, budget_calls=mult * n,
                         swiss_calls=swiss_calls[b] / t, pointwise=pointwise_hits / t,
                         pointwise_calls=n, swiss=swiss, random=rand,
                         round_robin=round_robin_hits / t, round_robin_calls=round_robin_calls,
                         ratio_swiss_over_random=swiss / rand if rand > 0 else None,
                         swiss_batches=swiss_batches[b] / t,
                         random_batches=-(-mult * n // (n // 2))))
    return rows, dict(K=num_correct, pointwise_saturated_frac=saturated / (t * n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-candidates", type=int, default=16)
    parser.add_argument("--num-correct", default="4,1", help="comma-separated K values")
    parser.add_argument("--budgets", default="1,2,3", help="comma-separated multiples of N")
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--pairwise-accuracy", type=float, default=0.8)
    parser.add_argument("--position-bias", type=float, default=0.05)
    parser.add_argument("--tie-prob", type=float, default=0.2)
    parser.add_argument("--pointwise-correct-mean", type=float, default=9.0)
    parser.add_argument("--pointwise-incorrect-mean", type=float, default=8.0)
    parser.add_argument("--pointwise-noise", type=float, default=1.5)
    parser.add_argument("--both-orders", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.budgets = [int(x) for x in args.budgets.split(",")]
    ks = [int(x) for x in args.num_correct.split(",")]
    n = args.num_candidates
    if n < 2 or any(not 1 <= k <= n for k in ks) or any(m < 1 for m in args.budgets):
        parser.error("need --num-candidates >= 2, 1 <= K <= N and budget multiples >= 1")

    start = time.perf_counter()
    rows, notes = [], []
    for k in ks:
        r, note = run_setting(k, args)
        rows += r
        notes.append(note)
    seconds = time.perf_counter() - start

    rr_calls = rows[0]["round_robin_calls"]
    print(f"N={n}, trials={args.trials}, pairwise accuracy={args.pairwise_accuracy}, "
          f"position bias={args.position_bias}, both orders={args.both_orders}")
    print(f"\n| K | budget | V1 Swiss calls | pointwise ({n} calls) | V1 Swiss | random pairing "
          f"| round-robin ({rr_calls} calls) | Swiss / random | Swiss batches | random batches |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        ratio = row["ratio_swiss_over_random"]
        print(f"| {row['K']} | {row['budget_mult']}N = {row['budget_calls']} "
              f"| {row['swiss_calls']:.1f} | {row['pointwise']:.3f} | {row['swiss']:.3f} "
              f"| {row['random']:.3f} | {row['round_robin']:.3f} "
              f"| {'n/a' if ratio is None else f'{ratio:.3f}'} | {row['swiss_batches']:.2f} "
              f"| {row['random_batches']} |")
    half_width = 1.96 * np.sqrt(0.25 / args.trials)
    print(f"\nAccuracy 95% CI half-width <= {half_width:.3f}. Random pick: "
          + ", ".join(f"K={k}: {k / n:.3f}" for k in ks) + ". Pointwise scores at 10: "
          + ", ".join(f"K={x['K']}: {x['pointwise_saturated_frac']:.0%}" for x in notes)
          + f". {seconds:.1f} s.")
    print(json.dumps(dict(benchmark="verification_sim", num_candidates=n, trials=args.trials,
                          config={k: v for k, v in vars(args).items()}, rows=rows,
                          notes=notes, seconds=round(seconds, 2),
                          date=datetime.date.today().isoformat(),
                          machine=platform.platform())))


if __name__ == "__main__":
    main()
