"""The accuracy-against-budget plot: one colour per operator family, one marker per
checkpoint, Long-CoT joined as the baseline curve, 95% intervals, a legend, claim pairs."""

import math

import numpy as np
import pytest

from prd_jax.evaluate import summarize
from prd_jax.plots import pareto_figure, pareto_plot, plot_plan, split_name


def _row(op, b, acc, ci=0.05):
    return {"operator": op, "mean_at_k": acc, "ci95": ci, "b_seq": b, "b_total": 2 * b, "b_seq_io": 3 * b,
            "b_total_io": 4 * b}


TABLE = [_row("sft:long_cot@256", 256, 0.3), _row("sft:long_cot@64", 64, 0.1), _row("sft:long_cot@128", 128, 0.2),
         _row("sft:pdr", 200, 0.35), _row("sft:best_of_n", 300, 0.32),
         _row("rl:long_cot@64", 64, 0.15), _row("rl:long_cot@128", 128, 0.25), _row("rl:pdr", 200, 0.4)]


def test_split_name_reads_checkpoint_and_family():
    assert split_name("rl_pdr:long_cot@128") == ("rl_pdr", "long_cot")
    assert split_name("pdr(4-1,shared_topk,k=2,random-k,budget=512)") == ("", "pdr")
    assert split_name("best_of_n(n=4,sel=pairwise_v1[m=1,think=0],budget=512)") == ("", "best_of_n")


def test_plan_colours_markers_baseline_and_pairs():
    plan = plot_plan(TABLE, pairs=[("sft:pdr", "sft:long_cot@128"), ("rl:pdr", "rl:missing")])
    assert plan["colors"] == {"long_cot": 0, "pdr": 1, "best_of_n": 2}  # one colour per family, all checkpoints
    assert plan["markers"] == {"sft": "o", "rl": "s"}
    assert [t["b_total"] for t in plan["baselines"]["sft"]] == [128, 256, 512]  # the curve in budget order
    assert [t["operator"] for t in plan["baselines"]["rl"]] == ["rl:long_cot@64", "rl:long_cot@128"]
    assert [(a["operator"], b["operator"]) for a, b in plan["pairs"]] == [("sft:pdr", "sft:long_cot@128")]


def test_figure_has_legend_intervals_and_baseline_lines(tmp_path):
    import matplotlib.pyplot as plt

    fig = pareto_figure(TABLE, "t", pairs=[("sft:pdr", "sft:long_cot@128")])
    try:
        texts = [t.get_text() for t in fig.legends[0].get_texts()]
        assert texts == ["long_cot", "pdr", "best_of_n", "checkpoint sft", "checkpoint rl", "claim pair (A vs B)"]
        for ax in fig.axes:
            assert len(ax.containers) == len(TABLE)  # one error bar per point
            assert not ax.texts  # no per-point labels
            lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1]
            assert len(lines) == 2 + 1  # two Long-CoT curves and one claim pair
        top_left = fig.axes[0]
        np.testing.assert_allclose(top_left.get_lines()[0].get_xdata(), [64, 128, 256])  # B_seq, in budget order
    finally:
        plt.close(fig)
    pareto_plot(TABLE, str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_ci95_is_the_normal_half_width_over_problems():
    rows = [{"problem_id": p, "operator": "op", "sample": s, "correct": c, "parsed": True,
             "calls": [{"in_tokens": 10, "out_tokens": 5, "accepted": True}]}
            for p, cs in enumerate([(1, 1), (1, 0), (0, 0), (1, 1)]) for s, c in enumerate(cs)]
    (t,) = summarize(rows)
    per_problem = [1.0, 0.5, 0.0, 1.0]
    assert t["mean_at_k"] == pytest.approx(0.625)
    assert t["ci95"] == pytest.approx(1.96 * np.std(per_problem, ddof=1) / 2)
    (one,) = summarize(rows[:2])
    assert math.isnan(one["ci95"])
