"""CodeContests time limits for Python (issue 45 §3): `time_scale` multiplies each problem's
published limit (default 5.0, docs/results/2026-12-04-codecontests-time-limits.md), on rows
built here in the published format."""

from __future__ import annotations

import pytest

from prd_jax.tasks import get_task

SLEEPY = "import time\na, b = map(int, input().split())\ntime.sleep(2.5)\nprint(a + b)\n"


def row(name: str, seconds: int = 1) -> dict:
    return {"name": name, "description": "Print the sum of two integers.",
            "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
            "private_tests": {"input": [], "output": []}, "generated_tests": {"input": [], "output": []},
            "time_limit": {"seconds": seconds, "nanos": 0}, "memory_limit_bytes": 256 << 20, "difficulty": 7}


def test_default_factor_and_the_limit_it_gives():
    task = get_task("codecontests")
    assert task.time_scale == 5.0
    assert task.cases(row("a", seconds=2))["timeout_s"] == 10.0  # 2 s x 5
    assert task.options(time_scale=1.5).cases(row("a", seconds=2))["timeout_s"] == 3.0


def test_a_solution_slower_than_the_published_limit_passes_at_the_default_only():
    """2.5 s of sleep on a 1 s problem: over 1.0x (1 s), under the default 5.0x (5 s)."""
    default, published = get_task("codecontests"), get_task("codecontests").options(time_scale=1.0)
    fenced = f"```python\n{SLEEPY}```\n"
    at_default = default.grade(row("1_A. Sleepy"), fenced)
    at_published = published.grade(row("1_A. Sleepy"), fenced)
    assert (at_default["status"], at_default["correct"]) == ("ok", True)
    assert (at_published["status"], at_published["correct"]) == ("timeout", False)


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), "3", True, None])
def test_bad_factor_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"time_scale=.*allowed: a finite number > 0"):
        get_task("codecontests").options(time_scale=bad)
