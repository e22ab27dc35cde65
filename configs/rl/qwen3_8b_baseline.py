"""Baseline RL for the PDR paper's comparison (arXiv 2510.01123 §4.2, Table 3 "RL" rows):
Qwen3-8B (our choice of the paper's "8B base model"), standard long-trace rollouts only, the
recipe of configs/rl/qwen3_8b.py (CISPO + aux SFT alpha = 0.1, ours; learning rate 5e-7 for 800
steps, App. B.3, the same as PDR-RL's so the two differ only in their rollouts) with every
operator and verifier knob spelled out (all off).

Command to run (see configs/rl/qwen3_8b.py for hardware, meshes and the runtime ESTIMATE):
    TPU_NAME=prd-v5p ZONE=us-east5-a launch/tpu_pod.sh run configs/rl/qwen3_8b_baseline.py:v5p-128 \\
        gs://BUCKET/rl_baseline --config.model.init_workdir=gs://BUCKET/sft_qwen3_8b \\
        --config.model.path=/data/Qwen3-8B-Base
Reproduces: the baseline-RL rows the paper compares PDR-RL against (Table 3), evaluated
with configs/eval/qwen3_8b_table3.py. Expected (paper, §4.2 and Table 3): the paper gives no
figure for baseline RL alone in papers/, only PDR-RL's gains over it (+3.34 / +1.67) and
continual PDR-RL's (+5.00 / +4.59) on AIME 2024 / 2025. Ours: not yet run.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200")


def _base(name, arg):
    if arg not in ARGS:
        raise ValueError(f"configs/rl/{os.path.basename(__file__)}: arg {arg!r} unknown; allowed: {ARGS}")
    return load_config(f"{os.path.join(HERE, name)}:{arg}")


def get_config(arg=None):
    c = _base("qwen3_8b.py", arg)
    c.rl.operator_fraction = 0.0
    c.rl.operator = None
    c.rl.gradient_targets = "refine"
    c.rl.verifier = "none"
    c.rl.verifier_coef = 1.0
    c.rl.verifier_threshold = 0.2
    c.rl.verifier_pairs_per_prompt = 4
    c.rl.verifier_max_new_tokens = 4096
    c.rl.verifier_candidate_max_tokens = 4096
    c.rl.seed_offset = 0
    return c
