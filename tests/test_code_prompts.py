"""Code prompts ask for what the task grades (issue 45 §1): every role of the "code" set, filled
with a problem of each code task, names the artifact that task's grader runs (a function with
its signature, or a whole stdin/stdout program), and reference solutions of the fixture rows
pass through `task.extract` + `task.grade`."""

from __future__ import annotations

import json
import os
import re

import hub_mirror  # the published-format fixture rows
import pytest

from prd_jax import prompts as P
from prd_jax.tasks import get_task

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "configs", "eval", "fixtures", "code", "livecodebench",
                       "tiny.jsonl")
STDIN = "reads the input from standard input"


def lcb_fixture() -> dict:
    with open(FIXTURE, encoding="utf-8") as f:
        return {r["question_id"]: r for r in map(json.loads, f)}


def humaneval_rows(n: int = 8) -> list:
    return get_task("humaneval").problems(limit=n)


def fill(template: P.Template, problem: str) -> str:
    """`template` rendered with `problem` and a one-candidate workspace in the other slots."""
    others = {"previous": "x = 1", "candidates": P.render_candidates(template, ["x = 1"]), "summary": "s",
              "candidate": "x = 1", "candidate_a": "x = 1", "candidate_b": "x = 2", "kappa": "64"}
    return P.render(template, problem=problem, **{k: v for k, v in others.items() if "{" + k + "}" in template.user})


CASES = [("humaneval", "function"), ("codecontests", "program")] + [
    (name, artifact) for name in ("livecodebench", "livecodebench_v5", "livecodebench_v6", "livecodebench_release_v6")
    for artifact in ("program", "function")]


def case_row(name: str, artifact: str) -> dict:
    """A row of `name` whose grader runs `artifact` (read in the test, not at collection: reading
    HumanEval prepares its TFDS copy, which pytest workers must not race over while collecting)."""
    if name == "humaneval":
        return humaneval_rows(1)[0]
    if name == "codecontests":
        return hub_mirror.CC["test"][0]
    return lcb_fixture()[{"program": "tiny_sum", "function": "tiny_reverse"}[artifact]]


@pytest.mark.parametrize("name,artifact", CASES)
def test_every_role_names_the_artifact_the_grader_runs(name, artifact):
    row = case_row(name, artifact)
    task = get_task(name)
    assert task.templates == "code" and task.artifact(row) == artifact
    if name != "humaneval":  # contest tasks: the sandbox kind the grader runs
        assert task.cases(row)["kind"] == {"program": "stdin", "function": "functional"}[artifact]
    problem = task.problem_text(row)
    assert problem.count("Format: ") == 1
    for role in P.ROLES:
        text = fill(P.template_set("code")[role], problem)
        assert "Format line" in text and "Format: " in text, (name, role)
        if artifact == "program":
            assert STDIN in text and "writes the answer to standard output" in text, (name, role)
            assert "signature" not in text and not re.search(r"\bfunction\b", text), (name, role)
        else:
            assert "keep" in text.lower() and "signature" in text and "standard input" not in text, (name, role)
            assert "It is called with the test arguments." in text, (name, role)
    if artifact == "function" and name == "humaneval":
        assert f"function `{row['entry_point']}`" in problem and problem.startswith(row["prompt"].rstrip("\n"))
    elif artifact == "function":
        assert "class Solution:\n    def reverseWords(self, s: str) -> str:" in problem


def test_code_templates_are_artifact_neutral():
    """The compiled pieces are shared by a batch mixing both artifacts: no role names either one."""
    for role, template in P.template_set("code").items():
        if role not in P.ROLES:
            continue
        text = template.user
        assert "signature" not in text and "standard input" not in text, role
        assert not re.search(r"\bfunctions?\b", text), role
        assert "the form the task's Format line asks for" in text, role


def test_format_line_refuses_unknown_artifacts():
    with pytest.raises(ValueError, match=r"artifact='script'; allowed: \('function', 'program'\)"):
        P.format_line("script")
    with pytest.raises(ValueError, match="entry_point or its starter code"):
        P.format_line("function")


def fenced(code: str) -> str:
    return f"The approach is direct.\n\n```python\n{code}```\n"


def test_humaneval_published_canonical_solutions_pass_extract_and_grade():
    task = get_task("humaneval")
    rows = humaneval_rows()
    completions = [fenced(r["prompt"] + r["canonical_solution"]) for r in rows]
    assert [task.extract(c) for c in completions] == [r["prompt"] + r["canonical_solution"] for r in rows]
    grades = task.grade_many(rows, completions)
    assert [(g["correct"], g["status"]) for g in grades] == [(True, "ok")] * len(rows)


# Reference solutions of the fixture rows (ours: the LiveCodeBench rows publish no solutions and the
# CodeContests fixture rows none in Python), one per artifact.
SUM = "a, b = map(int, input().split())\nprint(a + b)\n"
REVERSE = ("class Solution:\n    def reverseWords(self, s: str) -> str:\n"
           "        return ' '.join(reversed(s.split(' ')))\n")


def test_contest_reference_solutions_pass_extract_and_grade():
    lcb = lcb_fixture()
    checks = [("livecodebench_v6", lcb["tiny_sum"], SUM), ("livecodebench_v6", lcb["tiny_reverse"], REVERSE),
              ("codecontests", hub_mirror.CC["test"][0], SUM), ("livecodebench", hub_mirror.LCB["test.jsonl"][0], SUM)]
    for name, row, code in checks:
        task = get_task(name)
        assert task.extract(fenced(code)) == code
        g = task.grade(row, fenced(code))
        assert (g["correct"], g["status"], g["passed"]) == (True, "ok", g["total"]), (name, g)
        assert g["total"] >= 1
    # the other artifact fails its grader: a program for the functional row, a class for the stdin row
    wrong = get_task("livecodebench_v6").grade_many([lcb["tiny_reverse"], lcb["tiny_sum"]],
                                                      [fenced(SUM), fenced(REVERSE)])
    assert [g["correct"] for g in wrong] == [False, False]
