"""`prd-jax compile`: AOT compile-and-fit tables, the analytic model by hand, targets, refusals."""

import importlib.util
import os

import pytest

from prd_jax.aot import estimate as E
from prd_jax.aot.chips import CHIPS, parse_target
from prd_jax.aot.report import Row, as_json, failures
from prd_jax.config_io import load_config
from prd_jax.model.config import NAMED_CONFIGS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAS_LIBTPU = importlib.util.find_spec("libtpu") is not None


def test_kv_cache_per_device_by_hand():
    """Qwen3-8B, 256 rows x (10240 + 16384) slots, mesh data=1,fsdp=16,tensor=4, bf16."""
    cfg = NAMED_CONFIGS["qwen3-8b"].replace(dtype="bfloat16")
    s = E.SamplerShape(prompts=64, prompt_len=10240, samples=4, gen_len=16384, max_rows=256)
    # rows per device 256 / 16 = 16; kv heads per device 8 / 4 = 2; 36 layers; K and V; 128 dims; 2 bytes
    by_hand = 16 * 26624 * 36 * 2 * 2 * 128 * 2
    assert by_hand == 15_703_474_176
    assert E.kv_cache_bytes_per_device(cfg, s, E.Mesh3(1, 16, 4)) == by_hand
    # 512 prompts x 4 = 2048 rows without a cap: all in flight, 8x the cache
    assert E.kv_cache_bytes_per_device(cfg, E.SamplerShape(512, 10240, 4, 16384), E.Mesh3(1, 16, 4)) == 8 * by_hand


def test_train_flops_by_hand():
    cfg = NAMED_CONFIGS["tiny"]
    n_mm = E.matmul_params(cfg) + E.head_params(cfg)
    t = 8
    fwd = 2 * n_mm * t + 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim * t * (t + 1) / 2
    assert E.train_flops(cfg, rows=3, width=t) == pytest.approx(3 * 3 * fwd)


def test_targets_parse_and_refuse():
    t = parse_target("v5p:4x4x4")
    assert (t.devices, t.chip) == (64, CHIPS["v5p"])
    assert parse_target("h200:8").devices == 8
    for bad, match in [("v9:2x2", "chip 'v9' unknown"), ("v5p", "expected CHIP:TOPOLOGY"),
                       ("h200:2x2", "GPU:COUNT"), ("v5e:axb", "not a topology")]:
        with pytest.raises(ValueError, match=match):
            parse_target(bad)


def test_failure_message_names_program_excess_and_knob():
    row = Row("pdr.draft", 10e9, 100e9, 1e9, 0.0, 95e9, None, 1.0, 1.0, 0.0, "", "sampling.max_rows")
    assert not row.fits and row.bytes_per_device == 111e9
    (msg,) = failures([row])
    assert "pdr.draft" in msg and "over by 16.00 GB" in msg and "config.sampling.max_rows" in msg
    doc = as_json("cfg.py:arg", parse_target("v5p:2x2x4"), [row])
    assert doc["fits"] is False and doc["programs"][0]["bytes_per_device"] == int(111e9)
    assert set(doc) == {"config", "topology", "programs", "fits"}


@pytest.mark.skipif(not HAS_LIBTPU, reason="needs libtpu: pip install -e '.[tpu-aot]' (make test installs it)")
@pytest.mark.slow
def test_tiny_pdr_compiles_for_v5e_2x2():
    from prd_jax.aot.report import compile_all

    config = load_config(os.path.join(ROOT, "configs/rl/tiny_pdr.py"))
    rows = compile_all(config, parse_target("v5e:2x2"))
    names = [r.name for r in rows]
    assert names == ["train_step", "rl.rollout", "operator_rl.pdr_round", "pdr.draft", "pdr.refine"]
    for r in rows:
        assert r.arguments > 0 and r.bytes_per_device > 0, r
        assert r.fits and r.hbm_bytes == CHIPS["v5e"].hbm_bytes
        assert r.flops > 0 and r.est_seconds > 0
    train = rows[0]
    assert train.aliased > 0  # the donated train state is aliased to the output


@pytest.mark.slow
def test_operator_rl_sizes_in_the_docstring_come_from_the_code():
    """configs/rl/qwen3_8b_pdr.py states its prompt and row widths; recompute them from the code."""
    import re

    import jax

    from prd_jax.aot import programs as PG
    from prd_jax.aot.report import tokenizer_for
    from prd_jax.mesh import make_mesh
    from prd_jax.train.rl import RLStage

    path = os.path.join(ROOT, "configs/rl/qwen3_8b_pdr.py")
    config = load_config(path + ":v5p-128")
    config.rollout.mesh = ""  # one device here: the rollout layout (tensor=8) needs a pod
    cfg = PG.model_config(config)
    tok, _ = tokenizer_for(config)
    mesh = make_mesh("data=1", jax.devices()[:1])
    stage = RLStage(config, cfg, tok, mesh, load_data=False)
    shape = (stage.num_operator * stage.rl.samples_per_prompt, stage.rl.problem_tokens)
    calls = {c.name: c for c in PG.operator_calls(cfg, mesh, stage.operator.spec, stage.operator.ctx, shape, tok.pad_id)}
    (refine_row,) = stage.operator.widths(PG._abstract_params(cfg, mesh))
    doc = " ".join(open(path).read().split('"""')[1].split())
    stated = lambda pattern: int(re.search(pattern, doc).group(1).replace(",", ""))
    assert calls["pdr.draft"].prompt_len == stated(r"Draft prompt: (\d+) tokens")
    assert calls["pdr.draft"].prompts * calls["pdr.draft"].scfg.num_samples == 512 * 4
    assert calls["pdr.refine"].prompt_len == stated(r"Refine prompt: (\d+) tokens")
    assert calls["pdr.refine"].prompt_len + 16384 == stated(r"16384 generated: ([\d,]+) positions")
    assert calls["pdr.refine"].prompt_len + 16384 <= cfg.max_position
    assert calls["judge.pointwise"].prompt_len == stated(r"Judge prompt: (\d+) tokens")
    assert calls["judge.pointwise"].prompts == 512 * 4  # one rating call per draft
    # the forced-rating read runs over every judge row, chunked like the sampler
    assert calls["judge.rating.logits"].scfg.max_rows == stage.rl.sampling.max_rows
    assert refine_row == stated(r"training row is (\d+) wide")
    assert stage.width == refine_row and stated(r"the standard rows' (\d+)") == 1152 + 16384 - 1
    # a problem of max_problem_tokens tokens in the rollout's solve prompt fits max_prompt_tokens
    ids = tok.encode("seven " * 3000)[:stage.rl.problem_tokens]
    problem = tok.decode(ids)
    assert len(tok.encode(problem)) <= stage.rl.problem_tokens
    assert len(stage.prompt_ids(problem)) <= stage.rl.max_prompt_tokens == 1152


def test_largest_budgets_keeps_one_spec_per_group():
    from prd_jax.aot.programs import largest_budgets
    from prd_jax.operators.pdr import PDR
    from prd_jax.operators.long_cot import LongCoT

    specs = [LongCoT(max_new_tokens=8), LongCoT(max_new_tokens=32), LongCoT(max_new_tokens=16),
             PDR(schedule=(4, 1), k=2, max_new_tokens=8), PDR(schedule=(4, 1), k=2, max_new_tokens=64),
             PDR(schedule=(8, 1), k=2, max_new_tokens=8)]
    kept = largest_budgets(specs)
    assert kept == [LongCoT(max_new_tokens=32), PDR(schedule=(4, 1), k=2, max_new_tokens=64),
                    PDR(schedule=(8, 1), k=2, max_new_tokens=8)]


@pytest.mark.slow
def test_eval_estimate_counts_every_budgeted_call():
    """`prd-jax compile --estimate`: generated tokens by hand, tournament judge calls included."""
    import jax

    from prd_jax.aot import programs as PG
    from prd_jax.aot.report import tokenizer_for
    from prd_jax.mesh import make_mesh

    config = load_config(os.path.join(ROOT, "configs/eval/v1_best_of_n.py:smoke"))  # 2 problems, batch 2, k=1
    judge = dict(max_new_tokens=16, budget_multiple=2)
    config.operators = [dict(type="best_of_n", n=4, selector="pairwise_v1", max_new_tokens=48, candidate_max_tokens=48,
                             truncation_head=12, judge=judge),
                        dict(type="best_of_n", n=4, selector="round_robin", max_new_tokens=48,
                             candidate_max_tokens=48, truncation_head=12, judge=judge),
                        dict(type="long_cot", max_new_tokens=48)]
    tok, _ = tokenizer_for(config)
    rows = PG.eval_estimates(config, PG.model_config(config), make_mesh("data=1", jax.devices()[:1]), tok,
                             CHIPS["h200"])
    # per problem: 4 drafts x 48, plus the judge budget x 16 (Swiss: m N = 8 calls; round robin: C(4, 2) = 6)
    assert [r.generated_tokens for r in rows] == [2 * (4 * 48 + 8 * 16), 2 * (4 * 48 + 6 * 16), 2 * 48]
    assert all(r.seconds > 0 for r in rows) and rows[0].seconds > rows[1].seconds
