"""The `Task` plug-in and its registry (issue 14 §1). Plain Python: no JAX, no TensorFlow.

A task family declares everything the eval harness, the operators' host callbacks and the
RL loops need to know about a domain:

- `source`: its data, declared once (`tasks.source`: `JsonlFiles` per split, or `SeqioData`, a
  registered seqio task or mixture); `problems` reads it, and eval, SFT and RL ask `problems`;
- `templates`: the prompt template set its prompts use (`prompts.TEMPLATE_SETS`);
- `artifact(row)`: what a code task's grader runs for the row, "function" or "program"
  (`prompts.ARTIFACTS`; None: not code); its `problem_text` ends with `prompts.format_line`
  of that artifact, since the "code" set's instructions point at that line (issue 45 §1);
- `difficulty(row)`: the row's published difficulty label, or None; `summary.md` adds
  per-difficulty rows when the problems have one (`evaluate.difficulty_table`);
- `selection(rows)`: the line eval prints naming how many problems the config selected;
- `sft_target(row)`: the completion SFT trains on (default the row's `solution`, or None);
- `judge_domain` and `judge_templates`: what its judges assess and their template roles;
- `extract(completion)`: the final artifact (boxed answer, last fenced program) or None;
- `grade(row, completion) -> dict` with at least `reward`, `correct`, `parsed`
  (`grade_many` is its batch form; `reward` the float alone);
- `gold_key(row)`: the string carried in-graph as the problem's "answer tokens", from
  which `row_for_key` recovers what the oracle needs (math: the answer itself; code: the
  task id, looked up among the rows registered for the run);
- `oracle(row, completion) -> bool` for `oracle_*` selectors (default: `grade`'s `correct`);
- `answer_key(completion)`: the key majority voting groups on (None: no answer).

A user adds a task with one module: subclass `Task` (or instantiate one with a `source`) and
call `register_task`. docs/extending.md ("A task") has the recipe; tests/jsonl_benchmark_task.py
is a JSONL benchmark in one file.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Hashable, Optional, Sequence

from prd_jax import prompts

__all__ = ["TASKS", "Task", "get_task", "register_task", "task_names"]


@dataclasses.dataclass(frozen=True)
class Task:
    """One task family (see the module docstring). Subclasses override the methods."""

    name: str
    source: Any = None  # tasks.source.JsonlFiles / SeqioData, or None when `problems` is overridden
    templates: str = "default"
    judge_domain: str = "math"
    default_split: str = "test"

    # -- data
    def problems(self, split: Optional[str] = None, limit: Optional[int] = None,
                 data_dir: Optional[str] = None) -> list:
        """Rows of this task's data (dicts of python str/int with at least `id` and `problem`): split
        `split` (None: `default_split`) of its `source`, at most `limit` rows, in source order."""
        if self.source is None:
            raise NotImplementedError(f"task {self.name!r} declares no source; give it source=JsonlFiles(...) or "
                                      "SeqioData(...) (prd_jax.tasks.source), or override problems()")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit={limit!r}; allowed: None or an int >= 0")
        return self.source.rows(self.name, split or self.default_split, limit=limit, data_dir=data_dir)

    def problem_text(self, row: dict) -> str:
        """The text filled into the templates' `{problem}` slot."""
        return str(row["problem"])

    def artifact(self, row: dict) -> Optional[str]:
        """What the grader runs for `row`: "function", "program" (`prompts.ARTIFACTS`) or None (not code)."""
        return None

    def difficulty_label(self, row: dict) -> Optional[str]:
        """The row's published difficulty label (e.g. LiveCodeBench's easy / medium / hard), or None (named
        apart from the synthetic tasks' `difficulty` field, the chain lengths they draw)."""
        return None

    def selection(self, rows: Sequence[dict]) -> str:
        """The line eval prints when it starts: how many problems this task gave the config."""
        return f"{self.name}: {len(rows)} problems"

    def sft_target(self, row: dict) -> Optional[str]:
        """The completion SFT trains on for `row` (`train.setup.task_sft_rows`): its worked
        `solution` field, or None (the row is skipped) when it has none."""
        value = row.get("solution")
        return str(value) if value not in (None, "") else None

    # -- grading
    def extract(self, completion: str) -> Optional[str]:
        raise NotImplementedError(f"task {self.name!r} does not define extract()")

    def grade(self, row: dict, completion: str) -> dict:
        raise NotImplementedError(f"task {self.name!r} does not define grade()")

    def grade_many(self, rows: Sequence[dict], completions: Sequence[str]) -> list:
        """`grade` over pairs, in order (code tasks run them in parallel)."""
        if len(rows) != len(completions):
            raise ValueError(f"grade_many: {len(rows)} rows but {len(completions)} completions")
        return [self.grade(r, c) for r, c in zip(rows, completions)]

    def reward(self, row: dict, completion: str) -> float:
        """The scalar RL reward of `completion` for `row`."""
        return float(self.grade(row, completion)["reward"])

    def oracle(self, row: dict, completion: str) -> bool:
        """Ground truth for `oracle_*` selectors (PDR §4.1, App. D.1): the completion is correct."""
        return bool(self.grade(row, completion)["correct"])

    def oracle_many(self, rows: Sequence[dict], completions: Sequence[str]) -> list:
        return [bool(g["correct"]) for g in self.grade_many(rows, completions)]

    def answer_key(self, completion: str) -> Optional[Hashable]:
        """The majority-vote key of a completion (None: no answer)."""
        raise NotImplementedError(f"task {self.name!r} does not define answer_key()")

    # -- the in-graph gold
    def gold_key(self, row: dict) -> str:
        """The string tokenized as the problem's answer tokens (short: it is cut at 64 tokens)."""
        return str(row["answer"])

    def row_for_key(self, key: str, rows_by_key: dict) -> dict:
        """The row an oracle grades against, from a decoded `gold_key` (default: the row
        registered under it, else a row holding only that answer)."""
        return rows_by_key.get(key) or {"answer": key}

    @property
    def judge_templates(self) -> dict:
        """{"pairwise": role, "pointwise": role}: the template roles of this task's judges in its
        set `templates`: plain "pairwise" / "pointwise" where the set has them (each set speaks
        of its own domain), else the domain-suffixed "pairwise_<judge_domain>" of older sets."""
        roles = prompts.template_set(self.templates)
        return {kind: kind if kind in roles else f"{kind}_{self.judge_domain}" for kind in ("pairwise", "pointwise")}

    def options(self, **fields) -> "Task":
        """A copy with dataclass `fields` replaced (e.g. `reward_mode="all_pass"`); unknown
        fields raise naming the allowed ones."""
        allowed = {f.name for f in dataclasses.fields(self)}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"task {self.name!r}: unknown option(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        return dataclasses.replace(self, **fields)


TASKS: dict = {}
ABSTRACT_METHODS = ("extract", "grade", "answer_key")  # every registered task defines these (register_task checks)


def register_task(task: Task, *, replace: bool = False) -> Task:
    """Add `task` to the registry under `task.name` (a second task of that name raises unless
    `replace`). Returns the task, so a module can write `MY_TASK = register_task(MyTask(...))`."""
    if not isinstance(task, Task):
        raise TypeError(f"register_task expects a Task, got {type(task).__name__}")
    if not task.name or not isinstance(task.name, str):
        raise ValueError(f"Task.name={task.name!r}; must be a non-empty string")
    missing = [m for m in ABSTRACT_METHODS if getattr(type(task), m) is getattr(Task, m)]
    if missing:
        raise ValueError(f"task {task.name!r} ({type(task).__name__}) does not define {missing}; a task subclasses "
                         f"Task and defines {list(ABSTRACT_METHODS)} (docs/extending.md, \"A task\")")
    if task.name in TASKS and not replace and TASKS[task.name] is not task:
        raise ValueError(f"task {task.name!r} is already registered; pass replace=True to override it")
    TASKS[task.name] = task
    return task


def task_names() -> list:
    """Names of the registered tasks, sorted."""
    return sorted(TASKS)


def get_task(name: str) -> Task:
    """The registered task `name`; ValueError naming the allowed names otherwise."""
    if isinstance(name, Task):
        return name
    if name not in TASKS:
        raise ValueError(f"task={name!r}; allowed: {task_names()}")
    return TASKS[name]
