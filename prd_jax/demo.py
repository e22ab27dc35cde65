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
from typing import Optional

import jax
import ml_collections
import numpy as np

from prd_jax import fileio
from prd_jax.checkpoint import latest_params
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.config_schema import Field, dataclass_fields, leaves
from prd_jax.data import synthetic
from prd_jax.evaluate import build_spec, evaluate, markdown_table, pareto_plot, row_budgets
from prd_jax.model.config import NAMED_CONFIGS
from prd_jax.operators.adaptive_pdr import AdaptivePDR
from prd_jax.sampling import Sampling
from prd_jax.train.config import TrainConfig
from prd_jax.train.run import train
from prd_jax.train.setup import synthetic_rows

log = logging.getLogger(__name__)

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
QUICK_MODEL = ["--config.model.overrides.hidden=32", "--config.model.overrides.intermediate=64",
               "--config.model.overrides.num_layers=1", "--config.data.num_train=64", "--config.data.seq_len=128",
               "--config.batch_size=8", "--config.data.num_eval=8"]
CHECKPOINTS = ("sft", "rl_baseline", "rl_pdr")

# Per-task settings (a demo config field left None takes these). preimage: eight drafts of
# `budget` tokens (one try and its box each); the workspace is the k=2 whose answers most drafts
# share (`selector="majority"`, drafts without an answer last), each quoted by its last `tail`
# tokens (a finished draft's "ok" and its box; a cut draft's partial try); one refine that
# checks the quoted boxes in rank order first; the SFT drafts drawn, ranked, cut and quoted the
# same way (`stage_configs`); Long-CoT from one try to past the whole search (docs/demo.md says why each setting;
# the runs that chose them: docs/results/2026-12-01-demo-results.md).
# modchain (the control): the settings the demo used before issue 15.
# `adaptive` (issue 37): adaptive PDR's draft waves, D = min_fanout + (waves - 1) x max_fanout =
# `drafts` slots, so its drafts are PDR's (it runs with PDR's sampling keys, `run_demo`). preimage:
# 2 drafts, then up to 3 and 3 more while no draft has an answer (tau = 1/8: one boxed answer,
# which passed its own check, stops a problem); then PDR's refine (docs/demo.md).
PRESETS = {
    "preimage": dict(difficulty=(3, 4), sft_steps=600, num_train=4000, budget=80, drafts=8, selector="majority",
                     long_cot_budgets=(64, 128, 192, 256, 512), rl_budget=256, k=2, tail=12,
                     adaptive=dict(waves=3, min_fanout=2, max_fanout=3, tau=0.125),
                     sft=["--config.data.seq_len=512", "--config.data.pdr_fraction=1.0", "--config.data.refine_ignore=0.2",
                          "--config.data.sr_fraction=0.0", "--config.data.judge_fraction=0.25"]),
    "modchain": dict(difficulty=(1, 2), sft_steps=600, num_train=4000, budget=64, drafts=4, selector="random",
                     long_cot_budgets=(32, 64, 128), rl_budget=64, k=2, tail=None, sft=[],
                     adaptive=dict(waves=2, min_fanout=2, max_fanout=2, tau=0.5)),
}


def _config(name: str, overrides: list):
    return apply_overrides(load_config(os.path.join(CONFIGS, name)), overrides)


def declared_fields(config) -> dict:
    """{dotted path: config_schema.Field} of the demo config: the file's own fields, typed by
    their values or, where None (the task's preset), by `PRESETS`; and `adaptive.*`, typed by
    `AdaptivePDR` (set field by field over the preset's)."""
    preset = next(iter(PRESETS.values()))
    out = {}
    for name, value in leaves(config).items():  # the file declares its fields; None: the task's preset
        if value is None and name in preset and not isinstance(preset[name], dict):
            out[name] = Field(Optional[type(preset[name])], None, "demo.PRESETS")
        elif value is not None and not name.startswith("adaptive."):
            out[name] = Field(tuple if isinstance(value, (list, tuple)) else type(value), value, "the demo config")
    out["adaptive"] = Field(Optional[dict], None, "demo.PRESETS")  # None: the preset; or set field by field
    out.update({k: Field(Optional[f.type], None, f.source) for k, f in
                dataclass_fields(AdaptivePDR, "adaptive.", keep=tuple(preset["adaptive"])).items()})
    return out


def resolve(demo) -> ml_collections.ConfigDict:
    """`demo` with quick overrides applied and every None field filled from `PRESETS[demo.task]`
    (idempotent: the stage and eval builders resolve what they are given); raises naming
    `task` and the allowed tasks."""
    if demo.task not in PRESETS:
        raise ValueError(f"config.task={demo.task!r}; the demo runs {sorted(PRESETS)}")
    out = demo.to_dict()
    # adaptive PDR's fields are set one by one (--config.adaptive.tau=0.5): each field given
    # wins over the quick version's, which wins over the task's preset
    given = {k: v for k, v in dict(out.get("adaptive") or {}).items() if v is not None}
    if demo.quick:
        out.update(demo.quick_overrides.to_dict())
    base = dict(out["adaptive"] if demo.quick and out.get("adaptive") else PRESETS[demo.task]["adaptive"])
    for key, value in PRESETS[demo.task].items():
        if out.get(key) is None:
            out[key] = value
    out["adaptive"] = {**base, **given}
    out["difficulty"], out["long_cot_budgets"] = tuple(out["difficulty"]), tuple(out["long_cot_budgets"])
    if len(out["long_cot_budgets"]) < 3:
        raise ValueError(f"config.long_cot_budgets={out['long_cot_budgets']}; give at least 3 budgets")
    a = dict(out["adaptive"])
    if a.get("min_fanout", 0) + (a.get("waves", 1) - 1) * a.get("max_fanout", 0) != out["drafts"]:
        raise ValueError(f"config.adaptive={a}: min_fanout + (waves - 1) x max_fanout must equal config.drafts="
                         f"{out['drafts']} (adaptive PDR draws PDR's drafts)")
    out["adaptive"] = a
    out["pareto_taus"] = tuple(out.get("pareto_taus") or ())
    out["pareto_drafts"] = tuple(out.get("pareto_drafts") or ())
    return ml_collections.ConfigDict(out)


def _pdr_fields(demo) -> dict:
    """The PDR round of eval and PDR-RL: M = `demo.drafts` drafts, a shared top-k workspace of
    k drafts ranked by `demo.selector` (random, or majority: the most shared answers first),
    one refine, every call at `demo.budget` tokens (PDR §3.1)."""
    b, tail = demo.budget, demo.tail
    quoted = dict(candidate_max_tokens=tail, truncation_head=0) if tail else dict(candidate_max_tokens=b,
                                                                                 truncation_head=b // 4)
    return dict(schedule=(demo.drafts, 1), distill="shared_topk", k=demo.k, selector=demo.selector, kappa=b, max_new_tokens=b,
                **quoted)


def stage_configs(demo, workdir: str) -> dict:
    """The three training configs the demo runs (resolved, with its overrides)."""
    demo = resolve(demo)
    quick = QUICK_MODEL if demo.quick else []
    common = [f"--config.seed={demo.seed}", f"--config.task={demo.task}",
              f"--config.data.difficulty={tuple(demo.difficulty)}", f"--config.data.num_train={demo.num_train}"]
    drafts = [f"--config.data.draft_tokens={demo.budget}", f"--config.data.tail_tokens={demo.tail}",
              f"--config.data.drafts={demo.drafts}", f"--config.data.ranking={demo.selector}"] if demo.tail else []
    sft = _config("sft/tiny.py", common + [f"--config.data.pdr_k={demo.k}"] + list(demo.sft) + drafts + quick + [
        f"--config.steps={demo.sft_steps}", f"--config.optim.decay_steps={max(demo.sft_steps - 10, 1)}",
        f"--config.checkpoint_every={max(demo.sft_steps // 3, 1)}", f"--config.eval_every={max(demo.sft_steps // 3, 1)}"])
    rl = ["--config.rl.max_prompt_tokens=384", f"--config.steps={demo.rl_steps}", f"--config.checkpoint_every={max(demo.rl_steps // 2, 1)}",
          f"--config.optim.learning_rate={demo.rl_learning_rate}",
          f"--config.model.init_workdir={os.path.join(workdir, 'sft')}",
          f"--config.rl.max_new_tokens={demo.rl_budget if not demo.quick else 32}"]
    rl += ["--config.rl.samples_per_prompt=4"] if demo.quick else []
    rl_common = [x for x in common + quick if "num_eval" not in x and "seq_len" not in x and "batch_size" not in x]
    pdr = [f"--config.rl.operator.{k}={v}" for k, v in _pdr_fields(demo).items()]
    return {"sft": sft, "rl_baseline": _config("rl/tiny.py", rl_common + rl),
            "rl_pdr": _config("rl/tiny_pdr.py", rl_common + rl + pdr)}


def training_texts(configs: dict) -> set:
    """Text of every problem a training stage saw (SFT train and held-out loss rows, RL prompts):
    the demo evaluates only on problems outside this set."""
    typed = [TrainConfig.from_config(config) for config in configs.values()]
    draws = {(seed, n, tc.data.difficulty, tc.task): tc.data
             for tc in typed for seed, n in ((tc.seed, tc.data.num_train), (tc.seed + 10_000, tc.data.num_eval))}
    return {p["problem"] for (seed, n, _, family), data in draws.items() for p in synthetic_rows(data, seed, n, family)}


def eval_operators(demo) -> dict:
    """{name: operator entry}: Long-CoT at each budget ("long_cot@B"), the PDR round and V1
    best-of-4 with the pairwise tournament (zero reasoning tokens per judgement); then the
    fixed PDR rounds of `demo.pareto_drafts` ("pdr@M": M drafts), points of the Pareto sweep."""
    demo = resolve(demo)
    pdr = _pdr_fields(demo)
    quoted = {k: pdr[k] for k in ("max_new_tokens", "candidate_max_tokens", "truncation_head")}
    ops = {f"long_cot@{b}": dict(type="long_cot", max_new_tokens=b) for b in demo.long_cot_budgets}
    ops["pdr"] = dict(type="pdr", **pdr)
    ops["best_of_n"] = dict(type="best_of_n", n=4, selector="pairwise_v1", judge=dict(max_new_tokens=0), **quoted)
    for m in demo.pareto_drafts:
        ops[f"pdr@{m}"] = dict(type="pdr", **dict(pdr, schedule=(m, 1)))
    return ops


def adaptive_operators(demo) -> dict:
    """{name: entry} of adaptive PDR (issue 37): "adaptive_pdr" at `demo.adaptive`'s tau, then
    "adaptive_pdr@tau" for each of `demo.pareto_taus`. Each has PDR's draft budget, workspace
    (k, majority ranking, quoting) and refine; `run_demo` runs it with PDR's sampling keys."""
    demo = resolve(demo)
    pdr = _pdr_fields(demo)
    shared = {k: pdr[k] for k in ("k", "max_new_tokens", "candidate_max_tokens", "truncation_head")}
    base = dict(type="adaptive_pdr", signal="majority", **shared, **demo.adaptive)
    ops = {"adaptive_pdr": base}
    ops.update({f"adaptive_pdr@{t:g}": dict(base, tau=t) for t in demo.pareto_taus if t != base["tau"]})
    return ops


def with_pdr_keys(config, entry):
    """`config` with `entry` in the PDR entry's place: evaluated in the same workdir, every
    other operator's rows are already there (skipped), and `entry` gets PDR's per-problem
    sampling keys (the harness keys an operator by its index), so adaptive PDR's draft slot m
    is PDR's draft m: common random numbers for the paired claim."""
    out = ml_collections.ConfigDict(config.to_dict())
    index = [e["type"] for e in config.operators].index("pdr")
    out.operators = [dict(e) for e in config.operators[:index]] + [dict(entry)] + [
        dict(e) for e in config.operators[index + 1:]]
    return out


def eval_config(demo, templates: str = "compact"):
    demo = resolve(demo)
    c = ml_collections.ConfigDict()
    c.task, c.model, c.seed = demo.task, "tiny", demo.seed
    c.k_samples, c.batch_size, c.num_problems = 1, demo.eval_batch, demo.eval_problems
    c.sampling = Sampling(temperature=demo.eval_temperature, top_p=1.0, top_k=0).to_config()
    c.max_problem_tokens = 96
    c.templates = templates  # the prompt set the models were trained on
    c.operators = list(eval_operators(demo).values())
    return c


def _model(workdir: str, config, tokenizer):
    model = TrainConfig.from_config(config).model
    cfg = NAMED_CONFIGS[model.name].replace(**model.overrides)
    step, params = latest_params(workdir)
    return types.SimpleNamespace(cfg=cfg, params=jax.device_put(params), tokenizer=tokenizer, mesh=None), step


def held_out_problems(demo, configs: dict) -> list:
    """The evaluation draw: problems no training stage saw; `demo.validation` takes a second,
    disjoint draw (settings are chosen there)."""
    training = training_texts(configs)
    seed = demo.seed + 1_000_003
    if demo.validation:
        training |= {p["problem"] for p in synthetic.held_out(demo.eval_problems, seed, tuple(demo.difficulty),
                                                              training, family=demo.task)}
        seed += 1
    return synthetic.held_out(demo.eval_problems, seed, tuple(demo.difficulty), training, family=demo.task)


def run_demo(demo, workdir: str, *, progress: bool = True) -> dict:
    """Run (or resume) the whole demo in `workdir`; returns {checkpoint: eval table}."""
    fileio.makedirs(workdir)
    demo = resolve(demo)
    configs = stage_configs(demo, workdir)
    for name in CHECKPOINTS:
        log.info("demo: training %s", name)
        train(configs[name], os.path.join(workdir, name), progress=progress)
    problems = held_out_problems(demo, configs)
    tables, steps = {}, {}
    vocab = synthetic.CharVocab()  # one tokenizer object: each eval operator compiles once for all checkpoints
    for name in CHECKPOINTS:
        model, steps[name] = _model(os.path.join(workdir, name), configs[name], vocab)
        config = eval_config(demo, configs[name].data.templates)
        tables[name] = evaluate(config, os.path.join(workdir, "eval", name), model=model, rows=problems,
                                progress=progress)
        for entry in adaptive_operators(demo).values():  # one more pass each, with PDR's keys
            tables[name] = evaluate(with_pdr_keys(config, entry), os.path.join(workdir, "eval", name), model=model,
                                    rows=problems, progress=progress)
    counts = {d: sum(p["difficulty"] == d for p in problems) for d in sorted({p["difficulty"] for p in problems})}
    claims = demo_claims(workdir, demo)
    write_results(workdir, demo, tables, steps, counts, claims)
    return tables


def _labels(demo) -> dict:
    """{operator name: the label its results rows carry} (`eval_operators`, `adaptive_operators`)."""
    entries = {**eval_operators(demo), **adaptive_operators(demo)}
    return {name: build_spec(dict(entry)).label for name, entry in entries.items()}


def _correct_by_problem(workdir: str, run: str, label: str) -> tuple[dict, float]:
    """{problem_id: correct} of sample 0 and the mean B_seq (generated tokens on the accepted
    path, PDR §3.1) of one operator (its exact label) in one run's eval results."""
    rows = fileio.read_jsonl(os.path.join(workdir, "eval", run, "results.jsonl"))
    rows = [r for r in rows if r["operator"] == label and r["sample"] == 0 and "correct" in r]
    b_seq = sum(row_budgets(r)["b_seq"] for r in rows) / max(len(rows), 1)
    return {r["problem_id"]: bool(r["correct"]) for r in rows}, b_seq


def matched_long_cot(workdir: str, run: str, demo, b_seq: float) -> str:
    """The Long-CoT budget of `run` whose mean B_seq is closest to `b_seq` without exceeding it
    (PDR §4: comparisons at matched sequential budget); the smallest budget when all exceed it."""
    demo = resolve(demo)
    labels = _labels(demo)
    means = {b: _correct_by_problem(workdir, run, labels[f"long_cot@{b}"])[1] for b in demo.long_cot_budgets}
    under = [b for b in demo.long_cot_budgets if means[b] <= b_seq]
    return f"long_cot@{max(under, key=lambda b: means[b]) if under else min(demo.long_cot_budgets)}"


def paired_claim(workdir: str, claim_id: str, checkpoint: str, a: tuple, b: tuple, labels: dict,
                 text: str = "") -> dict:
    """Paired comparison of A = (run, operator) and B on the same problems: the mean difference
    in accuracy, its 95% half-width (1.96 x sample std of per-problem differences / sqrt(n)),
    the discordant counts (only A right, only B right) and a verdict: "holds" if the interval
    lies above 0, "reversed" if below, else "not shown"."""
    (ca, bseq_a), (cb, bseq_b) = (_correct_by_problem(workdir, run, labels[op]) for run, op in (a, b))
    ids = sorted(set(ca) & set(cb))
    d = np.asarray([float(ca[i]) - float(cb[i]) for i in ids])
    diff = float(d.mean()) if len(d) else 0.0
    half = 1.96 * float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
    verdict = "holds" if diff - half > 0 else "reversed" if diff + half < 0 else "not shown"
    return {"id": claim_id, "checkpoint": checkpoint, "a": "/".join(a), "b": "/".join(b), "diff": diff,
            "half_width": half, "only_a": int((d > 0).sum()), "only_b": int((d < 0).sum()), "verdict": verdict,
            "text": text, "n": len(ids), "acc_a": float(np.mean([ca[i] for i in ids])) if ids else 0.0,
            "acc_b": float(np.mean([cb[i] for i in ids])) if ids else 0.0, "b_seq_a": bseq_a, "b_seq_b": bseq_b}


def demo_claims(workdir: str, demo) -> list:
    """The issue's claims, each "A beats B" paired on the same problems (stable ids):
    `rl_vs_sft` (Long-CoT at the RL rollout budget); `pdr_vs_long_cot` and
    `best_of_n_v1_vs_long_cot` at every checkpoint, Long-CoT at the matched B_seq
    (`matched_long_cot`); `pdr_rl_vs_rl` (both under PDR); `adaptive_pdr_vs_pdr` at every
    checkpoint (`adaptive_claim`: its own verdict rule)."""
    labels = _labels(demo)
    rl_budget = min(demo.long_cot_budgets, key=lambda b: (abs(b - demo.rl_budget), b))
    claims = [paired_claim(workdir, "rl_vs_sft", "rl_baseline", ("rl_baseline", f"long_cot@{rl_budget}"),
                           ("sft", f"long_cot@{rl_budget}"), labels, "RL beats SFT (Long-CoT)")]
    for op, claim_id, what in (("pdr", "pdr_vs_long_cot", "PDR"), ("best_of_n", "best_of_n_v1_vs_long_cot",
                                                                  "V1 best-of-4")):
        for run in CHECKPOINTS:
            b_seq = _correct_by_problem(workdir, run, labels[op])[1]
            lc = matched_long_cot(workdir, run, demo, b_seq)
            claims.append(paired_claim(workdir, claim_id, run, (run, op), (run, lc), labels,
                                       f"{what} beats Long-CoT at matched B_seq ({run})"))
    claims.append(paired_claim(workdir, "pdr_rl_vs_rl", "rl_pdr", ("rl_pdr", "pdr"), ("rl_baseline", "pdr"), labels,
                               "PDR-RL beats RL under PDR inference"))
    claims += [adaptive_claim(workdir, run, labels) for run in CHECKPOINTS]
    return claims


ADAPTIVE_MAX_B_TOTAL_RATIO, ADAPTIVE_MIN_CI_LOW = 0.7, -0.03


def _mean_budget(workdir: str, run: str, label: str, budget: str) -> float:
    """Mean `budget` ("b_total", ...) over sample 0 of one operator's rows in one run."""
    rows = fileio.read_jsonl(os.path.join(workdir, "eval", run, "results.jsonl"))
    rows = [row_budgets(r)[budget] for r in rows if r["operator"] == label and r["sample"] == 0 and "correct" in r]
    return float(np.mean(rows)) if rows else float("nan")


def adaptive_claim(workdir: str, run: str, labels: dict) -> dict:
    """`adaptive_pdr_vs_pdr` at checkpoint `run` (issue 37): adaptive PDR against the fixed PDR
    round, paired on the same problems and keys: the accuracy difference with its 95% interval
    (`ci95`), `b_total_ratio` and `b_seq_ratio` (adaptive over fixed, mean tokens), n, and a
    verdict: "holds" when b_total_ratio <= 0.7 and the interval's lower end >= -0.03, else
    "not shown"."""
    c = paired_claim(workdir, "adaptive_pdr_vs_pdr", run, (run, "adaptive_pdr"), (run, "pdr"), labels,
                     f"adaptive PDR spends <= {ADAPTIVE_MAX_B_TOTAL_RATIO} of PDR's B_total at most "
                     f"{-ADAPTIVE_MIN_CI_LOW} below its accuracy ({run})")
    b_total = [_mean_budget(workdir, run, labels[op], "b_total") for op in ("adaptive_pdr", "pdr")]
    low = c["diff"] - c["half_width"]
    c.update(ci95=[low, c["diff"] + c["half_width"]], b_total_a=b_total[0], b_total_b=b_total[1],
             b_total_ratio=b_total[0] / b_total[1] if b_total[1] else float("nan"),
             b_seq_ratio=c["b_seq_a"] / c["b_seq_b"] if c["b_seq_b"] else float("nan"))
    holds = c["b_total_ratio"] <= ADAPTIVE_MAX_B_TOTAL_RATIO and low >= ADAPTIVE_MIN_CI_LOW
    c["verdict"] = "holds" if holds else "not shown"
    return c


def adaptive_table(claims: list) -> str:
    head = ("| checkpoint | n | acc adaptive | acc PDR | diff (95% CI) | B_total adaptive / PDR (ratio) "
            "| B_seq adaptive / PDR (ratio) | verdict |\n|---|---|---|---|---|---|---|---|")
    return "\n".join([head] + [
        f"| {c['checkpoint']} | {c['n']} | {c['acc_a']:.3f} | {c['acc_b']:.3f} | {c['diff']:+.3f} "
        f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}] | {c['b_total_a']:.0f} / {c['b_total_b']:.0f} "
        f"({c['b_total_ratio']:.3f}) | {c['b_seq_a']:.0f} / {c['b_seq_b']:.0f} ({c['b_seq_ratio']:.3f}) | "
        f"{c['verdict']} |" for c in claims if c["id"] == "adaptive_pdr_vs_pdr"])


def claims_table(claims: list) -> str:
    head = ("| id | checkpoint | A | B | n | acc A | acc B | A - B (95% CI) | only A / only B "
            "| B_seq A / B | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|")
    return "\n".join([head] + [
        f"| {c['id']} | {c['checkpoint']} | {c['a']} | {c['b']} | {c['n']} | {c['acc_a']:.3f} | {c['acc_b']:.3f} | "
        f"{c['diff']:+.3f} (+-{c['half_width']:.3f}) | {c['only_a']} / {c['only_b']} | "
        f"{c['b_seq_a']:.0f} / {c['b_seq_b']:.0f} | {c['verdict']} |" for c in claims])


def write_results(workdir, demo, tables, steps, held_out_counts: dict, claims: list) -> None:
    draw = "validation draw" if demo.validation else "held-out draw"
    lines = ["# prd_jax demo results", "",
             f"Task {demo.task}, seed {demo.seed}: {demo.eval_problems} problems not seen in training ({draw}; "
             f"difficulty counts {held_out_counts}), k=1, T={demo.eval_temperature}; per-call budget "
             f"{demo.budget}; Long-CoT budgets {list(demo.long_cot_budgets)}.", ""]
    lines += ["## Claims (A beats B, paired on the same problems, k=1)", "", claims_table(claims), ""]
    lines += ["## Adaptive PDR against PDR (holds: B_total ratio <= 0.7 and the CI's lower end >= -0.03)", "",
              adaptive_table(claims), ""]
    combined, short = [], {label: op for op, label in _labels(demo).items()}  # "long_cot@128", "pdr", ...
    for name, table in tables.items():
        lines += [f"## {name} (step {steps[name]})", "", markdown_table(table), ""]
        combined += [dict(t, operator=f"{name}:{short.get(t['operator'], t['operator'])}") for t in table]
    fileio.write_text(os.path.join(workdir, "results.md"), "\n".join(lines))
    fileio.write_text(os.path.join(workdir, "results.json"), json.dumps(
        {"task": demo.task, "seed": demo.seed, "validation": bool(demo.validation), "pdr": _pdr_fields(demo),
         "adaptive_pdr": adaptive_operators(demo)["adaptive_pdr"],
         "long_cot_budgets": list(demo.long_cot_budgets), "steps": steps,
         "eval_difficulties": {str(d): n for d, n in held_out_counts.items()}, "claims": claims,
         "tables": tables}, indent=1))
    pairs = [(c["a"].replace("/", ":"), c["b"].replace("/", ":")) for c in claims]  # "run/op" -> "run:op"
    pareto_plot(combined, os.path.join(workdir, "pareto.png"), f"demo ({demo.task}): accuracy vs budget per checkpoint",
                pairs=pairs)
    print("\n".join(lines))

