"""The V1 paper's claims that had no config (arXiv 2603.04304 §3-4), with GPT-OSS-20B, each as
far as prd_jax's eval can measure it today. Arg `CLAIM[,BENCH[,BACKEND]]`:

- `pass_at_n` (default bench codecontests): `long_cot` with k = 16 samples per problem:
  mean@16 is Pass@1 and pass@16 is Pass@N for N = 16 independent candidates, the ceiling of any
  selector; the denominator of the top-1 accuracy below.
- `self_ranking` (V1 §3's top-1 self-ranking accuracy; default bench codecontests): best-of-16
  with `self_pointwise`, `pairwise_v1` at m = 1, 2, 3 and `random` (chance: its mean is Pass@1),
  k = 4. The top-1 accuracy of a selector is its mean@k over the `pass_at_n` run's pass@16 (a
  selector is right only where some candidate is). NOT measured as the paper defines it: the
  results record only the selected program, not each candidate's correctness, so the
  accuracy conditioned on problems whose own 16 candidates hold a correct one cannot be
  computed; the ratio above uses two independent candidate draws.
- `rsa_decay` (RSA's Pass@N decay, V1 §4; default bench livecodebench_v6): RSA with population
  16, subsets of 4, T = 1, 2, 3, 4 loops, and `long_cot`, k = 4. Measured: each loop count's
  mean accuracy (member 0) and pass@4 over independent runs. NOT measured: the Pass@N of the
  population after each loop (the claim itself), since the eval grades only the final member.
- `difficulty` (V1 §4's hard / medium / easy split, "On hard LCB-v6 problems"; default bench
  livecodebench_v6, the 2025-02-01..2025-05-01 window of release_v6, tasks/livecodebench.py): the
  operators of configs/eval/gptoss20b_v1_infer.py; summary.md adds per-difficulty rows (each
  results.jsonl row's `problem_id` joined with the LiveCodeBench row's published `difficulty`).

BENCH is any V1 benchmark (codecontests, livecodebench_v5, livecodebench_v6, hmmt_feb2025),
BACKEND remote (default), 8xh200 or v5p-128 (in-graph; declares `target`; 8xh200 keeps
configs/eval/gptoss20b_v1_infer.py's 4 decode rows in flight per call, with which
`self_ranking,codecontests,8xh200` fits, its largest program 35.09 GB per device of 139.93;
`self_ranking,codecontests,v5p-128` fits, its largest a rating read at 85.53 of 102.80;
docs/results/2026-12-04-aot-fit-5.md). Shared settings, GPT_OSS_20B_DIR and what is ours:
configs/eval/v1_paper.py.

Command to run (server as in configs/eval/gptoss20b_v1_infer.py):
    export GPT_OSS_20B_DIR=/path/to/gpt-oss-20b
    prd-jax eval --config configs/eval/gptoss20b_v1_claims.py:pass_at_n --workdir runs/gptoss20b_pass_at_n
    prd-jax eval --config configs/eval/gptoss20b_v1_claims.py:self_ranking --workdir runs/gptoss20b_self_ranking
    prd-jax eval --config configs/eval/gptoss20b_v1_claims.py:rsa_decay --workdir runs/gptoss20b_rsa_decay
    prd-jax eval --config configs/eval/gptoss20b_v1_claims.py:difficulty --workdir runs/gptoss20b_difficulty

Expected (paper):
- `difficulty` (V1 §4): "+23.7%: On hard LCB-v6 problems, pairwise verification with a 3x budget
  raises accuracy from 40.2% Pass@1 to 63.9%." "The reported gain is larger than the improvement
  on medium-difficulty problems, while easy problems already reach 99.3% Pass@1." (Our reading:
  `long_cot`'s hard row against `pairwise_v1` m = 3's, GPT-OSS-20B's; the quote names neither the
  baseline operator nor the model; the medium gain has no figure.)
- `self_ranking` (V1 §3): "Pairwise judgments provide relative comparisons and yield higher top-1
  self-ranking accuracy than pointwise scoring." (no figure in the text we have).
- `rsa_decay` (V1 §3): "Self-aggregation combines parallel solutions but can monotonically reduce
  Pass@N as aggregation steps increase." (no figure in the text we have).
- `pass_at_n`: the paper gives no figure for it. Ours: not yet run.
"""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("v1_paper", os.path.join(HERE, "v1_paper.py"))
V1 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(V1)
_spec = importlib.util.spec_from_file_location("gptoss20b_v1_infer", os.path.join(HERE, "gptoss20b_v1_infer.py"))
INFER = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(INFER)

CLAIMS = {  # claim: (default bench, k samples, operators(bench))
    "pass_at_n": ("codecontests", V1.N, lambda b: [V1.long_cot(b)]),
    "self_ranking": ("codecontests", 4, lambda b: [V1.best_of_n(b, "self_pointwise")]
                     + [V1.best_of_n(b, "pairwise_v1", m=m) for m in V1.BUDGETS] + [V1.best_of_n(b, "random")]),
    "rsa_decay": ("livecodebench_v6", 4, lambda b: [V1.long_cot(b)] + [V1.rsa(b, t) for t in (1, 2, 3, 4)]),
    "difficulty": ("livecodebench_v6", 4, INFER.operators),
}
ARGS = tuple(CLAIMS) + ("self_ranking,codecontests,8xh200", "self_ranking,codecontests,v5p-128")


def get_config(arg=None):
    claim, _, rest = (arg or "pass_at_n").partition(",")
    if claim not in CLAIMS:
        raise ValueError(f"configs/eval/gptoss20b_v1_claims.py: arg {arg!r} unknown; allowed: "
                         f"CLAIM[,BENCH[,BACKEND]] with CLAIM in {list(CLAIMS)}, BENCH in {list(V1.BENCHMARKS)}, "
                         f"BACKEND in {list(V1.BACKENDS)} (none given: pass_at_n)")
    default, k, ops = CLAIMS[claim]
    bench, backend = V1.parse_arg(rest or None, __file__, default=default)
    c = V1.config("gpt-oss-20b", ops(bench), bench, backend, k_samples=k)
    if "max_rows" in INFER.POD_OVERRIDES.get(backend, {}):  # 8xh200: GPT-OSS's decode rows in flight
        c.sampling.max_rows = INFER.POD_OVERRIDES[backend]["max_rows"]
    return c
