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

Version windows (`version`), by `contest_date`, from the "Dataset Versions" list of
LiveCodeBench's README (github.com/LiveCodeBench/LiveCodeBench): `release_v1` ... `release_v6`
hold the problems released from May 2023 to the end of Mar 2024, May 2024, Jul 2024, Sep 2024,
Jan 2025 and Apr 2025 (400, 511, 612, 713, 880 and 1055 problems). The README also names
fine-grained tags (`v1`, `v2`, `v1_v3`, `v4_v5`, ...: the problems some releases added) without
dates; their windows here are derived from consecutive release ends: `v5` is Oct 2024 - Jan
2025, `v6` Feb 2025 - Apr 2025, `vA_vB` from the start of `vA` to the end of `vB`. The V1 paper
does not say which reading its "v5" and "v6" use; `livecodebench_v5` / `livecodebench_v6` take
the releases (`release_v5`, `release_v6`), and `options(version="v6")` the newer problems only.
`start_date` / `end_date` (ISO dates, inclusive) narrow any window, like LiveCodeBench's own
`--start_date` / `--end_date`.

Prompt (LiveCodeBench's in substance, our words): with starter code, complete the stub and
keep its signature; without, write a whole program that reads standard input and writes
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

from prd_jax.rewards.code import CASE_KINDS
from prd_jax.tasks.base import register_task
from prd_jax.tasks.contest import ContestTask
from prd_jax.tasks.rows import read_published

__all__ = ["LIVECODEBENCH", "LIVECODEBENCH_V5", "LIVECODEBENCH_V6", "LiveCodeBenchTask", "VERSIONS",
           "decode_private_tests", "version_window"]

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


@dataclasses.dataclass(frozen=True)
class LiveCodeBenchTask(ContestTask):
    """LiveCodeBench code generation over a version window (see the module docstring)."""

    version: Optional[str] = None
    start_date: str = ""  # ISO date, inclusive
    end_date: str = ""  # ISO date, inclusive

    def __post_init__(self):
        super().__post_init__()
        version_window(self.version)
        for key in ("start_date", "end_date"):
            value = getattr(self, key)
            if value:
                try:
                    dt.date.fromisoformat(value)
                except ValueError:
                    raise ValueError(f"{self.name}: {key}={value!r}; allowed: '' or an ISO date YYYY-MM-DD") from None

    # -- data
    def in_window(self, row: dict) -> bool:
        """Whether the row's `contest_date` lies in this task's version and date window."""
        first, after = version_window(self.version)
        if first is None and not self.start_date and not self.end_date:
            return True
        day = _date(row.get("contest_date"))
        if day is None:
            raise ValueError(f"{self.name}: row {row.get('question_id')!r} has no contest_date; a version or "
                             "date window needs one")
        if first is not None and not first <= day < after:
            return False
        if self.start_date and day < dt.date.fromisoformat(self.start_date):
            return False
        return not (self.end_date and day > dt.date.fromisoformat(self.end_date))

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

    def problem_text(self, row: dict) -> str:
        text = str(row["question_content"]).strip()
        starter = str(row.get("starter_code") or "").strip("\n")
        if starter.strip():
            return (f"{text}\n\nFormat: complete the starter code below. Keep its class, method name and "
                    "signature, write the whole solution, and put it in one ```python fenced block.\n\n"
                    f"```python\n{starter}\n```")
        return (f"{text}\n\nFormat: write a complete Python program that reads the input from standard input "
                "and writes the answer to standard output (do not just test the samples). Put the program in "
                "one ```python fenced block.")

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
LIVECODEBENCH_V5 = register_task(LiveCodeBenchTask("livecodebench_v5", version="release_v5"))
LIVECODEBENCH_V6 = register_task(LiveCodeBenchTask("livecodebench_v6", version="release_v6"))
