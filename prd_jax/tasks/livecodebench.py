"""LiveCodeBench code generation (V1 arXiv 2603.04304 §4-5: LiveCodeBench v5 and v6).

Data: the release files of `livecodebench/code_generation_lite` as published (`test.jsonl`,
`test2.jsonl`, ... or parquet), read from `<data dir>/code/livecodebench/`; nothing is
downloaded. A row holds `question_content`, `starter_code`, `public_test_cases` (a JSON string
of [{"input", "output", "testtype"}]), `private_test_cases` (the same list, or, in the lite
files, base64 of zlib-compressed pickled JSON text), `metadata` (a JSON string with
`func_name`), `contest_date`, `platform`, `difficulty` and `question_id`. `grade` takes such a
row as the file holds it; `problems` adds `id` (= `question_id`) for the eval harness.

Tests: public then private cases. `stdin` cases run the program with the input on standard
input and compare standard output as LiveCodeBench's checker does (`rewards.code.outputs_match`,
"lines": same number of stripped lines, each equal or equal as decimal numbers). `functional`
cases (LeetCode) call `Solution().<func_name>(*args)`, one argument per JSON line of the input,
and compare the return value with the JSON output by value (tuples as lists). Each case has
`timeout_s` (6 s, LiveCodeBench's default per-test limit). Grading, statuses and reward modes:
`tasks.contest`.

Windows (issue 45 §2). A task reads the problems whose `contest_date` lies in its window:
`release` (a cumulative release, `RELEASES`), `start` (first day, inclusive) and `end` (first
day after, exclusive), ISO dates. The releases, from the "Dataset Versions" / change-log list of
LiveCodeBench's README and dataset card (github.com/LiveCodeBench/LiveCodeBench,
huggingface.co/datasets/livecodebench/code_generation_lite): `release_v1` ... `release_v6` hold
the problems released from May 2023 to the end of Mar 2024, May 2024, Jul 2024, Sep 2024,
Jan 2025 and Apr 2025 (400, 511, 612, 713, 880 and 1055 problems).

What the V1 paper says: it reports "LiveCodeBench-v5" and "LiveCodeBench-v6" (and "hard LCB-v6
problems") and gives no dates or problem counts (../shared/papers/v1-...txt). Our reading:
reasoning-model reports, V1's comparisons among them, score "v5" and "v6" as date windows of
the newest problems, not as the cumulative releases, so

- `livecodebench_v5`: 2024-08-01..2025-02-01 of release_v5. Sources: NVIDIA NeMo Evaluator's
  `livecodebench_0824_0225` task (start_date 2024-08-01, end_date 2025-02-01, release_v5);
  mlfoundations/evalchemy `LiveCodeBenchv5_official` (release_v5 rows of the months 2024-08 to
  2025-01). Reported size: 279 problems (a third-party summary, emergentmind.com's LiveCodeBench
  v5/v6 page; not checked here against the files).
- `livecodebench_v6`: 2025-02-01..2025-05-01 of release_v6, the problems release_v6 added
  (test6.jsonl; 1055 - 880 = 175 problems: LiveCodeBench issue #145, AetherEval's README). Some
  reports read "v6" as 2024-08-01..2025-05-01 (454 problems; QwenLM/Qwen3-VL issue #1945 asks
  which): `options(start="2024-08-01")` selects that.
- `livecodebench_release_v5` / `livecodebench_release_v6`: the cumulative releases (880 / 1055),
  the reading this module used before; `livecodebench`: every row in the files.

Eval prints the count a config selects (`selection`), e.g. "livecodebench_v6: 175 problems
(2025-02-01..2025-05-01 of release_v6)". `version` also takes the README's fine-grained tags
(`v1`, `v2`, `v1_v3`, `v4_v5`, ...: the problems some releases added); the published loader
selects those by file, here they are date windows derived from consecutive release ends (`v5`
is Oct 2024 - Jan 2025, `vA_vB` from the start of `vA` to the end of `vB`), an approximation.
`start_date` / `end_date` (ISO dates, both inclusive) narrow any window further, like
LiveCodeBench's own `--start_date` / `--end_date`.

Difficulty: `difficulty(row)` is the row's published `difficulty` (easy / medium / hard);
`summary.md` adds per-difficulty rows (V1 §4 reports hard LCB-v6 problems apart).

Prompt (LiveCodeBench's in substance, our words): the statement, then the Format line of the
row's artifact (`prompts.format_line`): with starter code (functional tests), complete the stub
and keep its signature; without, write a whole program that reads standard input and writes
standard output.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import functools
import io
import json
import pickle
import zlib
from typing import Optional

from prd_jax.prompts import format_line
from prd_jax.rewards.code import CASE_KINDS
from prd_jax.tasks.base import register_task
from prd_jax.tasks.contest import ContestTask
from prd_jax.tasks.rows import read_published

__all__ = ["DIFFICULTIES", "LIVECODEBENCH", "LIVECODEBENCH_RELEASE_V5", "LIVECODEBENCH_RELEASE_V6", "LIVECODEBENCH_V5",
           "LIVECODEBENCH_V6", "LiveCodeBenchTask", "RELEASES",
           "VERSIONS", "decode_private_tests", "version_window"]

DATA_PATTERNS = ("code/livecodebench/*",)
_START = dt.date(2023, 5, 1)
# last month of each release (LiveCodeBench README, "Dataset Versions")
_RELEASE_ENDS = {1: (2024, 3), 2: (2024, 5), 3: (2024, 7), 4: (2024, 9), 5: (2025, 1), 6: (2025, 4)}


def _month_after(year: int, month: int) -> dt.date:
    return dt.date(year + month // 12, month % 12 + 1, 1)


def _windows() -> dict:
    """{version: (first day, first day after)} for release_vN (cumulative), vN (added by N) and
    vA_vB (added by A to B)."""
    out = {}
    for n, (year, month) in _RELEASE_ENDS.items():
        end = _month_after(year, month)
        out[f"release_v{n}"] = (_START, end)
        out[f"v{n}"] = (_START if n == 1 else _month_after(*_RELEASE_ENDS[n - 1]), end)
    for a in _RELEASE_ENDS:
        for b in _RELEASE_ENDS:
            if a < b:
                out[f"v{a}_v{b}"] = (out[f"v{a}"][0], out[f"v{b}"][1])
    return out


VERSIONS = _windows()
RELEASES = tuple(f"release_v{n}" for n in _RELEASE_ENDS)  # the cumulative releases a window reads
DIFFICULTIES = ("easy", "medium", "hard")  # the published `difficulty` labels


def version_window(version: Optional[str]) -> tuple:
    """(first day, first day after) of `version` ((None, None): every problem)."""
    if version is None or version == "all":
        return None, None
    if version not in VERSIONS:
        raise ValueError(f"version={version!r}; allowed: None, 'all', {sorted(VERSIONS)}")
    return VERSIONS[version]


class _TextOnly(pickle.Unpickler):
    """Unpickles plain values only: the published private tests are a pickled str."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"private_test_cases: refusing pickled global {module}.{name}")


@functools.lru_cache(maxsize=16)  # a batch holds N candidates of few problems
def _decode_private(text: str) -> tuple:
    text = text.strip()
    if not text:
        return ()
    try:
        cases = json.loads(text)
    except json.JSONDecodeError:
        try:
            payload = _TextOnly(io.BytesIO(zlib.decompress(base64.b64decode(text.encode("ascii"))))).load()
        except (ValueError, zlib.error, pickle.UnpicklingError, EOFError, UnicodeEncodeError) as e:
            raise ValueError(f"private_test_cases is neither JSON nor base64(zlib(pickle(JSON))): {e}") from None
        if isinstance(payload, bytes):
            payload = payload.decode("utf-8")
        if not isinstance(payload, str):
            raise ValueError(f"private_test_cases: the pickle holds a {type(payload).__name__}, expected JSON text")
        cases = json.loads(payload)
    if not isinstance(cases, list):
        raise ValueError(f"private_test_cases: expected a list of cases, got {type(cases).__name__}")
    return tuple(cases)


def decode_private_tests(value) -> list:
    """The private cases of a row: a list as is, a JSON string, or base64 of zlib-compressed
    pickled JSON text (LiveCodeBench's lite files). Refuses pickles holding anything but text."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    if not isinstance(value, str):
        raise ValueError(f"private_test_cases: expected a string or a list, got {type(value).__name__}")
    return list(_decode_private(value))


def _json_field(row: dict, key: str, default):
    value = row.get(key, default)
    if isinstance(value, str):
        if not value.strip():
            return default
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{key}: invalid JSON ({e.msg} at column {e.colno})") from None
    return default if value is None else value


def _date(value) -> Optional[dt.date]:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str) and value.strip():
        return dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00")).date()
    return None


def _iso(name: str, key: str, value: str) -> Optional[dt.date]:
    if not value:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{name}: {key}={value!r}; allowed: '' or an ISO date YYYY-MM-DD") from None


@dataclasses.dataclass(frozen=True)
class LiveCodeBenchTask(ContestTask):
    """LiveCodeBench code generation over a window (see the module docstring): the rows of
    `release` whose contest day d has `start <= d < end`."""

    release: Optional[str] = None  # a cumulative release (RELEASES); None: every row in the files
    start: str = ""  # ISO date, first day of the window (inclusive)
    end: str = ""  # ISO date, first day after the window (exclusive)
    version: Optional[str] = None  # a release or fine-grained tag (VERSIONS), narrowing further
    start_date: str = ""  # ISO date, inclusive (LiveCodeBench's --start_date)
    end_date: str = ""  # ISO date, inclusive (LiveCodeBench's --end_date)

    def __post_init__(self):
        super().__post_init__()
        if self.release is not None and self.release not in RELEASES:
            raise ValueError(f"{self.name}: release={self.release!r}; allowed: None or one of {RELEASES}")
        version_window(self.version)
        for key in ("start", "end", "start_date", "end_date"):
            _iso(self.name, key, getattr(self, key))
        if self.start and self.end and not self.start < self.end:
            raise ValueError(f"{self.name}: start={self.start!r} must come before end={self.end!r} (end is exclusive)")

    def window(self) -> tuple:
        """(first day, first day after, release) of this task's window; a missing day is None."""
        first, after = version_window(self.release)
        start, end = _iso(self.name, "start", self.start), _iso(self.name, "end", self.end)
        first = max(d for d in (first, start) if d) if first or start else None
        after = min(d for d in (after, end) if d) if after or end else None
        return first, after, self.release

    # -- data
    def in_window(self, row: dict) -> bool:
        """Whether the row's `contest_date` lies in this task's window (and `version`, `start_date`,
        `end_date`, when given)."""
        first, after, _ = self.window()
        v_first, v_after = version_window(self.version)
        if (first is None and after is None and v_first is None and not self.start_date
                and not self.end_date):
            return True
        day = _date(row.get("contest_date"))
        if day is None:
            raise ValueError(f"{self.name}: row {row.get('question_id')!r} has no contest_date; a release or "
                             "date window needs one")
        if (first and day < first) or (after and day >= after):
            return False
        if v_first is not None and not v_first <= day < v_after:
            return False
        if self.start_date and day < dt.date.fromisoformat(self.start_date):
            return False
        return not (self.end_date and day > dt.date.fromisoformat(self.end_date))

    def selection(self, rows) -> str:
        """E.g. "livecodebench_v6: 175 problems (2025-02-01..2025-05-01 of release_v6)"."""
        first, after, release = self.window()
        where = []
        if first or after:
            where.append(f"{first or ''}..{after or ''}" + (f" of {release}" if release else ""))
        if self.version:
            where.append(f"version {self.version}")
        if self.start_date or self.end_date:
            where.append(f"contest days {self.start_date or ''}..{self.end_date or ''} inclusive")
        return f"{self.name}: {len(rows)} problems" + (f" ({'; '.join(where)})" if where else " (every row)")

    def difficulty_label(self, row: dict) -> Optional[str]:
        value = str(row.get("difficulty") or "").strip().lower()
        return value if value in DIFFICULTIES else None

    def problems(self, split: Optional[str] = None, limit: Optional[int] = None,
                 data_dir: Optional[str] = None) -> list:
        if (split or "test") != "test":
            raise ValueError(f"{self.name}: split={split!r}; allowed: 'test' (LiveCodeBench has one split)")
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit={limit!r}; allowed: None or an int >= 0")
        rows, seen = [], set()
        for row in read_published(DATA_PATTERNS, data_dir, what=self.name):
            qid = str(row.get("question_id", ""))
            if not qid or qid in seen or not self.in_window(row):
                continue
            seen.add(qid)
            rows.append(dict(row, id=qid))
            if limit is not None and len(rows) >= limit:
                break
        return rows

    def artifact(self, row: dict) -> str:
        """"function" when the row's public tests are functional (or, with none, it has starter
        code), else "program" (stdin tests): what `cases` hands the sandbox."""
        types = {str(c.get("testtype") or "stdin") for c in _json_field(row, "public_test_cases", [])
                 if isinstance(c, dict)}
        if types:
            return "function" if "functional" in types else "program"
        return "function" if str(row.get("starter_code") or "").strip() else "program"

    def problem_text(self, row: dict) -> str:
        text = str(row["question_content"]).strip()
        artifact = self.artifact(row)
        if artifact == "program":
            return f"{text}\n\n{format_line('program')}"
        metadata = _json_field(row, "metadata", {}) or {}
        func_name = metadata.get("func_name", "") if isinstance(metadata, dict) else ""
        return f"{text}\n\n{format_line('function', entry_point=func_name, starter=str(row.get('starter_code') or ''))}"

    # -- tests
    def cases(self, row: dict) -> dict:
        raw = list(_json_field(row, "public_test_cases", [])) + decode_private_tests(row.get("private_test_cases"))
        if not all(isinstance(c, dict) and "input" in c and "output" in c for c in raw):
            raise ValueError(f"{self.name}: row {row.get('question_id')!r}: every test case must be an object with "
                             "'input' and 'output'")
        types = {str(c.get("testtype") or "stdin") for c in raw}
        if not types <= set(CASE_KINDS):
            raise ValueError(f"{self.name}: row {row.get('question_id')!r}: testtype {sorted(types)}; allowed: "
                             f"{list(CASE_KINDS)}")
        kind = "functional" if "functional" in types else "stdin"
        spec = {"kind": kind, "entry_point": None, "timeout_s": self.timeout_s, "memory_mb": self.memory_mb}
        if kind == "stdin":
            spec["tests"] = [{"input": str(c["input"]), "output": str(c["output"])} for c in raw]
            return spec
        metadata = _json_field(row, "metadata", {}) or {}
        func_name = metadata.get("func_name") if isinstance(metadata, dict) else None
        if not isinstance(func_name, str) or not func_name:
            raise ValueError(f"{self.name}: row {row.get('question_id')!r}: functional tests need metadata.func_name")
        spec["entry_point"] = func_name
        try:
            spec["tests"] = [{"args": [json.loads(line) for line in str(c["input"]).split("\n") if line.strip()],
                              "expected": json.loads(c["output"])} for c in raw]
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.name}: row {row.get('question_id')!r}: a functional case's input lines and "
                             f"output must be JSON ({e.msg})") from None
        return spec

    def sandbox_options(self) -> dict:
        return {"compare": "lines"}

    def gold_key(self, row: dict) -> str:
        return str(row["question_id"])


LIVECODEBENCH = register_task(LiveCodeBenchTask("livecodebench"))
# the windows the V1 paper's "LiveCodeBench-v5" / "-v6" are read as (module docstring: sources)
LIVECODEBENCH_V5 = register_task(LiveCodeBenchTask("livecodebench_v5", release="release_v5", start="2024-08-01",
                                                   end="2025-02-01"))
LIVECODEBENCH_V6 = register_task(LiveCodeBenchTask("livecodebench_v6", release="release_v6", start="2025-02-01",
                                                   end="2025-05-01"))
LIVECODEBENCH_RELEASE_V5 = register_task(LiveCodeBenchTask("livecodebench_release_v5", release="release_v5"))
LIVECODEBENCH_RELEASE_V6 = register_task(LiveCodeBenchTask("livecodebench_release_v6", release="release_v6"))
