"""prd_jax.data.synthetic: generator vs independent solver, difficulty, seeds, corruption,
PDR traces, JSONL, CharVocab (with the operators' template compiler) and the seqio task; then
the preimage family (issue 15): solver vs brute force, checker exactness, traces parse back."""

import json
import logging
import re

import numpy as np
import pytest

from prd_jax.data import jsonl
from prd_jax.data import preimage as pre
from prd_jax.data import synthetic as S
from prd_jax.tasks import get_task

DIFFICULTIES = (1, 2, 3, 4, 5, 6)
ARITHMETIC = ("modchain", "modinverse")  # the preimage family has its own tests at the end


@pytest.fixture(scope="module")
def problems():
    """100 problems per (family, difficulty): 1200 in all."""
    return {(fam, d): S.generate(100, 10 * d, d, family=fam)
            for fam in ARITHMETIC for d in DIFFICULTIES}


# ---------------------------------------------------------------- generator and solver


def test_hand_computed_examples():
    chain = "Start at 7. Work mod 10. Apply +5, *3, -4. Answer?"
    inverse = "Start at x. Work mod 11. Apply +5, *3, -4. End at 2. Find x."
    assert S.solve(chain) == "2"
    assert S.solve(inverse) == "8"  # 8+5=13->2, 2*3=6, 6-4=2
    lines, answer = S._solution_lines(S.parse_problem(chain))
    assert (lines, answer) == (["7+5=12->2", "2*3=6->6", "6-4=2->2"], 2)
    lines, answer = S._solution_lines(S.parse_problem(inverse))
    assert (lines, answer) == (["2+4=6->6", "6/3=6*4=24->2", "2-5=-3->8"], 8)
    assert S.solve("Start at 3. Work mod 7. Apply *5. Answer?") == "1"
    assert S.final_answer("a \\boxed{1} b \\boxed{ 42 }") == "42"
    assert S.final_answer("no box") is None
    with pytest.raises(ValueError, match="not a synthetic problem"):
        S.solve("What is 2+2?")


def test_solver_verifies_generator(problems):
    count = 0
    for (fam, d), rows in problems.items():
        for p in rows:
            assert S.solve(p["problem"]) == p["answer"], p
            assert S.final_answer(p["solution"]) == p["answer"]
            assert len(p["solution"].splitlines()) == d + 1
            assert (p["difficulty"], p["family"], p["modulus"]) == (d, fam, S.DEFAULT_MODULUS[fam])
            assert p["problem"].isascii() and p["solution"].isascii()
            count += 1
    assert count == 1200


def test_other_moduli_verified():
    for fam, m in (("modchain", 7), ("modchain", 100), ("modinverse", 13), ("modinverse", 101)):
        for p in S.generate(60, 1, (1, 4, 8), family=fam, modulus=m):
            assert p["modulus"] == m and S.solve(p["problem"]) == p["answer"]
            assert 0 <= int(p["answer"]) < m


def test_difficulty_increases_solution_length(problems):
    for fam in ARITHMETIC:
        means = [np.mean([len(p["solution"]) for p in problems[fam, d]]) for d in DIFFICULTIES]
        assert all(a < b for a, b in zip(means, means[1:])), (fam, means)


def test_mixed_difficulty_draws_from_the_given_values():
    rows = S.generate(300, 5, (2, 5))
    counts = {d: sum(r["difficulty"] == d for r in rows) for d in (2, 5)}
    assert sum(counts.values()) == 300 and min(counts.values()) > 100


def test_seeds_reproduce_and_differ():
    a = S.generate(50, 3, DIFFICULTIES)
    assert a == S.generate(50, 3, DIFFICULTIES)
    b = S.generate(50, 4, DIFFICULTIES)
    assert [r["problem"] for r in a] != [r["problem"] for r in b]
    assert len({r["id"] for r in a}) == 50 and a[0]["id"] == "modchain-s3-000000"
    t1 = S.pdr_trace(np.random.default_rng(9), a[10], 4, 2)
    assert t1 == S.pdr_trace(np.random.default_rng(9), a[10], 4, 2)


# ---------------------------------------------------------------- corruption and PDR


def test_corrupted_solutions_are_wrong(problems):
    rng = np.random.default_rng(0)
    for (fam, d), rows in problems.items():
        for p in rows[:50]:
            bad = S.corrupt_solution(rng, p)
            assert S.final_answer(bad) != S.solve(p["problem"]) == p["answer"]
            gold_lines, bad_lines = p["solution"].splitlines(), bad.splitlines()
            assert len(bad_lines) == len(gold_lines) == d + 1
            first = next(i for i, (g, b) in enumerate(zip(gold_lines, bad_lines)) if g != b)
            assert first < d  # the slip is in a step line, earlier lines are untouched
            assert bad_lines[first].split("=")[0] == gold_lines[first].split("=")[0]


def test_pdr_trace_counts():
    from prd_jax import prompts

    rng = np.random.default_rng(1)
    for p in S.generate(12, 2, DIFFICULTIES, family="modinverse"):
        for k in (1, 2, 4):
            for num_wrong in range(k + 1):
                t = S.pdr_trace(rng, p, k, num_wrong)
                cands = t["prompt_candidates"]
                answers = [S.final_answer(c) for c in cands]
                assert len(cands) == k
                assert sum(a != S.solve(p["problem"]) for a in answers) == num_wrong
                assert t["wrong"] == [a != p["answer"] for a in answers]
                assert S.final_answer(t["response"]) == p["answer"]
                assert t["prompt"].startswith(prompts.PDR_TOPK.user[:40])
                assert f"Problem:\n{p['problem']}\n\n### Candidate 1 (unverified)\n" in t["prompt"]
                assert t["prompt"].count("(unverified)\n") == k
                assert t["prompt"].endswith(cands[-1] + prompts.CANDIDATE_FOOTER)
                assert "{" not in t["prompt"].replace("\\boxed{", "")


def test_bad_arguments():
    rng = np.random.default_rng(0)
    p = S.generate(1, 0, 3)[0]
    with pytest.raises(ValueError, match="difficulty=0"):
        S.make_problem(rng, 0)
    with pytest.raises(ValueError, match="difficulty"):
        S.generate(5, 0, (1, 0))
    with pytest.raises(ValueError, match="num_wrong=3; must be <= k=2"):
        S.pdr_trace(rng, p, 2, 3)
    with pytest.raises(ValueError, match="k=0"):
        S.pdr_trace(rng, p, 0, 0)
    with pytest.raises(ValueError, match="family='sudoku'"):
        S.generate(5, 0, 1, family="sudoku")
    with pytest.raises(ValueError, match="modulus=12"):
        S.generate(5, 0, 1, family="modinverse", modulus=12)
    with pytest.raises(ValueError, match="seed=None"):
        S.generate(5, None, 1)
    with pytest.raises(ValueError, match="rng"):
        S.make_problem(np.random, 1)


# ---------------------------------------------------------------- JSONL


def test_write_jsonl_round_trips(tmp_path):
    rows = S.generate(20, 7, DIFFICULTIES)
    path = tmp_path / "problems.jsonl"
    assert S.write_jsonl(path, rows) == 20
    assert jsonl.read_jsonl(path) == rows

    rng = np.random.default_rng(0)
    sft = [S.solve_example(rows[0]), S.pdr_trace(rng, rows[1], 3, 1)]
    sft = [{"id": r["id"], "prompt": r["prompt"], "response": r["response"]} for r in sft]
    assert S.write_jsonl(tmp_path / "sft.jsonl", sft) == 2
    assert [json.loads(line) for line in open(tmp_path / "sft.jsonl")] == sft
    assert sft[0]["prompt"].endswith("\\boxed{}.\n\nProblem:\n" + rows[0]["problem"])
    msgs = [S.as_messages(r) for r in sft]
    S.write_jsonl(tmp_path / "messages.jsonl", msgs)
    assert json.loads(open(tmp_path / "messages.jsonl").readline())["messages"][1]["content"] == rows[0]["solution"]

    with pytest.raises(ValueError, match=r"rows\[1\] is a 'sft' row but rows\[0\] is 'problems'"):
        S.write_jsonl(tmp_path / "x.jsonl", [rows[0], sft[0]])
    with pytest.raises(ValueError, match=r"rows\[1\]: duplicate id"):
        S.write_jsonl(tmp_path / "x.jsonl", [rows[0], rows[0]])
    with pytest.raises(ValueError, match=r"rows\[0\]: need non-empty string keys"):
        S.write_jsonl(tmp_path / "x.jsonl", [{"id": "a", "problem": "p"}])


# ---------------------------------------------------------------- CharVocab


def test_char_vocab_ids_and_round_trip():
    v = S.CharVocab()
    assert (v.vocab_size, v.pad_id, v.eos_id, v.unk_id, v.bos_id, v.stop_ids) == (103, 0, 1, 2, None, (1, 4))
    assert v.encode("1") == [25] and v.encode(" ") == [8] and v.encode("\n") == [6]
    assert [v.encode(d)[0] for d in "0123456789"] == list(range(24, 34))
    text = "".join(chr(c) for c in range(32, 127)) + "\n\t"
    assert v.decode(v.encode(text)) == text and len(v.encode(text)) == len(text)
    for p in S.generate(30, 0, DIFFICULTIES, family="modinverse"):
        for s in (p["problem"], p["solution"]):
            assert v.decode(v.encode(s)) == s and v.unknown_chars(s) == []
    chat = v.apply_chat_template([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
                                 add_generation_prompt=False)
    assert chat == "<|user|>2+2?\n<|assistant|>4<|eos|>"
    ids = v.encode(chat)
    assert ids[0] == v.user_id and ids[-1] == v.eos_id and len(ids) == 1 + 5 + 1 + 1 + 1
    assert v.decode(ids) == "2+2?\n4" and v.decode(ids, skip_special=False) == chat
    assert v.decode([v.vocab_size + 5, 25]) == "1"
    with pytest.raises(ValueError, match=r"messages\[0\].role='tool'"):
        v.apply_chat_template([{"role": "tool", "content": "x"}])


def test_char_vocab_unknown_chars_reported(caplog):
    v = S.CharVocab()
    with caplog.at_level(logging.WARNING, logger=S.__name__):
        ids = v.encode("x\u2265y\u2265")
    assert ids == [v.encode("x")[0], 2, v.encode("y")[0], 2]
    assert v.unknown_chars("a\u2265b\u00e9<|eos|>") == ["\u00e9", "\u2265"]
    assert sum("\\u2265" in r.getMessage() or "\u2265" in r.getMessage() for r in caplog.records) == 1


def test_char_vocab_encodes_every_template_character():
    from prd_jax import prompts

    v = S.CharVocab()
    templates = [t for group in prompts.TEMPLATE_SETS.values() for t in group.values()]
    names = {name: sorted(group) for name, group in prompts.TEMPLATE_SETS.items()}
    assert all(n == names["default"] for n in names.values()), names  # every set fills every role
    assert len(templates) == len(names) * len(names["default"]) >= 20
    for t in templates:
        assert v.unknown_chars(t.user + t.assistant_prefix + t.candidate_header + t.candidate_footer) == [], t.name


def test_char_vocab_with_operator_context():
    from prd_jax import prompts
    from prd_jax.operators import runner
    from prd_jax.operators.specs import Sampling

    v = S.CharVocab()
    ctx = runner.make_context(v, Sampling(stop_ids=v.stop_ids))
    assert ctx.pad_id == 0
    solve = ctx.templates["solve"]
    assert solve.slots == ("problem",)
    assert v.decode(solve.pieces[0], skip_special=False) == (
        "<|user|>" + prompts.render(prompts.SOLVE, problem=""))
    assert v.decode(solve.pieces[1], skip_special=False) == "\n<|assistant|>"
    assert v.decode(solve.headers[2]) == "### Candidate 3 (unverified)\n"
    compact = runner.make_context(v, Sampling(stop_ids=v.stop_ids), templates="compact")
    assert v.decode(compact.templates["pdr_topk"].headers[1]) == "#2\n"
    assert v.decode(compact.templates["solve"].pieces[0], skip_special=False) == "<|user|>Solve: "
    assert all(len(piece) == len(v.decode(piece, skip_special=False)) - 7 * piece.count(v.user_id)
               - 12 * piece.count(v.assistant_id) for piece in solve.pieces)


# ---------------------------------------------------------------- seqio task


@pytest.mark.slow
def test_seqio_task():
    import seqio

    from prd_jax.data.vocab import HFVocabulary
    from prd_jax import prompts

    vocab = HFVocabulary(S.CharVocab())
    name = S.register_synthetic_task("prd_synthetic_test", vocab, {"train": (6, 0), "test": (3, 1)},
                                     difficulty=(2, 3))
    gold = S.generate(3, 1, (2, 3))
    ds = seqio.get_mixture_or_task(name).get_dataset(sequence_length=None, split="test", shuffle=False)
    exs = list(ds.as_numpy_iterator())
    assert len(exs) == 3
    for ex, p in zip(exs, gold):
        assert ex["id"].decode() == p["id"] and ex["answer"].decode() == p["answer"]
        assert ex["targets"][-1] == 1 and vocab.decode(ex["targets"].tolist()) == p["solution"]
        assert ex["inputs_pretokenized"].decode() == prompts.render(prompts.SOLVE, problem=p["problem"])
        assert len(ex["inputs"]) == len(ex["inputs_pretokenized"])

    S.register_synthetic_task("prd_synthetic_test", vocab, {"test": (2, 1)}, kind="pdr", k=3,
                              num_wrong=2, render_inputs=lambda u: S.CharVocab().apply_chat_template(
                                  [{"role": "user", "content": u}]))
    ex = next(seqio.get_mixture_or_task(name).get_dataset(
        sequence_length=None, split="test", shuffle=False).as_numpy_iterator())
    text = ex["inputs_pretokenized"].decode()
    assert text.startswith("<|user|>Here is a problem") and text.endswith("\n<|assistant|>")
    assert ex["inputs"][0] == 4 and text.count("(unverified)") == 3
    with pytest.raises(ValueError, match="each split needs its own seed"):
        S.register_synthetic_task("x", vocab, {"train": (2, 1), "test": (2, 1)})
    with pytest.raises(ValueError, match="num_wrong"):
        S.register_synthetic_task("x", vocab, {"test": (2, 1)}, kind="pdr", k=2, num_wrong=(1, 3))


# ---------------------------------------------------------------- SR and judge traces, the SFT mix


def test_sr_trace_holds_the_earlier_attempt_and_answers_with_the_gold():
    rng = np.random.default_rng(5)
    for p in S.generate(40, 8, (1, 2, 3)):
        for wrong in (False, True):
            t = S.sr_trace(rng, p, wrong, "compact")
            assert t["prompt"] == f"Improve: {p['problem']}\nEarlier:\n{t['previous']}"
            assert t["response"] == p["solution"]
            assert (S.final_answer(t["previous"]) != p["answer"]) == wrong
            assert (t["previous"] == p["solution"]) == (not wrong)


def test_judge_trace_ratings_parse_and_match_correctness():
    from prd_jax.operators.judges import RatingParser

    v = S.CharVocab()
    parser = RatingParser(v)
    rng = np.random.default_rng(6)
    for p in S.generate(20, 9, (1, 2)):
        for wrong in ((False, False), (False, True), (True, False), (True, True)):
            t = S.judge_trace(rng, p, wrong, "compact")
            assert t["response"].startswith("\n<rating_A>")  # continues the forced prefix of a 0-token judge
            ids = v.encode(t["response"])
            got = parser(np.asarray([ids]), np.asarray([len(ids)]), tags=("rating_A", "rating_B"))[0]
            assert got.tolist() == [1 if w else 10 for w in wrong]
            for cand, w in zip(t["candidates"], wrong):
                assert (S.final_answer(cand) == p["answer"]) == (not w)
                assert cand in t["prompt"]


def test_sft_mix_fractions():
    import dataclasses

    from prd_jax.train.config import DataSettings
    from prd_jax.train.setup import synthetic_traces

    p = S.generate(1, 0, 2)[0]
    data = DataSettings(pdr_fraction=1.0, pdr_k=2, sr_fraction=1.0, judge_fraction=1.0)
    rows = synthetic_traces(np.random.default_rng(0), p, data, "compact")
    assert [r["prompt"].split(":")[0] for r in rows] == ["Solve", "Refine", "Improve", "Compare"]
    data = dataclasses.replace(data, pdr_fraction=0.0, sr_fraction=0.0, judge_fraction=0.0)
    assert len(synthetic_traces(np.random.default_rng(0), p, data, "compact")) == 1
    rng, data = np.random.default_rng(1), dataclasses.replace(data, pdr_fraction=0.5)
    counts = [len(synthetic_traces(rng, p, data, "compact")) - 1 for _ in range(2000)]
    assert abs(np.mean(counts) - 0.5) < 0.04


def test_held_out_problems_avoid_every_seen_text():
    train = S.generate(4000, 0, (1, 2))
    seen = {p["problem"] for p in train}
    assert len({p["problem"] for p in train if p["difficulty"] == 1}) == 260  # every difficulty-1 problem
    out = S.held_out(96, 7, (1, 2), seen)
    texts = [p["problem"] for p in out]
    assert len(out) == 96 and len(set(texts)) == 96 and not set(texts) & seen
    assert {p["difficulty"] for p in out} == {2} and all(S.solve(t) == p["answer"] for t, p in zip(texts, out))
    assert S.held_out(96, 7, (1, 2), seen) == out  # reproducible
    with pytest.raises(ValueError, match="only 0 of n=5 problems of difficulty=1 are unseen"):
        S.held_out(5, 7, 1, seen)


# ---------------------------------------------------------------- the preimage family (data.preimage)


def _brute(spec):
    return [x for x in range(spec.modulus) if pre.forward(spec, x)[1] == spec.target]


def test_hand_example():
    text = "Find x. Work mod 10. Apply +3, *2, ^2. End at 6."
    spec = pre.parse_problem(text)
    assert spec == pre.Spec(10, (("+", 3), ("*", 2), ("^", 2)), 6)
    # (x+3)*2 mod 10 is in {4, 6} (squares ending in 6); (x+3) mod 5 in {2, 3}: x in {4, 9, 5, 0}
    assert pre.solutions(text) == [0, 4, 5, 9]
    assert pre.try_line(spec, 3) == "x=3: 3+3=6->6 6*2=12->2 2^2=4->4 vs 6 no"
    assert pre.try_line(spec, 4) == "x=4: 4+3=7->7 7*2=14->4 4^2=16->6 vs 6 ok"


@pytest.mark.parametrize("seed,modulus", [(0, 10), (1, 12), (2, 7), (3, 31)])
def test_solver_matches_brute_force(seed, modulus):
    for p in pre.generate(60, seed, (1, 2, 3, 4), modulus):
        spec = pre.parse_problem(p["problem"])
        assert pre.solutions(p["problem"]) == _brute(spec)
        assert p["answer"] == str(min(_brute(spec)))
        assert [int(s) for s in p["solutions"].split(",")] == _brute(spec)


@pytest.mark.parametrize("seed", [0, 5])
def test_checker_accepts_exactly_the_valid_x(seed):
    for p in pre.generate(40, seed, (2, 3), 10):
        valid = set(_brute(pre.parse_problem(p["problem"])))
        for x in range(-20, 30):
            assert pre.check(p["problem"], str(x)) == (x % 10 in valid), (p["problem"], x)
        assert not pre.check(p["problem"], None)
        assert not pre.check(p["problem"], "4.0")
        assert not pre.check(p["problem"], "x")


def test_search_needs_branching():
    """Solving backwards branches: many problems have several solutions, and ^2 is in every chain."""
    probs = pre.generate(200, 0, 3, 10)
    assert all("^2" in p["problem"] for p in probs)
    assert np.mean(["," in p["solutions"] for p in probs]) > 0.3


def test_solve_trace_parses_back():
    rng = np.random.default_rng(0)
    for p in pre.generate(50, 1, (2, 3), 10):
        resp = pre.solve_response(rng, p)
        tries = pre.parse_tries(resp)
        xs = [x for x, _ in tries]
        assert len(set(xs)) == len(xs)  # no repeats
        assert [ok for _, ok in tries] == [False] * (len(tries) - 1) + [True]
        assert all(ok == pre.check(p["problem"], str(x)) for x, ok in tries)
        assert pre.final_answer(resp) == str(xs[-1])
        assert pre.check(p["problem"], pre.final_answer(resp))


def test_refine_checks_the_workspace_first():
    rng = np.random.default_rng(0)
    p = {"problem": "Find x. Work mod 10. Apply +3, *2, ^2. End at 6."}
    wrong, right = "x=3: ...\n\\boxed{3}", "\\boxed{9}"
    resp = pre.refine_response(rng, p, [right, "no answer", wrong, wrong])  # the last-quoted first
    assert pre.parse_tries(resp) == [(3, False), (9, True)]
    assert pre.final_answer(resp) == "9"
    resp = pre.refine_response(rng, p, ["\\boxed{1}", wrong])  # no candidate passes: fresh tries
    tries = pre.parse_tries(resp)
    assert tries[:2] == [(3, False), (1, False)] and tries[-1][1] and len({x for x, _ in tries}) == len(tries)
    assert pre.check(p["problem"], pre.final_answer(resp))


def test_chains_have_one_order_and_distinct_kinds():
    for p in pre.generate(100, 9, (1, 2, 3, 4)):
        kinds = tuple(op for op, _ in pre.parse_problem(p["problem"]).ops)
        assert kinds == pre.CHAINS[p["difficulty"]] and len(set(kinds)) == len(kinds)
    with pytest.raises(ValueError, match="length=5"):
        pre.generate(1, 0, 5)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="length"):
        pre.generate(2, 0, 0)
    with pytest.raises(ValueError, match="modulus"):
        pre.generate(2, 0, 2, modulus=2)
    with pytest.raises(ValueError, match="not a preimage problem"):
        pre.parse_problem("Start at 3. Work mod 10. Apply +1. Answer?")


def _consistent(problem, text):
    """Every try line of `text` is the forward check of its x (traces parse back)."""
    spec = pre.parse_problem(problem["problem"])
    lines = [ln for ln in text.splitlines() if ln.startswith("x=")]
    return all(ln == pre.try_line(spec, x) for ln, (x, _) in zip(lines, pre.parse_tries(text)))


def test_drafts_are_cut_at_the_budget_and_slips_fail_the_check():
    rng = np.random.default_rng(3)
    for p in pre.generate(40, 2, (2, 3)):
        full = pre.draft(rng, p, 10_000)
        assert _consistent(p, full) and pre.check(p["problem"], pre.final_answer(full))
        cut = pre.draft(rng, p, 128)
        assert len(cut) == 128 or (len(cut) < 128 and pre.check(p["problem"], pre.final_answer(cut)))
        slip = pre.draft(rng, p, 10_000, false_rate=1.0)
        if len(p["solutions"].split(",")) < p["modulus"]:  # some x fails, so a slip exists
            x = pre.final_answer(slip)
            assert slip.splitlines()[-2].endswith(" ok") and not pre.check(p["problem"], x)
            assert pre.try_line(pre.parse_problem(p["problem"]), int(x)).endswith(" no")
    assert pre.quote("abcdef", 4) == "cdef" and pre.quote("ab", 4) == "ab"


def test_refine_and_judge_traces_parse_back():
    rng = np.random.default_rng(4)
    ignored = 0
    for p in pre.generate(60, 3, (2, 3)):
        row = pre.refine_trace(rng, p, 4, draft_tokens=128, tail_tokens=12, refine_ignore=0.35, false_rate=0.15)
        assert len(row["candidates"]) == 4 and all(len(c) <= 12 and c in row["prompt"] for c in row["candidates"])
        assert row["prompt"].startswith("Refine: " + p["problem"] + "\n#1\n")
        assert _consistent(p, row["response"]) and pre.check(p["problem"], pre.final_answer(row["response"]))
        answers = []
        for c in reversed(row["candidates"]):
            a = pre.final_answer(c)
            if a is not None and int(a) % p["modulus"] not in answers:
                answers.append(int(a) % p["modulus"])
        tried = [x for x, _ in pre.parse_tries(row["response"])]
        if row["ignored"]:
            ignored += 1
        else:  # the workspace's answers are checked first, last-quoted first, up to the first that passes
            first_ok = next((i for i, x in enumerate(answers) if pre.check(p["problem"], str(x))), None)
            expect = answers if first_ok is None else answers[:first_ok + 1]
            assert tried[:len(expect)] == expect
        judge = pre.judge_trace(rng, p)
        ratings = [int(v) for v in re.findall(r">(\d+)</rating_", judge["response"])]
        assert ratings == [10 if pre.check(p["problem"], pre.final_answer(c)) else 1 for c in judge["candidates"]]
    assert 8 <= ignored <= 36  # refine_ignore=0.35 of 60


def test_preimage_sft_mix_and_bad_knobs():
    p = pre.generate(1, 0, 2)[0]
    rows = S.sft_traces(np.random.default_rng(0), p, pdr_fraction=1.0, pdr_k=4, judge_fraction=1.0,
                        templates="compact", draft_tokens=64)
    assert [r["prompt"].split(":")[0] for r in rows] == ["Solve", "Refine", "Compare"]
    assert rows[0]["response"] == p["solution"]
    with pytest.raises(ValueError, match="draft_budget"):
        S.sft_traces(np.random.default_rng(0), p, templates="compact", draft_budget=64)
    with pytest.raises(ValueError, match="preimage"):
        S.sft_traces(np.random.default_rng(0), S.generate(1, 0, 2)[0], draft_tokens=64)
    assert S.generate(3, 5, (2, 3), family="preimage") == pre.generate(3, 5, (2, 3))


def test_preimage_task_grades_any_valid_x():
    task = get_task("preimage")
    for row in task.problems(limit=20):
        valid = {int(s) for s in row["solutions"].split(",")}
        for x in range(25):  # the boxed x is re-checked: only valid x (any representative mod m) pass
            g = task.grade(row, f"x={x}: 1+1=2->2 vs 2 ok\n\\boxed{{{x}}}")
            assert g["correct"] == (x % row["modulus"] in valid) and g["parsed"] and g["answer"] == str(x)
        assert task.grade(row, "x=1: 1+1=2->2 vs 2 ok")["parsed"] is False
        assert task.row_for_key(task.gold_key(row), {})["problem"] == row["problem"]


def test_the_task_has_the_gap_the_demo_relies_on():
    """Executed without error, the taught traces give PDR a clear lead over Long-CoT at matched
    B_seq (the budget whose mean B_seq is closest without exceeding PDR's), and a refine that
    ignores its workspace at the SFT mix's rate loses much of it (the room left to operator RL).
    Both for the shipped demo preset (8 one-try drafts of 80 tokens, the top 2 by majority
    quoted by 12 characters) and for the earlier one (4 drafts of 128, all quoted by 32)."""
    from prd_jax.demo import PRESETS
    demo = PRESETS["preimage"]
    shipped = dict(drafts=demo["drafts"], budget=demo["budget"], tail_tokens=demo["tail"], k=demo["k"],
                   ranking=demo["selector"], long_cot_budgets=demo["long_cot_budgets"])
    ignore = {0: pre.TRACE_DEFAULTS["refine_ignore"], 1: next(float(a.split("=")[1]) for a in demo["sft"]
                                                               if a.startswith("--config.data.refine_ignore="))}
    for seed, setting in ((0, {}), (1, {}), (0, shipped), (1, shipped)):
        probs = pre.generate(300, 100 + seed, (3, 4))
        r = pre.ideal_rates(probs, np.random.default_rng(seed), **setting)
        pdr_acc, pdr_seq = r["pdr"]
        matched = max((v for k, v in r.items() if k.startswith("long_cot") and v[1] <= pdr_seq), key=lambda v: v[1])
        assert pdr_acc - matched[0] > 0.12, (setting, r, matched)
        assert r["long_cot@512"][0] > 0.95 and r["best_of_n"][0] > r["long_cot@128"][0] + 0.3
        lazy = pre.ideal_rates(probs, np.random.default_rng(seed), **setting,
                               refine_ignore=ignore[bool(setting)])["pdr"][0]
        assert pdr_acc - lazy > 0.1


def test_majority_order_ranks_shared_answers_first_and_no_answer_last():
    cands = ["x=1: ...", "\\boxed{4}", "ok\n\\boxed{7}", "\\boxed{ 4}", "\\boxed{15}", "\\boxed{7}", "\\boxed{q}"]
    # answers: none, 4, 7, 4, 15, 7, q -> votes 0, 2, 2, 2, 1, 2, 1; ties keep the lower index
    assert pre.majority_order(cands) == [1, 2, 3, 5, 4, 6, 0]
    assert pre.majority_order([]) == []


def test_ranked_refine_traces_quote_the_top_k_and_check_them_in_rank_order():
    rng = np.random.default_rng(7)
    for p in pre.generate(40, 11, (3, 4)):
        row = pre.refine_trace(rng, p, 2, draft_tokens=80, tail_tokens=12, refine_ignore=0.0, drafts=8,
                               ranking="majority")
        cands = row["candidates"]
        assert len(cands) == 2 and row["prompt"].index("#1\n" + cands[0]) < row["prompt"].index("#2\n" + cands[1])
        answers = []
        for c in cands:  # rank order: #1 first
            a = pre.final_answer(c)
            if a is not None and int(a) % p["modulus"] not in answers:
                answers.append(int(a) % p["modulus"])
        first_ok = next((i for i, x in enumerate(answers) if pre.check(p["problem"], str(x))), None)
        expect = answers if first_ok is None else answers[:first_ok + 1]
        assert [x for x, _ in pre.parse_tries(row["response"])][:len(expect)] == expect
        assert _consistent(p, row["response"]) and pre.check(p["problem"], pre.final_answer(row["response"]))
    # the workspace is the top 2 of 8 drafts: a draft with an answer is quoted whenever one exists
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    p = pre.generate(1, 2, 4)[0]
    ws = pre._workspace(rng_a, p, 2, 80, 12, 0.15, 8, "majority")
    ds = [pre.draft(rng_b, p, 80, 0.15) for _ in range(8)]
    assert ws == [pre.quote(ds[i], 12) for i in pre.majority_order(ds)[:2]]
    with pytest.raises(ValueError, match="ranking='best'"):
        pre.refine_trace(rng, p, 2, ranking="best")
    with pytest.raises(ValueError, match="drafts=1 < k=2"):
        pre.refine_trace(rng, p, 2, drafts=1)
