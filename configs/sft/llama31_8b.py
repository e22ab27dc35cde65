"""SFT of pretrained Llama-3.1-8B-Instruct on long chat traces written by a stronger model:
the SFT stage before RL in the PDR paper (arXiv 2510.01123, §3.3, §4.2 and App. B.3). Paper
scale: pods only. Same recipe as configs/sft/qwen3_8b.py (App. B.3's numbers: 2^21-token
batches of 32768-token sequences, lr 2e-5, 8B tokens = 3815 steps; the schedule's shape,
warm-up and minimum lr are ours, see there); only the model differs. The paper's SFT starts
from "an 8B base model"; Llama-3.1-8B is our second model, and starting it from its Instruct
checkpoint, whose tokenizer carries the Llama-3.1 chat template, is our choice (point
--config.model.path at a Llama-3.1-8B base copy to follow the paper's pattern).

The arg picks the hardware and with it the mesh (`MESHES`) and the gradient accumulation:
  v5p-128  64 TPU v5p chips (JAX sees 64 devices, 16 hosts x 4): "data=1,fsdp=16,tensor=4"
  8xh200   one node of 8 H200 GPUs (one process): "fsdp=2,tensor=4"
grad_accum_steps = batch_size / (data * fsdp): one 32768-token sequence per batch shard per
microbatch (configs/sft/qwen3_8b.py computes it from the mesh). Attention runs in query
blocks over a dense [T, T] mask per sequence; tensor=4 keeps each device to 8 of the 32
query heads.

Command to run (weights: a local copy of the HF repo meta-llama/Llama-3.1-8B-Instruct;
traces: a directory with train.jsonl [+ validation.jsonl], see `prd_jax.data.chat_traces`):
    # v5p-128 (after `launch/tpu_pod.sh create` and `setup`, which stage weights and data)
    TPU_NAME=prd-v5p ZONE=us-east5-a launch/tpu_pod.sh run configs/sft/llama31_8b.py:v5p-128 \\
        gs://BUCKET/sft_llama31_8b --config.model.path=/data/Llama-3.1-8B-Instruct \\
        --config.data.path=/data/sft_traces
    # 8xH200, one node
    sbatch --nodes=1 launch/gpu_slurm.sbatch configs/sft/llama31_8b.py:8xh200 /ckpt/sft_llama31_8b \\
        --config.model.path=/data/Llama-3.1-8B-Instruct --config.data.path=/data/sft_traces
Scaling to N H200 nodes: data-parallel across nodes, the same FSDP x tensor mesh within
each node; keep one sequence per (data, fsdp) shard per microbatch:
    sbatch --nodes=N launch/gpu_slurm.sbatch configs/sft/llama31_8b.py:8xh200 DIR \\
        --config.mesh=data=N,fsdp=2,tensor=4 --config.grad_accum_steps=$((32 / N)) ...
(in general grad_accum_steps = batch_size / (data * fsdp)). Another TPU slice: set
--config.mesh (e.g. data=2,fsdp=16,tensor=4 on v5p-256) and grad_accum_steps likewise.

Settings: bf16 compute, fp32 params and AdamW state, full remat per layer; sequences packed
to 32768 tokens. Held-out eval is off (eval_every=0): `trainer.eval_loss` runs a whole global
batch in one unsharded call, which does not fit at this size.

Expected (an ESTIMATE, not measured: no run at this scale has been made; the paper gives no
SFT throughput): ~9.4e10 FLOPs per token (6 x 7.5B matmul params, plus causal 32k attention,
6 x 32 layers x 4096 x 32768 / 2 x 2 = 2.6e10; x4/3 for remat), i.e. ~2.0e17 FLOPs per
2^21-token step. Assuming 35% of peak bf16 FLOP/s: ~19 s per step (~110k tokens/s) on
v5p-128, ~20 h for 3815 steps; ~72 s per step (~29k tokens/s) on one 8xH200 node, ~76 h.
The compiled step's memory analysis is logged before the first step; check it there.
"""

import os

from prd_jax.config_io import load_config

ARGS = ("v5p-128", "8xh200")
QWEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "qwen3_8b.py")


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/sft/llama31_8b.py: arg {arg!r} unknown; allowed: {ARGS} "
                         "(e.g. --config configs/sft/llama31_8b.py:v5p-128)")
    c = load_config(f"{QWEN}:{arg}")  # the same recipe, mesh and batch; only the model differs
    c.model.name = "llama3.1-8b"
    c.model.path = "/path/to/Llama-3.1-8B-Instruct"  # placeholder: override with --config.model.path
    return c
