"""PDR paper Figs. 6 and 8 (arXiv 2510.01123 §4.1 and App. D.1): what the workspace holds.
Oracle selection with the gold answer: correct-only or incorrect-only workspaces, against the
model's own ranking and random-k, for top-k workspaces and for a global summary.

Qwen3-8B, AIME 2024, PDR (8, 4, 1), 8k tokens per call, mean@16:
- shared top-2 with `oracle_correct` / `oracle_incorrect` (only drafts the grader marks
  right / wrong are admitted; fewer than k when fewer exist), `self_pointwise` and random-k;
- a global summary (kappa 2048) written over all drafts, over the correct ones only and
  over the incorrect ones only.
A call whose workspace admits no candidate refines from the problem alone (the accepted
path then runs through the previous round's longest call; `operators/core.py`).

Command to run:
    prd-jax compile --config configs/eval/pdr_oracle_workspaces.py:v5p-128
    prd-jax eval --config configs/eval/pdr_oracle_workspaces.py:v5p-128 --workdir gs://BUCKET/pdr_oracle \\
        --config.model_path=/ckpts/Qwen3-8B
Runtime ESTIMATE (`prd-jax compile --estimate`, not measured): at most 3.9e8 generated
tokens; roofline 1.3 h on a v5p-128, 6.9 h on 8xH200 (a floor).
Expected (paper, §4.1 and App. D.1): correct-only workspaces "improve over Random-k". For
the incorrect-only workspaces, the model's own ranking and the global-summary rows the paper
gives no figure we could verify; ours: not yet run.
"""

import os

from prd_jax.config_io import load_config
from prd_jax.operators.specs import with_thinking

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200")
COMMON = dict(type="pdr", schedule=(8, 4, 1), max_new_tokens=8192, candidate_max_tokens=4096, truncation_head=1024)


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/eval/pdr_oracle_workspaces.py: arg {arg!r} unknown; allowed: {ARGS}")
    c = load_config(f"{os.path.join(HERE, 'aime_pdr_sweep.py')}:{arg}")  # pod, data, sampling
    topk = dict(COMMON, distill="shared_topk", k=2)
    c.operators = [dict(topk, selector="oracle_correct"), dict(topk, selector="oracle_incorrect"),
                   dict(topk, selector="self_pointwise", judge=dict(domain="math", max_new_tokens=1024)),
                   dict(COMMON, distill="random_k", k=2, selector="random")]
    c.operators += [dict(COMMON, distill="global_summary", kappa=2048, selector=s)
                    for s in ("random", "oracle_correct", "oracle_incorrect")]
    # Qwen3-8B thinks in every call: each call role's budget is split into a thinking budget
    # and an answer budget (ours, the paper gives no split: 2048 answer tokens per call, 1024
    # of the summary's kappa, 256 of a judge's budget), the block force-closed at its budget.
    c.enable_thinking = True
    c.operators = with_thinking(c.operators, answer_tokens=2048, summary_answer_tokens=1024, judge_answer_tokens=256)
    return c
