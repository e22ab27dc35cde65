"""Shared grading of competitive-programming tasks (LiveCodeBench, CodeContests; V1 arXiv
2603.04304 §4-5 evaluates and trains on them).

A subclass says how a row becomes test cases (`cases`: the sandbox kind, the cases, the entry
point and the row's own time and memory limits), which artifact that is (`artifact`: "program"
for stdin cases, "function" for functional ones) and how its problem reads (`problem_text`,
ending with `prompts.format_line` of that artifact: the "code" templates point at it).
This module does the rest, the same way for every such task:

- Artifact: the last fenced python block of the completion (an unclosed final fence counts);
  with no fence at all, the whole completion when it parses as python and holds more than a
  bare name or constant (so prose never runs).
- Program: `PREAMBLE` (the standard-library imports contest solutions take for granted, as
  LiveCodeBench's runner prepends them) followed by the extracted code.
- Sandbox: `rewards.code.evaluate_many`, kind "stdin" or "functional": all cases of a problem
  in one sandboxed process, each case under the problem's time limit, at most `workers`
  problems at once. Statuses: ok, wrong_answer, timeout, runtime_error, compile_error, memory,
  output_limit ("error": no program in the completion, or a sandbox failure).
- `reward_mode`: "all_pass" (default; 1.0 only when every case passes, the papers' Pass@1; a
  problem stops at its first failed case) or "fraction" (passed / total, every case run, for
  RL). The oracle is all cases passing. Majority key: the ast-normalised program.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Optional, Sequence

from prd_jax.rewards.code import evaluate_many, parse_source
from prd_jax.tasks.base import Task
from prd_jax.tasks.humaneval import extract_program, normalize_program

__all__ = ["ContestTask", "PREAMBLE", "REWARD_MODES"]

REWARD_MODES = ("all_pass", "fraction")

# Imports made available to every program (contest code often uses List, deque, heappush, ...
# without importing them; LiveCodeBench's runner prepends a similar block).
PREAMBLE = (
    "import sys, os, io, re, math, string, bisect, heapq, itertools, functools, collections, operator, "
    "random, statistics, copy, json, datetime, fractions, decimal\n"
    "from typing import *\n"
    "from collections import *\n"
    "from itertools import *\n"
    "from functools import *\n"
    "from heapq import *\n"
    "from bisect import *\n"
    "from math import *\n"
    "from builtins import *\n"  # the builtins win over math's names (pow(a, b, m) stays three-argument)
    "sys.setrecursionlimit(1 << 16)\n"
)


@dataclasses.dataclass(frozen=True)
class ContestTask(Task):
    """A contest benchmark graded by running the program on the row's test cases."""

    templates: str = "code"
    judge_domain: str = "code"
    reward_mode: str = "all_pass"
    timeout_s: float = 6.0  # per test case, when the row gives no time limit
    memory_mb: int = 1024  # address-space limit, when the row gives no memory limit
    workers: int = 0  # problems evaluated at once (0: min(batch, CPUs, 16))
    max_output_bytes: int = 1 << 24  # stdout + stderr of one case

    def __post_init__(self):
        if self.reward_mode not in REWARD_MODES:
            raise ValueError(f"{self.name}: reward_mode={self.reward_mode!r}; allowed: {REWARD_MODES}")
        if not self.timeout_s > 0 or not self.memory_mb > 0 or self.workers < 0 or not self.max_output_bytes > 0:
            raise ValueError(f"{self.name}: timeout_s={self.timeout_s}, memory_mb={self.memory_mb} and "
                             f"max_output_bytes={self.max_output_bytes} must be > 0, workers={self.workers} >= 0")

    # -- per task
    def artifact(self, row: dict) -> str:
        """What the grader runs: "program" (stdin cases; the default) or "function" (functional cases)."""
        return "program"

    def cases(self, row: dict) -> dict:
        """{"kind": "stdin" | "functional", "tests": [...], "entry_point": str | None,
        "timeout_s": float, "memory_mb": int} for `row` (as the public file holds it)."""
        raise NotImplementedError(f"task {self.name!r} does not define cases()")

    def sandbox_options(self) -> dict:
        """Extra `rewards.code.evaluate` options of this task (e.g. the output comparison)."""
        return {}

    # -- grading
    def extract(self, completion: str) -> Optional[str]:
        code = extract_program(completion)
        if code is not None or not isinstance(completion, str) or "```" in completion:
            return code
        try:
            tree = parse_source(completion)
        except (SyntaxError, ValueError, RecursionError):
            return None
        does_something = any(not isinstance(s, ast.Expr) or isinstance(s.value, ast.Call) for s in tree.body)
        return completion if does_something else None

    def program(self, completion: str) -> Optional[str]:
        """The program the sandbox runs (None: no fenced code block in the completion)."""
        code = self.extract(completion)
        return None if code is None else PREAMBLE + "\n" + code

    def grade(self, row: dict, completion: str) -> dict:
        return self.grade_many([row], [completion])[0]

    def grade_many(self, rows: Sequence[dict], completions: Sequence[str]) -> list:
        if len(rows) != len(completions):
            raise ValueError(f"grade_many: {len(rows)} rows but {len(completions)} completions")
        specs = [self.cases(r) for r in rows]
        programs = [self.program(c) for c in completions]
        todo = [i for i, p in enumerate(programs) if p is not None and specs[i]["tests"]]
        results = evaluate_many(
            [dict(program=programs[i], tests=specs[i]["tests"], kind=specs[i]["kind"],
                  entry_point=specs[i].get("entry_point"), timeout_s=specs[i]["timeout_s"],
                  memory_mb=specs[i]["memory_mb"]) for i in todo],
            workers=self.workers or None, stop_on_failure=self.reward_mode != "fraction",
            max_output_bytes=self.max_output_bytes, **self.sandbox_options())
        by_index = dict(zip(todo, results))
        out = []
        for i, spec in enumerate(specs):
            res = by_index.get(i)
            total = len(spec["tests"])
            if res is not None:
                passed, status, detail = res.passed, res.status, res.detail
            elif programs[i] is None:
                passed, status, detail = 0, "error", "no python program found in the completion"
            else:
                passed, status, detail = 0, "error", "the problem has no test cases"
            correct = total > 0 and passed == total
            frac = passed / total if total else 0.0
            out.append({"reward": float(frac if self.reward_mode == "fraction" else correct),
                        "correct": bool(correct), "parsed": programs[i] is not None, "passed": int(passed),
                        "total": int(total), "status": status, "detail": detail,
                        "answer": self.extract(completions[i])})
        return out

    def answer_key(self, completion: str) -> Optional[str]:
        code = self.extract(completion)
        return None if code is None else normalize_program(code)

    def row_for_key(self, key: str, rows_by_key: dict) -> dict:
        if key not in rows_by_key:
            raise KeyError(f"task {self.name!r}: no row registered for gold key {key!r} "
                           f"(TaskGrader.add_rows must be given this batch's rows)")
        return rows_by_key[key]


def positive(value, default):
    """`value` as a float when it is a positive number, else `default`."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return default
    return value if value > 0 else default
