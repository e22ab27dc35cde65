"""PDR paper Fig. 3 / Table 1 (arXiv 2510.01123 §4.1): Long-CoT, SR and PDR at matched B_seq.

Qwen3-8B on AIME 2024 (`--config.task=aime2025` for the other half), mean@16, T = 1.0.
B_seq counts the tokens generated on the accepted path (§3.1), so the comparison is made
by reading accuracy off B_seq, not off the per-call budget:
- Long-CoT at 8k / 16k / 24k / 32k generated tokens brackets the B_seq of the iterative
  operators at 8k per call (at most 3 x 8k plus the selector's rating calls);
- SR, 2 refinement rounds, with and without error analysis (Table 1's two SR rows), and PDR
  (8, 4, 1), shared top-2 ranked by the model itself (`self_pointwise`, 1k-token rating
  budget) and with a global summary, each at 8k and at 16k per call;
- PDR (16, 8, 4, 1), shared top-2, at 8k and at 12k per call.
32k of Long-CoT plus a 1k problem stays under Qwen3-8B's 40,960 positions. The grid is ours.
Fig. 3's point, B_seq 49k (o3-mini's, the paper's only Fig. 3 values), lives in the rows at
16k per call (3 calls: at most 49,152 tokens on the path, plus the accepted candidates' rating
calls for top-k, which `b_seq_no_judge` leaves out) and PDR (16, 8, 4, 1) at 12k (4 calls).
Long-CoT cannot join it here: one 49k-token call is past Qwen3-8B's 40,960-token context, so
the Long-CoT side of that point is in configs/eval/o3mini_fig3_matched_bseq.py (Long-CoT at
49,152, within o3-mini's 100,000 output tokens).

The arg names the pod (mesh, batch, decode-row cap and `prd-jax compile` target), as in
configs/eval/aime_pdr_sweep.py.

Command to run:
    prd-jax compile --config configs/eval/pdr_matched_bseq.py:v5p-128
    prd-jax eval --config configs/eval/pdr_matched_bseq.py:v5p-128 --workdir gs://BUCKET/pdr_fig3 \\
        --config.model_path=/ckpts/Qwen3-8B
Runtime ESTIMATE (`prd-jax compile --estimate`, not measured): at most 7.95e8 generated
tokens for 30 problems x 16 samples; roofline 18.7 h on 8xH200 (a floor: real decode runs
below the roofline); on a v5p-128 about 3.3 h, scaled by the two targets' ratio for the
previous 8k-only grid (1.2 h / 6.9 h), not re-estimated.
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
# per-call budgets (ours): 8k, and the paper's B_seq-49k point (3 x 16,384; 4 x 12,288 for 4 rounds)
PER_CALL = {(8, 4, 1): (BUDGET, 2 * BUDGET), (16, 8, 4, 1): (BUDGET, 12288)}


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/eval/pdr_matched_bseq.py: arg {arg!r} unknown; allowed: {ARGS}")
    c = load_config(f"{os.path.join(HERE, 'aime_pdr_sweep.py')}:{arg}")  # pod, data, sampling
    ops = [dict(type="long_cot", max_new_tokens=b) for b in (BUDGET, 2 * BUDGET, 3 * BUDGET, 4 * BUDGET)]
    for b in PER_CALL[(8, 4, 1)]:
        ops += [dict(type="sr", rounds=2, error_analysis=ea, max_new_tokens=b, **CAND) for ea in (False, True)]
    ops += [dict(type="pdr", schedule=s, distill="shared_topk", k=2, max_new_tokens=b, **CAND, **RANKER)
            for s, budgets in PER_CALL.items() for b in budgets]
    ops += [dict(type="pdr", schedule=(8, 4, 1), distill="global_summary", kappa=2048, max_new_tokens=b, **CAND)
            for b in PER_CALL[(8, 4, 1)]]
    c.operators = ops
    # Qwen3-8B thinks in every call: each call role's budget is split into a thinking budget
    # and an answer budget (ours, the paper gives no split: 2048 answer tokens per call, 1024
    # of the summary's kappa, 256 of a judge's budget), the block force-closed at its budget.
    c.enable_thinking = True
    c.operators = with_thinking(c.operators, answer_tokens=2048, summary_answer_tokens=1024, judge_answer_tokens=256)
    return c
