"""V1-PointRL (arXiv 2603.04304 §5 baseline): as configs/rl/qwen3_4b_pairrl.py, but each
rollout is verified pointwise with the same threshold reward.

Command to run:
    sbatch --nodes=1 launch/gpu_slurm.sbatch configs/rl/qwen3_4b_pointrl.py:8xh200 /ckpt/pointrl_qwen3_4b \\
        --config.model.path=/data/Qwen3-4B --config.data.data_dir=/data/prd_data
Reproduces: the V1 paper's PointRL baseline rows. Runtime: an ESTIMATE as for PairRL.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200")


def get_config(arg=None):
    c = load_config(f"{os.path.join(HERE, 'qwen3_4b_pairrl.py')}:{arg}")  # validates arg
    c.rl.verifier = "pointwise"
    # rows = 64 x 8 generations + 512 pointwise verifications = 1024
    c.grad_accum_steps = {"v5p-128": 64, "8xh200": 512}[arg]
    return c
