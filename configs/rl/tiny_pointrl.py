"""V1-PointRL (V1 paper §5 baseline): as tiny_pairrl.py, but the policy verifies each of its
rollouts pointwise (one rating per solution) with the same threshold reward.

Command to run (after configs/sft/tiny.py):
    prd-jax train --config configs/rl/tiny_pointrl.py --workdir /tmp/rl_tiny_pointrl \
        --config.model.init_workdir=/tmp/sft_tiny

Expected: about the cost of configs/rl/tiny_pairrl.py per step (not timed separately).
"""

import os

from prd_jax.config_io import load_config

PAIRRL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_pairrl.py")


def get_config(arg=None):
    c = load_config(PAIRRL)
    c.rl.verifier = "pointwise"
    return c
