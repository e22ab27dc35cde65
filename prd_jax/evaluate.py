"""Evaluation harness: operators x problems x k samples -> results.jsonl, summary.md, pareto.png,
results.json (`prd_jax.results_json`: scores with intervals, budgets and the run's identity).

Metrics follow the PDR paper (arXiv 2510.01123 §4): mean@k accuracy (mean over problems
of the per-problem mean over k samples), pass@k (share of problems with at least one
correct sample among k), and mean B_seq / B_total per operator: the tokens generated on the
accepted path and over all calls (§3.1, Fig. 9 caption), with the in + out sums
`b_seq_io` / `b_total_io` (context cost) beside them. A rerun reads `results.jsonl` and
skips (problem, operator, sample) rows already written; budgets are recomputed from each
row's per-call records, so rows written under an older definition summarise correctly.

The workdir may be local or a URI (gs://...; `prd_jax.fileio`). On several processes
(`jax.distributed`) the operators run on one global mesh, their outputs are gathered with
`host.to_host`, and process 0 alone reads and writes the workdir's files.

The harness knows the LM only through its declared seam (`operators.lm_protocol.LanguageModel`,
opened by `eval_setup.EvalSetup.open_lm`): what the rows name as the model, the per-batch
row fields and counters, and closing; it holds no branch on the backend (tests/test_import_graph.py).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import time
from typing import Iterable

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from prd_jax import fileio, results_json
from prd_jax.backends import for_eval
from prd_jax.checkpoint import resolve_checkpoint
from prd_jax.config_io import save_config
from prd_jax.eval_config import EvalConfig
from prd_jax.eval_setup import EvalSetup, build_spec, eval_sampling, eval_task, run_settings  # noqa: F401 (re-exported)
from prd_jax.host import is_main, on_main, to_host
from prd_jax.mesh import init_distributed
from prd_jax.operators.budget import JUDGE_CALLS
from prd_jax.plots import pareto_plot
from prd_jax.operators.runner import answer_texts, encode_problems, run_operator
from prd_jax.tasks import require_data
from prd_jax.tracking import open_tracker

log = logging.getLogger(__name__)

def check_settings(ec: EvalConfig, workdir: str, checkpoint: str = "") -> None:
    """Resume only under the settings the workdir's rows were made with (`settings.json`).

    Result rows are keyed by (problem, operator, sample); sampling settings are not in that
    key, so a rerun with, say, another temperature must not reuse them. Raises naming the
    fields that differ (on every process; process 0 reads or writes the file). `checkpoint`
    ("WORKDIR@STEP", resolved) is recorded, so rows of another checkpoint are not reused
    (`eval_setup.run_settings`)."""
    now = run_settings(ec, checkpoint)
    path = os.path.join(workdir, "settings.json")

    def read_or_write():
        if fileio.exists(path):
            return fileio.read_json(path)
        fileio.write_text(path, json.dumps(now, indent=1))
        return None

    before = on_main(read_or_write)
    if before is not None:
        changed = {k: (before.get(k), now.get(k)) for k in set(now) | set(before) if before.get(k) != now.get(k)}
        if changed:
            raise ValueError(f"workdir {workdir} holds results made with other settings "
                             f"{ {k: v[0] for k, v in changed.items()} }; this config has "
                             f"{ {k: v[1] for k, v in changed.items()} }. Use a new workdir (nothing was changed).")


def read_done(path: str) -> set:
    """(problem_id, operator, sample) keys already in results.jsonl (a torn last line is
    ignored). A row whose remote request failed is not done: a rerun tries it again."""
    if not fileio.exists(path):
        return set()
    return {(row["problem_id"], row["operator"], row["sample"]) for row in fileio.read_jsonl(path)
            if not row.get("failed")}


def latest_rows(rows: Iterable[dict]) -> list:
    """One row per (problem, operator, sample): the last written (a retried row replaces its failure)."""
    last = {}
    for row in rows:
        last[(row.get("problem_id"), row.get("operator"), row.get("sample"))] = row
    return list(last.values())


# b_seq_no_judge: B_seq without a selector's rating / judge calls, the other reading (`operators.budget`)
BUDGETS = ("b_seq", "b_total", "b_seq_io", "b_total_io", "b_seq_no_judge")


def row_budgets(row: dict) -> dict:
    """The budgets of a results row (`BUDGETS`), from its per-call records when it has them."""
    calls = row.get("calls")
    if not calls:
        return {k: row[k] for k in BUDGETS if k in row}
    out = [c["out_tokens"] for c in calls]
    both = [c["in_tokens"] + c["out_tokens"] for c in calls]
    acc = [bool(c["accepted"]) for c in calls]
    gen = [c.get("name") not in JUDGE_CALLS for c in calls]
    return {"b_seq": sum(o for o, a in zip(out, acc) if a), "b_total": sum(out),
            "b_seq_io": sum(t for t, a in zip(both, acc) if a), "b_total_io": sum(both),
            "b_seq_no_judge": sum(o for o, a, g in zip(out, acc, gen) if a and g)}


def summarize(rows: Iterable[dict], detail: bool = False) -> list:
    """Per-operator mean@k, pass@k, the four mean budgets, parse failures and skips.

    Operators are compared over the same problems: the scores and budgets are over the
    problems every operator answered (no failed row: a remote request failed), `problems`
    counts them, and `failed` counts each operator's failed rows (`problems_dropped`: the
    problems left out). Remote runs add each operator's billed completion and hidden
    reasoning tokens (`remote`). `detail` adds `detail`: the compared and dropped problem
    ids (sorted), each compared problem's mean and solved flag, and each row's budgets
    (what `results_json` turns into intervals and quantiles)."""
    by_op = collections.defaultdict(lambda: collections.defaultdict(list))
    skipped = collections.Counter()
    failed = collections.defaultdict(list)
    for row in latest_rows(rows):
        if row.get("skipped"):
            skipped[row["operator"]] += 1
            continue
        if row.get("failed"):
            failed[row["operator"]].append(row)
            continue
        by_op[row["operator"]][row["problem_id"]].append(row)
    table = []
    ops = list(by_op) + [o for o in failed if o not in by_op]
    answered = [set(by_op.get(op, {})) - {r["problem_id"] for r in failed[op]} for op in ops]
    common = set.intersection(*answered) if answered else set()
    every = set().union(*(set(by_op.get(op, {})) | {r["problem_id"] for r in failed[op]} for op in ops))
    for op in ops:
        problems = {pid: rs for pid, rs in by_op.get(op, {}).items() if pid in common}
        per_problem = [np.mean([r["correct"] for r in rs]) for rs in problems.values()]
        all_rows = [r for rs in problems.values() for r in rs]
        k = max([len(rs) for rs in problems.values()] or [0])
        budgets = [row_budgets(r) for r in all_rows]
        mean = lambda xs: float(np.mean(xs)) if len(xs) else float("nan")  # an operator whose rows all failed
        table.append({
            "operator": op, "problems": len(problems), "k": k,
            "mean_at_k": mean(per_problem),
            # 95% half-width over problems: 1.96 x sample std of the per-problem means / sqrt(n)
            "ci95": 1.96 * float(np.std(per_problem, ddof=1) / np.sqrt(len(per_problem)))
            if len(per_problem) > 1 else float("nan"),
            "pass_at_k": mean([any(r["correct"] for r in rs) for rs in problems.values()]),
            **{b: mean([r[b] for r in budgets if b in r]) for b in BUDGETS},
            "parse_failures": int(sum(not r["parsed"] for r in all_rows)),
            "truncations": int(sum(r.get("truncations", 0) for r in all_rows)),
            "judge_unparsed": int(sum(r.get("judge_unparsed", 0) for r in all_rows)),
            "skipped": skipped[op],
            "failed": len(failed[op]), "problems_dropped": len(every - common),
        })
        if any("remote" in r for r in all_rows + failed[op]):
            mine = [r for rs in by_op.get(op, {}).values() for r in rs] + failed[op]
            counts = for_eval.operator_counts(mine)
            for k in ("completion_tokens", "reasoning_tokens"):  # every request billed, rating reads included
                counts[k] = int(sum((r.get("remote") or {}).get(k, 0) for r in mine))
            table[-1]["remote"] = counts
        if detail:
            ids = sorted(problems, key=str)
            table[-1]["detail"] = {
                "compared": ids, "dropped": sorted(every - common, key=str), "rows": len(all_rows),
                "per_problem": [float(np.mean([r["correct"] for r in problems[p]])) for p in ids],
                "solved": [any(r["correct"] for r in problems[p]) for p in ids],
                "budgets": {b: [r[b] for r in budgets if b in r] for b in BUDGETS}}
    return table


def markdown_table(table: list) -> str:
    """Summary table; B_seq / B_total count generated tokens, the io columns in + out tokens."""
    head = ("| operator | problems | k | mean@k | pass@k | mean B_seq | mean B_total | B_seq io | B_total io "
            "| no answer | truncations | judge unparsed | skipped |")
    lines = [head, "|" + "---|" * 13]
    remote = [t for t in table if "remote" in t]
    dropped = max([t.get("problems_dropped", 0) for t in table] or [0])
    if dropped:
        lines[:0] = [f"mean@k, pass@k and budgets are over the {table[0]['problems']} problems every operator "
                     f"answered; {dropped} problems with a failed row are left out (failed rows per operator "
                     "beside mean@k).", ""]
    for t in table:
        failed = f" ({t['failed']} failed)" if t.get("failed") else ""
        lines.append(f"| {t['operator']} | {t['problems']} | {t['k']} | {t['mean_at_k']:.3f}{failed} | "
                     f"{t['pass_at_k']:.3f} | {t['b_seq']:.0f} | {t['b_total']:.0f} | {t['b_seq_io']:.0f} | "
                     f"{t['b_total_io']:.0f} | {t['parse_failures']} | {t['truncations']} | "
                     f"{t['judge_unparsed']} | {t['skipped']} |")
    if remote:  # bad answers of a remote backend (`backends.for_eval.SUMMARY_COUNTS`)
        names = for_eval.SUMMARY_COUNTS
        lines += ["", "| operator | " + " | ".join(f"requests {n}" for n in names) + " |",
                  "|---|" + "---|" * len(names)]
        lines += [f"| {t['operator']} | " + " | ".join(str(t["remote"][n]) for n in names) + " |" for t in remote]
        lines += ["", "| operator | completion tokens billed | hidden reasoning tokens | hidden reasoning share |",
                  "|---|---|---|---|"]
        for t in remote:
            done, hidden = t["remote"]["completion_tokens"], t["remote"]["reasoning_tokens"]
            share = f"{hidden / done:.3f}" if done else "n/a"
            lines.append(f"| {t['operator']} | {done} | {hidden} | {share} |")
    return "\n".join(lines)


DIFFICULTY_ORDER = ("easy", "medium", "hard")  # LiveCodeBench's labels, in this order; others follow sorted


def difficulty_table(results: Iterable[dict], difficulty_of: dict) -> list:
    """`summarize` over each difficulty's problems (V1 arXiv 2603.04304 §4 reports hard
    LiveCodeBench-v6 problems apart): results rows joined by `problem_id` with `difficulty_of`
    (problem id -> the published label, `Task.difficulty_label`; rows of unlabelled problems are left
    out). Each entry is a `summarize` row with `difficulty` added; easy, medium, hard first."""
    groups = collections.defaultdict(list)
    for r in results:
        label = difficulty_of.get(r.get("problem_id"))
        if label is not None:
            groups[label].append(r)
    rank = lambda d: (DIFFICULTY_ORDER.index(d) if d in DIFFICULTY_ORDER else len(DIFFICULTY_ORDER), d)
    return [dict(t, difficulty=d) for d in sorted(groups, key=rank) for t in summarize(groups[d])]


def difficulty_markdown(table: list) -> str:
    """The per-difficulty rows of `summary.md` (`difficulty_table`)."""
    lines = ["| difficulty | operator | problems | k | mean@k | pass@k | mean B_seq | mean B_total |",
             "|" + "---|" * 8]
    lines += [f"| {t['difficulty']} | {t['operator']} | {t['problems']} | {t['k']} | {t['mean_at_k']:.3f} | "
              f"{t['pass_at_k']:.3f} | {t['b_seq']:.0f} | {t['b_total']:.0f} |" for t in table]
    return "\n".join(lines)


def _calls_rows(calls, i: int) -> list:
    """The problem's calls; unused tournament slots (no tokens) are left out. A judge call also
    has `candidates` (the indices it rated: one pointwise, [A, B] pairwise) and their
    `ratings` (1..10; `operators.budget`, docs/analysis.md)."""
    out = []
    for name, a, b, c, rated, ratings in zip(calls.names, np.asarray(calls.in_tokens[i]),
                                             np.asarray(calls.out_tokens[i]), np.asarray(calls.accepted[i]),
                                             np.asarray(calls.candidates[i]), np.asarray(calls.ratings[i])):
        if not (a or b):
            continue
        row = {"name": name, "in_tokens": int(a), "out_tokens": int(b), "accepted": bool(c)}
        slots = [s for s in range(len(rated)) if rated[s] >= 0]
        if slots:
            row["candidates"] = [int(rated[s]) for s in slots]
            row["ratings"] = [None if np.isnan(ratings[s]) else
                              int(ratings[s]) if float(ratings[s]).is_integer() else float(ratings[s]) for s in slots]
        out.append(row)
    return out


def _k_max(spec) -> int:
    """Candidate headers a spec's prompts need, as the spec declares (`OperatorSpec.k_max`)."""
    return spec.k_max


def evaluate(config, workdir: str, *, model=None, rows=None, progress: bool = True) -> list:
    """Run `config.operators` on `config.task`'s problems (or the given `rows`); write results,
    summary and plot to `workdir`. `model` is anything with cfg, params, tokenizer, mesh.
    `config` is checked once here (`EvalConfig`); its typed parts go down."""
    setup = EvalSetup.from_config(config)  # task (data, grading, oracle, majority key), prompt set: checked first
    task, ec = setup.task, setup.config
    run_id, started = results_json.new_run_id(), results_json.utc_now()  # this invocation's rows carry run_id
    if rows is None:  # a built-in benchmark not yet fetched: one line naming `prd-jax data get`
        require_data(task, ec.split or None, ec.data_dir or None)
    if model is None:  # `prd-jax eval`: join the other processes, if any (PRD_COORDINATOR, SLURM, TPU pod)
        init_distributed()
    main = is_main()
    ckpt = resolve_checkpoint(ec.checkpoint) if ec.checkpoint and model is None else None  # (workdir, step)
    if main:
        fileio.makedirs(workdir)
    checkpoint = "@".join(map(str, ckpt)) if ckpt else ""  # WORKDIR@STEP
    # The LM config.backend names. It refuses what it cannot honour (`LanguageModel.check`)
    # before settings.json is written, so a corrected config resumes in the same workdir.
    setup = setup.open_lm(workdir, model=model, checkpoint=ckpt, progress=progress and main)
    lm, tok = setup.lm, setup.tokenizer
    served = lm.served(checkpoint or ec.model)  # what summary, plot and rows name
    check_settings(ec, workdir, checkpoint)
    save_config(config, workdir)
    specs = setup.specs()
    if rows is None:  # the task is the one way data enters (issue 35 §1)
        rows = task.problems(ec.split or None, limit=ec.num_problems, data_dir=ec.data_dir or None)
        if main:  # e.g. "livecodebench_v6: 175 problems (2025-02-01..2025-05-01 of release_v6)"
            print(task.selection(rows))
    results_path = os.path.join(workdir, "results.jsonl")
    done = {tuple(key) for key in on_main(lambda: sorted(read_done(results_path)))}
    batch = ec.batch_size
    bar = Progress(len(specs) * ec.k_samples * len(rows), progress and main)
    chunks = []  # tokenized once, shared by every operator
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]
        chunks.append((start, chunk, *encode_problems(
            tok, [task.problem_text(r) for r in chunk], [task.gold_key(r) for r in chunk],
            ec.max_problem_tokens, width=ec.max_problem_tokens)))
    with (fileio.open(results_path, "a") if main else open(os.devnull, "w")) as out:  # written by process 0
        for op_index, spec in enumerate(specs):
            ctx = setup.context(spec)
            ctx.grader.add_rows(rows)  # the oracle looks rows up by gold key (code: the task id)
            for start, chunk, probs, kept, skipped in chunks:
                for sample in range(ec.k_samples):
                    todo = [j for j in range(len(chunk)) if (chunk[j]["id"], spec.label, sample) not in done]
                    if not todo:
                        bar.update(len(chunk))
                        continue
                    for j, reason in skipped.items():
                        if j not in todo:
                            continue
                        out.write(json.dumps({"problem_id": chunk[j]["id"], "operator": spec.label,
                                              "sample": sample, "skipped": reason, "run_id": run_id,
                                              "model": served}) + "\n")
                    if kept:
                        # One key per (operator, problem, sample): results do not depend on batching.
                        op_key = jax.random.fold_in(jax.random.key(ec.seed), op_index)
                        keys = [jax.random.fold_in(jax.random.fold_in(op_key, start + j), sample) for j in kept]
                        keys = jnp.stack(keys + [keys[0]] * (batch - len(kept)))
                        lm.begin(batch)
                        res = to_host(run_operator(lm, _pad_batch(probs, batch), keys, spec, ctx))
                        stats = lm.stats()  # the LM's per-row fields (a remote LM's requests) and counters
                        graded = [(i, j) for i, j in enumerate(kept) if j in todo]
                        texts = [tok.decode(np.asarray(res.final_tokens[i, :int(res.final_lengths[i])]).tolist())
                                 for i, _ in graded]
                        at = [i for i, _ in graded]  # graded on the answer after any thinking block
                        answers = answer_texts(tok, np.asarray(res.final_tokens)[at], np.asarray(res.final_lengths)[at])
                        # one batch per chunk: code programs run in parallel (tasks.Task.grade_many)
                        grades = task.grade_many([chunk[j] for _, j in graded], answers)
                        for (i, j), text, g in zip(graded, texts, grades):
                            extra = {k: g[k] for k in ("reward", "passed", "total", "status") if k in g}
                            out.write(json.dumps({
                                "problem_id": chunk[j]["id"], "operator": spec.label, "sample": sample,
                                "task": task.name, "answer": g.get("answer"), "correct": bool(g["correct"]),
                                "parsed": bool(g["parsed"]), **extra,
                                **{b: int(getattr(res.calls, b)[i]) for b in BUDGETS},
                                "truncations": int(res.truncations[i]),
                                "judge_unparsed": int(res.judge_unparsed[i]),
                                "calls": _calls_rows(res.calls, i), "completion": text, "model": served,
                                "run_id": run_id,
                                **stats.rows.get(i, {})}) + "\n")
                    out.flush()
                    bar.update(len(chunk), tokens=int(np.sum(np.asarray(res.calls.b_total)[at])) if kept else 0,
                               **(stats.counts if kept else {}))
    bar.close()
    lm.close()
    table = on_main(lambda: summarize(fileio.read_jsonl(results_path)))
    if main:
        md = markdown_table(table)
        levels = {r["id"]: task.difficulty_label(r) for r in rows}
        by_level = difficulty_table(fileio.read_jsonl(results_path), {k: v for k, v in levels.items() if v})
        if by_level:  # per-difficulty rows (LiveCodeBench's easy / medium / hard)
            md += "\n\n" + difficulty_markdown(by_level)
        via = f" via {lm.via()}" if lm.via() else ""
        fileio.write_text(os.path.join(workdir, "summary.md"), f"# {task.name}: {served}{via}\n\n{md}\n")
        print(md)
        pareto_plot(table, os.path.join(workdir, "pareto.png"), f"{task.name} ({served})")
        track_summary(ec, config, workdir, table, md, ckpt[1] if ckpt else 0)
        written = fileio.read_jsonl(results_path)  # results.json: scores with intervals, budgets, identity
        results_json.write(workdir, results_json.build(
            summarize(written, detail=True), written, task=task.name, model=served, checkpoint=checkpoint,
            config=config, run_id=run_id, started=started, finished=results_json.utc_now(),
            previous=results_json.read_previous(workdir)))
    return table


class Progress:
    """The eval bar: problems done (operators x samples x problems), generated tokens per second
    (over every call), the running sums of the counters the LM reports per batch
    (`BatchStats.counts`: a remote LM's requests sent), and (tqdm's) the time left."""

    def __init__(self, total: int, enabled: bool):
        self.bar = tqdm(total=total, desc="eval", unit="problem", disable=not enabled, dynamic_ncols=True)
        self.tokens, self.counts, self.t0 = 0, collections.Counter(), time.perf_counter()

    def update(self, problems: int, tokens: int = 0, **counts: int) -> None:
        self.tokens += tokens
        self.counts.update({k: int(v) for k, v in counts.items()})
        post = {"tok/s": f"{self.tokens / max(time.perf_counter() - self.t0, 1e-9):.0f}", **self.counts}
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(problems)

    def close(self) -> None:
        self.bar.close()


# per-operator numbers sent to `config.loggers` as eval/<operator>/<name>
TRACKED = ("mean_at_k", "ci95", "pass_at_k", *BUDGETS, "problems", "k", "parse_failures", "failed")


def track_summary(ec: EvalConfig, config, workdir: str, table: list, md: str, step: int = 0) -> None:
    """Send the summary to `config.loggers` (`prd_jax.tracking`), at `step` (a checkpoint's step,
    else 0): the resolved config, eval/<operator>/<TRACKED name> scalars, the summary rows as
    a table and as markdown (`eval/summary`, `eval/summary_md`) and `pareto.png` (`eval/pareto`)."""
    if not ec.loggers:
        return
    tracker = open_tracker(ec.loggers, workdir, ec.wandb)
    try:
        tracker.config(config.to_dict() if hasattr(config, "to_dict") else dict(config))
        tracker.scalars(step, {f"eval/{t['operator']}/{k}": t[k] for t in table for k in TRACKED})
        tracker.table("eval/summary", [{k: v for k, v in t.items() if k != "detail"} for t in table], step)
        tracker.text(step, "eval/summary_md", md)
        tracker.image("eval/pareto", os.path.join(workdir, "pareto.png"), step)
    finally:
        tracker.close()


def _pad_batch(problems, batch: int):
    """Pad a Problems batch to `batch` rows (the padding rows are ignored), so shapes repeat."""
    n = problems.tokens.shape[0]
    if n == batch:
        return problems
    pad = lambda x: jnp.concatenate([x, jnp.repeat(x[:1], batch - n, axis=0)], axis=0)
    return jax.tree.map(pad, problems)
