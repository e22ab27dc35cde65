"""Operator-consistent PDR-RL (arXiv 2510.01123 §3.3, §4.2, Table 3 "PDR-RL" rows): Qwen3-8B
(our choice of the paper's "8B base model") from the SFT checkpoint (SFT from Qwen3-8B-Base,
configs/sft/qwen3_8b.py); each step's 32 prompts are split 50/50 (ours) between standard rollouts
and PDR-round rollouts (M = 4 drafts, shared top-k = 2 forwarded, one refine; §4.2: "four
parallel generations, one round, and two candidates forwarded", "mixing operator and standard
RL batches", no split stated) run by the eval operator; the refine completions are trained
(workspace and template masked). Recipe (configs/rl/qwen3_8b.py): CISPO + aux SFT (alpha = 0.1,
ours), learning rate 5e-7 for 800 steps (App. B.3).

Top-k is ranked, not random: `selector="self_pointwise"`, the policy itself rates each draft
1-10 (model-based ranking, as the paper's top-k; `pairwise_v1`, our V1 extension, is the
alternative, `random` gives random-k). The judge gets a modest budget, JUDGE_TOKENS = 512
tokens of reasoning per draft (our choice; the paper gives none), then its rating is read
in-graph from the forced tag. Cost per step (from the sizes below): 2048 judge calls (512
PDR rollouts x 4 drafts), each a 5233-token prompt (Judge prompt: 5233 tokens) plus 512
generated, so +1.0M generated tokens (+3% of the drafts' 33.5M) and ~10.7M prompt tokens of
prefill, plus one rating forward over each judge context; ~1k extra decode steps at 1024 rows
in flight against the drafts' ~33k on v5p-128 (an ESTIMATE). To read the rating at once (no judge decode):
    --config.rl.operator.judge.max_new_tokens=0 --config.rl.operator.judge.think_budget=0

Sizes (computed by the code: tests/test_compile.py asserts them, with SmolLM2's ChatML
tokenizer standing in for Qwen3's, so template pieces may differ by a few tokens): problems
are quoted at rl.max_problem_tokens = 1024; drafts and refine have 16k-token budgets;
forwarded candidates are capped at 4096 tokens (head 1024 + tail). Draft prompt: 1080 tokens
(512 problems x 4 drafts). Refine prompt: 9349 tokens (template + problem + 2 candidates), plus
16384 generated: 25,733 positions, within Qwen3-8B's 40,960; its training row is 25732 wide,
over the standard rows' 17535 (1152 + 16384 - 1): the refine rows set the batch width. Sampler calls
decode at most sampling.max_rows rows at a time, 1024 on v5p-128 and 64 on 8xH200, on the
rollout layout of configs/rl/qwen3_8b.py (tensor=8; a float8 cache on v5p-128).

Command to run (see configs/rl/qwen3_8b.py for hardware and the runtime ESTIMATE; an
operator prompt adds 4 draft calls per refine call, roughly 2.5x the rollout time):
    TPU_NAME=prd-v5p ZONE=us-east5-a launch/tpu_pod.sh run configs/rl/qwen3_8b_pdr.py:v5p-128 \\
        gs://BUCKET/rl_pdr --config.model.init_workdir=gs://BUCKET/sft_qwen3_8b \\
        --config.model.path=/data/Qwen3-8B-Base
Ablations: --config.rl.operator_fraction, --config.rl.operator.schedule, .k, .selector,
--config.rl.gradient_targets=drafts_and_refine.
Expected (paper, §4.2 and Table 3): "PDR RL first improves over baseline by +3.34 points on
AIME 2024 and +1.67 points on AIME 2025" (over configs/rl/qwen3_8b_baseline.py, both
evaluated with configs/eval/qwen3_8b_table3.py). Ours: not yet run; per step, an ESTIMATE as
above.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200")
JUDGE_TOKENS = 512  # the self_pointwise judge's reasoning budget per draft (see the docstring)


def get_config(arg=None):
    c = load_config(f"{os.path.join(HERE, 'qwen3_8b_baseline.py')}:{arg}")  # validates arg
    c.rl.operator_fraction = 0.5
    c.rl.operator = dict(schedule=(4, 1), distill="shared_topk", k=2, selector="self_pointwise",
                         judge=dict(domain="math", max_new_tokens=JUDGE_TOKENS, think_budget=JUDGE_TOKENS // 2),
                         max_new_tokens=16384, candidate_max_tokens=4096, truncation_head=1024, kappa=2048,
                         # thinking + answer budgets per call role (ours): drafts and the refine call
                         # are trained as written (think_budget 0: no forced tokens in a trained
                         # row); the judge and the summary, not trained, close their thinking at
                         # half their budget and answer in the rest
                         think_budget=0, kappa_think=1024)
    return c
