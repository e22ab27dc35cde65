"""Compute-matched verification (arXiv 2603.04304 §4; App. C.1): Qwen3-4B-Instruct-2507,
pairwise against pointwise self-verification at 64 model calls per problem, on each code
benchmark, averaged over them.

- pairwise: N = 16 candidates + a Swiss tournament (`pairwise_v1`) of 3 x 16 = 48 judge calls
  = 64 calls;
- pointwise: N = 32 candidates + 32 ratings (`self_pointwise`) = 64 calls;
- the unmatched reference points: pairwise at m = 1 (32 calls) and pointwise at N = 16 (32
  calls).
The split is the paper's: "Budget-matched comparisons additionally use N = 32 for pointwise
verification against pairwise N = 16 at 3x budget" (App. C.1), so the 64 calls count the
generations (16 + 48 = 32 + 32). Calls, not tokens, are matched; the B_total column of the
summary shows each one's token cost.

The figure is an average over the code-generation benchmarks, and `prd-jax eval` runs one task
per workdir: run each code benchmark (`CODE_BENCHES`: LiveCodeBench v5, v6, CodeContests, the
code benchmarks of the paper that prd_jax has; the paper's code list also names SWE-Bench, which
it does not, and the text we have does not say which benchmarks the average covers), then
average the operators over the three workdirs with `prd-jax results --average` (each benchmark's
mean@k, their unweighted mean and the mean weighted by problems).

Arg `BENCH[,BACKEND]`: BENCH is livecodebench_v6 (default), livecodebench_v5, codecontests or
hmmt_feb2025 (math, ours: outside the code average); BACKEND remote (default; a served
Qwen/Qwen3-4B-Instruct-2507, tokenizer from QWEN3_4B_DIR), 8xh200 or v5p-128 (in-graph, weights
from QWEN3_4B_DIR or --config.model_path). Shared settings and what is ours:
configs/eval/v1_paper.py (k = 4 samples per problem, ours; "Base-model inference experiments run
once", App. C.1). Qwen3-4B-Instruct-2507 writes no thinking block, so no budget is split.

Command to run:
    vllm serve Qwen/Qwen3-4B-Instruct-2507 --max-logprobs 20 --generation-config vllm
    export QWEN3_4B_DIR=/path/to/Qwen3-4B-Instruct-2507
    prd-jax eval --config configs/eval/qwen3_4b_v1_matched_calls.py:livecodebench_v5 --workdir runs/matched_lcb5
    prd-jax eval --config configs/eval/qwen3_4b_v1_matched_calls.py:livecodebench_v6 --workdir runs/matched_lcb6
    prd-jax eval --config configs/eval/qwen3_4b_v1_matched_calls.py:codecontests --workdir runs/matched_cc
    prd-jax results --average livecodebench_v5=runs/matched_lcb5 livecodebench_v6=runs/matched_lcb6 \\
        codecontests=runs/matched_cc --csv runs/matched_average.csv
In-graph (likewise per benchmark, then the same average):
    prd-jax compile --config configs/eval/qwen3_4b_v1_matched_calls.py:livecodebench_v6,8xh200
    prd-jax eval --config configs/eval/qwen3_4b_v1_matched_calls.py:livecodebench_v6,8xh200 \\
        --workdir runs/qwen3_4b_matched_h200 --config.model_path=/path/to/Qwen3-4B-Instruct-2507
Request ESTIMATE (`prd-jax compile --estimate`, stand-in tokenizer; upper bounds that count the
forced-rating reads as requests, so they exceed the calls above), livecodebench_v6: 1.49e6
requests, 1.6e10 prompt and 7.5e9 completion tokens over the four operators. The in-graph
args declare `target` h200:8 / v5p:4x4x4; `livecodebench_v6,8xh200` and
`livecodebench_v6,v5p-128` fit (docs/results/2026-12-04-aot-fit-4.md).

Expected (paper, V1 §4): "At a compute budget of 64 model calls, pairwise verification reaches
45% average accuracy on code-generation benchmarks versus approximately 33% for pointwise
verification." "The comparison uses Qwen3-4B-Instruct-2507 in a compute-matched setting." These
are the `mean over runs` of the pairwise m = 3 and pointwise N = 32 rows; per benchmark, and for
the 32-call references, the paper gives no figure in the text we have. Ours: not yet run.
"""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("v1_paper", os.path.join(HERE, "v1_paper.py"))
V1 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(V1)

ARGS = tuple(V1.BENCHMARKS) + ("livecodebench_v6,8xh200", "livecodebench_v6,v5p-128")
CODE_BENCHES = tuple(b for b, spec in V1.BENCHMARKS.items() if spec["domain"] == "code")  # the averaged runs
CALLS = 64  # model calls per problem, both arms


def operators(bench: str) -> list:
    n = V1.N
    return [V1.best_of_n(bench, "pairwise_v1", n=n, m=(CALLS - n) // n),  # 16 + 48
            V1.best_of_n(bench, "self_pointwise", n=CALLS // 2),  # 32 + 32
            V1.best_of_n(bench, "pairwise_v1", n=n, m=1),
            V1.best_of_n(bench, "self_pointwise", n=n)]


def get_config(arg=None):
    bench, backend = V1.parse_arg(arg, __file__, default="livecodebench_v6")
    return V1.config("qwen3-4b-instruct-2507", operators(bench), bench, backend)
