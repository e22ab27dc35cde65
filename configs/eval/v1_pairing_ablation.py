"""V1 paper (arXiv 2603.04304 §4): how the pairs are chosen. Swiss (uncertainty-guided,
`pairwise_v1`) against random disjoint pairing (`pairwise_random`) at m = 1, 2, 3 judge calls per
candidate, and round-robin (all C(16, 2) = 120 pairs, 7.5 calls per candidate) as the
exhaustive reference.

Qwen3-8B, AIME 2024, N = 16 candidates of up to 16k tokens, judges reason for up to 4k.
Round-robin's budget is fixed by N; it is run once, not at 1x/2x/3x.

Command to run:
    prd-jax compile --config configs/eval/v1_pairing_ablation.py:v5p-128
    prd-jax eval --config configs/eval/v1_pairing_ablation.py:v5p-128 --workdir gs://BUCKET/v1_pairing \\
        --config.model_path=/ckpts/Qwen3-8B
Runtime ESTIMATE (`prd-jax compile --estimate`, not measured): at most 4.0e8 generated
tokens; roofline 2.0 h on a v5p-128, 10.1 h on 8xH200 (a floor).
Expected: the paper gives no figure we could verify for this ablation; ours: not yet run.
The model and benchmark are ours: the paper measures on GPT-OSS-20B and Qwen3-4B-Instruct-2507
over LiveCodeBench, CodeContests and HMMT (configs/eval/gptoss20b_v1_infer.py).
(V1's abstract, for V1-Infer as a whole: "an uncertainty-guided algorithm using a
tournament-based ranking that dynamically allocates self-verification compute to candidate
pairs whose relative correctness is most uncertain".)
"""

import os

from prd_jax.config_io import load_config
from prd_jax.operators.specs import with_thinking

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200")
COMMON = dict(type="best_of_n", n=16, max_new_tokens=16384, candidate_max_tokens=8192, truncation_head=2048)
JUDGE = dict(domain="math", max_new_tokens=4096)


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/eval/v1_pairing_ablation.py: arg {arg!r} unknown; allowed: {ARGS}")
    c = load_config(f"{os.path.join(HERE, 'v1_best_of_n.py')}:{arg}")  # pod, data, sampling (top-p 0.95)
    c.operators = [dict(COMMON, selector=s, judge=dict(JUDGE, budget_multiple=m))
                   for m in (1, 2, 3) for s in ("pairwise_v1", "pairwise_random")]
    c.operators.append(dict(COMMON, selector="round_robin", judge=JUDGE))
    # Qwen3-8B thinks in every call: each call role's budget is split into a thinking budget
    # and an answer budget (ours, the paper gives no split: 2048 answer tokens per call, 1024
    # of the summary's kappa, 256 of a judge's budget), the block force-closed at its budget.
    c.enable_thinking = True
    c.operators = with_thinking(c.operators, answer_tokens=2048, summary_answer_tokens=1024, judge_answer_tokens=256)
    return c
