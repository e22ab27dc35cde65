"""Code task: HumanEval (V1 arXiv 2603.04304 §4-5 evaluates and trains on code).

Artifact: the last fenced python program of the completion (```` ```python ````, ```` ```py ````
or a bare fence; an unclosed final fence counts, the model may have hit its budget); with no
fence, the whole completion when it parses as python and defines the entry point. The
artifact is a function (`artifact`): the problem text is the prompt followed by the Format
line naming the entry point (`prompts.format_line`, issue 45 §1). The
program run is the problem's prompt followed by that code, so both a full function (it
redefines the prompt's stub) and a body-only continuation work, and the prompt's imports and
helpers are in scope.

Grading: `rewards.code.evaluate_many` (sandboxed, at most `workers` programs at once, each
with `timeout_s` and `memory_mb`) against the row's `test` (`check(candidate)`; each of its
assert statements is one test). Record: reward, correct (all tests passed), parsed (a program
was found), passed, total, status (the sandbox status; "error" when no program was found),
detail. `reward_mode`: "fraction" (passed / total, the default) or "all_pass" (1.0 only when
all pass). Oracle: all tests pass. Majority key: the ast-normalised program (docstrings,
comments and formatting dropped). In-graph gold: the task id; `TaskGrader` looks up the row.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional, Sequence

from prd_jax.prompts import format_line
from prd_jax.rewards.code import count_tests, evaluate_many, parse_source
from prd_jax.tasks.base import Task, register_task
from prd_jax.tasks.source import JsonlFiles

__all__ = ["CodeTask", "HUMANEVAL", "HUMANEVAL_FIELDS", "REWARD_MODES", "extract_program", "normalize_program"]

REWARD_MODES = ("fraction", "all_pass")
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[ \t]*\r?\n(.*?)(?:```|\Z)", re.DOTALL)
_PY_LANGS = ("", "python", "py", "python3")


def _defines(tree: ast.Module, name: str) -> bool:
    return any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name for s in tree.body)


def extract_program(completion: str, entry_point: Optional[str] = None) -> Optional[str]:
    """The last fenced python block of `completion` (see the module docstring), or None."""
    if not isinstance(completion, str) or not completion.strip():
        return None
    blocks = [m.group(2) for m in _FENCE_RE.finditer(completion) if m.group(1).lower() in _PY_LANGS]
    blocks = [b for b in blocks if b.strip()]
    if blocks:
        return blocks[-1]
    if "```" in completion or entry_point is None:
        return None
    try:
        tree = parse_source(completion)
    except (SyntaxError, ValueError):
        return None
    return completion if _defines(tree, entry_point) else None


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def normalize_program(source: str) -> str:
    """Canonical text of a program: `ast.unparse` without docstrings (whitespace-collapsed
    source when it does not parse)."""
    try:
        return ast.unparse(_strip_docstrings(parse_source(source)))
    except (SyntaxError, ValueError, RecursionError):
        return " ".join(source.split())


@dataclasses.dataclass(frozen=True)
class CodeTask(Task):
    """A code benchmark whose rows carry `task_id`, `prompt`, `test`, `entry_point`."""

    reward_mode: str = "fraction"
    timeout_s: float = 10.0  # wall clock of one sandboxed test run (start-up excluded)
    memory_mb: int = 1024  # address-space limit of the program
    workers: int = 0  # programs evaluated at once (0: min(batch, CPUs, 16))

    def __post_init__(self):
        if self.reward_mode not in REWARD_MODES:
            raise ValueError(f"{self.name}: reward_mode={self.reward_mode!r}; allowed: {REWARD_MODES}")
        if self.timeout_s <= 0 or self.memory_mb <= 0 or self.workers < 0:
            raise ValueError(f"{self.name}: timeout_s={self.timeout_s} and memory_mb={self.memory_mb} must be > 0, "
                             f"workers={self.workers} >= 0")

    def artifact(self, row: dict) -> str:
        return "function"  # the sandbox runs the prompt's stub redefined by the code, then check(entry_point)

    def problem_text(self, row: dict) -> str:
        """The row's prompt (the stub with its docstring), then the Format line naming the function."""
        return str(row["prompt"]).rstrip("\n") + "\n\n" + format_line("function", entry_point=str(row["entry_point"]))

    def extract(self, completion: str, entry_point: Optional[str] = None) -> Optional[str]:
        return extract_program(completion, entry_point)

    def program(self, row: dict, completion: str) -> Optional[str]:
        """The program the sandbox runs: the row's prompt, then the extracted code (None: no code)."""
        code = self.extract(completion, row.get("entry_point"))
        if code is None:
            return None
        if _full(code, row):  # a whole function: it redefines the prompt's stub
            return row["prompt"].rstrip("\n") + "\n\n\n" + code
        return row["prompt"] + code  # a body continuing the prompt's signature and docstring

    def grade(self, row: dict, completion: str) -> dict:
        return self.grade_many([row], [completion])[0]

    def grade_many(self, rows: Sequence[dict], completions: Sequence[str]) -> list:
        if len(rows) != len(completions):
            raise ValueError(f"grade_many: {len(rows)} rows but {len(completions)} completions")
        programs = [self.program(r, c) for r, c in zip(rows, completions)]
        todo = [i for i, p in enumerate(programs) if p is not None]
        results = evaluate_many([{"program": programs[i], "tests": rows[i]["test"],
                                  "entry_point": rows[i]["entry_point"]} for i in todo],
                                workers=self.workers or None, kind="assert", timeout_s=self.timeout_s,
                                memory_mb=self.memory_mb)
        by_index = dict(zip(todo, results))
        out = []
        for i, row in enumerate(rows):
            res = by_index.get(i)
            if res is None:
                total = count_tests(row["test"], entry_point=row["entry_point"])
                passed, status, detail = 0, "error", "no python program found in the completion"
            else:
                passed, total, status, detail = res.passed, res.total, res.status, res.detail
            correct = total > 0 and passed == total
            frac = passed / total if total else 0.0
            out.append({"reward": float(frac if self.reward_mode == "fraction" else correct),
                        "correct": bool(correct), "parsed": res is not None, "passed": int(passed),
                        "total": int(total), "status": status, "detail": detail, "answer": programs[i]})
        return out

    def answer_key(self, completion: str) -> Optional[str]:
        code = self.extract(completion)
        return None if code is None else normalize_program(code)

    def gold_key(self, row: dict) -> str:
        return str(row["task_id"])

    def row_for_key(self, key: str, rows_by_key: dict) -> dict:
        if key not in rows_by_key:
            raise KeyError(f"task {self.name!r}: no row registered for gold key {key!r} "
                           f"(TaskGrader.add_rows must be given this batch's rows)")
        return rows_by_key[key]


def _full(code: str, row: dict) -> bool:
    """Whether `code` defines the entry point itself (else it is a body continuing the prompt)."""
    try:
        return _defines(parse_source(code), row["entry_point"])
    except (SyntaxError, ValueError, RecursionError):
        return "def " + row["entry_point"] in code


# Data: code/humaneval.jsonl under the data dir, its five fields kept verbatim, plus id = answer =
# task_id and problem = prompt, so code rows fit the problem layout too.
HUMANEVAL_FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
HUMANEVAL = register_task(CodeTask(
    "humaneval", templates="code", judge_domain="code",
    source=JsonlFiles({"test": "code/humaneval.jsonl"}, fields=HUMANEVAL_FIELDS, id_key="task_id",
                      derived={"id": "task_id", "problem": "prompt", "answer": "task_id"})))
