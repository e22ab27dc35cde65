"""Operator registry (issue 14 §2): built-ins register themselves, an operator defined only in
tests/ (`sc_refine_operator`) runs through eval and operator RL with no edit elsewhere,
one selector vocabulary, and labels unique per spec across every eval config."""

import dataclasses
import glob
import importlib.util
import os
import types

import jax
import ml_collections
import numpy as np
import pytest

import sc_refine_operator as SC
from prd_jax import prompts as P
from prd_jax.config_io import load_config
from prd_jax.operators import registry, specs as S
from prd_jax.operators.best_of_n import BestOfN
from prd_jax.operators.call_budget import settings
from prd_jax.operators.long_cot import LongCoT
from prd_jax.operators.pdr import PDR
from prd_jax.operators.rsa import RSA
from prd_jax.operators.sr import SR
from prd_jax.operators.adaptive_pdr import AdaptivePDR
from prd_jax.operators.runner import make_context, run_operator
from test_operators import TOK, problems as one_problem
from test_v1_operators import MARK, JudgeLM

ROOT = os.path.join(os.path.dirname(__file__), "..")


def test_builtins_and_the_test_operator_are_registered():
    assert {"long_cot", "sr", "pdr", "best_of_n", "rsa", "sc_refine"} <= set(registry.operator_names())
    assert registry.get_operator("pdr").spec is PDR
    assert registry.operator_for(SC.SCRefine()).run is SC.sc_refine
    spec = registry.build_spec({"type": "sc_refine", "n": 3, "max_new_tokens": 8})
    assert spec == SC.SCRefine(n=3, max_new_tokens=8)
    with pytest.raises(ValueError, match=r"operator type 'bon'; allowed: \[.*'best_of_n'.*'sc_refine'"):
        registry.build_spec({"type": "bon"})
    with pytest.raises(ValueError, match=r"operator 'sc_refine': unknown fields \['k'\]; allowed"):
        registry.build_spec({"type": "sc_refine", "k": 2})


def test_a_second_registration_is_refused_unless_replaced():
    with pytest.raises(ValueError, match="operator name 'pdr' is already registered"):
        registry.register_operator("pdr", spec=SC.SCRefine)(lambda *a: None)
    with pytest.raises(ValueError, match="spec must be a dataclass subclassing"):
        registry.register_operator("plain", spec=dict)
    with pytest.raises(ValueError, match="unknown operator spec Judge"):
        registry.operator_for(S.Judge())


def test_specs_declare_what_their_context_needs():
    assert PDR((8, 4, 1), "global_summary", kappa=100).kappa == 100 and BestOfN().kappa is None
    assert PDR((8, 4, 1)).k_max == 8 and RSA(subset=3).k_max == 3 and LongCoT().k_max == 1
    assert PDR((4, 1), "shared_topk", 2, "pairwise_v1").template_roles() == ("solve", "pdr_topk", "pairwise")
    assert BestOfN(selector="self_pointwise").template_roles() == ("solve", "pointwise")
    assert PDR((4, 2, 1)).trainable_rounds("refine") == (2,)
    assert PDR((4, 2, 1)).trainable_rounds("drafts_and_refine") == (2, 0)
    assert BestOfN().trainable_rounds() == ()  # returns no traces: operator RL refuses it
    assert SC.SCRefine(n=3).round_sizes() == (3, 1)


def test_a_missing_template_role_is_refused_naming_it():
    ctx = make_context(TOK, S.Sampling(), k_max=2, templates={"sc_refine": P.Template("x", "{problem}")})
    del ctx.templates["sc_refine"]  # a user override dict without the operator's role, and no set fallback
    ctx.templates._set_name = "no-such-set"
    with pytest.raises(ValueError, match="operator 'sc_refine' needs template role 'sc_refine'"):
        run_operator(JudgeLM(), one_problem(), jax.random.key(0), SC.SCRefine(2, 8, 8, 2), ctx)


# ----------------------------------------------------------------------------- the test-only operator

@pytest.mark.slow
def test_sc_refine_refines_the_majority_candidate_with_its_own_template():
    answers = ("\\boxed{3}", "\\boxed{4}", "\\boxed{4}", "none")
    ctx = make_context(TOK, S.Sampling(), k_max=2)
    res = run_operator(JudgeLM(answers=answers), one_problem(), jax.random.key(0), SC.SCRefine(4, 16, 32, 8), ctx)
    row = np.asarray(res.workspace_tokens[0])
    quoted = row[len(row) - int(res.workspace_lengths[0]):].tolist()
    assert quoted == [MARK + 1] + TOK.encode("\\boxed{4}")  # the first candidate of the majority answer
    lens = [1 + len(a) for a in answers]
    assert int(res.b_total[0]) == sum(lens) + int(res.final_lengths[0])
    assert int(res.b_seq[0]) == lens[1] + int(res.final_lengths[0])  # majority draft + refine
    assert res.calls.names == ("draft",) * 4 + ("refine",)
    assert np.asarray(res.calls.accepted[0]).tolist() == [False, True, False, False, True]


def _tiny_model():
    from prd_jax.data.synthetic import CharVocab
    from prd_jax.model import get_model_config, init_params

    cfg = get_model_config("tiny", max_position=512)
    return types.SimpleNamespace(cfg=cfg, params=init_params(cfg, jax.random.key(0)), tokenizer=CharVocab(),
                                 mesh=None)


@pytest.mark.slow
def test_eval_runs_the_test_operator_from_a_config_entry(tmp_path):
    from prd_jax.evaluate import evaluate

    config = ml_collections.ConfigDict(dict(
        task="gsm8k", model="tiny", model_path="", templates="compact", sampling=dict(temperature=1.0, top_p=1.0),
        seed=0, batch_size=2, k_samples=2, max_problem_tokens=32, num_problems=2, enable_thinking=None,
        operators=[dict(type="sc_refine", n=3, max_new_tokens=6, candidate_max_tokens=6, truncation_head=2)]))
    rows = [{"id": "p0", "problem": "1+2=?", "answer": "3"}, {"id": "p1", "problem": "2+2=?", "answer": "4"}]
    (table,) = evaluate(config, str(tmp_path / "ev"), model=_tiny_model(), rows=rows, progress=False)
    assert table["operator"] == "sc_refine(n=3,candidate_max_tokens=6,truncation_head=2,budget=6)"
    assert (table["problems"], table["k"]) == (2, 2)
    assert 6 < table["b_seq"] <= 12 and table["b_total"] <= 4 * 6  # 2 calls on the path of 4
    assert table["b_total"] > table["b_seq"]


@pytest.mark.slow
def test_operator_rl_trains_the_test_operator():
    from prd_jax.train.operator_rl import OperatorRollouts
    from prd_jax.train.rl import RLConfig, batch_rows

    model = _tiny_model()
    rl = RLConfig(prompts_per_step=1, samples_per_prompt=2, max_prompt_tokens=32, max_new_tokens=8,
                  operator_fraction=1.0, templates="compact", max_problem_tokens=16,
                  gradient_targets="drafts_and_refine",
                  operator=dict(type="sc_refine", n=3, max_new_tokens=6, candidate_max_tokens=6, truncation_head=2))
    assert rl.operator == SC.SCRefine(3, 6, 6, 2)
    rollouts = OperatorRollouts(rl, model.cfg, model.tokenizer, None, rl.operator, 1)
    assert rollouts.rows == batch_rows(rl) == 2 * (1 + 3)  # G refines + G x n drafts
    groups, metrics = rollouts(model.params, jax.random.key(3), [("1+2=?", "3")],
                               lambda text, answer: float(len(text) % 2), lambda r: r - r.mean(axis=1, keepdims=True))
    assert [g["inputs"].shape[0] for g in groups] == [2, 6]  # refine round, then the drafts
    assert len(rollouts.widths(model.params)) == 2
    assert {"reward/operator", "reward/draft", "operator/b_seq"} <= set(metrics)
    for g in groups:
        np.testing.assert_allclose(g["advantages"].reshape(1, -1).sum(), 0.0, atol=1e-5)
    with pytest.raises(ValueError, match=r"config.rl.operator: operator 'best_of_n' declares no round"):
        RLConfig(operator_fraction=0.5, operator=dict(type="best_of_n", n=2))


# ----------------------------------------------------------------------------- selectors and labels

def test_one_selector_vocabulary():
    assert set(S.PDR_SELECTORS) <= set(S.SELECTORS) and set(S.BEST_OF_N_SELECTORS) <= set(S.SELECTORS)
    assert "pointwise" not in S.SELECTORS and "pairwise_random" in S.SELECTORS
    from prd_jax.operators import verify

    assert set(verify.METHODS) == set(S.SELECTORS)  # selector names are the select() methods
    with pytest.raises(ValueError, match=r"BestOfN.selector='pointwise'; allowed: \('random', 'self_pointwise'"):
        BestOfN(selector="pointwise")


def test_best_of_n_random_picks_uniformly_without_judge_calls():
    picks = []
    ctx = make_context(TOK, S.Sampling(), k_max=2)
    for seed in range(40):
        res = run_operator(JudgeLM(), one_problem(), jax.random.key(seed), BestOfN(4, "random", 16, 32, 8), ctx)
        picks.append(int(np.asarray(res.final_tokens[0, 0])) - MARK)
        assert res.calls.names == ("draft",) * 4  # no judge call
    assert set(picks) == {0, 1, 2, 3} and max(np.bincount(picks)) <= 20


def _config_specs():
    """(config, arg, specs) for every configs/eval/*.py at its default arg and every named arg."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "eval", "*.py"))):
        if path.endswith("__init__.py"):
            continue
        spec = importlib.util.spec_from_file_location("cfg_module", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for arg in (None,) + tuple(getattr(module, "ARGS", ())):
            try:
                config = load_config(path + (f":{arg}" if arg else ""))
            except ValueError:  # this config needs a named arg
                continue
            out.append((os.path.basename(path), arg, [registry.build_spec(dict(e)) for e in config.operators]))
    return out


def test_labels_are_unique_per_distinct_spec_in_every_eval_config():
    found = _config_specs()
    assert len(found) >= 10
    for name, arg, spec_list in found:
        by_label = {}
        for s in spec_list:
            by_label.setdefault(s.label, set()).add(s)
        clashes = {label: ss for label, ss in by_label.items() if len(ss) > 1}
        assert not clashes, (name, arg, clashes)


def _other(value, field, spec):
    """A different valid value for `field` of `spec` (None if none is tried)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, S.Judge):
        return dataclasses.replace(value, budget_multiple=value.budget_multiple + 1)
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2
    if isinstance(value, tuple):
        return (value[0] + 1,) + value[1:]
    if isinstance(value, str):
        allowed = {"distill": S.DISTILL_VARIANTS, "refine_template": ("topk", "previous"), "final": S.RSA_FINALS,
                   "signal": ("majority", "v1_mu"),
                   "selector": S.PDR_SELECTORS if isinstance(spec, PDR) else S.BEST_OF_N_SELECTORS}[field]
        return [a for a in allowed if a != value]
    raise AssertionError(f"no perturbation for {field}={value!r}")


# Valid starting points that reach every field of each class (e.g. PDR's refine_template needs
# k=1; RSA's keep needs pruning). No field is excluded: each one changes the operator's result.
BASES = {LongCoT: [LongCoT()], SR: [SR()],
         PDR: [PDR((4, 2, 1), "shared_topk", 1, "pairwise_v1"), PDR((4, 1), "global_summary"),
                 PDR((4, 1), "shared_topk", 1, "random"), PDR((4, 1), "random_k", 2)],
         BestOfN: [BestOfN(), BestOfN(selector="majority")],
         RSA: [RSA(4, 2, 2, prune_every=1, keep=2)], SC.SCRefine: [SC.SCRefine()],
         AdaptivePDR: [AdaptivePDR(signal="v1_mu"), AdaptivePDR(min_fanout=3, cap=4 * 512)]}


def test_every_registered_spec_class_is_covered():
    assert {registry.get_operator(n).spec for n in registry.operator_names()} <= set(BASES)


@pytest.mark.parametrize("cls", list(BASES), ids=lambda c: c.__name__)
def test_changing_any_field_changes_the_label(cls):
    changed = 0
    for base in BASES[cls]:
        for name, value, _ in settings(base):  # the call budget's fields flat
            others = _other(value, name, base)
            for other in (others if isinstance(others, list) else [others]):
                try:
                    spec = dataclasses.replace(base, **{name: other})
                except ValueError:  # not a valid combination with this base
                    continue
                assert spec.label != base.label, (cls.__name__, name, base.label)
                changed += 1
        for sub in ("d_min", "window", "tau", "both_orders", "max_new_tokens", "domain"):
            if hasattr(base, "judge"):
                new = {"domain": "code", "both_orders": True, "tau": 0.3}.get(sub) or getattr(base.judge, sub) + 1
                spec = dataclasses.replace(base, judge=dataclasses.replace(base.judge, **{sub: new}))
                assert spec.label != base.label, (cls.__name__, "judge." + sub, base.label)
    assert changed >= len(settings(cls()))
