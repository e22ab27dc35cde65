"""PDR paper Table 4 / App. E (arXiv 2510.01123) in-graph on Qwen3-8B: 4 rounds against 5, the
5-round schedule at the higher compute. The paper ran this comparison on gemini-2.5-flash
(App. E); its API counterpart is configs/eval/gemini25flash_table4_rounds.py.

Model: Qwen3-8B (in-graph). AIME 2024, 8k tokens per call, shared top-2 ranked by
`self_pointwise`, mean@16:
- (32, 16, 8, 4, 1), 5 rounds: App. E, "the higher-compute setting uses 32 first-round
  generations" (M_1 = 32 is the paper's; the later round sizes are ours, halving);
- (16, 8, 4, 1), 4 rounds, the lower-compute setting: only the higher-compute setting starts
  with 32 drafts. The lower one's first-round width is not in the text we could read, so
  M_1 = 16 (the 4-round schedule of Fig. 3, configs/eval/pdr_matched_bseq.py) is ours, as
  are its later round sizes;
- (8, 4, 1), 3 rounds: our reference point, not in Table 4.
Per-question accuracy (the paper's Table 4 reports it per question) is in results.jsonl: one
row per problem and sample.

Command to run:
    prd-jax compile --config configs/eval/pdr_rounds.py:v5p-128
    prd-jax eval --config configs/eval/pdr_rounds.py:v5p-128 --workdir gs://BUCKET/pdr_table4 \\
        --config.model_path=/ckpts/Qwen3-8B
Runtime ESTIMATE (`prd-jax compile --estimate`, not measured): at most 4.8e8 generated
tokens; roofline 1.5 h on a v5p-128, 8.5 h on 8xH200 (a floor).
Expected (paper, Table 4 / App. E): for Qwen3-8B the paper gives no figure. Its Table 4 figures
are gemini-2.5-flash's, 4 rounds -> 5 rounds on the four questions of its table:
Q1 0.4375 -> 0.625, Q2 0.0625 -> 0, Q3 and Q4 flat; a mixed per-question result, not a uniform gain from
the fifth round (quoted for that model in configs/eval/gemini25flash_table4_rounds.py). Ours:
not yet run.
"""

import os

from prd_jax.config_io import load_config
from prd_jax.operators.specs import with_thinking

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200")
COMMON = dict(type="pdr", distill="shared_topk", k=2, selector="self_pointwise",
              judge=dict(domain="math", max_new_tokens=1024), max_new_tokens=8192, candidate_max_tokens=4096,
              truncation_head=1024)
# (reference, ours), 4 rounds at the lower compute (M_1 = 16 ours), 5 rounds at the higher (M_1 = 32, App. E)
SCHEDULES = ((8, 4, 1), (16, 8, 4, 1), (32, 16, 8, 4, 1))


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/eval/pdr_rounds.py: arg {arg!r} unknown; allowed: {ARGS}")
    c = load_config(f"{os.path.join(HERE, 'aime_pdr_sweep.py')}:{arg}")  # pod, data, sampling
    c.operators = [dict(COMMON, schedule=s) for s in SCHEDULES]
    # Qwen3-8B thinks in every call: each call role's budget is split into a thinking budget
    # and an answer budget (ours, the paper gives no split: 2048 answer tokens per call, 1024
    # of the summary's kappa, 256 of a judge's budget), the block force-closed at its budget.
    c.enable_thinking = True
    c.operators = with_thinking(c.operators, answer_tokens=2048, summary_answer_tokens=1024, judge_answer_tokens=256)
    return c
