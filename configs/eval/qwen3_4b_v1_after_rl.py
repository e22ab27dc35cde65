"""Evaluation of the V1-PairRL, V1-PointRL and standard-RL policies (arXiv 2603.04304 §5;
configs/rl/qwen3_4b_pairrl.py, qwen3_4b_pointrl.py, qwen3_4b_rl_baseline.py) on code:
Pass@1 of one sample (`long_cot`) and V1-Infer at a 2x budget (best-of-16 + `pairwise_v1`,
m = 2: 32 judge calls), on LiveCodeBench v5, v6 and CodeContests. Run it once per trained
policy (and once on the base Qwen3-4B-Instruct-2507 for the reference row).

Arg `BENCH[,BACKEND]`: BENCH livecodebench_v5 (default), livecodebench_v6 or codecontests;
BACKEND remote (default: the policy served by vLLM / SGLang, tokenizer from QWEN3_4B_DIR, the
base model's, which RL does not change), 8xh200 or v5p-128 (in-graph: `--config.model_path`
must name the policy's weights as an HF directory, e.g. written by
`prd_jax.checkpoint.export_hf` with the base model's tokenizer files beside them). Shared
settings and what is ours: configs/eval/v1_paper.py.

Command to run:
    vllm serve /path/to/pairrl_export --served-model-name Qwen/Qwen3-4B-Instruct-2507 --max-logprobs 20 \\
        --generation-config vllm
    export QWEN3_4B_DIR=/path/to/Qwen3-4B-Instruct-2507
    prd-jax eval --config configs/eval/qwen3_4b_v1_after_rl.py:livecodebench_v5 --workdir runs/pairrl_lcb5
In-graph:
    prd-jax eval --config configs/eval/qwen3_4b_v1_after_rl.py:livecodebench_v6,8xh200 \\
        --workdir runs/pairrl_lcb6 --config.model_path=/path/to/pairrl_export
The in-graph args declare `target` h200:8 / v5p:4x4x4; `livecodebench_v5,8xh200` and
`livecodebench_v5,v5p-128` fit (docs/results/2026-12-04-aot-fit-4.md).

Expected (paper, V1 abstract): "V1-PairRL achieves 7-9% test-time scaling gains over standard
RL and pointwise joint training, and improves base Pass@1 by up to 8.7% over standard RL in a
code-generation setting". Per benchmark and per policy the text we have gives no figure we
could verify; ours: not yet run (no policy trained).
"""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("v1_paper", os.path.join(HERE, "v1_paper.py"))
V1 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(V1)

BENCHES = ("livecodebench_v5", "livecodebench_v6", "codecontests")
ARGS = BENCHES + ("livecodebench_v5,8xh200", "livecodebench_v5,v5p-128")
BUDGET = 2  # V1-Infer at 2x N judge calls (issue 33 §2)


def get_config(arg=None):
    bench, backend = V1.parse_arg(arg, __file__, benches=BENCHES, default="livecodebench_v5")
    c = V1.config("qwen3-4b-instruct-2507", [V1.long_cot(bench), V1.best_of_n(bench, "pairwise_v1", m=BUDGET)],
                  bench, backend)
    c.model_path = ""  # the trained policy's weights, never the base model's (in-graph: required override)
    return c
