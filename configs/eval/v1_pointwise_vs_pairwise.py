"""V1 paper (arXiv 2603.04304 §4, V1-Infer): pointwise against pairwise best-of-N at a matched
number of model calls.

Qwen3-8B, AIME 2024, 16k generated tokens per candidate, judges reason for up to 4k tokens:
- pointwise at N = 32: 32 candidates + 32 rating calls = 64 calls per problem;
- pairwise_v1 (Swiss tournament) at N = 16 with m = 3: 16 candidates + 48 judge calls = 64;
- pairwise_v1 at N = 16, m = 1, and pointwise at N = 16 (the unmatched reference points).
Calls, not tokens, are matched (as the paper's budget is counted in verifier calls; its split:
"Budget-matched comparisons additionally use N = 32 for pointwise verification against pairwise
N = 16 at 3x budget", V1 App. C.1); the B_total column of the results shows the token cost of each.

Command to run:
    prd-jax compile --config configs/eval/v1_pointwise_vs_pairwise.py:v5p-128
    prd-jax eval --config configs/eval/v1_pointwise_vs_pairwise.py:v5p-128 --workdir gs://BUCKET/v1_pw \\
        --config.model_path=/ckpts/Qwen3-8B
Runtime ESTIMATE (`prd-jax compile --estimate`, not measured): at most 2.3e8 generated
tokens (judge calls at their budget); roofline 1.0 h on a v5p-128, 5.2 h on 8xH200 (a floor).
Expected (paper, V1 summary): "V1-Infer improves Pass@1 by up to 10% over pointwise
verification" (over its benchmarks and models); its matched-calls figure is Qwen3-4B-Instruct-2507's
on code (V1 §4: "45% average accuracy on code-generation benchmarks versus approximately 33% for
pointwise verification", configs/eval/qwen3_4b_v1_matched_calls.py). For Qwen3-8B on AIME 2024 at
matched calls the paper gives no figure; ours: not yet run. The paper's own setting differs
(Qwen3-4B-Instruct-2507 on code and HMMT): configs/eval/qwen3_4b_v1_matched_calls.py; this
Qwen3-8B / AIME 2024 run is ours.
"""

import os

from prd_jax.config_io import load_config
from prd_jax.operators.specs import with_thinking

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200")
COMMON = dict(type="best_of_n", max_new_tokens=16384, candidate_max_tokens=8192, truncation_head=2048)
JUDGE = dict(domain="math", max_new_tokens=4096)


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/eval/v1_pointwise_vs_pairwise.py: arg {arg!r} unknown; allowed: {ARGS}")
    c = load_config(f"{os.path.join(HERE, 'v1_best_of_n.py')}:{arg}")  # pod, data, sampling (top-p 0.95)
    c.operators = [dict(COMMON, n=32, selector="self_pointwise", judge=JUDGE),
                   dict(COMMON, n=16, selector="pairwise_v1", judge=dict(JUDGE, budget_multiple=3)),
                   dict(COMMON, n=16, selector="pairwise_v1", judge=JUDGE),
                   dict(COMMON, n=16, selector="self_pointwise", judge=JUDGE)]
    # Qwen3-8B thinks in every call: each call role's budget is split into a thinking budget
    # and an answer budget (ours, the paper gives no split: 2048 answer tokens per call, 1024
    # of the summary's kappa, 256 of a judge's budget), the block force-closed at its budget.
    c.enable_thinking = True
    c.operators = with_thinking(c.operators, answer_tokens=2048, summary_answer_tokens=1024, judge_answer_tokens=256)
    return c
