"""Baseline long-trace RL of the SFT'd Qwen3-8B with verifiable math rewards: the PDR paper's
(arXiv 2510.01123) RL recipe, objective from §3.3, setup from §4.2 and App. B.3. Paper scale:
pods only. The PDR-RL configs (qwen3_8b_pdr.py, qwen3_8b_continual_pdr.py) and the baseline
(qwen3_8b_baseline.py) all run this recipe.

From the paper (App. B.3): temperature 1.0 and top-p 1.0, learning rate 5e-7 for 800 steps; the
objective, CISPO plus an auxiliary SFT term on correct rollouts (alpha = 0.1), is ours (not in
papers/: the summary names no RL objective); the policy
starts from the SFT stage, which starts from a base model (configs/sft/qwen3_8b.py). The paper
trains "an 8B base model"; that it is Qwen3-8B(-Base) is our choice. Not stated in the paper as
far as we found, so our choices: the batch (32 prompts x 32 rollouts = 1024 sequences), the
16k-token generation budget, group-normalised (GRPO) advantages, token-mean aggregation, one
on-policy update per batch, no KL term, 10 warmup steps then a constant rate, and the aux SFT
normaliser (mean over correct-rollout tokens, `rl.aux_sft_normaliser`, see
`train.rl.RLConfig`). CISPO's importance weight is clipped from above only, at 1 + eps_high =
1.28 (MiniMax-M1, arXiv 2506.13585, §3.1; eps_high is our choice); eps_low = 0.2 acts only when
rl.cispo_lower_clip is True. `rl.max_prompt_tokens=1152` (ours) holds
the solve prompt of any problem of up to `rl.max_problem_tokens=1024` tokens (1080 tokens with
the template; tests/test_compile.py) rounded up to a multiple of 128. Standard rollout prompts
are left-padded to it, so every slot beyond the longest prompt is a masked cache slot that each
decode step reads; operator RL's own prompts have their own widths.

Rollouts (ours; docs/scaling.md, issue 48): they sample on their own layout, `rollout.mesh=tensor=8`
(the weights resharded once per step, no weight gathered in a decode step), with at most
`sampling.max_rows` rows in flight (1024 on v5p-128, 64 per 8xH200 node), a cache that grows
2048 slots at a time (`sampling.cache_window`), and on v5p-128 keys and values stored in
float8_e4m3fn (`sampling.kv_cache_dtype`: half the bytes each decode step reads; lossy; 8xH200
keeps bf16, see KV_CACHE_DTYPE). The paper states no rollout precision. With the float8 cache
the sampler's log-probabilities come from a nearby policy, so the loss takes them as the
behaviour policy's (`rl.decoupled_loss="auto"`: one forward pass of the step's params per batch
and a truncated weight, C = 2, docs/training.md). To sample with the exact bf16 cache:
--config.sampling.kv_cache_dtype="" (the decoupled loss then turns off).

Data: `config.task` names the task whose problems RL trains on (`prd_jax.tasks`; split
`config.split`, JSONL under $PRD_DATA_DIR or `config.data_dir`). "gsm8k" (split "train") is a
placeholder: the paper trains on its own math RL mix; declare it as a task in one module
(docs/extending.md, "A task") and set --config.task.

The arg picks the hardware, as in configs/sft/qwen3_8b.py (same mesh):
  v5p-128  64 TPU v5p chips: "data=1,fsdp=16,tensor=4", 64 microbatches of 16 sequences
  8xh200   one node of 8 H200: "fsdp=2,tensor=4", 512 microbatches of 2 sequences
Each update microbatch holds one sequence of 1152 + 16384 - 1 tokens per (data, fsdp)
shard (grad_accum_steps = 1024 / (data * fsdp); operator RL configs: their widest rows).

Command to run (after the SFT stage; model.path is still needed for the tokenizer: the SFT
stage's, Qwen3-8B-Base):
    # v5p-128
    TPU_NAME=prd-v5p ZONE=us-east5-a launch/tpu_pod.sh run configs/rl/qwen3_8b.py:v5p-128 \\
        gs://BUCKET/rl_qwen3_8b --config.model.init_workdir=gs://BUCKET/sft_qwen3_8b \\
        --config.model.path=/data/Qwen3-8B-Base --config.data_dir=/data/prd_data
    # H200: the paper batch needs 8 nodes (64 GPUs), data-parallel across nodes
    sbatch --nodes=8 launch/gpu_slurm.sbatch configs/rl/qwen3_8b.py:8xh200 /ckpt/rl_qwen3_8b \\
        --config.mesh=data=8,fsdp=2,tensor=4 --config.grad_accum_steps=64 \\
        --config.sampling.max_rows=512 --config.sampling.compact_min_rows=128 \\
        --config.model.init_workdir=/ckpt/sft_qwen3_8b --config.model.path=/data/Qwen3-8B-Base
    # one 8xH200 node: a reduced batch to try the recipe (64 sequences; NOT the paper setting)
    sbatch --nodes=1 launch/gpu_slurm.sbatch configs/rl/qwen3_8b.py:8xh200 /ckpt/rl_qwen3_8b_small \\
        --config.rl.prompts_per_step=2 --config.grad_accum_steps=32 \\
        --config.model.init_workdir=/ckpt/sft_qwen3_8b --config.model.path=/data/Qwen3-8B-Base
N nodes in general: --config.mesh=data=N,fsdp=2,tensor=4 --config.grad_accum_steps=$((512 / N))
--config.sampling.max_rows=$((64 * N)) (each node's rollout replica keeps its 64 rows).

Why one node is not enough: time. Every program of the paper batch fits one node (the
rollouts decode 64 rows at a time; docs/results/2026-12-05-aot-fit-8.md), but a step samples
up to 1024 x 16384 = 16.8M tokens: `prd-jax compile --config configs/rl/qwen3_8b.py:8xh200
--estimate` models ~49 min per step on one node (2754 s of rollout, XLA:CPU's byte counts for
the GPU target; the analytic figure is 2.2x faster), ~27 days for 800 steps.

Expected (the paper gives no figure; ours, an ESTIMATE, not measured: no run at this scale has
been made):
- rollout: `prd-jax compile --config CONFIG:v5p-128 --estimate` models each sampler call's
  decode steps from their compiled programs (docs/scaling.md); for the PDR-RL config see
  docs/results/2026-12-05-rollout-estimate-2.md.
- update: 1024 x 17535 positions (prompt padding included) x ~1.2e11 FLOPs (6 x 7.6B +
  dense attention, x4/3 remat) = 2.2e18 FLOPs; at an assumed 35% of peak bf16, ~3.5 min
  on v5p-128 and ~1.6 min on 64 H200.
- step time: `--estimate` prints the RL step's modelled time from compiled programs
  (rollout + update, colocated and split). For the PDR-RL config (qwen3_8b_pdr.py) on
  v5p-128 as shipped: ~10.6 min per step colocated (rollout 532 s at 1509 tok/s per chip over
  the step's sampler calls + update 82 s + the decoupled loss's forward 20 s), against ~105
  min with the rollouts on the training layout (256 rows, full bf16 cache) and ~15.5 min with
  a bf16 cache; docs/results/2026-12-05-aot-fit-8.md. Not measured.
The update's memory analysis is logged at compile time (dense attention over 17.5k tokens
dominates it). If it exceeds a v5p chip's 95 GB, shard heads 8 ways:
    --config.mesh=data=1,fsdp=8,tensor=8 --config.grad_accum_steps=128
"""

import os

import ml_collections

from prd_jax.config_io import load_config
from prd_jax.sampling import Sampling

ARGS = ("v5p-128", "8xh200")
SFT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sft", "qwen3_8b.py")
# grad_accum_steps = rollout rows / (data * fsdp): one sequence per batch shard per microbatch.
GRAD_ACCUM = {"v5p-128": 64, "8xh200": 512}
# Rollouts sample on their own layout (config.rollout, docs/scaling.md): the weights resharded
# once per step to tensor=8 (data fills the rest: 8 replicas on v5p-128, 1 per 8xH200 node), so
# no decode step gathers a weight.
ROLLOUT_MESH = {"v5p-128": "tensor=8", "8xh200": "tensor=8"}
# The decode cache's dtype (ours): float8 where the target's compiled decode step reads half the
# cache bytes for it (libtpu, v5p: docs/results/2026-12-05-rollout-estimate-2.md); bf16 on
# 8xH200, whose step is compiled by XLA:CPU here and reads more with float8 (152.9 against 91.7
# GB per step: docs/results/2026-12-05-aot-fit-8.md); no GPU compiler's program has been read.
KV_CACHE_DTYPE = {"v5p-128": "float8_e4m3fn", "8xh200": ""}
# Decode rows in flight per sampler call (`prd-jax compile` checks the fit): on v5p-128 1024 rows
# (128 per replica) x 17536 slots x 72 KiB of float8 KV (1 byte, kv heads over tensor=8) = 1.3 TB,
# 20.7 GB per chip at full length; on one 8xH200 node 64 rows of bf16 KV are 20.7 GB per GPU.
MAX_ROWS = {"v5p-128": 1024, "8xh200": 64}


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/rl/qwen3_8b.py: arg {arg!r} unknown; allowed: {ARGS} "
                         "(e.g. --config configs/rl/qwen3_8b.py:v5p-128)")
    c = load_config(f"{SFT}:{arg}")  # same model, tokenizer, dtypes and mesh as the SFT stage
    c.stage = "rl"
    # Qwen3 thinks (the chat template's default, stated): standard rollouts are trained as the
    # policy wrote them, so they get no forced end of thinking (forced tokens are no samples)
    c.model.overrides.enable_thinking = True
    c.model.init = "checkpoint"
    c.model.init_workdir = ""  # required: the SFT run's workdir (--config.model.init_workdir=...)
    c.task = "gsm8k"  # placeholder for the paper's math RL mix (see the docstring)
    c.split = "train"
    c.data_dir = ""  # default: $PRD_DATA_DIR
    c.data = ml_collections.ConfigDict(dict(
        num_train=0,  # 0: every problem of the set
        mixture="", module=""))  # or a registered seqio task/mixture (docs/extending.md, "Training data of your own")
    c.rl = ml_collections.ConfigDict(dict(
        prompts_per_step=32, samples_per_prompt=32, max_prompt_tokens=1152, max_new_tokens=16384,
        max_problem_tokens=1024, advantage="grpo", loss="cispo", eps_low=0.2, eps_high=0.28,
        cispo_lower_clip=False, aggregation="token_mean", kl_coef=0.0, aux_sft_coef=0.1,
        aux_sft_normaliser="correct_token_mean", updates_per_batch=1))
    c.sampling = Sampling(
        temperature=1.0, top_p=1.0,
        max_rows=MAX_ROWS[arg],  # decode rows in flight per sampler call
        # rollout lengths spread up to 16k: each call's decode batch halves (per batch shard) as rows
        # finish, down to a quarter (sampling.decode_loop)
        compact_min_rows=MAX_ROWS[arg] // 4,
        # the first decode phase's cache grows 2048 slots at a time (sampling.cache_windows): a step
        # reads the slots written so far, not the whole budget's
        cache_window=2048,
        # v5p-128: keys and values stored in float8 (lossy, ours), half the bytes every decode step
        # reads; the loss then weighs the sampler's log-probabilities as the behaviour policy's
        # (rl.decoupled_loss="auto", docs/training.md)
        kv_cache_dtype=KV_CACHE_DTYPE[arg]).to_config()
    c.rollout = ml_collections.ConfigDict(dict(mesh=ROLLOUT_MESH[arg], placement="colocated", sample_devices=0))
    c.batch_size = c.rl.prompts_per_step * c.rl.samples_per_prompt  # unused by RL (rows come from rl.*)
    c.grad_accum_steps = GRAD_ACCUM[arg]
    c.optim = ml_collections.ConfigDict(dict(
        learning_rate=5e-7, warmup_steps=10, decay_steps=0, schedule="constant", end_lr_fraction=1.0,
        weight_decay=0.0, grad_clip_norm=1.0))
    c.steps = 800  # App. B.3
    c.checkpoint_every = 10
    c.keep_checkpoints = 3
    c.eval_every = 0
    c.max_nonfinite_steps = 5
    return c
