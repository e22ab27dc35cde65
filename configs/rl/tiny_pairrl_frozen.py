"""Non-co-evolving V1-PairRL ablation (V1 paper §5) on the tiny model: as tiny_pairrl.py, but
the verifier's pairs quote rollouts sampled from the frozen initial params (the SFT model)
instead of the current policy's (`rl.verifier_samples="frozen_base"`).

Command to run (after configs/sft/tiny.py):
    prd-jax train --config configs/rl/tiny_pairrl_frozen.py --workdir /tmp/rl_tiny_pairrl_frozen \
        --config.model.init_workdir=/tmp/sft_tiny

Expected (the paper gives no figure; ours): tiny_pairrl.py's cost plus one more rollout of 4
prompts x 8 samples per step (not timed separately).
"""

import os

from prd_jax.config_io import load_config

PAIRRL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_pairrl.py")


def get_config(arg=None):
    c = load_config(PAIRRL)
    c.rl.verifier_samples = "frozen_base"
    return c
