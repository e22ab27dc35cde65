"""Standard-RL baseline for V1-PairRL (arXiv 2603.04304 §5, "standard RL"): the generator
objective of configs/rl/qwen3_4b_pairrl.py exactly (Qwen3-4B-Instruct-2507, Dr.GRPO
advantages and constant normaliser, PPO clip-higher 0.2 / 0.28, no KL, 4 mini-batches,
lr 1e-6, 64 prompts x 8 rollouts; these settings are ours, the V1 text in papers/ states none of
them) with no verifier rows, so PairRL minus this run is the
effect of the verifier term. Trained on code like PairRL: the CodeContests train split (ours:
the paper does not name its training problems), reward all tests pass; arg `POD,math` is the
GSM8K variant (ours, not the paper's setting).

Hardware (the arg): v5p-128 (data=1,fsdp=16,tensor=4) or one 8xH200 node (fsdp=2,tensor=4);
rows = 64 x 8 = 512, one per (data, fsdp) shard per microbatch (grad_accum_steps 32 / 256).
Fit: `8xh200` fits (docs/results/2026-12-04-aot-fit-4.md); `v5p-128` fits (train step 9.51,
rollout 14.00 GB per device of 102.80; docs/results/2026-12-04-aot-fit-5.md).

Command to run:
    sbatch --nodes=1 launch/gpu_slurm.sbatch configs/rl/qwen3_4b_rl_baseline.py:8xh200 /ckpt/rl_qwen3_4b \\
        --config.model.path=/data/Qwen3-4B-Instruct-2507 --config.data_dir=/data/prd_data
Reproduces: the paper's standard-RL rows that PairRL is compared against; evaluate with
configs/eval/qwen3_4b_v1_after_rl.py (LiveCodeBench v5 / v6, CodeContests; Pass@1 and V1-Infer
at 2x: after_rl.py:rl,BENCH). Expected (paper, V1 §5), PairRL over this run: "+8.9% on
CodeContests: V1-PairRL outperforms the RL baseline when both use V1-Infer with identical 2x
verification budgets." "The gains are +3.6% on LiveCodeBench-v5 and +1.9% on LiveCodeBench-v6."
"+8.7% Pass@1 on CodeContests: V1-PairRL improves over the RL baseline without test-time scaling
at N=16." "It also improves Pass@1 by +2.9% on LiveCodeBench-v5 and +2.7% on LiveCodeBench-v6."
This run's own figures are not in the text we have; ours: not yet run. Runtime: an ESTIMATE of about 2/3 of a PairRL step (no verifier
sampling; 512 of its 768 training rows).
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200", "v5p-128,math", "8xh200,math")  # POD: code; POD,math: ours


def get_config(arg=None):
    c = load_config(f"{os.path.join(HERE, 'qwen3_4b_pairrl.py')}:{arg}")  # validates arg
    c.rl.verifier = "none"
    c.rl.verifier_samples = "policy"
    c.grad_accum_steps = {"v5p-128": 32, "8xh200": 256}[arg.partition(",")[0]]  # 512 rows, one per batch shard
    return c
