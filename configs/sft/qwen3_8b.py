"""SFT of the pretrained base model Qwen3-8B-Base on long chat traces written by a stronger
model: the SFT stage before RL in the PDR paper (arXiv 2510.01123, §3.3, §4.2 and App. B.3,
which starts SFT from the base model, not the post-trained Qwen3-8B). Paper scale: pods only.

Weights: `model.name="qwen3-8b"` is the architecture (prd_jax.model.config.NAMED_CONFIGS),
shared by Qwen/Qwen3-8B-Base and Qwen/Qwen3-8B; which checkpoint is loaded is
`model.path`, a local copy of the HF repo Qwen/Qwen3-8B-Base (the loader checks its
config.json against the architecture). RL after this stage uses the same path for its
tokenizer.

The arg picks the hardware and with it the mesh (`MESHES`) and the gradient accumulation:
  v5p-128  64 TPU v5p chips (JAX sees 64 devices, 16 hosts x 4): "data=1,fsdp=16,tensor=4"
  8xh200   one node of 8 H200 GPUs (one process): "fsdp=2,tensor=4"
Attention goes through XLA's dense `jax.nn.dot_product_attention`, which materialises
[heads, T, T] fp32 scores; at T = 16384 tensor=4 keeps that to 8 heads (~9 GB per layer)
per device. With all 32 heads on one device ("fsdp=8") it is ~34 GB, plus softmax
buffers, which leaves too little of an H200's 141 GB.

Command to run (weights: a local copy of the HF repo Qwen/Qwen3-8B-Base; traces: a directory
with train.jsonl [+ validation.jsonl], see `prd_jax.data.chat_traces`):
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

Settings: bf16 compute, fp32 params and AdamW state, remat per layer; sequences of 16384
tokens, packed; 64 sequences (~1.05M tokens) per step; AdamW lr 1e-5, 50 warmup steps,
cosine to 1e-6 at step 1000. The batch, step count and schedule are our choices, not
numbers taken from the paper (B.3's 5e-7 and 800 steps are the RL stage's,
configs/rl/qwen3_8b.py). Held-out eval is off (eval_every=0): `trainer.eval_loss` runs a
whole global batch in one unsharded call, which does not fit at this size.

Expected (an ESTIMATE, not measured: no run at this scale has been made): ~9.9e10 FLOPs
per token (6 x 7.6B matmul params + dense 16k attention, x4/3 for remat), i.e. ~1.0e17
FLOPs per step. Assuming 35% of peak bf16 FLOP/s: ~10 s per step (~100k tokens/s) on
v5p-128, ~3 h for 1000 steps; ~40 s per step (~27k tokens/s) on one 8xH200 node, ~11 h.
The compiled step's memory analysis is logged before the first step; check it there.
"""

import ml_collections

ARGS = ("v5p-128", "8xh200")
MESHES = {"v5p-128": "data=1,fsdp=16,tensor=4", "8xh200": "fsdp=2,tensor=4"}
# the pod each arg names, for `prd-jax compile` (TPU topology, or GPU:count on simulated devices)
TARGETS = {"v5p-128": "v5p:4x4x4", "8xh200": "h200:8"}
# grad_accum_steps = batch_size / (data * fsdp): one 16k sequence per batch shard per microbatch.
GRAD_ACCUM = {"v5p-128": 4, "8xh200": 32}


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
        source="jsonl",
        path="/path/to/sft_traces",  # placeholder: override with --config.data.path=<trace dir>
        seq_len=16384, mode="pack", validation_fraction=0.01, mixture="", module=""))
    c.batch_size = 64  # sequences per optimizer step (global, all processes together)
    c.grad_accum_steps = GRAD_ACCUM[arg]
    c.optim = ml_collections.ConfigDict(dict(
        learning_rate=1e-5, warmup_steps=50, decay_steps=950, schedule="cosine", end_lr_fraction=0.1,
        weight_decay=0.01, grad_clip_norm=1.0))
    c.steps = 1000
    c.checkpoint_every = 100
    c.keep_checkpoints = 3
    c.eval_every = 0
    c.max_nonfinite_steps = 5
    return c
