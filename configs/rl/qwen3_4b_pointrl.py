"""V1-PointRL (arXiv 2603.04304 §5 baseline): as configs/rl/qwen3_4b_pairrl.py, but the policy
verifies its rollouts pointwise with the same threshold reward, budget-matched to PairRL:
the same verifier rows per step (4 of each prompt's 8 rollouts, drawn uniformly = PairRL's 4
pairs) and the same verifier tokens (each pointwise row quotes one candidate of up to
2 x 4096 tokens where a pair quotes two of 4096; both generate up to 4096). The matching is
OURS: the paper does not state PointRL's budget in the text available to us. Trained on code
like PairRL: the CodeContests train split (ours: the paper does not name its training
problems), the "code" judges, reward all tests pass; arg `POD,math` is the GSM8K variant
(ours, not the paper's setting).

Hardware: as PairRL (v5p-128 or one 8xH200 node); rows = 64 x 8 + 64 x 4 = 768, the same
grad_accum_steps. Fit: both fit (8xh200: docs/results/2026-12-03-aot-fit-2.md; v5p-128: train
step 11.52, rollout 14.00, verifier 20.11 GB per device of 102.80,
docs/results/2026-12-04-aot-fit-5.md).

Command to run:
    sbatch --nodes=1 launch/gpu_slurm.sbatch configs/rl/qwen3_4b_pointrl.py:8xh200 /ckpt/pointrl_qwen3_4b \\
        --config.model.path=/data/Qwen3-4B-Instruct-2507 --config.data_dir=/data/prd_data
Reproduces: the V1 paper's PointRL baseline rows; evaluate with
configs/eval/qwen3_4b_v1_after_rl.py:pointrl,BENCH (pointwise selection, as V1 App. B: "selects
the solution with the highest pointwise score"). From App. B: "The pointwise verifier outputs a
confidence score from 1 to 10 for one solution and normalizes it to v ∈ [0, 1]" (the map
v = (r - 1) / 9 is ours). Expected (paper, V1 §5): "V1-PairRL reaches 53.9% versus 47.4% for
V1-PointRL at 2x budget" (LiveCodeBench-v5: PointRL's one figure); "The corresponding gains are
+6.8% on LiveCodeBench-v6 and +7.3% on CodeContests" (PairRL over PointRL; PointRL's own figures
there are not in the text we have). Ours: not yet run. Runtime: an ESTIMATE as for PairRL (same
rows and token budget per step).
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200", "v5p-128,math", "8xh200,math")  # POD: code; POD,math: ours


def get_config(arg=None):
    c = load_config(f"{os.path.join(HERE, 'qwen3_4b_pairrl.py')}:{arg}")  # validates arg
    c.rl.verifier = "pointwise"
    c.rl.verifier_pointwise_per_prompt = c.rl.verifier_pairs_per_prompt  # PairRL's rows per prompt
    c.rl.verifier_candidate_max_tokens = 2 * c.rl.verifier_candidate_max_tokens  # a pair's two slots
    return c
