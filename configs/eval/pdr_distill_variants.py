"""PDR paper Table 2 (arXiv 2510.01123 §4.1): the four distill variants, extractive ones ranked
by the model itself, over a ladder of per-call budgets, on AIME 2024 and AIME 2025.

Qwen3-8B, PDR (8, 4, 1), mean@16, at per-call budgets of 8k, 16k and 24k tokens (the ladder's
rungs are ours; the paper reports the variants' margins widening at larger thinking budgets):
- global summary (kappa = 2048 summary tokens);
- shared top-2 and per-sample top-2, ranked with `self_pointwise` (the model rates each
  draft 1-10 after up to 1k tokens of reasoning), plus the same two ranked by our V1
  extension `pairwise_v1` (Swiss tournament, m = 1);
- random-k (k = 2, no ranking: each refine call draws its own two drafts).
Candidates are quoted at most 4096 tokens (head 1024 + tail), after their thinking block; at
24k per call the largest prompt (the global summary's 8 quoted drafts) stays under Qwen3-8B's
40,960 positions.

The arg is POD[,YEAR]: POD names the pod (mesh, batch and `prd-jax compile` target, as in
configs/eval/aime_pdr_sweep.py), YEAR the AIME year, aime2024 (the default) or aime2025. One
eval run reads one task, so the two years are two runs:
    prd-jax compile --config configs/eval/pdr_distill_variants.py:v5p-128
    prd-jax eval --config configs/eval/pdr_distill_variants.py:v5p-128,aime2024 \\
        --workdir gs://BUCKET/pdr_table2_aime2024 --config.model_path=/ckpts/Qwen3-8B
    prd-jax eval --config configs/eval/pdr_distill_variants.py:v5p-128,aime2025 \\
        --workdir gs://BUCKET/pdr_table2_aime2025 --config.model_path=/ckpts/Qwen3-8B
(`:v5p-128` alone is `:v5p-128,aime2024`; the programs, and so `prd-jax compile`, are the
same for both years.)
Runtime ESTIMATE (`prd-jax compile --estimate`, not measured), per year: at most 2.0e9
generated tokens; roofline 11.5 h on a v5p-128, 59 h on 8xH200 (a floor).
Expected (paper, §4.1 and Table 2): the margins between the distill variants widen at larger
thinking budgets, on AIME 2024 and 2025; "for o3-mini on AIME 2025, global summary
outperforms" (a sentence about o3-mini). For Qwen3-8B the paper gives no figure we could
verify; ours: not yet run.
"""

import os

from prd_jax.config_io import load_config
from prd_jax.operators.specs import with_thinking

HERE = os.path.dirname(os.path.abspath(__file__))
PODS = ("v5p-128", "8xh200")
YEARS = ("aime2024", "aime2025")
ARGS = PODS + tuple(f"{pod},{year}" for pod in PODS for year in YEARS)
BUDGETS = (8192, 16384, 24576)  # per-call budgets (ours)
COMMON = dict(type="pdr", schedule=(8, 4, 1), k=2, candidate_max_tokens=4096, truncation_head=1024)
JUDGE = dict(domain="math", max_new_tokens=1024)


def get_config(arg=None):
    pod, _, year = (arg or "").partition(",")
    if arg not in ARGS:
        raise ValueError(f"configs/eval/pdr_distill_variants.py: arg {arg!r} unknown; allowed: {ARGS} "
                         "(POD[,YEAR], e.g. v5p-128,aime2025)")
    c = load_config(f"{os.path.join(HERE, 'aime_pdr_sweep.py')}:{pod}")  # pod, data, sampling
    c.task = year or "aime2024"
    ops = []
    for budget in BUDGETS:
        common = dict(COMMON, max_new_tokens=budget)
        ops.append(dict(common, distill="global_summary", kappa=2048))
        for distill in ("shared_topk", "per_sample_topk"):
            ops += [dict(common, distill=distill, selector=s, judge=JUDGE) for s in ("self_pointwise", "pairwise_v1")]
        ops.append(dict(common, distill="random_k", selector="random"))
    c.operators = ops
    # Qwen3-8B thinks in every call: each call role's budget is split into a thinking budget
    # and an answer budget (ours, the paper gives no split: 2048 answer tokens per call, 1024
    # of the summary's kappa, 256 of a judge's budget), the block force-closed at its budget.
    c.enable_thinking = True
    c.operators = with_thinking(c.operators, answer_tokens=2048, summary_answer_tokens=1024, judge_answer_tokens=256)
    return c
