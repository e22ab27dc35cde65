"""`prd-jax` command line: `generate`, `eval`, `results`, `train`, `inspect`, `compile`, `serve`, `export`, `demo`.

    prd-jax generate --model smollm2-135m --prompt "What is 7*8?" --chat --max-new-tokens 64
    prd-jax eval --config configs/eval/smollm2_gsm8k.py --workdir /tmp/eval --config.num_problems=3
    prd-jax train --config configs/sft/tiny.py --workdir /tmp/sft_tiny [--config.steps=100]
    prd-jax inspect --workdir /tmp/sft_tiny [--json]
    prd-jax results /tmp/eval_a /tmp/eval_b [--csv table.csv] [--json]
    prd-jax compile --config configs/rl/qwen3_8b_pdr.py:v5p-128 [--topology v5p:4x4x4 | h200:8] [--json]
    prd-jax serve --model smollm2-135m [--path DIR | --workdir W] [--host 127.0.0.1] [--port 8000]
    prd-jax export --workdir /tmp/sft_tiny --out /tmp/sft_tiny_hf [--step N] [--dtype bfloat16]
    prd-jax demo
    prd-jax data get gsm8k math500 [--all] [--dir D] [--split train]   # or: prd-jax data list [--json]

Commands are quiet: library INFO logs (absl / orbax / jax) are hidden, warnings, our own
progress and results are shown; `generate` prints the completion alone. `--verbose` (after
the command) shows the library logs (and generate's compile line) and, on an error, the
Python traceback; without it an error is one line and exit status 2. Off a TPU host, every
command but `compile` runs JAX on the CPU (or GPU) and never loads libtpu.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import logging
import os
import sys

# Nothing heavy at module level: `prd-jax --help` must not pay for jax, flax, orbax or the
# train/eval/aot modules, so each command imports what it runs inside its handler (a test
# checks `sys.modules` after `--help`). The data layer loads TensorFlow lazily as well.

EXIT_ERROR = 2  # a usage, config or path error (argparse's status for usage errors)
# The errors of a wrong config, override, flag value or path: reported as one line.
USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError,
               ModuleNotFoundError)
DEFAULT_PROMPT = "What is 7*8?"
MODEL_HELP = "named model (see prd_jax.model.NAMED_CONFIGS); default: the family and shape of --path, else smollm2-135m"


def _add_generate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help=MODEL_HELP)
    p.add_argument("--path", default=None, help="local .gguf file or HF directory (config.json + safetensors)")
    p.add_argument("--prompt", default=DEFAULT_PROMPT, help=f"prompt text (default {DEFAULT_PROMPT!r})")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0 = greedy decoding (default); > 0 samples and needs --seed")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--num-samples", type=int, default=1)
    p.add_argument("--seed", type=int, default=None,
                   help="PRNG seed; required when temperature > 0 (there is no default seed)")
    p.add_argument("--mesh", default=None, help="e.g. data=2,fsdp=2,tensor=2 (-1 fills)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--json", action="store_true", help="last line is a JSON record")


def load_model(name: str, path, mesh, dtype: str):
    """`prd_jax.model.load`, imported on first use (tests memoise it here)."""
    from prd_jax.model import load

    return load(name, path, mesh=mesh, dtype=dtype)


def run_generate(args: argparse.Namespace) -> dict:
    """Load the model, decode (greedy, or sampled with --temperature and --seed), print
    completions; returns the JSON record. One sample prints its text alone (`--verbose` adds
    a `---` header line); several print a `--- sample i (n tokens)` header before each."""
    if args.seed is None and args.temperature > 0:
        raise SystemExit(f"--seed is required when sampling (--temperature={args.temperature} > 0); "
                         "there is no default seed. Omit --temperature for greedy decoding")
    import jax

    from prd_jax.mesh import make_mesh
    from prd_jax.sampling import Sampler, SamplingConfig

    mesh = make_mesh(args.mesh) if args.mesh else None
    model = load_model(args.model, args.path, mesh, args.dtype)
    tok = model.tokenizer
    if tok is None:
        raise SystemExit(f"model {args.model or args.path!r} has no tokenizer (tokenizer.json missing in {args.path})")
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
        if args.num_samples > 1:
            print(f"--- sample {i} ({len(s['completion_ids'])} tokens)")
        elif args.verbose:
            print("---")
        print(s["text"])
    record = {"prompt_ids": prompt_ids, **samples[0]}
    if args.num_samples > 1:
        record["samples"] = samples[1:]
    if args.json:
        print(json.dumps(record))
    return record


_HANDLER: "logging.Handler | None" = None
# Libraries that set their own logger level (absl's verbosity) or log at INFO under their own
# name; quiet mode holds them at WARNING. Every other library inherits the root's level.
_LIBRARY_LOGGERS = ("absl", "jax", "orbax", "etils", "tensorflow", "clu")


def configure_logging(verbose: bool, progress: bool = True) -> None:
    """Quiet by default: our INFO records (prd_jax: progress, results) and every library's
    warnings reach stderr; `verbose` adds the libraries' INFO lines (orbax handler
    registries, metadata stores, jax backends). `progress=False` (generate, whose output is
    the completion) holds our own INFO lines back too unless `verbose`. Levels are set on
    the loggers, so this holds whichever handler is installed (ours, or one a library or an
    embedding program made)."""
    global _HANDLER
    root = logging.getLogger()
    ours = logging.Formatter("%(levelname)s %(name)s: %(message)s")
    if _HANDLER is None and not root.handlers:
        _HANDLER = logging.StreamHandler(sys.stderr)
        root.addHandler(_HANDLER)
    for handler in root.handlers:
        # absl calls `logging.basicConfig()` on its first record (orbax logs while it is
        # imported): adopt that default stderr handler, giving it our format.
        fmt = getattr(handler.formatter, "_fmt", None)
        if handler is _HANDLER or (type(handler) is logging.StreamHandler and fmt == logging.BASIC_FORMAT):
            handler.setFormatter(ours)
    library_level = logging.INFO if verbose else logging.WARNING
    if not verbose:  # TensorFlow's C++ start-up lines (oneDNN, CUDA probes) when the data layer loads it
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    root.setLevel(library_level)
    for name in _LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(library_level)
    logging.getLogger("prd_jax").setLevel(logging.INFO if progress or verbose else logging.WARNING)


def cpu_or_gpu_host_platforms() -> None:
    """Off a TPU host, keep JAX from initialising the TPU plugin that the `tpu-aot` extra
    installs: libtpu takes the host-wide `/tmp/libtpu_lockfile`, so a CPU run (an eval,
    `prd-jax serve`) would make a concurrent `prd-jax compile` for a TPU topology fail.
    Only `compile` (which may target a TPU) and an explicit JAX_PLATFORMS are left alone."""
    if os.environ.get("JAX_PLATFORMS") or glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return
    import jax

    gpu = any(importlib.util.find_spec(m) for m in ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm7_plugin"))
    jax.config.update("jax_platforms", "cuda,cpu" if gpu else "cpu")


def _int_list(text: str) -> tuple:
    """"8,32" -> (8, 32), for bucket flags."""
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers, e.g. 8,32") from None


OVERRIDES_HELP = """\
config:
  --config FILE[:ARG]   a Python config file (get_config(arg)); ARG goes to get_config, e.g. the
                        pod of a paper-scale config: configs/rl/qwen3_8b_pdr.py:v5p-128
  --config.FIELD=VALUE  set a field, nested with dots. Any field the config declares can be set,
                        listed in the file or not (RLConfig, EvalConfig, Sampling, BackendConfig,
                        OptimConfig, ModelConfig under model.overrides, the data and loop fields;
                        prd_jax/config_fields.py). VALUE is a Python literal (3, 0.5, True, None,
                        "(8, 4, 1)") or text, converted to the field's type. An unknown field
                        names the nearest ones; a value of the wrong type names the type.
  --print-config        print the resolved config (file, overrides and every declared field's
                        default) as JSON and exit, loading no model

example:
"""
OVERRIDE_EXAMPLES = {  # each runs in tests/test_documented_commands.py
    "eval": ["prd-jax eval --config configs/eval/smollm2_gsm8k.py --workdir runs/eval --config.num_problems=4 "
             "--config.sampling.temperature=0.6"],
    "train": ["prd-jax train --config configs/rl/tiny.py --workdir runs/rl_tiny "
              "--config.model.init_workdir=runs/sft_tiny --config.rl.cispo_lower_clip=True",
              "prd-jax train --config configs/sft/tiny.py --print-config --config.data.eval_split=validation"],
    "compile": ["prd-jax compile --config configs/rl/gptoss20b_pairrl.py:8xh200 "
                "--config.model.overrides.router_aux_loss_coef=0.01 --print-config"],
    "demo": ["prd-jax demo --workdir runs/demo --config.adaptive.tau=0.5 --config.seed=1"],
}


def _config_help(command: str) -> dict:
    """The parser keywords of a command that takes `--config.FIELD=VALUE` (its help epilog)."""
    return dict(epilog=OVERRIDES_HELP + "".join(f"  {line}\n" for line in OVERRIDE_EXAMPLES[command]),
                formatter_class=argparse.RawDescriptionHelpFormatter)


def build_parser() -> argparse.ArgumentParser:
    """The `prd-jax` parser: one subcommand per job; `--verbose` on each."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--verbose", action="store_true",
                        help="show library INFO logs (absl/orbax/jax) and tracebacks on errors")
    parser = argparse.ArgumentParser(prog="prd-jax", description="LLMs as improvement operators in JAX")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, **kw):
        return sub.add_parser(name, parents=[common], **kw)

    _add_generate_args(add("generate", help="decode completions from a model (greedy unless --temperature)"))
    demo = add("demo", help="the main demo job: SFT -> RL / PDR-RL -> budget-matched eval (configs/demo.py)",
               **_config_help("demo"))
    demo.add_argument("--workdir", default="demo_workdir", help="output directory (reruns resume)")
    demo.add_argument("--config", default=None, help="demo config (default configs/demo.py)")
    demo.add_argument("--no-progress", action="store_true")
    ev = add("eval", help="run operators on a dataset (mean@k, pass@k, B_seq, B_total)", **_config_help("eval"))
    ev.add_argument("--config", required=True, help="config file, e.g. configs/eval/smollm2_gsm8k.py")
    ev.add_argument("--workdir", default=None, help="output directory (results.jsonl, summary.md, pareto.png); required")
    ev.add_argument("--no-progress", action="store_true",
                    help="no progress bar (problems done, tokens/s, requests, time left)")
    tr = add("train", help="SFT or RL per a config (resumes from the workdir)", **_config_help("train"))
    tr.add_argument("--config", required=True, help="config file, e.g. configs/rl/tiny.py")
    tr.add_argument("--workdir", default=None, help="run directory (checkpoints, TensorBoard, metrics.jsonl); required")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    co = add("compile", help="AOT-compile every program of a config for its pod; exit 1 if one does not fit",
             **_config_help("compile"))
    for p in (demo, ev, tr, co):
        p.add_argument("--print-config", action="store_true",
                       help="print the resolved config (defaults included) as JSON and exit; loads no model")
    co.add_argument("--config", required=True, help="config file[:ARG], e.g. configs/rl/qwen3_8b_pdr.py:v5p-128")
    co.add_argument("--topology", default=None,
                    help="override the config's target: CHIP:TOPOLOGY for TPUs (v5p:4x4x4, v5e:2x2) or GPU:COUNT "
                         "(h200:8, compiled on COUNT simulated CPU devices)")
    co.add_argument("--devices", type=int, default=None, help="GPU targets: number of GPUs (simulated devices)")
    co.add_argument("--only", action="append", default=None, help="compile only programs whose name starts so")
    co.add_argument("--estimate", action="store_true",
                    help="compile one decode step per sampler call (and the RL train step) and print the modelled "
                         "decode tok/s per chip with its bound (HBM, ICI, FLOPs), the analytic figure beside it, and "
                         "the RL step's time colocated and split; eval configs first print the whole run's roofline")
    co.add_argument("--sample-fraction", type=float, default=0.5,
                    help="--estimate, split placement: the share of the chips that samples (default 0.5)")
    co.add_argument("--whole-operators", action="store_true",
                    help="eval configs: also compile each operator's whole program (slow; its calls are always compiled)")
    co.add_argument("--json", action="store_true", help="last line: one JSON object")
    sv = add("serve", help="serve a model or checkpoint behind the OpenAI API (/v1/completions, /v1/chat/completions)")
    sv.add_argument("--model", default=None, help=MODEL_HELP)
    sv.add_argument("--path", default=None, help="local .gguf file or HF directory")
    sv.add_argument("--workdir", default=None, help="a training workdir: serve its latest checkpoint")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--served-name", default=None, help="the name clients send as `model` (default: the model's)")
    sv.add_argument("--max-batch-rows", type=int, default=32,
                    help="decode slots: most rows (prompts x n) decoding at once (continuous batching)")
    sv.add_argument("--batch-wait-ms", type=float, default=5.0,
                    help="when no row is decoding, how long the first request waits for company")
    sv.add_argument("--decode-chunk", type=int, default=8,
                    help="decode steps between admissions: finished rows leave and waiting rows enter after each")
    sv.add_argument("--prompt-buckets", type=_int_list, default=(),
                    help="fixed prompt widths, e.g. 128,256: prompts are padded to the smallest that holds them")
    sv.add_argument("--warmup-max-tokens", type=int, default=0,
                    help="> 0: before /health is ready, compile every program that requests of up to this many "
                         "new tokens on prompts within the buckets meet (at temperature / top-p / top-k off)")
    sv.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    sv.add_argument("--mesh", default=None, help="serve on several devices, e.g. data=2,tensor=4 (-1 fills)")
    sv.add_argument("--api-key", default=None, help="requests to /v1/ must send 'Authorization: Bearer KEY'")
    sv.add_argument("--api-key-env", default=None, help="the environment variable holding the API key")
    sv.add_argument("--max-queued-requests", type=int, default=None,
                    help="most requests waiting for a decode slot; past it: 429 with Retry-After (default: no bound)")
    sv.add_argument("--drain-timeout", type=float, default=60.0,
                    help="on SIGTERM: seconds in-flight requests get to finish (new ones get 503)")
    ex = add("export", help="write a Hugging Face directory (safetensors, config, tokenizer, generation_config)")
    ex.add_argument("--out", required=True, help="output directory")
    ex.add_argument("--workdir", default=None, help="a training workdir (default: its newest readable step)")
    ex.add_argument("--step", type=int, default=None, help="with --workdir: this checkpoint step")
    ex.add_argument("--model", default=None, help="without --workdir: a named model (default smollm2-135m, embedded)")
    ex.add_argument("--path", default=None, help="without --workdir: a .gguf file or HF directory")
    ex.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ins = add("inspect", help="summarise a training workdir (fails if it has no checkpoint)")
    ins.add_argument("--workdir", required=True)
    ins.add_argument("--json", action="store_true", help="print one JSON object (`step` = `latest_step`)")
    res = add("results", help="compare eval workdirs: operators x runs, mean@k / pass@k with 95%% CI, budgets")
    res.add_argument("runs", nargs="+", metavar="[NAME=]WORKDIR", help="eval workdirs (local or gs://)")
    res.add_argument("--average", action="store_true",
                     help="each operator's mean@k averaged over the runs, one per benchmark (V1 code average)")
    res.add_argument("--csv", default=None, metavar="FILE", help="also write the table as CSV")
    res.add_argument("--json", action="store_true", help="print the table as JSON records")
    _add_data_args(sub.add_parser("data", help="fetch the built-in benchmarks (`data get`) or list them (`data list`)"),
                   common)
    return parser


def _add_data_args(data: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """`prd-jax data get NAME... | --all [--dir D] [--split S] [--catalog F]` and
    `prd-jax data list [--dir D] [--json] [--catalog F]`."""
    actions = data.add_subparsers(dest="data_action", required=True)
    catalog_help = ("JSON file overriding repo, revision, sha256 or rows per benchmark, e.g. a private mirror's "
                    "(docs/data.md; default: the built-in catalog)")
    get = actions.add_parser("get", parents=[common], help="download, verify and write benchmarks (docs/data.md)")
    get.add_argument("names", nargs="*", help="benchmarks (prd_jax.data.catalog), e.g. gsm8k math500")
    get.add_argument("--all", action="store_true", help="every built-in benchmark")
    get.add_argument("--split", action="append", default=None, help="only this split (repeatable), e.g. train")
    get.add_argument("--dir", default=None, help="data dir (default: $PRD_DATA_DIR, else the user data dir)")
    get.add_argument("--catalog", default=None, metavar="FILE", help=catalog_help)
    ls = actions.add_parser("list", parents=[common], help="source, revision, rows, licence and presence of each")
    ls.add_argument("--dir", default=None, help="data dir (default: $PRD_DATA_DIR, else the user data dir)")
    ls.add_argument("--json", action="store_true", help="one JSON list")
    ls.add_argument("--catalog", default=None, metavar="FILE", help=catalog_help)


def main(argv=None) -> None:
    """Run one `prd-jax` command. Config, override, flag-value and path errors print one line
    `prd-jax COMMAND: error: ...` and exit with status 2 (`--verbose`: the traceback)."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command in ("eval", "train") and args.workdir is None and not args.print_config:
        _subparser(parser, args.command).error("the following arguments are required: --workdir")
    if rest and args.command not in ("eval", "train", "demo", "compile"):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    configure_logging(args.verbose, progress=args.command != "generate")
    if args.command not in ("compile", "data"):
        cpu_or_gpu_host_platforms()
    try:
        _run(args, rest)
    except USER_ERRORS as e:
        if args.verbose:
            raise
        message = " ".join(str(e).split("\n")).strip() or type(e).__name__
        print(f"prd-jax {args.command}: error: {message} (--verbose shows the traceback)", file=sys.stderr)
        sys.exit(EXIT_ERROR)


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


def print_config(args: argparse.Namespace, rest: list) -> None:
    """`--print-config`: the config the command would run (file, overrides, the default of
    every declared field; the demo's with its task presets filled), validated as the command
    validates it, as JSON. Loads no model."""
    from prd_jax import config_check

    if args.command == "demo":
        from prd_jax.demo import CONFIGS, resolve

        config = config_check.load(args.config or os.path.join(CONFIGS, "demo.py"), rest, kind="demo")
        config_check.validate(config, "demo")
        print(json.dumps(resolve(config).to_dict(), indent=2, sort_keys=True, default=repr))
        return
    config = config_check.load(args.config, rest)
    config_check.validate(config)
    print(config_check.to_json(config))


def _run(args: argparse.Namespace, rest: list) -> None:
    """Dispatch one command, importing only the modules it runs."""
    if getattr(args, "print_config", False):
        print_config(args, rest)
    elif args.command == "generate":
        run_generate(args)
    elif args.command == "demo":
        from prd_jax.config_check import load
        from prd_jax.demo import CONFIGS, run_demo

        config = load(args.config or os.path.join(CONFIGS, "demo.py"), rest, kind="demo")
        run_demo(config, args.workdir, progress=not args.no_progress)
    elif args.command == "eval":
        from prd_jax.config_check import load
        from prd_jax.evaluate import evaluate

        evaluate(load(args.config, rest, kind="eval"), args.workdir, progress=not args.no_progress)
    elif args.command == "train":
        from prd_jax.config_check import load
        from prd_jax.train.run import train

        train(load(args.config, rest), args.workdir, progress=not args.no_progress)
    elif args.command == "inspect":
        run_inspect(args)
    elif args.command == "compile":
        sys.exit(run_compile(args, rest))
    elif args.command == "export":
        from prd_jax.export import export_model, summary

        print(summary(export_model(args.out, workdir=args.workdir, step=args.step, model=args.model, path=args.path,
                                   dtype=args.dtype)))
    elif args.command == "data":
        from prd_jax.data import download

        download.main(args)
    elif args.command == "results":
        from prd_jax import results  # pandas: the `analysis` extra

        results.main(args)
    elif args.command == "serve":
        from prd_jax.serve.app import serve

        serve(args)


def run_compile(args: argparse.Namespace, rest: list) -> int:
    """Compile the config's programs for its target, print the table (and JSON); 0 if all fit."""
    import jax

    from prd_jax.aot import report
    from prd_jax.backends import estimate, for_eval
    from prd_jax.backends.config import BackendConfig
    from prd_jax.config_check import load
    from prd_jax.eval_setup import EvalSetup

    config = load(args.config, rest)
    if config.get("operators") is not None:
        backend = BackendConfig.from_config(config.backend)
        if backend.remote:  # an API run: requests, tokens and cost; there is nothing to compile
            if not args.estimate:
                raise ValueError("config.backend.kind='openai': nothing runs on a pod; use --estimate")
            setup = EvalSetup.from_config(config)  # as `prd-jax eval` builds it
            lm, tok = for_eval.eval_lm(setup.config, backend.replace_key_env(), None, progress=False)
            setup = setup.with_lm(lm, tok)  # the remote LM refuses what it cannot honour (`RemoteLM.check`)
            rows = estimate.remote_estimates(config, tok, backend, setup.context)
            print(estimate.remote_table(rows, backend))
            return 0
    target = report.target_of(config, args.topology, args.devices)
    if target.chip.platform == "gpu":
        jax.config.update("jax_num_cpu_devices", max(target.devices, 1))
    try:
        if args.estimate:
            return _print_estimate(args, config, target)
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


def _print_estimate(args: argparse.Namespace, config, target) -> int:
    """`compile --estimate`: the eval run's roofline (eval configs), then decode tok/s per chip
    and the RL step's time read from compiled programs (`aot.throughput`)."""
    from prd_jax.aot import report, throughput

    if config.get("operators") is not None:
        print(f"{args.config} on {target.label} (analytic roofline of the whole run):")
        print(report.estimate_table(config, target))
    est = throughput.estimate_all(config, target, args.only)
    print(f"{args.config} on {target.label} (modelled from compiled decode steps; {target.chip.name}: "
          f"{target.chip.peak_flops / 1e12:.0f} TFLOP/s, HBM {target.chip.hbm_bandwidth / 1e12:.3g} TB/s, "
          f"ICI {target.chip.ici_bandwidth / 1e9:.0f} GB/s):")
    print(throughput.table(est))
    if est.has_step:
        print(throughput.step_table(est, args.sample_fraction))
    if args.json:
        print(json.dumps({"config": args.config, "topology": target.label,
                          **throughput.as_json(est, args.sample_fraction)}))
    return 0


def run_inspect(args: argparse.Namespace) -> dict:
    """Latest step, parameter count, params_digest, config and last metrics of a workdir."""
    from prd_jax.checkpoint import describe

    info = describe(args.workdir, require=True)  # no checkpoint: NoCheckpointError says where it looked
    if args.json:
        print(json.dumps(info, default=str))
        return info
    print(f"workdir        {info['workdir']}")
    print(f"step           {info['step']}  (saved steps: {info['steps']})")
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
