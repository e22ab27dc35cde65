"""Template sets (operators/prompts.TEMPLATE_SETS): same calls and slots in every set, and
every consumer (operators, SFT data, RL, eval) rejects an unknown set by name."""

import re

import pytest

from prd_jax.data import synthetic as S
from prd_jax.operators import prompts as P


def _slots(t):
    return sorted(s for s in re.findall(r"\{(\w+)\}", t.user) if s in P.SLOTS)


def test_every_set_has_the_default_calls_with_the_same_slots():
    default = P.template_set("default")
    for name in P.TEMPLATE_SETS:
        chosen = P.template_set(name)
        assert sorted(chosen) == sorted(default), name
        for key, t in chosen.items():
            assert t.name == key and _slots(t) == _slots(default[key]), (name, key)
            assert "{index}" in t.candidate_header


def test_compact_set_is_shorter_and_renders_the_workspace():
    compact, default = P.template_set("compact"), P.template_set("default")
    for key in default:
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

    msg = r"templates='terse'; allowed: \['compact', 'default'\]"
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
    config = ml_collections.ConfigDict(dict(dataset="synthetic", model="tiny", templates="terse", operators=[]))
    with pytest.raises(ValueError, match=msg):
        evaluate(config, str(tmp_path / "ev"), rows=[])
    assert not (tmp_path / "ev").exists()  # refused before anything was written
