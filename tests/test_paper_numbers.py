"""Every figure a config or doc quotes from the papers occurs in ../shared/papers/, number for
number (issue 45 §6), and the PDR paper's headline points are reachable (§5).

What counts as a quoted figure (`quoted_figures`): a number written as a figure, with a decimal
point, a sign (+ or −), a percent sign, a × or a k suffix (86.7, +3.34, 53.9%, 2.57×, 49k), that
stands in
- an Expected clause attributed to a paper: from "Expected (paper" to the end of its paragraph,
  or up to "Ours" / "ours:", where our own figures begin;
- a double-quoted span introduced by a paper place: the 60 characters before the opening quote
  name "paper", "Fig.", "Table", "App.", "§" or "abstract" (e.g. `§4.2: "... +3.34 points"`);
- a cell of a markdown table column headed "the paper's number".
Each must occur in one of the two summaries as the same number (sign, % and × dropped; "49k"
as written). Bare integers (counts, years, schedules) and our measured figures (after "Ours",
or dated records in docs/results/, which are not scanned) are not checked.

Scanned: every config's module docstring under configs/, README.md and docs/*.md.
"""

from __future__ import annotations

import ast
import glob
import os
import re

import pytest

from prd_jax.config_io import load_config

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PAPERS = os.path.join(ROOT, "..", "shared", "papers")
MARKERS = re.compile(r"paper|Fig\.|Table|App\.|§|abstract")
# a number not inside a word, path or section number (§4.2, App. B.3), with its sign and unit
FIGURE = re.compile(r"(?<![\w.@/§-])(?<!§ )([+\-−]?)(\d+(?:\.\d+)?)(%|×|k\b)?(?![\w/])")
QUOTE = re.compile(r"\"([^\"]+)\"|“([^”]+)”")


def _is_figure(sign: str, number: str, unit: str) -> bool:
    return bool(sign or unit or "." in number)


def _figures(text: str) -> list:
    """Figure strings in `text` (see the module docstring): "86.7", "3.34", "49k", ..."""
    out = []
    for m in FIGURE.finditer(text):
        sign, number, unit = m.group(1), m.group(2), m.group(3) or ""
        if _is_figure(sign, number, unit):
            out.append(number + ("k" if unit == "k" else ""))
    return out


def quoted_figures(text: str, markdown: bool = False) -> list:
    """The quoted figures of a docstring or doc page, each as (figure, context)."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        flat = " ".join(para.split())
        for m in re.finditer(r"Expected \(paper", flat):
            clause = re.split(r"\bOurs\b|\bours:", flat[m.start():])[0]
            out += [(f, clause[:120]) for f in _figures(clause)]
        for m in QUOTE.finditer(flat):
            if MARKERS.search(flat[max(0, m.start() - 60):m.start()]):
                span = m.group(1) or m.group(2)
                out += [(f, span[:120]) for f in _figures(span)]
    if markdown:
        out += _table_figures(text)
    return out


def _table_figures(text: str) -> list:
    out, column = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]  # "\|" stays in its cell
        if column is None:
            column = next((i for i, c in enumerate(cells) if c == "the paper's number"), -1)
        elif column >= 0 and len(cells) > column and not set(cells[column]) <= set("-: "):
            out += [(f, cells[column][:120]) for f in _figures(cells[column])]
    return out


def paper_numbers() -> set:
    text = "\n".join(open(p).read() for p in sorted(glob.glob(os.path.join(PAPERS, "*.txt"))))
    return set(re.findall(r"\d+(?:\.\d+)?k?", text.replace(",", "")))


def missing(text: str, markdown: bool = False) -> list:
    known = paper_numbers()
    return [(f, ctx) for f, ctx in quoted_figures(text, markdown) if f not in known]


def _docstring(path: str) -> str:
    return ast.get_docstring(ast.parse(open(path).read()), clean=False) or ""


CONFIGS = sorted(p for p in glob.glob(os.path.join(ROOT, "configs", "**", "*.py"), recursive=True)
                 if os.path.basename(p) != "__init__.py")
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def test_the_papers_are_there():
    assert {"86.7", "3.34", "4.59", "2.57", "49k", "0.4375", "63.9", "99.3"} <= paper_numbers()


# ----------------------------------------------------------------------------- the convention, by hand

HAND = '''Runs a thing.

Expected (paper, Fig. 3 and App. D.2): AIME 2024 76.9 (Long CoT), 81.5 (SR), {pdr} (PDR) at
B_seq 49k; the paper's 2.57× and +3.34 points. Ours: 0.52 at 1.07x (measured, 2026-12-03).

The rounds (8, 4, 1) and 800 steps are bare integers. §4.2: "gains of {quoted} and +4.59
percentage points". A tool's message: "took 12.5 s".
'''


def test_a_correct_docstring_passes():
    text = HAND.format(pdr="86.7", quoted="+5.00")
    assert quoted_figures('Expected (paper, §4.2 and App. B.3): "see §4.1".') == []  # section numbers
    assert sorted(f for f, _ in quoted_figures(text)) == sorted(
        ["76.9", "81.5", "86.7", "49k", "2.57", "3.34", "5.00", "4.59"])
    assert missing(text) == []


@pytest.mark.parametrize("pdr, quoted, wrong", [("86.8", "+5.00", "86.8"), ("86.7", "+5.01", "5.01")])
def test_a_wrong_quoted_number_fails(pdr, quoted, wrong):
    assert [f for f, _ in missing(HAND.format(pdr=pdr, quoted=quoted))] == [wrong]


def test_a_paper_number_column_is_checked():
    table = "| config | the paper's number |\n|---|---|\n| a.py | Fig. 3: 86.7, 82.8 |\n\n| x | y |\n|---|---|\n| 1.5 | 2.5 |\n"
    assert missing(table, markdown=True) == [("82.8", "Fig. 3: 86.7, 82.8")]


# ----------------------------------------------------------------------------- the repository

@pytest.mark.parametrize("path", CONFIGS, ids=[os.path.relpath(p, ROOT) for p in CONFIGS])
def test_config_docstrings_quote_the_papers_number_for_number(path):
    assert missing(_docstring(path)) == [], os.path.relpath(path, ROOT)


@pytest.mark.parametrize("path", PAGES, ids=[os.path.relpath(p, ROOT) for p in PAGES])
def test_docs_quote_the_papers_number_for_number(path):
    assert missing(open(path).read(), markdown=True) == [], os.path.relpath(path, ROOT)


# (file, figures its Expected lines must quote): the omissions issue 45 §6 lists for PDR configs
REQUIRED = {
    "configs/rl/qwen3_8b_pdr.py": ("3.34", "1.67"),
    "configs/rl/qwen3_8b_continual_pdr.py": ("5.00", "4.59"),
    "configs/eval/qwen3_8b_table3.py": ("3.34", "1.67", "5.00", "4.59"),
    "configs/eval/o3mini_fig3_matched_bseq.py": ("76.9", "81.5", "86.7", "73.5", "77.1", "82.9", "49k"),
    "configs/eval/o3mini_fig5_token_matched.py": ("2.57",),
    "configs/eval/gemini25flash_fig5_token_matched.py": ("2.57",),
    "configs/eval/gemini25flash_table4_rounds.py": ("0.4375", "0.625", "0.0625", "0.1875"),
}


@pytest.mark.parametrize("rel", sorted(REQUIRED))
def test_expected_lines_carry_the_papers_figures(rel):
    figures = {f for f, _ in quoted_figures(_docstring(os.path.join(ROOT, rel)))}
    assert set(REQUIRED[rel]) <= figures, (rel, set(REQUIRED[rel]) - figures)


def test_no_unverified_third_party_figures():
    text = open(os.path.join(ROOT, "configs", "eval", "o3mini_fig3_matched_bseq.py")).read()
    assert "77.5" not in text and "86.5" not in text


@pytest.mark.parametrize("prov", ["o3mini", "gemini25flash"])
def test_table1_says_whom_error_analysis_helps(prov):
    doc = " ".join(_docstring(os.path.join(ROOT, "configs", "eval", f"{prov}_table1_sr.py")).split())
    assert "improves SR performance for o3-mini but not for gemini-2.5-flash" in doc
    assert ("error analysis helps" if prov == "o3mini" else "error analysis does not help") in doc


def test_pdr_rounds_names_its_model_and_quotes_gemini_figures_as_gemini():
    doc = " ".join(_docstring(os.path.join(ROOT, "configs", "eval", "pdr_rounds.py")).split())
    first_line = _docstring(os.path.join(ROOT, "configs", "eval", "pdr_rounds.py")).splitlines()[0]
    assert "Qwen3-8B" in first_line  # the summary line names the model it runs
    expected = doc[doc.index("Expected"):]
    assert "for Qwen3-8B the paper gives no figure" in expected
    assert expected.index("gemini-2.5-flash") < expected.index("0.4375")


@pytest.mark.parametrize("rel", ["configs/rl/qwen3_8b.py", "configs/rl/qwen3_8b_pdr.py", "configs/rl/llama31_8b.py",
                                 "configs/rl/qwen3_4b_pairrl.py", "configs/rl/gptoss20b_pairrl.py", "docs/training.md",
                                 "README.md"])
def test_settings_the_papers_do_not_state_are_labelled_ours(rel):
    flat = " ".join(open(os.path.join(ROOT, rel)).read().split())
    for setting in ("alpha = 0.1", "50/50", "lr 1e-6", "(rating - 1) / 9"):
        for m in re.finditer(re.escape(setting), flat):
            assert "ours" in flat[max(0, m.start() - 200):m.end() + 200], (rel, setting)


# ----------------------------------------------------------------------------- §5: the 49k point is reachable

API_LIMITS = {"o3mini": 100_000, "gemini25flash": 65_536}  # published max output tokens (api_rows.py)
POINT = 49152  # Fig. 3's B_seq 49k: 3 calls of 16,384


@pytest.mark.parametrize("prov", sorted(API_LIMITS))
def test_fig3_ladder_spans_the_49k_point_within_the_api_limit(prov):
    c = load_config(os.path.join(ROOT, "configs", "eval", f"{prov}_fig3_matched_bseq.py") + ":aime2025")
    ops = [dict(o) for o in c.operators]
    assert all(o["max_new_tokens"] <= API_LIMITS[prov] for o in ops)
    long_cot = sorted(o["max_new_tokens"] for o in ops if o["type"] == "long_cot")
    assert long_cot[0] <= 8192 and POINT in long_cot and long_cot[-1] > POINT  # brackets the point
    # the iterative rows whose calls on the path add up to the point: (number of sequential calls) x budget
    seq_calls = lambda o: o["rounds"] + 1 if o["type"] == "sr" else len(o["schedule"])
    at_point = [o for o in ops if o["type"] != "long_cot" and seq_calls(o) * o["max_new_tokens"] == POINT]
    assert {o["type"] for o in at_point} == {"sr", "pdr"}
    assert {tuple(o["schedule"]) for o in at_point if o["type"] == "pdr"} == {(8, 4, 1), (16, 8, 4, 1)}
    if prov == "gemini25flash":  # the thinking budget cap of gemini-2.5-flash: 0-24,576
        assert 0 < c.backend.thinking_budget <= 24576


@pytest.mark.parametrize("name", ["pdr_matched_bseq.py", "aime_pdr_sweep.py"])
def test_in_graph_grids_say_which_rows_hold_the_49k_point(name):
    pod = "8xh200"
    c = load_config(os.path.join(ROOT, "configs", "eval", name) + f":{pod}")
    assert any(dict(o)["type"] == "pdr" and len(dict(o)["schedule"]) * dict(o)["max_new_tokens"] == POINT
               for o in c.operators)
    doc = " ".join(_docstring(os.path.join(ROOT, "configs", "eval", name)).split())
    assert "49k" in doc and "16k-per-call rows" in doc.replace("rows at 16k per call", "16k-per-call rows")
    assert "40,960" in doc and "o3mini_fig3_matched_bseq.py" in doc
