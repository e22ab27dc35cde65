"""`prd-jax demo`: SFT -> baseline RL and PDR-RL -> budget-matched evaluation, on CPU.

Stages run through the same entry points a user calls (`train.run.train`,
`evaluate.evaluate`) with the configs in `configs/` (see `configs/demo.py`). Every stage
resumes from its workdir, so a rerun finishes where the last one stopped.
"""

from __future__ import annotations

import json
import logging
import os
import types

import jax
import ml_collections
import numpy as np

from prd_jax import fileio
from prd_jax.checkpoint import latest_params
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.data import synthetic
from prd_jax.evaluate import evaluate, markdown_table, pareto_plot, row_budgets
from prd_jax.model.config import NAMED_CONFIGS
from prd_jax.train.run import train
from prd_jax.train.setup import synthetic_rows

log = logging.getLogger(__name__)

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
QUICK_MODEL = ["--config.model.overrides.hidden=32", "--config.model.overrides.intermediate=64",
               "--config.model.overrides.num_layers=1", "--config.data.num_train=64", "--config.data.seq_len=128",
               "--config.batch_size=8", "--config.data.num_eval=8"]
CHECKPOINTS = ("sft", "rl_baseline", "rl_pdr")


def _config(name: str, overrides: list):
    return apply_overrides(load_config(os.path.join(CONFIGS, name)), overrides)


def stage_configs(demo, workdir: str) -> dict:
    """The three training configs the demo runs (resolved, with its overrides)."""
    quick = QUICK_MODEL if demo.quick else []
    common = [f"--config.seed={demo.seed}", f"--config.data.difficulty={tuple(demo.difficulty)}",
              f"--config.data.num_train={demo.num_train}"] + quick
    sft = _config("sft/tiny.py", common + [f"--config.steps={demo.sft_steps}",
                                           f"--config.optim.decay_steps={max(demo.sft_steps - 10, 1)}",
                                           f"--config.checkpoint_every={max(demo.sft_steps // 3, 1)}",
                                           f"--config.eval_every={max(demo.sft_steps // 3, 1)}"])
    rl = [f"--config.steps={demo.rl_steps}", f"--config.checkpoint_every={max(demo.rl_steps // 2, 1)}",
          f"--config.optim.learning_rate={demo.rl_learning_rate}",
          f"--config.model.init_workdir={os.path.join(workdir, 'sft')}"]
    rl += ["--config.rl.max_new_tokens=32", "--config.rl.samples_per_prompt=4"] if demo.quick else []
    rl_common = [x for x in common if "num_eval" not in x and "seq_len" not in x and "batch_size" not in x]
    return {"sft": sft, "rl_baseline": _config("rl/tiny.py", rl_common + rl),
            "rl_pdr": _config("rl/tiny_pdr.py", rl_common + rl)}


def training_texts(configs: dict) -> set:
    """Text of every problem a training stage saw (SFT train and held-out loss rows, RL prompts):
    the demo evaluates only on problems outside this set."""
    draws = {(seed, n, tuple(config.data.difficulty), config.data.get("family", "modchain")): config.data
             for config in configs.values()
             for seed, n in ((config.seed, config.data.num_train), (config.seed + 10_000, config.data.get("num_eval", 0)))}
    return {p["problem"] for (seed, n, *_), data in draws.items() for p in synthetic_rows(data, seed, n)}


def eval_config(demo, templates: str = "compact"):
    b = demo.budget
    common = dict(max_new_tokens=b, candidate_max_tokens=b, truncation_head=b // 4)
    c = ml_collections.ConfigDict()
    c.dataset, c.model, c.seed = "synthetic", "tiny", demo.seed
    c.k_samples, c.batch_size, c.num_problems = 1, demo.eval_batch, demo.eval_problems
    c.temperature, c.top_p, c.top_k = demo.eval_temperature, 1.0, 0
    c.max_problem_tokens = 96
    c.templates = templates  # the prompt set the models were trained on
    c.operators = [dict(type="long_cot", max_new_tokens=2 * b),
                   dict(type="sr", rounds=1, **common),
                   dict(type="pdr", schedule=(4, 1), distill="shared_topk", k=2, selector="random", kappa=b, **common),
                   dict(type="best_of_n", n=4, selector="pairwise_v1", judge=dict(max_new_tokens=0), **common)]
    return c


def _model(workdir: str, config, tokenizer):
    overrides = config.model.overrides.to_dict()
    cfg = NAMED_CONFIGS[config.model.name].replace(**overrides)
    step, params = latest_params(workdir)
    return types.SimpleNamespace(cfg=cfg, params=jax.device_put(params), tokenizer=tokenizer, mesh=None), step


def run_demo(demo, workdir: str, *, progress: bool = True) -> dict:
    """Run (or resume) the whole demo in `workdir`; returns {checkpoint: eval table}."""
    fileio.makedirs(workdir)
    if demo.quick:
        demo = ml_collections.ConfigDict(dict(demo.to_dict(), **demo.quick_overrides.to_dict()))
    configs = stage_configs(demo, workdir)
    for name in CHECKPOINTS:
        log.info("demo: training %s", name)
        train(configs[name], os.path.join(workdir, name), progress=progress)
    problems = synthetic.held_out(demo.eval_problems, demo.seed + 1_000_003, tuple(demo.difficulty),
                                  training_texts(configs))
    tables, steps = {}, {}
    vocab = synthetic.CharVocab()  # one tokenizer object: each eval operator compiles once for all checkpoints
    for name in CHECKPOINTS:
        model, steps[name] = _model(os.path.join(workdir, name), configs[name], vocab)
        tables[name] = evaluate(eval_config(demo, configs[name].data.templates), os.path.join(workdir, "eval", name),
                                model=model, rows=problems, progress=progress)
    counts = {d: sum(p["difficulty"] == d for p in problems) for d in sorted({p["difficulty"] for p in problems})}
    claims = [paired_claim(workdir, *c) for c in CLAIMS]
    write_results(workdir, demo, tables, steps, markdown_table, counts, claims)
    return tables


# The issue's three claims (plus PDR vs Long-CoT after RL), as (text, (run, operator) A, B): "A beats B".
CLAIMS = (("RL beats SFT (Long-CoT)", ("rl_baseline", "long_cot"), ("sft", "long_cot")),
          ("PDR beats Long-CoT (SFT checkpoint)", ("sft", "pdr"), ("sft", "long_cot")),
          ("PDR beats Long-CoT (RL checkpoint)", ("rl_baseline", "pdr"), ("rl_baseline", "long_cot")),
          ("PDR-RL beats RL under PDR inference", ("rl_pdr", "pdr"), ("rl_baseline", "pdr")))


def _correct_by_problem(workdir: str, run: str, operator: str) -> tuple[dict, float]:
    """{problem_id: correct} of sample 0 and the mean B_seq (generated tokens on the accepted
    path, PDR §3.1), from one run's eval results."""
    rows = fileio.read_jsonl(os.path.join(workdir, "eval", run, "results.jsonl"))
    rows = [r for r in rows if r["operator"].split("(")[0] == operator and r["sample"] == 0 and "correct" in r]
    b_seq = sum(row_budgets(r)["b_seq"] for r in rows) / max(len(rows), 1)
    return {r["problem_id"]: bool(r["correct"]) for r in rows}, b_seq


def paired_claim(workdir: str, text: str, a: tuple, b: tuple) -> dict:
    """Paired comparison of A and B on the same problems: the mean difference in accuracy,
    its standard error (sample std of per-problem differences / sqrt(n)), the discordant
    counts (A right and B wrong, and the reverse) and a verdict: "holds" if the 95% interval
    (diff +- 1.96 SE) lies above 0, "reversed" if below, else "not shown"."""
    (ca, bseq_a), (cb, bseq_b) = _correct_by_problem(workdir, *a), _correct_by_problem(workdir, *b)
    ids = sorted(set(ca) & set(cb))
    d = np.asarray([float(ca[i]) - float(cb[i]) for i in ids])
    diff = float(d.mean()) if len(d) else 0.0
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
    verdict = "holds" if diff - 1.96 * se > 0 else "reversed" if diff + 1.96 * se < 0 else "not shown"
    return {"claim": text, "a": "/".join(a), "b": "/".join(b), "n": len(ids),
            "acc_a": float(np.mean([ca[i] for i in ids])) if ids else 0.0,
            "acc_b": float(np.mean([cb[i] for i in ids])) if ids else 0.0, "diff": diff, "se": se,
            "a_only": int((d > 0).sum()), "b_only": int((d < 0).sum()), "b_seq_a": bseq_a, "b_seq_b": bseq_b,
            "verdict": verdict}


def claims_table(claims: list) -> str:
    head = ("| claim (A beats B) | A | B | n | acc A | acc B | A - B (95% CI) | only A right / only B right "
            "| B_seq A / B | verdict |\n|---|---|---|---|---|---|---|---|---|---|")
    return "\n".join([head] + [
        f"| {c['claim']} | {c['a']} | {c['b']} | {c['n']} | {c['acc_a']:.3f} | {c['acc_b']:.3f} | "
        f"{c['diff']:+.3f} (+-{1.96 * c['se']:.3f}) | {c['a_only']} / {c['b_only']} | "
        f"{c['b_seq_a']:.0f} / {c['b_seq_b']:.0f} | {c['verdict']} |" for c in claims])


def write_results(workdir, demo, tables, steps, markdown_table, held_out_counts: dict, claims: list) -> None:
    lines = ["# prd_jax demo results", "",
             f"{demo.eval_problems} synthetic problems not seen in training (difficulty counts "
             f"{held_out_counts}), k=1, T={demo.eval_temperature}; per-call budget {demo.budget} "
             f"(Long-CoT {2 * demo.budget}).", ""]
    lines += ["## Claims (paired on the same problems, k=1)", "", claims_table(claims), ""]
    combined = []
    for name, table in tables.items():
        lines += [f"## {name} (step {steps[name]})", "", markdown_table(table), ""]
        combined += [dict(t, operator=f"{name}:{t['operator'].split('(')[0]}") for t in table]
    fileio.write_text(os.path.join(workdir, "results.md"), "\n".join(lines))
    fileio.write_text(os.path.join(workdir, "results.json"), json.dumps(
        {"steps": steps, "eval_difficulties": {str(d): n for d, n in held_out_counts.items()},
         "claims": claims, "tables": tables}, indent=1))
    pareto_plot(combined, os.path.join(workdir, "pareto.png"), "demo: accuracy vs budget per checkpoint")
    print("\n".join(lines))
