"""`prd-jax` command line: `generate`, `eval`, `train`, `inspect` and `demo`.

    prd-jax generate --model smollm2-135m --prompt "What is 7*8?" --chat --max-new-tokens 64
    prd-jax eval --config configs/eval/smollm2_gsm8k.py --workdir /tmp/eval --config.num_problems=3
    prd-jax train --config configs/sft/tiny.py --workdir /tmp/sft_tiny [--config.steps=100]
    prd-jax inspect --workdir /tmp/sft_tiny [--json]
    prd-jax compile --config configs/rl/qwen3_8b_pdr.py:v5p-128 [--topology v5p:4x4x4 | h200:8] [--json]
    prd-jax demo
"""

from __future__ import annotations

import argparse
import json
import logging
import sys



def _add_generate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2-135m", help="named model (see prd_jax.model.NAMED_CONFIGS)")
    p.add_argument("--path", default=None, help="local .gguf file or HF directory (config.json + safetensors)")
    p.add_argument("--prompt", required=True, help="prompt text")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--num-samples", type=int, default=1)
    p.add_argument("--seed", type=int, default=None,
                   help="PRNG seed; required when temperature > 0 (there is no default seed)")
    p.add_argument("--mesh", default=None, help="e.g. data=2,fsdp=2,tensor=2 (-1 fills)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--json", action="store_true", help="last line is a JSON record")


def run_generate(args: argparse.Namespace) -> dict:
    """Load the model, sample, print completions; returns the JSON record."""
    import jax

    from prd_jax.mesh import make_mesh
    from prd_jax.model import load
    from prd_jax.sampling import Sampler, SamplingConfig

    if args.seed is None and args.temperature > 0:
        raise SystemExit("--seed is required when sampling (temperature > 0); there is no default seed")
    mesh = make_mesh(args.mesh) if args.mesh else None
    model = load(args.model, args.path, mesh=mesh, dtype=args.dtype)
    tok = model.tokenizer
    if tok is None:
        raise SystemExit(f"model {args.model!r} has no tokenizer (tokenizer.json missing in {args.path})")
    if args.chat:
        prompt_ids = tok.encode_chat([{"role": "user", "content": args.prompt}])
    else:
        prompt_ids = tok.encode(args.prompt, add_bos=None)
    scfg = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                          top_p=args.top_p, top_k=args.top_k, num_samples=args.num_samples,
                          stop_ids=tok.stop_ids)
    sampler = Sampler(model.cfg, mesh, pad_id=tok.pad_id)
    out = sampler(model.params, [prompt_ids], jax.random.key(args.seed or 0), scfg)
    samples = []
    for row in range(args.num_samples):
        n = int(out.lengths[row])
        ids = [int(t) for t in out.tokens[row, :n]]
        samples.append({"completion_ids": ids, "text": tok.decode(ids),
                        "logprobs": [float(x) for x in out.logprobs[row, :n]]})
    for i, s in enumerate(samples):
        header = f"--- sample {i} ({len(s['completion_ids'])} tokens)" if args.num_samples > 1 else "---"
        print(header)
        print(s["text"])
    record = {"prompt_ids": prompt_ids, **samples[0]}
    if args.num_samples > 1:
        record["samples"] = samples[1:]
    if args.json:
        print(json.dumps(record))
    return record


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="prd-jax", description="LLMs as improvement operators in JAX")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_generate_args(sub.add_parser("generate", help="sample completions from a model"))
    demo = sub.add_parser("demo", help="the main demo job: SFT -> RL / PDR-RL -> budget-matched eval (configs/demo.py)")
    demo.add_argument("--workdir", default="demo_workdir", help="output directory (reruns resume)")
    demo.add_argument("--config", default=None, help="demo config (default configs/demo.py)")
    demo.add_argument("--no-progress", action="store_true")
    ev = sub.add_parser("eval", help="run operators on a dataset (mean@k, pass@k, B_seq, B_total)")
    ev.add_argument("--config", required=True, help="config file, e.g. configs/eval/smollm2_gsm8k.py")
    ev.add_argument("--workdir", required=True, help="output directory (results.jsonl, summary.md, pareto.png)")
    tr = sub.add_parser("train", help="SFT or RL per a config (resumes from the workdir)")
    tr.add_argument("--config", required=True, help="config file, e.g. configs/rl/tiny.py")
    tr.add_argument("--workdir", required=True, help="run directory (checkpoints, TensorBoard, metrics.jsonl)")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    co = sub.add_parser("compile", help="AOT-compile every program of a config for its pod; exit 1 if one does not fit")
    co.add_argument("--config", required=True, help="config file[:ARG], e.g. configs/rl/qwen3_8b_pdr.py:v5p-128")
    co.add_argument("--topology", default=None,
                    help="override the config's target: CHIP:TOPOLOGY for TPUs (v5p:4x4x4, v5e:2x2) or GPU:COUNT "
                         "(h200:8, compiled on COUNT simulated CPU devices)")
    co.add_argument("--devices", type=int, default=None, help="GPU targets: number of GPUs (simulated devices)")
    co.add_argument("--only", action="append", default=None, help="compile only programs whose name starts so")
    co.add_argument("--estimate", action="store_true",
                    help="eval configs: print the whole run's roofline (generated tokens, hours) and compile nothing")
    co.add_argument("--whole-operators", action="store_true",
                    help="eval configs: also compile each operator's whole program (slow; its calls are always compiled)")
    co.add_argument("--json", action="store_true", help="last line: one JSON object")
    ins = sub.add_parser("inspect", help="summarise a training workdir")
    ins.add_argument("--workdir", required=True)
    ins.add_argument("--json", action="store_true", help="print one JSON object")
    args, rest = parser.parse_known_args(argv)
    if rest and args.command not in ("eval", "train", "demo", "compile"):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.command == "generate":
        run_generate(args)
    elif args.command == "demo":
        import os

        from prd_jax.config_io import apply_overrides, load_config
        from prd_jax.demo import CONFIGS, run_demo

        config = load_config(args.config or os.path.join(CONFIGS, "demo.py"))
        config = apply_overrides(config, rest)
        run_demo(config, args.workdir, progress=not args.no_progress)
    elif args.command == "eval":
        from prd_jax.config_io import apply_overrides, load_config
        from prd_jax.evaluate import evaluate

        config = apply_overrides(load_config(args.config), rest)
        evaluate(config, args.workdir)
    elif args.command == "train":
        from prd_jax.config_io import apply_overrides, load_config
        from prd_jax.train.run import train

        config = apply_overrides(load_config(args.config), rest)
        train(config, args.workdir, progress=not args.no_progress)
    elif args.command == "inspect":
        run_inspect(args)
    elif args.command == "compile":
        sys.exit(run_compile(args, rest))


def run_compile(args: argparse.Namespace, rest: list) -> int:
    """Compile the config's programs for its target, print the table (and JSON); 0 if all fit."""
    from prd_jax.aot import report
    from prd_jax.config_io import apply_overrides, load_config

    config = apply_overrides(load_config(args.config), rest)
    target = report.target_of(config, args.topology, args.devices)
    if target.chip.platform == "gpu":
        import jax

        jax.config.update("jax_num_cpu_devices", max(target.devices, 1))
    try:
        if args.estimate:
            if config.get("operators") is None:
                raise ValueError("--estimate applies to eval configs (a config with `operators`)")
            print(f"{args.config} on {target.label} (roofline estimate, nothing compiled):")
            print(report.estimate_table(config, target))
            return 0
        rows = report.compile_all(config, target, args.only, args.whole_operators)
    except (ValueError, RuntimeError) as e:  # mesh vs topology, missing libtpu, context overflow
        print(f"ERROR {args.config} on {target.label}: {e}", file=sys.stderr)
        return 2
    print(f"{args.config} on {target.label}:")
    print(report.table(rows))
    bad = report.failures(rows)
    for line in bad:
        print("ERROR " + line, file=sys.stderr)
    if args.json:
        print(json.dumps(report.as_json(args.config, target, rows)))
    return 1 if bad else 0


def run_inspect(args: argparse.Namespace) -> dict:
    """Latest step, parameter count, params_digest, config and last metrics of a workdir."""
    from prd_jax.checkpoint import describe

    info = describe(args.workdir)
    if args.json:
        print(json.dumps(info, default=str))
        return info
    print(f"workdir        {info['workdir']}")
    print(f"latest step    {info['latest_step']}  (saved steps: {info['steps']})")
    print(f"parameters     {info['num_params']}")
    print(f"params_digest  {info['params_digest']}")
    if info["last_metrics"]:
        print("last metrics   " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                            for k, v in info["last_metrics"].items()))
    if info["config"]:
        print("config         " + json.dumps(info["config"], sort_keys=True)[:2000])
    return info

if __name__ == "__main__":
    main()
