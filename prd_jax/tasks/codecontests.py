"""CodeContests (DeepMind's `code_contests`; V1 arXiv 2603.04304 §4-5 reports GPT-OSS-20B on it).

Data: the published records, read from `<data dir>/code/codecontests/`: the parquet shards as
published (`test-00000-of-00001-*.parquet`, `valid-...`, `train-000NN-of-00039-...`, also under
a `data/` subfolder) or `<split>.jsonl`; nothing is downloaded. A row holds `name`,
`description`, `public_tests` / `private_tests` / `generated_tests` (each {"input": [...],
"output": [...]}), `time_limit` ({"seconds", "nanos"} or null), `memory_limit_bytes` and
`difficulty`. `grade` takes such a row as the file holds it; `problems` adds `id` (= `name`).

Tests: the cases of `test_sets` (default public, private and generated, in that order), all
stdin/stdout. Output is compared token by token after whitespace normalisation
(`rewards.code.outputs_match`, "tokens"): integer tokens exactly, other numeric tokens within
`float_tol` (default 1e-6, absolute, or relative where the expected value exceeds 1 in
magnitude), any other token exactly. Each case runs under the problem's own time limit times
`time_scale` (see below; `timeout_s` when the row has none) and its own
memory limit as the sandbox's address-space limit (`memory_mb` when the row has none).
Grading, statuses and reward modes: `tasks.contest`.

Time limits for Python (`time_scale`, default 5.0). The published limits are the contests'
own, set for C++ judges; our programs run on CPython. Other evaluators do
not apply them at 1.0x: DeepMind's CodeContests execution code runs every test under one
fixed limit (google-deepmind/code_contests, `execution/tester_sandboxer.h`: `TestOptions`
`max_execution_duration = absl::Seconds(10)`, which `execution/solve_example.cc` keeps),
LiveCodeBench's runner gives each test 6 s (`lcb_runner/evaluation/
compute_code_generation_metrics.py`, `timeout=6`), AlphaCodium 3 s on CodeContests
(`alpha_codium/settings/configuration.toml`, `[code_contests_tester] timeout = 3`). At 5x a
2 s problem gets the dataset authors' own 10 s and a 1 s problem 5 s (LiveCodeBench's 6 s lies
between). The prompt states the published limit. How many published correct Python 3
solutions pass at 1x, 2x, 3x and 5x: `benchmarks/codecontests_time_limits.py`, and
docs/results/2026-12-04-codecontests-time-limits.md.

Prompt: the statement, its limits, and the instruction to write a whole program that reads
standard input and writes standard output.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from prd_jax.prompts import format_line
from prd_jax.tasks.base import register_task
from prd_jax.tasks.contest import ContestTask, positive
from prd_jax.tasks.rows import read_published

__all__ = ["CODECONTESTS", "CodeContestsTask", "SPLITS", "TEST_SETS"]

SPLITS = ("test", "valid", "train")
TEST_SETS = ("public", "private", "generated")


def _pairs(row: dict, key: str) -> list:
    block = row.get(key)
    if block is None:
        return []
    if not isinstance(block, dict):
        raise ValueError(f"{key}: expected {{'input': [...], 'output': [...]}}, got {type(block).__name__}")
    inputs, outputs = list(block.get("input") or []), list(block.get("output") or [])
    if len(inputs) != len(outputs):
        raise ValueError(f"{key}: {len(inputs)} inputs but {len(outputs)} outputs")
    return [{"input": str(i), "output": str(o)} for i, o in zip(inputs, outputs)]


def time_limit_s(row: dict) -> Optional[float]:
    """The row's time limit in seconds ({"seconds", "nanos"}, a number, or None: no limit given)."""
    limit = row.get("time_limit")
    if isinstance(limit, dict):
        seconds = (limit.get("seconds") or 0) + (limit.get("nanos") or 0) / 1e9
        return seconds if seconds > 0 else None
    return positive(limit, None)


@dataclasses.dataclass(frozen=True)
class CodeContestsTask(ContestTask):
    """CodeContests problems graded on their tests (see the module docstring)."""

    time_scale: float = 5.0  # multiplies each problem's published (C++) time limit for CPython
    float_tol: float = 1e-6
    test_sets: tuple = TEST_SETS

    def __post_init__(self):
        super().__post_init__()
        scale = self.time_scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
            raise ValueError(f"{self.name}: time_scale={scale!r}; allowed: a finite number > 0 (the factor on "
                             "each problem's published time limit)")
        if not self.float_tol >= 0:
            raise ValueError(f"{self.name}: float_tol={self.float_tol}; allowed: a number >= 0")
        bad = [s for s in self.test_sets if s not in TEST_SETS]
        if bad or not self.test_sets:
            raise ValueError(f"{self.name}: test_sets={self.test_sets!r}; allowed: a non-empty subset of {TEST_SETS}")

    def problems(self, split: Optional[str] = None, limit: Optional[int] = None,
                 data_dir: Optional[str] = None) -> list:
        split = split or self.default_split
        if split not in SPLITS:
            raise ValueError(f"{self.name}: split={split!r}; allowed: {SPLITS}")
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit={limit!r}; allowed: None or an int >= 0")
        patterns = (f"code/codecontests/{split}-*", f"code/codecontests/data/{split}-*",
                    f"code/codecontests/{split}.*")
        rows = [dict(r, id=str(r["name"])) for r in read_published(patterns, data_dir, what=f"{self.name} {split}")]
        return rows if limit is None else rows[:limit]

    def problem_text(self, row: dict) -> str:
        limits = []
        seconds = time_limit_s(row)
        if seconds:
            limits.append(f"Time limit: {seconds:g} seconds per test.")
        memory = positive(row.get("memory_limit_bytes"), None)
        if memory:
            limits.append(f"Memory limit: {memory / (1 << 20):g} MB.")
        return (f"{str(row['description']).strip()}\n\n" + (" ".join(limits) + "\n\n" if limits else "")
                + format_line(self.artifact(row)))

    def cases(self, row: dict) -> dict:
        tests = [c for s in self.test_sets for c in _pairs(row, f"{s}_tests")]
        seconds = time_limit_s(row)
        memory = positive(row.get("memory_limit_bytes"), None)
        return {"kind": "stdin", "tests": tests, "entry_point": None,
                "timeout_s": seconds * self.time_scale if seconds else self.timeout_s,
                "memory_mb": int(math.ceil(memory / (1 << 20))) if memory else self.memory_mb}

    def sandbox_options(self) -> dict:
        return {"compare": "tokens", "float_tol": self.float_tol}

    def gold_key(self, row: dict) -> str:
        return str(row["name"])


CODECONTESTS = register_task(CodeContestsTask("codecontests"))
