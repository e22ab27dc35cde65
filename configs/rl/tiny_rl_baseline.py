"""Standard-RL baseline for V1-PairRL (V1 paper §5) on the tiny model: tiny_pairrl.py's
generator objective (Dr.GRPO advantages and constant normaliser, clip-higher 0.2 / 0.28, no
KL, no auxiliary SFT; ours, as in configs/rl/qwen3_4b_pairrl.py) with no verifier rows.

Command to run (after configs/sft/tiny.py):
    prd-jax train --config configs/rl/tiny_rl_baseline.py --workdir /tmp/rl_tiny_v1_baseline \
        --config.model.init_workdir=/tmp/sft_tiny

Expected (the paper gives no figure; ours): about configs/rl/tiny.py's cost per step (not timed
separately).
"""

import os

from prd_jax.config_io import load_config

PAIRRL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_pairrl.py")


def get_config(arg=None):
    c = load_config(PAIRRL)
    c.rl.verifier = "none"
    return c
