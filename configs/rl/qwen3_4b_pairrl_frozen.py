"""Non-co-evolving ablation of V1-PairRL (arXiv 2603.04304 §5): as configs/rl/qwen3_4b_pairrl.py,
but the pairs the verifier is trained on quote rollouts of the frozen base model (the initial
params, Qwen3-4B-Instruct-2507) instead of the current policy's (`rl.verifier_samples=
"frozen_base"`). The generator still trains on its own rollouts, and the verifier's answers
still come from the current policy; only the candidates stop evolving. Trained on code like
PairRL (CodeContests train, ours); arg `POD,math` is the GSM8K variant (ours).

Each step samples 64 x 8 extra rollouts with the base params (kept on device, one more copy
of the params), graded for strict pairing. Hardware and rows: as PairRL (768 rows,
grad_accum_steps 48 / 384 on v5p-128 / one 8xH200 node). Fit: `8xh200` fits
(docs/results/2026-12-04-aot-fit-4.md); `v5p-128` fits (train step 11.40, rollout 14.00,
verifier 20.21 GB per device of 102.80; docs/results/2026-12-04-aot-fit-5.md).

Command to run:
    sbatch --nodes=1 launch/gpu_slurm.sbatch configs/rl/qwen3_4b_pairrl_frozen.py:8xh200 /ckpt/pairrl_frozen \\
        --config.model.path=/data/Qwen3-4B-Instruct-2507 --config.data_dir=/data/prd_data
Reproduces: the paper's co-evolution ablation (verifier trained on base-model samples; evaluate
with configs/eval/qwen3_4b_v1_after_rl.py:pairrl_frozen,BENCH). Expected (paper, V1 §5):
"Co-evolving training consistently outperforms non-co-evolving training across all evaluated
benchmarks." The paper gives no figure for it in the text we have; ours: not yet run.
Runtime: an ESTIMATE of PairRL plus one more generation rollout per step (~1.5-2x a PairRL step).
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200", "v5p-128,math", "8xh200,math")  # POD: code; POD,math: ours


def get_config(arg=None):
    c = load_config(f"{os.path.join(HERE, 'qwen3_4b_pairrl.py')}:{arg}")  # validates arg
    c.rl.verifier_samples = "frozen_base"
    return c
