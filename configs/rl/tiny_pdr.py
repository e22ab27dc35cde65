"""Operator-consistent RL (PDR-RL, PDR paper §3.3 / §4.2, Table 3 setting) on the tiny model:
half of each step's prompts get standard rollouts, half get PDR-round rollouts (M = 4 drafts,
shared top-k = 2 workspace, one refine) through the eval operator; the refine completions
are trained on (workspace and template tokens get no gradient).

Command to run (after configs/sft/tiny.py):
    prd-jax train --config configs/rl/tiny_pdr.py --workdir /tmp/rl_tiny_pdr \
        --config.model.init_workdir=/tmp/sft_tiny

Ablation knobs: --config.rl.operator_fraction (mix ratio), --config.rl.operator.schedule (M),
--config.rl.operator.k, --config.rl.operator.selector (random | self_pointwise | pairwise_v1 |
oracle_correct), --config.rl.gradient_targets (refine | drafts_and_refine).
Expected (the paper gives no figure; ours): 2 steps took 42 s with compilation on 2 idle CPU
cores (the second 4 s; measured 2026-11-30), so about a minute for 10 steps; metrics.jsonl has
reward/standard, reward/operator, length/*, workspace_length and operator/b_seq per step.
"""

import os

from prd_jax.config_io import load_config

RL_TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny.py")


def get_config(arg=None):
    c = load_config(RL_TINY)
    c.rl.operator_fraction = 0.5
    c.rl.operator = dict(schedule=(4, 1), distill="shared_topk", k=2, selector="random", max_new_tokens=64,
                         candidate_max_tokens=64, truncation_head=16, kappa=64)
    c.rl.gradient_targets = "refine"
    return c
