"""Task plug-ins (issue 14 §1, issue 35 §1): one module per family, looked up by name; the one
way data enters eval, SFT and RL.

    from prd_jax.tasks import get_task
    task = get_task("humaneval")          # or gsm8k, math500, aime2024, aime2025, hmmt_feb2025,
                                          # livecodebench(_v5, _v6), codecontests, modchain, modinverse
    rows = task.problems(limit=4)
    task.grade(rows[0], completion)       # {"reward", "correct", "parsed", ...}

`base` holds `Task` and the registry; `source` the data declarations (`JsonlFiles`,
`SeqioData`); `math`, `humaneval`, `synthetic`, `livecodebench`, `codecontests` and `hmmt`
register the builtin tasks on import (`contest` is the code-contest tasks' shared grading);
`grading` holds the operators' host callbacks (`TaskGrader`, `TaskGrouper`); `rows` reads
publishers' files; `require_data` fails fast, naming `prd-jax data get`, when a benchmark's
data is missing. No JAX or TensorFlow is imported.
"""

import glob
import os
from typing import Optional

from prd_jax.data import catalog, paths
from prd_jax.tasks.base import TASKS, Task, get_task, register_task, task_names
from prd_jax.tasks.source import JsonlFiles, SeqioData
from prd_jax.tasks import humaneval, math, synthetic  # noqa: F401  (register the builtin tasks)
from prd_jax.tasks import codecontests, hmmt, livecodebench  # noqa: F401,E402  (contest and HMMT tasks)

# Config fields that named data beside the task, and what replaced them (issue 35 §1).
REMOVED_FIELDS = {
    "dataset": "config.task (the task declares its data; config.split picks the split)",
    "data.source": "config.task (problems for RL, traces for a synthetic SFT task); SFT chat traces: "
                   "config.data.path; seqio data: config.data.mixture",
    "data.family": "config.task (a synthetic family: modchain, modinverse, preimage)",
}


def _has(config, dotted: str) -> bool:
    node = config
    for part in dotted.split("."):
        if not hasattr(node, "get") or part not in node:
            return False
        node = node[part]
    return True


def check_removed_fields(config) -> None:
    """Raise ValueError naming each removed data field a config still sets, and its replacement."""
    used = [f for f in REMOVED_FIELDS if _has(config, f)]
    if used:
        raise ValueError("; ".join(f"config.{f} was removed: use {REMOVED_FIELDS[f]}" for f in used)
                         + f". Tasks: {task_names()}")


def require_data(task, split: Optional[str] = None, data_dir: Optional[str] = None) -> None:
    """Fail fast, before any model loads, when `task` is a built-in benchmark's task whose `split`
    (None: its default) is not under the data dir (`data.paths`): FileNotFoundError, one line naming
    the `prd-jax data get` command. Tasks that are not built-in benchmarks (synthetic, plug-ins, a
    seqio mixture in place of the source) and splits the benchmark lacks pass (the task's own reader
    names those)."""
    task = get_task(task)
    bench = catalog.for_task(task.name)
    if bench is None or (task.source is not None and not isinstance(task.source, JsonlFiles)):
        return
    split = split or task.default_split
    if isinstance(task.source, JsonlFiles):
        files = dict(task.source.splits)
        if split not in files:
            return
        globs = (files[split],)
    else:
        if split not in bench.split_names and len(bench.splits) != 1:
            return
        globs = (bench.split(split) if split in bench.split_names else bench.splits[0]).globs
    root, source = paths.resolve_data_dir(data_dir)
    if any(os.path.isfile(f) for g in globs for f in glob.glob(os.path.join(root, *g.split("/")))):
        return
    fetched_by_default = [s.name for s in bench.fetch_splits()]
    extra = f" --split {split}" if split in bench.split_names and split not in fetched_by_default else ""
    raise FileNotFoundError(
        f"task {task.name!r} split {split!r}: its data is missing (no {' or '.join(globs)} under the data dir {root}, "
        f"from {source}); run `prd-jax data get {bench.name}{extra}`"
        + ("" if data_dir else f" (or set {paths.DATA_DIR_ENV} to a data dir that has it)"))


def task_for_config(config) -> Task:
    """The task `config.task` names (required: the task is the one way data enters). Raises
    ValueError naming `config.task` and the allowed tasks when unset or unknown, and naming the
    new field when the config still uses a removed one (`REMOVED_FIELDS`)."""
    check_removed_fields(config)
    name = config.get("task") if hasattr(config, "get") else None
    if not name:
        raise ValueError(f"config.task is unset; set it to one of {task_names()} (or register a task: "
                         "docs/extending.md, \"A task\")")
    return get_task(name)


__all__ = ["TASKS", "JsonlFiles", "REMOVED_FIELDS", "SeqioData", "Task", "check_removed_fields", "get_task",
           "register_task", "require_data", "task_for_config", "task_names"]
