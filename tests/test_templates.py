"""Template sets (prompts.TEMPLATE_SETS): the same roles and slots in every set, the code set
speaks of programs, unknown slots raise, the prompts module stays JAX-free, and every
consumer (operators, SFT data, RL, eval) rejects an unknown set by name."""

import hashlib
import json
import re
import subprocess
import sys

import pytest

from prd_jax import prompts as P
from prd_jax.data import synthetic as S

# sha256 of each set's (user, assistant_prefix, header, footer) by role, pinned when the sets
# became role-keyed: the demo is trained on "compact", so its texts must never drift.
PINNED = {"compact": "93f2da1f18f9fd92c7e297896aaf8662ce5beb9bac07fd7bd0557b188f340cc7",
          "default": "02354cd318e61e81a26f99ff83c0b91a96888110996cc882a7b386da64850b10"}


def _slots(t):
    return sorted(s for s in re.findall(r"\{(\w+)\}", t.user) if s in P.SLOTS)


def _digest(name):
    chosen = P.template_set(name)
    return hashlib.sha256(json.dumps({k: [t.user, t.assistant_prefix, t.candidate_header, t.candidate_footer]
                                      for k, t in sorted(chosen.items()) if k in P.ROLES}).encode()).hexdigest()


def test_every_set_has_the_same_roles_with_the_same_slots():
    default = P.template_set("default")
    # the built-in roles; an operator may add its own (`add_template`, e.g. tests/sc_refine_operator.py)
    assert set(P.ROLES) <= set(default) and {"pairwise", "pointwise"} <= set(P.ROLES)
    assert set(P.ROLES) == {t.name for t in P.DEFAULT_TEMPLATES}
    assert not any(r.endswith(("_math", "_code")) for r in P.ROLES)  # roles, not domains
    for name in P.TEMPLATE_SETS:
        chosen = P.template_set(name)
        assert set(P.ROLES) <= set(chosen), name
        for key in P.ROLES:
            t = chosen[key]
            assert t.name == key and _slots(t) == _slots(default[key]), (name, key)
            assert "{index}" in t.candidate_header
    assert P.SET_DOMAINS == {"default": "math", "compact": "math", "code": "code"}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_math_and_compact_texts_are_unchanged(name):
    assert _digest(name) == PINNED[name]


def test_code_set_asks_for_one_fenced_program():
    code = P.template_set("code")
    for role in ("solve", "sr_refine", "sr_error_analysis", "pdr_topk", "pdr_summary", "rsa_aggregate"):
        text = code[role].user
        assert "```python fenced block" in text and "program" in text.lower(), role
        assert "boxed" not in text, role
    for role in ("distill_summary", "distill_summary_votes"):
        assert "programs" in code[role].user and "{kappa}" in code[role].user
    assert code["pairwise"] is P.PAIRWISE_CODE and code["pointwise"] is P.POINTWISE_CODE
    assert "two proposed programs" in code["pairwise"].user
    rendered = P.render(code["pdr_topk"], problem="def f(x):", candidates=P.render_candidates(code["pdr_topk"], ["a"]))
    assert rendered.endswith("Task:\ndef f(x):\n\n### Candidate program 1 (unverified)\na\n\n")


def test_unknown_slot_raises_naming_slot_and_template():
    bad = P.Template("my_refine", "Improve {problem} using {hint}")
    with pytest.raises(ValueError, match=r"template 'my_refine' has unknown slot \{hint\}; allowed slots"):
        P.render(bad, problem="p", hint="h")
    with pytest.raises(ValueError, match=r"template 'my_refine' has unknown slot \{hint\}"):
        P.compile_template(S.CharVocab(), bad)
    with pytest.raises(ValueError, match=r"unknown slot \{hint\}"):
        P.add_template("default", bad)
    assert "my_refine" not in P.template_set("default")
    ok = P.compile_template(S.CharVocab(), P.Template("ok", "Sum {{}} of {problem} in {kappa}"), kappa=7)
    assert ok.slots == ("problem",)  # {{}} is literal, {kappa} a compile-time parameter


def test_add_template_refuses_a_different_text_for_an_existing_role():
    with pytest.raises(ValueError, match="already has role 'solve'"):
        P.add_template("compact", P.Template("solve", "Other: {problem}"))
    assert P.add_template("compact", P.template_set("compact")["solve"]) is P.template_set("compact")["solve"]


def test_prompts_module_imports_no_jax():
    code = "import prd_jax.prompts, sys; assert 'jax' not in sys.modules, sorted(m for m in sys.modules if 'jax' in m)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]


def test_compact_set_is_shorter_and_renders_the_workspace():
    compact, default = P.template_set("compact"), P.template_set("default")
    for key in P.ROLES:
        assert len(compact[key].user) * 3 < len(default[key].user), key
    problem = S.generate(1, 3, 2)[0]
    rng = __import__("numpy").random.default_rng(0)
    trace = S.pdr_trace(rng, problem, 2, 1, "compact")
    a, b = trace["prompt_candidates"]
    assert trace["prompt"] == f"Refine: {problem['problem']}\n#1\n{a}\n#2\n{b}\n"
    assert S.solve_example(problem, "compact")["prompt"] == f"Solve: {problem['problem']}"


def test_unknown_set_is_refused_by_name_everywhere(tmp_path):
    import ml_collections

    from prd_jax.data.vocab import HFVocabulary
    from prd_jax.evaluate import evaluate
    from prd_jax.operators.runner import make_context
    from prd_jax.operators.specs import Sampling
    from prd_jax.train.rl import RLConfig

    msg = r"templates='terse'; allowed: \['code', 'compact', 'default'\]"
    with pytest.raises(ValueError, match=msg):
        P.template_set("terse")
    v = S.CharVocab()
    with pytest.raises(ValueError, match=msg):
        make_context(v, Sampling(stop_ids=v.stop_ids), templates="terse")
    with pytest.raises(ValueError, match=msg):
        S.solve_example(S.generate(1, 0, 1)[0], "terse")
    with pytest.raises(ValueError, match=msg):
        S.register_synthetic_task("prd_terse", HFVocabulary(v), {"train": (2, 0)}, templates="terse")
    with pytest.raises(ValueError, match=r"config.rl.templates='terse'"):
        RLConfig(templates="terse")
    config = ml_collections.ConfigDict(dict(task="gsm8k", model="tiny", templates="terse", num_problems=1,
                                            batch_size=1, max_problem_tokens=8, seed=0,
                                            operators=[dict(type="long_cot", max_new_tokens=4)]))
    with pytest.raises(ValueError, match=msg):
        evaluate(config, str(tmp_path / "ev"), rows=[])
    assert not (tmp_path / "ev").exists()  # refused before anything was written
