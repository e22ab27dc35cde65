"""V1-PointRL (V1 paper §5 baseline): as tiny_pairrl.py, but the policy verifies its rollouts
pointwise (one rating per solution) with the same threshold reward, budget-matched to PairRL:
per prompt 4 of its 8 rollouts (PairRL's 4 pairs), each quoted at up to 2 x 64 tokens (a pair
quotes two of 64), each verification generating up to 32 tokens as a pair's does. The
matching is ours (the paper states no PointRL budget in the text available to us).

Command to run (after configs/sft/tiny.py):
    prd-jax train --config configs/rl/tiny_pointrl.py --workdir /tmp/rl_tiny_pointrl \
        --config.model.init_workdir=/tmp/sft_tiny

Expected (the paper gives no figure; ours): about the cost of configs/rl/tiny_pairrl.py per
step (not timed separately).
"""

import os

from prd_jax.config_io import load_config

PAIRRL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_pairrl.py")


def get_config(arg=None):
    c = load_config(PAIRRL)
    c.rl.verifier = "pointwise"
    c.rl.verifier_pointwise_per_prompt = c.rl.verifier_pairs_per_prompt  # PairRL's rows per prompt
    c.rl.verifier_candidate_max_tokens = 2 * c.rl.verifier_candidate_max_tokens  # a pair's two slots
    return c
