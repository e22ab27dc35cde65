"""The V1 paper's comparisons after RL (arXiv 2603.04304 §5; App. B, C.1): the V1-PairRL,
V1-PointRL and standard-RL policies (configs/rl/qwen3_4b_pairrl.py, qwen3_4b_pointrl.py,
qwen3_4b_rl_baseline.py; the non-co-evolving ablation qwen3_4b_pairrl_frozen.py) and the base
Qwen3-4B-Instruct-2507, each with the selector the paper evaluates it with, on LiveCodeBench v5,
v6 and CodeContests.

Arg `POLICY[,BENCH[,BACKEND]]`. Every policy's first row is `long_cot`: Pass@1 without
test-time scaling (its mean@k; our reading of the paper's "at N=16": the same mean over 16 draws).
Then:
- `pairrl`, `pairrl_frozen`, `rl`: V1-Infer, best-of-16 + the pairwise Swiss tournament
  (`pairwise_v1`) at 1x and 2x N judge calls (16 + 16 and 16 + 32 calls). The paper compares
  PairRL with PointRL "at 2x budget" and with the RL baseline "when both use V1-Infer with
  identical 2x verification budgets"; "Trained-model budget exploration is limited to 1x and
  2x because of computational cost" (App. C.1).
- `pointrl`: pointwise selection, App. B: "At inference, V1-PointRL generates N solutions,
  scores them independently, and selects the solution with the highest pointwise score"
  (`self_pointwise`, ties to the lower index): N = 16 (16 + 16 calls, the 1x rows' count) and
  N = 24 (24 + 24 = 48 calls, the 2x rows' count). How a pointwise selector spends a "2x"
  budget is not stated; N = 24 follows App. C.1's matching rule ("N = 32 for pointwise
  verification against pairwise N = 16 at 3x budget", i.e. equal model calls): ours.
- `base`: the base model with both selector sets (the reference for either).
BENCH: livecodebench_v5 (default), livecodebench_v6 or codecontests. BACKEND: remote (default;
the policy served under the name Qwen/Qwen3-4B-Instruct-2507, tokenizer from QWEN3_4B_DIR, the
base model's, which RL does not change), 8xh200 or v5p-128 (in-graph). Samples: k = 3 per
problem, each with its own PRNG key, so mean@3 is the mean of three seeded runs, as "trained-model
results average three runs with different random seeds" (App. C.1); the base model gets the same
k (the paper runs it once: "Base-model inference experiments run once"). Shared settings and what
is ours: configs/eval/v1_paper.py.

Which checkpoint each row evaluates: in-graph, `config.checkpoint` set to WORKDIR[@STEP] names the
training workdir the RL config wrote (its newest step without @STEP; docs/training.md, "Evaluate,
export and serve a checkpoint"): the policy is loaded with the run's own model and tokenizer, and
the eval workdir records WORKDIR@STEP, so resuming it on another checkpoint is refused. A trained
policy's in-graph config names no weights (`model_path` ""), so without `config.checkpoint` it
stops before loading anything rather than evaluate the base model; `base` reads QWEN3_4B_DIR.
Remote, serve the policy (`prd-jax serve --workdir WORKDIR`, or `prd-jax export` and vLLM).

Commands to run, in-graph on one 8xH200 node, one per policy and benchmark (workdirs as the RL
configs' commands name them):
    export QWEN3_4B_DIR=/path/to/Qwen3-4B-Instruct-2507
    prd-jax eval --config configs/eval/qwen3_4b_v1_after_rl.py:base,livecodebench_v5,8xh200 \\
        --workdir runs/v1rl_base_lcb5
    prd-jax eval --config configs/eval/qwen3_4b_v1_after_rl.py:rl,livecodebench_v5,8xh200 \\
        --workdir runs/v1rl_rl_lcb5 --config.checkpoint=/ckpt/rl_qwen3_4b
    prd-jax eval --config configs/eval/qwen3_4b_v1_after_rl.py:pointrl,livecodebench_v5,8xh200 \\
        --workdir runs/v1rl_pointrl_lcb5 --config.checkpoint=/ckpt/pointrl_qwen3_4b
    prd-jax eval --config configs/eval/qwen3_4b_v1_after_rl.py:pairrl,livecodebench_v5,8xh200 \\
        --workdir runs/v1rl_pairrl_lcb5 --config.checkpoint=/ckpt/pairrl_qwen3_4b
    prd-jax eval --config configs/eval/qwen3_4b_v1_after_rl.py:pairrl_frozen,livecodebench_v5,8xh200 \\
        --workdir runs/v1rl_frozen_lcb5 --config.checkpoint=/ckpt/pairrl_frozen@200
and the same with livecodebench_v6 and codecontests. Served instead (one policy at a time):
    prd-jax export --workdir /ckpt/pairrl_qwen3_4b --out /ckpt/pairrl_export --dtype bfloat16
    vllm serve /ckpt/pairrl_export --served-model-name Qwen/Qwen3-4B-Instruct-2507 --max-logprobs 20 \\
        --generation-config vllm
    prd-jax eval --config configs/eval/qwen3_4b_v1_after_rl.py:pairrl,codecontests --workdir runs/v1rl_pairrl_cc
Each row of the paper's comparisons is one operator label in two workdirs' summary.md (e.g.
PairRL's `pairwise_v1` at m = 2 against PointRL's `self_pointwise`, or against RL's `pairwise_v1`
at m = 2; `long_cot` of PairRL against RL's for base Pass@1). In-graph args declare `target` h200:8
/ v5p:4x4x4; every policy's programs are a subset of `base`'s, so compiling `base,...` covers them.
Fit (before the 1x and pointwise rows were added): `livecodebench_v5,8xh200` and
`livecodebench_v5,v5p-128` with long_cot and pairwise 2x fit (docs/results/2026-12-04-aot-fit-4.md).

Expected (paper, V1 §5, trained on code; which model the §5 figures are for is not stated in the
text we have, the config's Qwen3-4B-Instruct-2507 is our reading):
- `pairrl` against `pointrl`, selection at 2x: "+6.5% Pass@1 on LiveCodeBench-v5: V1-PairRL
  reaches 53.9% versus 47.4% for V1-PointRL at 2x budget." "The corresponding gains are +6.8% on
  LiveCodeBench-v6 and +7.3% on CodeContests, with accuracy increasing as verification budget
  grows."
- `pairrl` against `rl`, both V1-Infer at 2x: "+8.9% on CodeContests: V1-PairRL outperforms the RL
  baseline when both use V1-Infer with identical 2x verification budgets." "The gains are +3.6%
  on LiveCodeBench-v5 and +1.9% on LiveCodeBench-v6."
- `pairrl` against `rl`, `long_cot`: "+8.7% Pass@1 on CodeContests: V1-PairRL improves over the RL
  baseline without test-time scaling at N=16." "It also improves Pass@1 by +2.9% on
  LiveCodeBench-v5 and +2.7% on LiveCodeBench-v6."
- `pairrl` against `pairrl_frozen`: "Co-evolving training consistently outperforms
  non-co-evolving training across all evaluated benchmarks." (no figure).
- Summary: "V1-PairRL achieves 7–9% test-time scaling gains and up to 8.7% higher base Pass@1 than
  standard RL."
- `base`: the paper gives no figure for the base model's rows here. Ours: not yet run (no policy
  trained).
"""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("v1_paper", os.path.join(HERE, "v1_paper.py"))
V1 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(V1)

BENCHES = ("livecodebench_v5", "livecodebench_v6", "codecontests")
K_SAMPLES = 3  # App. C.1: trained-model results average three runs with different random seeds
POINTWISE_N_2X = 24  # ours: 24 + 24 calls = 16 + 2 x 16 (App. C.1's equal-calls rule)
# policy -> (the RL config that trains it, or None for the base model; its selector sets)
POLICIES = {
    "base": (None, ("pairwise", "pointwise")),
    "rl": ("configs/rl/qwen3_4b_rl_baseline.py", ("pairwise",)),
    "pointrl": ("configs/rl/qwen3_4b_pointrl.py", ("pointwise",)),
    "pairrl": ("configs/rl/qwen3_4b_pairrl.py", ("pairwise",)),
    "pairrl_frozen": ("configs/rl/qwen3_4b_pairrl_frozen.py", ("pairwise",)),
}
ARGS = tuple(f"{p},{b}" for p in POLICIES for b in BENCHES) + tuple(
    f"{p},livecodebench_v5,{pod}" for p in ("base", "pairrl") for pod in V1.PODS)


def selectors(bench: str, kind: str) -> list:
    """The best-of-N rows of a selector set: V1-Infer at 1x and 2x, or pointwise at the same calls."""
    if kind == "pairwise":
        return [V1.best_of_n(bench, "pairwise_v1", m=1), V1.best_of_n(bench, "pairwise_v1", m=2)]
    return [V1.best_of_n(bench, "self_pointwise"), V1.best_of_n(bench, "self_pointwise", n=POINTWISE_N_2X)]


def parse_arg(arg):
    """`POLICY[,BENCH[,BACKEND]]` -> (policy, bench, backend); errors name the file and the allowed args."""
    policy, _, rest = (arg or "base").partition(",")
    if policy not in POLICIES:
        raise ValueError(f"configs/eval/{os.path.basename(__file__)}: arg {arg!r} unknown; allowed: "
                         f"POLICY[,BENCH[,BACKEND]] with POLICY one of {list(POLICIES)} (none given: base)")
    bench, backend = V1.parse_arg(rest or None, __file__, benches=BENCHES, default="livecodebench_v5")
    return policy, bench, backend


def get_config(arg=None):
    policy, bench, backend = parse_arg(arg)
    rows = [V1.long_cot(bench)] + [e for kind in POLICIES[policy][1] for e in selectors(bench, kind)]
    c = V1.config("qwen3-4b-instruct-2507", rows, bench, backend, k_samples=K_SAMPLES)
    if policy != "base":
        c.model_path = ""  # a trained policy: config.checkpoint (in-graph) or the served policy
    return c
