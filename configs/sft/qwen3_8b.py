"""SFT of the pretrained base model Qwen3-8B-Base on long chat traces written by a stronger
model: the SFT stage before RL in the PDR paper (arXiv 2510.01123, §3.3, §4.2 and App. B.3,
which starts SFT from "an 8B base model"; that it is Qwen3-8B-Base, not the post-trained
Qwen3-8B or another 8B base, is our choice). Paper scale: pods only.

The paper's numbers (App. B.3): "2M-token batches, sequence length 32768, and learning rate
2 x 10^-5 for about four epochs and 8B tokens". Here: TOKENS_PER_STEP = 2^21 = 2,097,152
tokens per step, i.e. batch_size = 2^21 / 32768 = 64 packed sequences of SEQ_LEN = 32768;
AdamW peak lr 2e-5; steps = ceil(8e9 / 2^21) = 3815 (8.0e9 tokens; derived in the code
below from TOTAL_TOKENS and TOKENS_PER_STEP, not typed in). "Four epochs" is a property
of the trace set (about 2B tokens), not of this config. Ours, not the paper's (B.3 names no
schedule): linear warm-up over WARMUP_STEPS = 100 steps, then cosine decay to a minimum of
0.1 x peak (2e-6) at the last step; AdamW's weight decay 0.01 and gradient clipping at norm
1.0; the checkpoint cadence. (B.3's 5e-7 and 800 steps are the RL stage's,
configs/rl/qwen3_8b.py.)

Weights: `model.name="qwen3-8b"` is the architecture (prd_jax.model.config.NAMED_CONFIGS),
shared by Qwen/Qwen3-8B-Base and Qwen/Qwen3-8B; which checkpoint is loaded is
`model.path`, a local copy of the HF repo Qwen/Qwen3-8B-Base (the loader checks its
config.json against the architecture). RL after this stage uses the same path for its
tokenizer.

The arg picks the hardware and with it the mesh (`MESHES`) and the gradient accumulation:
  v5p-128  64 TPU v5p chips (JAX sees 64 devices, 16 hosts x 4): "data=1,fsdp=16,tensor=4"
  8xh200   one node of 8 H200 GPUs (one process): "fsdp=2,tensor=4"
grad_accum_steps = batch_size / (data * fsdp) (computed from the mesh below): each
microbatch holds one 32768-token sequence per batch shard, i.e. 4 microbatches of 16
sequences on v5p-128 and 32 of 2 on 8xh200. Attention runs in query blocks
(`prd_jax.model.attention.causal_block_attention`, 16 scanned groups of 16 blocks at
T = 32768), but its mask is a dense [T, T] boolean per sequence (1 GiB at T = 32768) and,
under full remat, each block's fp32 scores [heads / tensor, 128 x G, <= T] are formed again
in the backward; at T = 32768 tensor=4 keeps each device to 8 of the 32 query heads. The
compiled step's memory per device is in the fit rows of `prd-jax compile` (the commands
below; docs/scaling.md, "Will it fit?"): v5p-128 in docs/results/2026-12-03-aot-fit-2.md,
8xh200 (compiled before the attention's query blocks were scanned) in
docs/results/2026-12-03-sft-qwen3-8b-fit.md.

Command to run (weights: a local copy of the HF repo Qwen/Qwen3-8B-Base; traces: a directory
with train.jsonl [+ validation.jsonl], see `prd_jax.data.chat_traces`):
    # check the step compiles and fits first (TPU: AOT via libtpu; GPU: simulated devices)
    prd-jax compile --config configs/sft/qwen3_8b.py:v5p-128
    JAX_PLATFORMS=cpu prd-jax compile --config configs/sft/qwen3_8b.py:8xh200
    # v5p-128 (after `launch/tpu_pod.sh create` and `setup`, which stage weights and data)
    TPU_NAME=prd-v5p ZONE=us-east5-a launch/tpu_pod.sh run configs/sft/qwen3_8b.py:v5p-128 \\
        gs://BUCKET/sft_qwen3_8b --config.model.path=/data/Qwen3-8B-Base --config.data.path=/data/sft_traces
    # 8xH200, one node
    sbatch --nodes=1 launch/gpu_slurm.sbatch configs/sft/qwen3_8b.py:8xh200 /ckpt/sft_qwen3_8b \\
        --config.model.path=/data/Qwen3-8B-Base --config.data.path=/data/sft_traces
Scaling to N H200 nodes: data-parallel across nodes, the same FSDP x tensor mesh within
each node; keep one sequence per (data, fsdp) shard per microbatch:
    sbatch --nodes=N launch/gpu_slurm.sbatch configs/sft/qwen3_8b.py:8xh200 DIR \\
        --config.mesh=data=N,fsdp=2,tensor=4 --config.grad_accum_steps=$((32 / N)) ...
(in general grad_accum_steps = batch_size / (data * fsdp)). Another TPU slice: set
--config.mesh (e.g. data=2,fsdp=16,tensor=4 on v5p-256) and grad_accum_steps likewise.

Settings: bf16 compute, fp32 params and AdamW state, full remat per layer (`remat=True`);
sequences packed to 32768 tokens. Held-out eval is off (eval_every=0): `trainer.eval_loss`
runs a whole global batch in one unsharded call, which does not fit at this size.

Expected (an ESTIMATE, not measured: no run at this scale has been made; the paper gives no
SFT throughput): ~1.0e11 FLOPs per token (6 x 7.6B matmul params = 4.6e10, plus causal
32k attention, 6 x 36 layers x 4096 x 32768 / 2 x 2 = 2.9e10; x4/3 for remat), i.e.
~2.1e17 FLOPs per 2^21-token step. Assuming 35% of peak bf16 FLOP/s (prd_jax.aot.chips):
~20 s per step (~100k tokens/s) on v5p-128, ~22 h for 3815 steps; ~75 s per step (~28k
tokens/s) on one 8xH200 node, ~80 h. The compiled step's memory analysis is logged before
the first step; check it there.
"""

import math

import ml_collections

ARGS = ("v5p-128", "8xh200")
MESHES = {"v5p-128": "data=1,fsdp=16,tensor=4", "8xh200": "fsdp=2,tensor=4"}
# the pod each arg names, for `prd-jax compile` (TPU topology, or GPU:count on simulated devices)
TARGETS = {"v5p-128": "v5p:4x4x4", "8xh200": "h200:8"}

# App. B.3: "2M-token batches, sequence length 32768, and learning rate 2 x 10^-5 for about
# four epochs and 8B tokens".
SEQ_LEN = 32768
TOKENS_PER_STEP = 2 ** 21  # "2M-token batches": 2,097,152 tokens per optimizer step
TOTAL_TOKENS = 8e9  # "8B tokens"
LEARNING_RATE = 2e-5
BATCH_SIZE = TOKENS_PER_STEP // SEQ_LEN  # 64 packed sequences per step
STEPS = math.ceil(TOTAL_TOKENS / TOKENS_PER_STEP)  # 3815 (8e9 / 2^21 = 3814.7)
# Ours (B.3 names no schedule): warm-up length, cosine shape, minimum lr as a fraction of peak.
WARMUP_STEPS = 100
END_LR_FRACTION = 0.1


def grad_accum(mesh: str) -> int:
    """batch_size / (data * fsdp): one SEQ_LEN sequence per batch shard per microbatch."""
    axes = dict((k.strip(), int(v)) for k, v in (part.split("=") for part in mesh.split(",")))
    shards = axes.get("data", 1) * axes.get("fsdp", 1)
    if BATCH_SIZE % shards:
        raise ValueError(f"configs/sft/qwen3_8b.py: batch_size {BATCH_SIZE} is not a multiple of "
                         f"data x fsdp = {shards} (mesh {mesh!r})")
    return BATCH_SIZE // shards


GRAD_ACCUM = {arg: grad_accum(mesh) for arg, mesh in MESHES.items()}  # v5p-128: 4, 8xh200: 32


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/sft/qwen3_8b.py: arg {arg!r} unknown; allowed: {ARGS} "
                         "(e.g. --config configs/sft/qwen3_8b.py:v5p-128)")
    c = ml_collections.ConfigDict()
    c.stage = "sft"
    c.seed = 0
    c.mesh = MESHES[arg]
    c.target = TARGETS[arg]
    c.tokenizer = "model"
    c.model = ml_collections.ConfigDict(dict(
        name="qwen3-8b",
        path="/path/to/Qwen3-8B-Base",  # placeholder: --config.model.path=<local copy of Qwen/Qwen3-8B-Base>
        init="pretrained", init_workdir="",
        overrides=dict(dtype="bfloat16", param_dtype="float32", remat=True)))
    c.data = ml_collections.ConfigDict(dict(
        path="/path/to/sft_traces",  # chat traces; placeholder: override with --config.data.path=<trace dir>
        seq_len=SEQ_LEN, mode="pack", validation_fraction=0.01, mixture="", module=""))
    c.batch_size = BATCH_SIZE  # sequences per optimizer step (global, all processes together)
    c.grad_accum_steps = GRAD_ACCUM[arg]
    c.optim = ml_collections.ConfigDict(dict(
        learning_rate=LEARNING_RATE, warmup_steps=WARMUP_STEPS, decay_steps=STEPS - WARMUP_STEPS,
        schedule="cosine", end_lr_fraction=END_LR_FRACTION,
        weight_decay=0.01, grad_clip_norm=1.0))
    c.steps = STEPS
    c.checkpoint_every = 100
    c.keep_checkpoints = 3
    c.eval_every = 0
    c.max_nonfinite_steps = 5
    return c
