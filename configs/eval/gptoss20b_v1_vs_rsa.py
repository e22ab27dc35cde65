"""V1-Infer against RSA (arXiv 2603.04304 §4) with GPT-OSS-20B on LiveCodeBench v6: N = 16
candidates selected by the pairwise Swiss tournament with 48 verification calls (m = 3),
against recursive self-aggregation's curve, accuracy over its loop count.

Operators, with their model calls per problem:
- `long_cot`: 1 call (Pass@1, no selection);
- best-of-16 + `pairwise_v1` at m = 3: 16 + 48 = 64 calls;
- RSA, population 16, subsets of 4, T = 1, 2, 3, 4 loops: 16 + 16 T = 32, 48, 64, 80 calls
  (the final answer: member 0, an exchangeable member, as RSA reports mean accuracy).
Accuracy against calls (or against the measured B_total) gives the two curves; V1 at 1x and
2x is in configs/eval/gptoss20b_v1_infer.py:livecodebench_v6.

Arg `BENCH[,BACKEND]`: BENCH livecodebench_v6 (default) or another V1 benchmark; BACKEND remote
(default), 8xh200 or v5p-128. Shared settings, the GPT_OSS_20B_DIR variable and what is ours:
configs/eval/v1_paper.py. Ours: RSA's subset size 4 and loop grid 1-4 (the paper's RSA settings
are not in the text we have), its budgets equal to V1's candidates'.

Command to run (server as in configs/eval/gptoss20b_v1_infer.py):
    export GPT_OSS_20B_DIR=/path/to/gpt-oss-20b
    prd-jax eval --config configs/eval/gptoss20b_v1_vs_rsa.py:livecodebench_v6 --workdir runs/gptoss20b_v1_rsa
In-graph: `...:livecodebench_v6,8xh200` (declares `target` h200:8; 4 decode rows in flight per
call, configs/eval/gptoss20b_v1_infer.py's 8xh200 value: every program fits, the largest
rsa.aggregate at 37.41 GB per device of 139.93 as XLA:CPU measures it). `...,v5p-128` (target
v5p:4x4x4, 256 rows in flight per call): every program fits, the largest rsa.aggregate at 97.42 GB
per device of 102.80, a thin margin; `--config.sampling.max_rows=128` halves the rows in flight
if a run overflows (docs/results/2026-12-04-aot-fit-5.md).
Request ESTIMATE (`prd-jax compile --estimate`, stand-in tokenizer, upper bounds): 1.36e6
requests, 2.0e10 prompt and 1.8e10 completion tokens; RSA at T = 4 alone is 5.6e9 completion
tokens against V1's 2.0e9.

Expected (paper, V1 §4): "76% Pass@1: V1-Infer reaches this accuracy on LiveCodeBench-v6 with
N=16 and only 48 verification calls, exceeding RSA's maximum accuracy with fewer calls." RSA's own
figure at each loop count is not in the text we have (only that the 76% exceeds "RSA's maximum
accuracy"); whether the 76% is GPT-OSS-20B's is our reading (the quote names no model). Ours: not
yet run.
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

ARGS = ("livecodebench_v6", "livecodebench_v6,8xh200", "livecodebench_v6,v5p-128")
VERIFICATION_CALLS = 48
RSA_LOOPS = (1, 2, 3, 4)


def operators(bench: str) -> list:
    return ([V1.long_cot(bench), V1.best_of_n(bench, "pairwise_v1", m=VERIFICATION_CALLS // V1.N)]
            + [V1.rsa(bench, loops) for loops in RSA_LOOPS])


def get_config(arg=None):
    bench, backend = V1.parse_arg(arg, __file__, default="livecodebench_v6")
    c = V1.config("gpt-oss-20b", operators(bench), bench, backend)
    if "max_rows" in INFER.POD_OVERRIDES.get(backend, {}):  # 8xh200: GPT-OSS's decode rows in flight
        c.sampling.max_rows = INFER.POD_OVERRIDES[backend]["max_rows"]
    return c
