"""The call budget (`operators/call_budget.py`): one `CallBudget` each operator spec embeds and
validates once. A spec built the old way (flat keyword or positional budget fields, a flat
config entry) equals the one built with `budget=CallBudget(...)`, labels (results keys) are
those the flat fields gave, and a bad budget raises naming the field."""

from __future__ import annotations

import dataclasses
import os

import ml_collections
import pytest

import sc_refine_operator as SC
from prd_jax.config_check import load, validate
from prd_jax.config_fields import declared
from prd_jax.operators import registry
from prd_jax.operators.adaptive_pdr import AdaptivePDR
from prd_jax.operators.best_of_n import BestOfN
from prd_jax.operators.call_budget import BUDGET_FIELDS, CallBudget, as_budget, budget_names, flat_budget
from prd_jax.operators.long_cot import LongCoT
from prd_jax.operators.pdr import PDR
from prd_jax.operators.rsa import RSA
from prd_jax.operators.specs import Judge, OperatorSpec
from prd_jax.operators.sr import SR

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RL_TINY_PDR = os.path.join(ROOT, "configs", "rl", "tiny_pdr.py")
BUDGET = dict(max_new_tokens=64, candidate_max_tokens=48, truncation_head=8, quote_thinking=True, think_budget=40)
JUDGE = Judge(max_new_tokens=16)

# (the spec built with flat positional arguments, the same spec's own fields as keywords)
POSITIONAL = [
    (SR(1, True, 64, 48, 8, True, 40), dict(rounds=1, error_analysis=True)),
    (PDR((4, 1), "shared_topk", 2, "pairwise_v1", 32, 64, 48, 8, "topk", JUDGE, False, True, 40, 0),
     dict(schedule=(4, 1), k=2, selector="pairwise_v1", kappa=32, judge=JUDGE)),
    (BestOfN(4, "self_pointwise", 64, 48, 8, JUDGE, True, 40), dict(n=4, selector="self_pointwise", judge=JUDGE)),
    (RSA(4, 2, 1, 64, 48, 8, 1, 2, "first", JUDGE, True, 40),
     dict(population=4, subset=2, loops=1, prune_every=1, keep=2, judge=JUDGE)),
    (AdaptivePDR(2, 2, 3, 0.5, 0, "majority", 1, 64, 48, 8, JUDGE, True, 40),
     dict(min_fanout=2, max_fanout=3, tau=0.5, k=1, judge=JUDGE)),
    (SC.SCRefine(3, 64, 48, 8, True, 40), dict(n=3)),
]


@pytest.mark.parametrize("old,own", POSITIONAL, ids=lambda v: type(v).__name__ if isinstance(v, OperatorSpec) else "")
def test_a_spec_built_the_old_way_equals_the_new_way(old, own):
    cls = type(old)
    new = cls(**own, budget=CallBudget(**BUDGET))
    flat = cls(**own, **BUDGET)
    entry = registry.build_spec({"type": registry.operator_for(old).name, **own, **BUDGET})
    nested = registry.build_spec({"type": registry.operator_for(old).name, **own, "budget": dict(BUDGET)})
    assert old == new == flat == entry == nested
    assert len({hash(s) for s in (old, new, flat, entry, nested)}) == 1  # static jit arguments: one program
    assert new.budget == CallBudget(64, 48, 8, True, 40) and len({s.label for s in (old, new, entry)}) == 1
    assert cls(**own) != new and cls(**own).budget == CallBudget()  # the defaults: 512, 512, 128, False, 0


def test_long_cot_takes_its_two_budget_fields_flat_and_positionally():
    assert LongCoT(64, 40) == LongCoT(max_new_tokens=64, think_budget=40) == \
        LongCoT(budget=CallBudget(max_new_tokens=64, think_budget=40))
    assert budget_names(LongCoT) == ("max_new_tokens", "think_budget") and budget_names(PDR) == BUDGET_FIELDS


def test_flat_fields_replace_those_of_a_budget_given_too():
    spec = PDR((4, 1), budget=CallBudget(max_new_tokens=64, think_budget=40))
    assert PDR((4, 1), budget=CallBudget(max_new_tokens=64), max_new_tokens=128).budget.max_new_tokens == 128
    wider = dataclasses.replace(spec, max_new_tokens=128)  # replace passes budget= and the flat field
    assert wider.budget == CallBudget(max_new_tokens=128, think_budget=40) and wider.schedule == (4, 1)
    assert dataclasses.replace(spec, k=1) == PDR((4, 1), k=1, max_new_tokens=64, think_budget=40)
    assert as_budget(None, max_new_tokens=8) == CallBudget(8) and as_budget(spec.budget) is spec.budget


def test_labels_list_non_default_budget_fields_where_the_flat_fields_stood():
    """Results keys of existing workdirs stay valid: PDR's fields were (..., kappa, max_new_tokens,
    candidate_max_tokens, truncation_head, refine_template, judge, summary_vote_counts,
    quote_thinking, think_budget, kappa_think), so a non-default one is listed in that order."""
    spec = PDR((4, 1), refine_template="previous", k=1, candidate_max_tokens=256, think_budget=100, kappa_think=9)
    assert spec.label == ("pdr(4-1,shared_topk,k=1,random-k,candidate_max_tokens=256,refine_template=previous,"
                          "think_budget=100,kappa_think=9,budget=512)")
    assert SR(1, quote_thinking=True, truncation_head=0).label == \
        "sr(rounds=1,quote_thinking,truncation_head=0,budget=512)"
    assert LongCoT(64, 40).label == "long_cot(think_budget=40,budget=64)"
    assert SC.SCRefine(3, think_budget=5).label == "sc_refine(n=3,think_budget=5,budget=512)"


@pytest.mark.parametrize("fields,message", [
    (dict(max_new_tokens=0), r"CallBudget.max_new_tokens=0; must be >= 1"),
    (dict(candidate_max_tokens=0, truncation_head=0), r"CallBudget.candidate_max_tokens=0; must be >= 1"),
    (dict(max_new_tokens=2.5), r"CallBudget.max_new_tokens=2.5; must be an integer"),
    (dict(think_budget=True), r"CallBudget.think_budget=True; must be an integer"),
    (dict(candidate_max_tokens=16, truncation_head=17),
     r"CallBudget.truncation_head=17; allowed: 0..candidate_max_tokens=16"),
    (dict(truncation_head=-1), r"CallBudget.truncation_head=-1; allowed: 0..candidate_max_tokens=512"),
    (dict(quote_thinking=1), r"CallBudget.quote_thinking=1; allowed: True, False"),
    (dict(max_new_tokens=64, think_budget=64), r"CallBudget.think_budget=64; allowed: 0 \(no forced end of thinking\) "
                                               r"or 1..63 \(below max_new_tokens=64"),
    (dict(think_budget=-1), r"CallBudget.think_budget=-1; allowed: 0"),
])
def test_bad_budgets_raise_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        CallBudget(**fields)
    with pytest.raises(ValueError, match="SR: " + message):
        SR(**fields)
    with pytest.raises(ValueError, match="BestOfN: " + message):
        registry.build_spec({"type": "best_of_n", **fields})
    with pytest.raises(ValueError, match="PDR: " + message):
        PDR(budget=dict(fields))


def test_unknown_and_unused_budget_fields_are_refused():
    with pytest.raises(ValueError, match=r"budget: unknown fields \['kappa'\]; allowed: \['max_new_tokens'"):
        SR(budget=dict(kappa=3))
    with pytest.raises(ValueError, match=r"SR: budget=5; must be a CallBudget or a dict of its fields"):
        SR(budget=5)
    with pytest.raises(ValueError, match=r"LongCoT: CallBudget.quote_thinking=True; LongCoT uses only "
                                         r"\['max_new_tokens', 'think_budget'\] of its budget"):
        LongCoT(budget=CallBudget(quote_thinking=True))
    with pytest.raises(TypeError, match=r"LongCoT: got an unexpected keyword argument 'candidate_max_tokens'"):
        LongCoT(candidate_max_tokens=8)
    with pytest.raises(ValueError, match=r"operator 'long_cot': unknown fields \['candidate_max_tokens'\]; allowed: "
                                         r"\['budget', 'max_new_tokens', 'think_budget'\]"):
        registry.build_spec({"type": "long_cot", "candidate_max_tokens": 8})
    with pytest.raises(TypeError, match="SR: too many positional arguments"):
        SR(1, False, 64, 48, 8, True, 40, 1)


def test_the_old_reads_and_the_old_declarations_say_where_the_budget_is():
    with pytest.raises(AttributeError, match=r"PDR.max_new_tokens is read as spec.budget.max_new_tokens"):
        PDR().max_new_tokens  # noqa: B018
    with pytest.raises(AttributeError, match=r"'SR' object has no attribute 'kappa_think'"):
        SR().kappa_think  # noqa: B018

    @dataclasses.dataclass(frozen=True)
    class Flat(OperatorSpec):
        max_new_tokens: int = 64

    with pytest.raises(ValueError, match=r"spec class Flat declares \['max_new_tokens'\] itself; embed the call "
                                         r"budget instead: `budget: CallBudget = CallBudget\(\)`"):
        registry.register_operator("flat_budget_spec", spec=Flat)(lambda *a: None)
    assert "flat_budget_spec" not in registry.operator_names()
    with pytest.raises(TypeError, match=r"flat_budget\('n',\) on Flat: the class needs a field `budget"):
        flat_budget("n")(Flat)


def test_rl_operator_overrides_set_the_budget_fields_flat():
    config = load(RL_TINY_PDR, ["--config.rl.operator.max_new_tokens=24", "--config.rl.operator.think_budget=8"])
    fields = declared(config)
    assert {"rl.operator.max_new_tokens", "rl.operator.quote_thinking", "rl.operator.kappa"} <= set(fields)
    assert not any(k.startswith("rl.operator.budget") for k in fields)
    assert fields["rl.operator.truncation_head"].default == 128
    validate(config)
    spec = registry.build_spec(config.rl.operator, "pdr")  # RLConfig.operator: pdr unless typed
    assert spec.budget.max_new_tokens == 24 and spec.budget.think_budget == 8
    config.rl.operator = ml_collections.ConfigDict({"type": "long_cot"})
    long_cot = declared(config)
    assert "rl.operator.max_new_tokens" in long_cot and "rl.operator.candidate_max_tokens" not in long_cot
