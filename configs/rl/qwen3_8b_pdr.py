"""Operator-consistent PDR-RL (arXiv 2510.01123 §3.3, §4.2, Table 3 "PDR-RL" rows): Qwen3-8B
from the SFT checkpoint; each step's 32 prompts are split 50/50 between standard rollouts
and PDR-round rollouts (M = 4 drafts, shared top-k = 2 forwarded, one refine) run by the
eval operator; the refine completions are trained (workspace and template masked).

Sizes (computed by the code: tests/test_compile.py asserts them, with SmolLM2's ChatML
tokenizer standing in for Qwen3's, so template pieces may differ by a few tokens): problems
are quoted at rl.max_problem_tokens = 1024; drafts and refine have 16k-token budgets;
forwarded candidates are capped at 4096 tokens (head 1024 + tail). Draft prompt: 1080 tokens
(512 problems x 4 drafts). Refine prompt: 9327 tokens (template + problem + 2 candidates), plus
16384 generated: 25,711 positions, within Qwen3-8B's 40,960; its training row is 25710 wide,
under the standard rows' 26623 (10240 + 16384 - 1), which set the batch width. Sampler calls
decode at most rl.max_rows_per_call = 256 rows at a time (see configs/rl/qwen3_8b.py).

Command to run (see configs/rl/qwen3_8b.py for hardware and the runtime ESTIMATE; an
operator prompt adds 4 draft calls per refine call, roughly 2.5x the rollout time):
    TPU_NAME=prd-v5p ZONE=us-east5-a launch/tpu_pod.sh run configs/rl/qwen3_8b_pdr.py:v5p-128 \\
        gs://BUCKET/rl_pdr --config.model.init_workdir=gs://BUCKET/sft_qwen3_8b \\
        --config.model.path=/data/Qwen3-8B
Ablations: --config.rl.operator_fraction, --config.rl.operator.schedule, .k, .selector,
--config.rl.gradient_targets=drafts_and_refine.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200")


def get_config(arg=None):
    c = load_config(f"{os.path.join(HERE, 'qwen3_8b_baseline.py')}:{arg}")  # validates arg
    c.rl.operator_fraction = 0.5
    c.rl.operator = dict(schedule=(4, 1), distill="shared_topk", k=2, selector="random", max_new_tokens=16384,
                         candidate_max_tokens=4096, truncation_head=1024, kappa=2048)
    return c
