"""Adaptive PDR (issue 37) on AIME with Qwen3-8B: Pareto curves of adaptive PDR at several tau
against fixed PDR (M, 1) rounds and Long-CoT (accelerators: a v5p-128 pod or 8xH200).

Everything but the operators is configs/eval/aime_pdr_sweep.py (model, mesh, target, mean@16
on AIME 2024, T = 1.0, thinking budgets split by `with_thinking`). Rows, 8k tokens per call:
Long-CoT at 8k / 16k / 24k; fixed PDR (4, 1), (8, 1), (16, 1) with a shared top-2 ranked by
answer agreement (`majority`, no judge calls) and one refine; adaptive PDR over 16 draft slots
(4 drafts, then up to 6 and 6 more where the drafts disagree, by `adaptive_pdr.allocate`) at
tau = 0.25, 0.5, 0.75, 1.0, and once more at tau = 0.75 under a cap of 8 calls (65,536
generated tokens) per problem on average over the batch.

Command to run:
    prd-jax compile --config configs/eval/adaptive_pdr_aime_qwen3_8b.py:v5p-128
    prd-jax eval --config configs/eval/adaptive_pdr_aime_qwen3_8b.py:v5p-128 --workdir gs://.../adaptive_aime \
        --config.model_path=/ckpts/Qwen3-8B

Expected: the paper gives no figure (it names adaptive schedules as future work); ours: not yet run. Runtime
ESTIMATE, not measured: at most the fixed (16, 1) row's tokens per adaptive row (17 calls of
8k per problem and sample), i.e. 30 x 16 x 17 x 8192 = 6.7e7 generated tokens per row.
"""

import os

from prd_jax.config_io import load_config
from prd_jax.operators.specs import with_thinking

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200")
CALL = 8192
QUOTE = dict(max_new_tokens=CALL, candidate_max_tokens=4096, truncation_head=1024)
ADAPTIVE = dict(type="adaptive_pdr", waves=3, min_fanout=4, max_fanout=6, k=2, signal="majority", **QUOTE)


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"config arg {arg!r}; allowed: {ARGS} (the pod)")
    c = load_config(f"{os.path.join(HERE, 'aime_pdr_sweep.py')}:{arg}")
    ops = [dict(type="long_cot", max_new_tokens=b) for b in (CALL, 2 * CALL, 3 * CALL)]
    ops += [dict(type="pdr", schedule=(m, 1), distill="shared_topk", k=2, selector="majority", **QUOTE)
            for m in (4, 8, 16)]
    ops += [dict(ADAPTIVE, tau=tau) for tau in (0.25, 0.5, 0.75, 1.0)]
    ops.append(dict(ADAPTIVE, tau=0.75, cap=8 * CALL))
    c.operators = with_thinking(ops, answer_tokens=2048, summary_answer_tokens=1024, judge_answer_tokens=256)
    return c
