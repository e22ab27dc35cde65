"""Baseline long-trace RL of the SFT'd Llama-3.1-8B-Instruct with verifiable math rewards: the
PDR paper's (arXiv 2510.01123) RL recipe, objective from §3.3 and setup from §4.2. Paper
scale: pods only. Same recipe as configs/rl/qwen3_8b.py; only the model differs.

The recipe is the PDR paper's for "an 8B base model" (configs/rl/qwen3_8b.py, which runs it on
Qwen3-8B, our choice, and says what is the paper's and what is ours): CISPO plus an auxiliary
SFT term on correct rollouts (alpha = 0.1; both ours, not in papers/), temperature 1.0 and top-p
1.0, App. B.3's learning rate 5e-7 for 800 steps; CISPO's importance weight clipped from above only (1 + eps_high =
1.28). Running it on Llama, and from the Instruct checkpoint (configs/sft/llama31_8b.py), is
our choice. `rl.max_prompt_tokens=1152` (ours) holds the solve prompt of any problem of up to
`rl.max_problem_tokens=1024` tokens, rounded up to a multiple of 128 (as configs/rl/qwen3_8b.py).

Data: `config.task` names the task whose problems RL trains on (`prd_jax.tasks`; split
`config.split`, JSONL under $PRD_DATA_DIR or `config.data_dir`). "gsm8k" (split "train") is a
placeholder: the paper trains on its own math RL mix; declare it as a task in one module
(docs/extending.md, "A task") and set --config.task.

The arg picks the hardware, as in configs/sft/llama31_8b.py (same mesh):
  v5p-128  64 TPU v5p chips: "data=1,fsdp=16,tensor=4", 64 microbatches of 16 sequences
  8xh200   one node of 8 H200: "fsdp=2,tensor=4", 512 microbatches of 2 sequences
Each update microbatch holds one sequence of 1152 + 16384 - 1 tokens per (data, fsdp)
shard (grad_accum_steps = 1024 / (data * fsdp); operator RL configs: their widest rows).

Command to run (after the SFT stage; model.path is still needed for the tokenizer):
    # v5p-128
    TPU_NAME=prd-v5p ZONE=us-east5-a launch/tpu_pod.sh run configs/rl/llama31_8b.py:v5p-128 \\
        gs://BUCKET/rl_llama31_8b --config.model.init_workdir=gs://BUCKET/sft_llama31_8b \\
        --config.model.path=/data/Llama-3.1-8B-Instruct --config.data_dir=/data/prd_data
    # H200: the paper batch needs 8 nodes (64 GPUs), data-parallel across nodes
    sbatch --nodes=8 launch/gpu_slurm.sbatch configs/rl/llama31_8b.py:8xh200 /ckpt/rl_llama31_8b \\
        --config.mesh=data=8,fsdp=2,tensor=4 --config.grad_accum_steps=64 \\
        --config.sampling.max_rows=512 --config.sampling.compact_min_rows=128 \\
        --config.model.init_workdir=/ckpt/sft_llama31_8b \\
        --config.model.path=/data/Llama-3.1-8B-Instruct
    # one 8xH200 node: a reduced batch to try the recipe (64 sequences; NOT the paper setting)
    sbatch --nodes=1 launch/gpu_slurm.sbatch configs/rl/llama31_8b.py:8xh200 \\
        /ckpt/rl_llama31_8b_small \\
        --config.rl.prompts_per_step=2 --config.grad_accum_steps=32 \\
        --config.model.init_workdir=/ckpt/sft_llama31_8b \\
        --config.model.path=/data/Llama-3.1-8B-Instruct
N nodes in general: --config.mesh=data=N,fsdp=2,tensor=4 --config.grad_accum_steps=$((512 / N))
--config.sampling.max_rows=$((64 * N)).

Why one node is not enough: time, as for configs/rl/qwen3_8b.py, whose rollout settings
(tensor=8 rollout layout, 1024 / 64 rows in flight, 2048-slot cache windows, a float8 cache on
v5p-128) this config inherits; every program fits both targets
(docs/results/2026-12-05-aot-fit-8.md).

Expected (the paper gives no figure; ours, ESTIMATES, not measured): the rollout, update and
step estimates are made as in configs/rl/qwen3_8b.py. The update: 1024 x 17535 positions x
~1.2e11 FLOPs (6 x 7.5B + dense attention, x4/3 remat) = 2.1e18 FLOPs, ~3.5 min on v5p-128
and ~1.6 min on 64 H200 at an assumed 35% of peak bf16; the rollout and the step: run
`prd-jax compile --config configs/rl/llama31_8b.py:v5p-128 --estimate` (not run for this config).
The update's memory analysis is logged at compile time (dense attention over 17.5k tokens
dominates it). If it exceeds a v5p chip's 95 GB, shard heads 8 ways:
    --config.mesh=data=1,fsdp=8,tensor=8 --config.grad_accum_steps=128
"""

import os

from prd_jax.config_io import load_config

ARGS = ("v5p-128", "8xh200")
HERE = os.path.dirname(os.path.abspath(__file__))


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/rl/llama31_8b.py: arg {arg!r} unknown; allowed: {ARGS} "
                         "(e.g. --config configs/rl/llama31_8b.py:v5p-128)")
    c = load_config(f"{os.path.join(HERE, 'qwen3_8b.py')}:{arg}")  # the same recipe; only the model differs
    sft = load_config(f"{os.path.join(HERE, '..', 'sft', 'llama31_8b.py')}:{arg}")
    c.model.name, c.model.path = sft.model.name, sft.model.path
    return c
