"""Continual PDR-RL (PDR paper §4.2, "continual" rows of Table 3): start from a *baseline RL*
checkpoint and continue with the mixed standard + PDR-round objective of tiny_pdr.py.

Command to run (after configs/sft/tiny.py and configs/rl/tiny.py):
    prd-jax train --config configs/rl/tiny_continual_pdr.py --workdir /tmp/rl_tiny_cont \
        --config.model.init_workdir=/tmp/rl_tiny

Expected (the paper gives no figure; ours): the cost of configs/rl/tiny_pdr.py per step; the
run's first step starts from the baseline RL run's final params (logged: "initialising params
from ...").
"""

import os

from prd_jax.config_io import load_config

TINY_PDR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_pdr.py")


def get_config(arg=None):
    c = load_config(TINY_PDR)
    c.model.init = "checkpoint"
    c.model.init_workdir = ""  # a baseline RL workdir (configs/rl/tiny.py)
    c.continual = True
    return c
