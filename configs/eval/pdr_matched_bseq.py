"""PDR paper Fig. 3 / Table 1 (arXiv 2510.01123 §4.1): Long-CoT, SR and PDR at matched B_seq.

Qwen3-8B on AIME 2024 (`--config.task=aime2025` for the other half), mean@16, T = 1.0.
B_seq counts the tokens generated on the accepted path (§3.1), so the comparison is made
by reading accuracy off B_seq, not off the per-call budget:
- Long-CoT at 8k / 16k / 24k / 32k generated tokens brackets the B_seq of the iterative
  operators (at most 3 x 8k plus the selector's rating calls);
- SR, 2 refinement rounds of 8k, with and without error analysis (Table 1's two SR rows);
- PDR (8, 4, 1) and (16, 8, 4, 1), shared top-2 ranked by the model itself
  (`self_pointwise`, 1k-token rating budget), and (8, 4, 1) with a global summary.
Per-call budget 8k everywhere; 32k of Long-CoT plus a 1k problem stays under Qwen3-8B's
40,960 positions. The paper's exact budget grid is not restated here; these are ours.
Fig. 3's largest point, B_seq = 49k, cannot be reached with Qwen3-8B: Long-CoT would need one
49k-token call, past its 40,960-token context. For that point see the o3-mini config,
configs/eval/o3mini_fig3_matched_bseq.py (an API model without this context limit).

The arg names the pod (mesh, batch, decode-row cap and `prd-jax compile` target), as in
configs/eval/aime_pdr_sweep.py.

Command to run:
    prd-jax compile --config configs/eval/pdr_matched_bseq.py:v5p-128
    prd-jax eval --config configs/eval/pdr_matched_bseq.py:v5p-128 --workdir gs://BUCKET/pdr_fig3 \\
        --config.model_path=/ckpts/Qwen3-8B
Runtime ESTIMATE (`prd-jax compile --estimate`, not measured): at most 3.2e8 generated
tokens for 30 problems x 16 samples; roofline 1.2 h on a v5p-128, 6.9 h on 8xH200 (a floor:
real decode runs below the roofline).
Expected (paper, abstract): SR "provides performance superior to long CoT", and
"iterative pipelines surpass single-pass baselines at matched sequential budgets, with PDR
delivering the largest gains (e.g., +11% on AIME 2024 and +9% on AIME 2025)"
(that sentence names no model). For Qwen3-8B's rows and for SR with against without error
analysis (Table 1) the paper gives no figure we could verify; ours: not yet run.
"""

import os

from prd_jax.config_io import load_config
from prd_jax.operators.specs import with_thinking

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200")
BUDGET = 8192
CAND = dict(candidate_max_tokens=4096, truncation_head=1024)
RANKER = dict(selector="self_pointwise", judge=dict(domain="math", max_new_tokens=1024))


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/eval/pdr_matched_bseq.py: arg {arg!r} unknown; allowed: {ARGS}")
    c = load_config(f"{os.path.join(HERE, 'aime_pdr_sweep.py')}:{arg}")  # pod, data, sampling
    ops = [dict(type="long_cot", max_new_tokens=b) for b in (BUDGET, 2 * BUDGET, 3 * BUDGET, 4 * BUDGET)]
    ops += [dict(type="sr", rounds=2, error_analysis=ea, max_new_tokens=BUDGET, **CAND) for ea in (False, True)]
    ops += [dict(type="pdr", schedule=s, distill="shared_topk", k=2, max_new_tokens=BUDGET, **CAND, **RANKER)
            for s in ((8, 4, 1), (16, 8, 4, 1))]
    ops.append(dict(type="pdr", schedule=(8, 4, 1), distill="global_summary", kappa=2048, max_new_tokens=BUDGET,
                    **CAND))
    c.operators = ops
    # Qwen3-8B thinks in every call: each call role's budget is split into a thinking budget
    # and an answer budget (ours, the paper gives no split: 2048 answer tokens per call, 1024
    # of the summary's kappa, 256 of a judge's budget), the block force-closed at its budget.
    c.enable_thinking = True
    c.operators = with_thinking(c.operators, answer_tokens=2048, summary_answer_tokens=1024, judge_answer_tokens=256)
    return c
