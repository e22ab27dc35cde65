"""Train-step MFU for a SmolLM2-135M-sized model at sequence length 512, against the fp32
matmul peak measured in the same run; optional HF transformers (torch) step as a peer.

    python benchmarks/train_step.py --batch 2 --seq 512 --steps 3 [--torch]

MFU = model FLOPs per step / step time / matmul peak, with model FLOPs = 6 N T + 12 L H Dh S T
(PaLM appendix B: N parameters, T tokens per step, L layers, H heads of size Dh, S sequence
length; the second term is attention). The step is our compiled `train_step` (SFT loss,
AdamW, global-norm clipping) on random tokens, fp32. With `--torch`, the same-shaped
LlamaForCausalLM forward+backward+AdamW step in torch runs in the same process and the
ratio of step times is printed. With `--attention`, one layer's causal attention forward +
backward at the step's shapes is also timed alone (best of 10): ours
(`model.attention.causal_block_attention` under the default remat policy) and torch's
`scaled_dot_product_attention(is_causal=True)`. Prints a table, then one JSON line with
`mfu_vs_matmul_peak`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sampler_throughput import matmul_peak_flops, torch_matmul_peak_flops  # noqa: E402


def model_flops_per_step(cfg, batch: int, seq: int) -> float:
    tokens = batch * seq
    return 6.0 * cfg.num_params() * tokens + 12.0 * cfg.num_layers * cfg.num_heads * cfg.head_dim * seq * tokens


def ours(cfg, batch: int, seq: int, steps: int) -> float:
    from prd_jax.mesh import make_mesh
    from prd_jax.train.optim import OptimConfig, make_optimizer
    from prd_jax.train.sft import sft_loss_fn
    from prd_jax.train.state import abstract_state, create_state, state_shardings
    from prd_jax.train.step import compile_step, split_microbatches, train_step

    mesh = make_mesh("data=1", jax.devices()[:1])
    opt = make_optimizer(OptimConfig(1e-4, 0, 10, schedule="constant"))
    state = create_state(cfg, opt, mesh, jax.random.key(0))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.vocab_size, (batch, seq + 1)).astype(np.int32)
    host = dict(inputs=tokens[:, :-1], targets=tokens[:, 1:], positions=np.tile(np.arange(seq, dtype=np.int32), (batch, 1)),
                segment_ids=np.ones((batch, seq), np.int32), weights=np.ones((batch, seq), np.float32))
    mb = split_microbatches(host, 1)
    step = functools.partial(train_step, loss_fn=sft_loss_fn(cfg, mesh), optimizer=opt)
    exe, sh = compile_step(step, abstract_state(cfg, opt, mesh), jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), mb), mesh, state_shardings(cfg, opt, mesh))
    mb = jax.device_put(mb, sh)
    state, m = exe(state, mb)  # warm-up
    jax.block_until_ready(m)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        state, m = exe(state, mb)
        jax.block_until_ready(m)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def torch_step(cfg, batch: int, seq: int, steps: int) -> float:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hf = LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                     num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                     num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, tie_word_embeddings=True,
                     max_position_embeddings=cfg.max_position)
    torch.manual_seed(0)
    model = LlamaForCausalLM(hf).float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq + 1))

    def one():
        loss = model(input_ids=ids[:, :-1], labels=ids[:, :-1]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()

    one()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        one()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def best_of(fn, repeats: int = 10) -> float:
    fn()  # warm up / compile
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def attention_times(cfg, batch: int, seq: int) -> tuple:
    """(ours, torch) seconds for one layer's causal attention forward + backward."""
    import jax.numpy as jnp
    import torch

    from prd_jax.model.attention import causal_block_attention
    from prd_jax.model.decoder import REMAT_POLICY

    n, k, dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    q, key, val = (np.random.default_rng(i).standard_normal((batch, seq, h, dh)).astype(np.float32)
                   for i, h in enumerate((n, k, k)))
    j = np.arange(seq)
    mask = jnp.asarray(np.broadcast_to(j[None, None, None, :] <= j[None, None, :, None], (batch, 1, seq, seq)))
    attn = jax.checkpoint(lambda q, key, val: causal_block_attention(q, key, val, mask, dh ** -0.5),
                          policy=REMAT_POLICY[cfg.remat_policy])
    grad = jax.jit(jax.grad(lambda *a: jnp.sum(jnp.sin(attn(*a))), argnums=(0, 1, 2)))
    ours_s = best_of(lambda: jax.block_until_ready(grad(q, key, val)))
    tq, tk, tv = (torch.tensor(x).transpose(1, 2).requires_grad_() for x in (q, key, val))

    def torch_once():
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True, enable_gqa=True)
        torch.autograd.grad(torch.sin(out).sum(), (tq, tk, tv))

    return ours_s, best_of(torch_once)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--torch", action="store_true", help="also time HF transformers (torch) on the same shapes")
    p.add_argument("--attention", action="store_true",
                   help="also time one layer's attention forward + backward, ours and torch's SDPA")
    p.add_argument("--unroll", type=int, default=1, help="ModelConfig.scan_unroll (layers per scan iteration)")
    args = p.parse_args()
    from prd_jax.model import get_model_config

    cfg = get_model_config("smollm2-135m", max_position=max(args.seq, 1024), scan_unroll=args.unroll)
    peak = matmul_peak_flops()
    step_s = ours(cfg, args.batch, args.seq, args.steps)
    flops = model_flops_per_step(cfg, args.batch, args.seq)
    record = {"benchmark": "train_step", "model": "smollm2-135m-sized (fp32)", "batch": args.batch, "seq": args.seq,
              "scan_unroll": args.unroll,
              "params": cfg.num_params(), "model_tflop_per_step": flops / 1e12, "step_s": step_s,
              "achieved_gflop_s": flops / step_s / 1e9, "matmul_peak_gflop_s": peak / 1e9,
              "mfu_vs_matmul_peak": flops / step_s / peak, "tokens_per_s": args.batch * args.seq / step_s,
              "devices": str(jax.devices()[0].device_kind)}
    if args.torch:
        t = torch_step(cfg, args.batch, args.seq, args.steps)
        record.update(torch_step_s=t, torch_mfu_vs_matmul_peak=flops / t / peak, speed_vs_torch=t / step_s,
                      torch_matmul_peak_gflop_s=torch_matmul_peak_flops() / 1e9)
    if args.attention:
        a_ours, a_torch = attention_times(cfg, args.batch, args.seq)
        record.update(attention_ms=a_ours * 1e3, torch_attention_ms=a_torch * 1e3,
                      attention_speed_vs_torch=a_torch / a_ours)
    for k, v in record.items():
        print(f"{k:28s} {v:.4g}" if isinstance(v, float) else f"{k:28s} {v}")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
