"""One sampling config (issue 35 §2): `prd_jax.sampling.Sampling` is declared once and read by
eval (`EvalConfig`), RL (`RLConfig`), the operator context and every sampler call
(`SamplingConfig`); old override spellings fail naming the new field; `EvalConfig` validates."""

import dataclasses
import glob
import importlib.util
import os

import ml_collections
import pytest

from prd_jax import sampling as S
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.config_schema import MOVED
from prd_jax.eval_config import EvalConfig
from prd_jax.operators import specs
from prd_jax.operators.calls import sampling_config
from prd_jax.train.rl import RLConfig

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
EVAL = os.path.join(ROOT, "configs", "eval", "smollm2_gsm8k.py")
RL = os.path.join(ROOT, "configs", "rl", "tiny.py")
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_rows", "compact_min_rows", "compact_ratio", "prefill_groups",
                 "cache_window", "prompt_groups", "decode_layers", "kv_cache_dtype")


def test_one_declaration():
    """The operator specs re-export the one class; a sampler call's config is a `Sampling`;
    neither RLConfig nor EvalConfig declares a sampler setting of its own."""
    assert specs.Sampling is S.Sampling
    assert issubclass(S.SamplingConfig, S.Sampling)
    assert S.CONFIG_KEYS == SAMPLING_KEYS
    own = {f.name for f in dataclasses.fields(S.SamplingConfig)} - {f.name for f in dataclasses.fields(S.Sampling)}
    assert own == {"max_new_tokens", "num_samples", "think_budget", "think_end"}
    for cls in (RLConfig, EvalConfig):
        names = {f.name for f in dataclasses.fields(cls)}
        assert not names & (set(SAMPLING_KEYS) | {"max_rows_per_call"}), cls
        assert dataclasses.fields(cls)[[f.name for f in dataclasses.fields(cls)].index("sampling")].type in (
            "Sampling", S.Sampling)


def test_sampling_config_of_a_run_sampling():
    run = S.Sampling(temperature=0.6, top_p=0.95, top_k=20, stop_ids=(2, 7), max_rows=64, compact_min_rows=8,
                     compact_ratio=0.75, prefill_groups=4, cache_window=64)
    call = S.SamplingConfig.of(run, 32, num_samples=4)
    assert call.settings() == run.settings() and (call.max_new_tokens, call.num_samples) == (32, 4)
    assert S.SamplingConfig(32, **run.settings(), num_samples=4) == call
    with pytest.raises(TypeError):  # only the budget is positional: no silent shift of T into num_samples
        S.SamplingConfig(8, 0.0)
    with pytest.raises(ValueError, match="max_rows=2; must be 0 .* or >= num_samples=4"):
        S.SamplingConfig.of(S.Sampling(max_rows=2), 8, num_samples=4)
    ctx = type("Ctx", (), {"sampling": dataclasses.replace(run, max_rows=2), "think_end": ()})()
    assert sampling_config(ctx, 16, num_samples=4).max_rows == 4  # an operator call raises its cap to one prompt's M


def test_config_sampling_validates_and_names_the_field():
    assert S.Sampling.from_config(None) == S.Sampling()
    assert S.Sampling.from_config(S.Sampling().to_config(), stop_ids=[3]).stop_ids == (3,)
    with pytest.raises(ValueError, match=r"config.sampling: unknown keys \['temprature'\]; allowed: \["):
        S.Sampling.from_config(dict(temprature=1.0))
    with pytest.raises(ValueError, match=r"config.sampling: unknown keys \['stop_ids'\]"):
        S.Sampling.from_config(dict(stop_ids=(1,)))  # the tokenizer's, not a config key
    for key, bad in [("temperature", -0.5), ("top_p", 0.0), ("top_k", -1), ("max_rows", -1),
                     ("compact_ratio", 1.0), ("cache_window", -2), ("decode_layers", "fast")]:
        with pytest.raises(ValueError, match=f"sampling.{key}="):
            S.Sampling.from_config({key: bad})


OLD_SPELLINGS = [(EVAL, "temperature", "sampling.temperature"), (EVAL, "top_p", "sampling.top_p"),
                 (EVAL, "top_k", "sampling.top_k"), (EVAL, "max_rows_per_call", "sampling.max_rows"),
                 (EVAL, "cache_window", "sampling.cache_window"), (EVAL, "prefill_groups", "sampling.prefill_groups"),
                 (RL, "rl.temperature", "sampling.temperature"), (RL, "rl.top_p", "sampling.top_p"),
                 (RL, "rl.max_rows_per_call", "sampling.max_rows"),
                 (RL, "rl.compact_min_rows", "sampling.compact_min_rows"),
                 (RL, "rl.compact_ratio", "sampling.compact_ratio"), (RL, "rl.cache_window", "sampling.cache_window"),
                 (RL, "rl.prefill_groups", "sampling.prefill_groups")]


@pytest.mark.parametrize("path,old,new", OLD_SPELLINGS, ids=[o for _, o, _ in OLD_SPELLINGS])
def test_old_override_spellings_name_the_new_field(path, old, new):
    assert MOVED[old] == new
    config = load_config(path)
    with pytest.raises(ValueError, match=f"config.{old} moved to config.{new}"):
        apply_overrides(config, [f"--config.{old}=1"])
    parent, _, leaf = new.rpartition(".")
    value = 0.5 if leaf in ("temperature", "top_p", "compact_ratio") else 2
    apply_overrides(config, [f"--config.{new}={value}"])  # the new spelling sets it
    assert config.sampling[leaf] == value


def test_config_files_with_old_keys_name_the_new_field():
    """A config file written before the move (keys set in the file, not overridden) fails as it is read."""
    ev = load_config(EVAL)
    ev.temperature = 0.5
    with pytest.raises(ValueError, match="config.temperature moved to config.sampling.temperature"):
        EvalConfig.from_config(ev)
    rl = load_config(RL)
    rl.rl.cache_window = 64
    with pytest.raises(ValueError, match="config.rl.cache_window moved to config.sampling.cache_window"):
        RLConfig.from_config(rl)
    rl = load_config(RL)
    rl.rl.sampling = dict(temperature=0.5)
    with pytest.raises(ValueError, match="config.rl.sampling: the sampling config is top-level"):
        RLConfig.from_config(rl)


def test_rl_reads_every_sampling_setting():
    """RL once lacked `prefill_groups` (its copy drifted): now every key of `config.sampling`
    reaches the rollouts' `SamplingConfig` and the operator context's sampling."""
    values = dict(temperature=0.7, top_p=0.9, top_k=5, max_rows=16, compact_min_rows=4, compact_ratio=0.25,
                  prefill_groups=2, cache_window=32, decode_layers="scan")
    config = apply_overrides(load_config(RL), [f"--config.sampling.{k}={v}" for k, v in values.items()])
    rl = RLConfig.from_config(config)
    rollout, ctx = rl.sampler_config(8, 8, (1, 2)), rl.call_sampling((1, 2))
    for k, v in values.items():
        assert getattr(rollout, k) == getattr(ctx, k) == v, k
    assert rollout.stop_ids == ctx.stop_ids == (1, 2) and rollout.num_samples == 8
    with pytest.raises(ValueError, match="config.sampling.max_rows=4; must be 0 or >= config.rl.samples_per_prompt=8"):
        RLConfig.from_config(apply_overrides(load_config(RL), ["--config.sampling.max_rows=4"]))
    with pytest.raises(ValueError, match="sampling.prompt_groups=2 applies to the host `Sampler` only"):
        RLConfig.from_config(apply_overrides(load_config(RL), ["--config.sampling.prompt_groups=2"]))


def test_eval_config_is_typed_and_validated():
    ec = EvalConfig.from_config(apply_overrides(load_config(EVAL), ["--config.sampling.max_rows=64"]))
    assert (ec.model, ec.k_samples, ec.sampling.max_rows, ec.backend.remote) == (
        "smollm2-135m", load_config(EVAL).k_samples, 64, False)
    assert ec.settings()["temperature"] == 1.0  # settings.json keeps the key older workdirs used
    raw = load_config(EVAL).to_dict()
    cases = [(dict(raw, k_samples=0), r"config.k_samples=0; must be an integer >= 1"),
             (dict(raw, seed=None), r"config.seed=None; must be an integer \(there is no default seed\)"),
             (dict(raw, operators=[]), r"config.operators is empty"),
             (dict(raw, num_problem=3), r"eval config: unknown keys \['num_problem'\]; allowed: \['model'"),
             ({k: v for k, v in raw.items() if k != "batch_size"}, r"missing keys \['batch_size'\]"),
             (dict(raw, sampling=dict(prompt_groups=4)), r"sampling.prompt_groups=4 applies to the host"),
             (dict(raw, backend=dict(kind="vllm")), r"config.backend.kind='vllm'")]
    for config, message in cases:
        with pytest.raises(ValueError, match=message):
            EvalConfig.from_config(ml_collections.ConfigDict(config))


def _documented(path):
    """(path, arg) for each arg a config file documents (its ARGS, else the default)."""
    spec = importlib.util.spec_from_file_location("config_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [(path, arg) for arg in getattr(module, "ARGS", (None,))]


def test_every_eval_and_rl_config_has_the_whole_sampling_block():
    """Every eval and RL config sets `config.sampling` from `Sampling.to_config()`: every key
    is there (so each can be overridden) and none is left at top level or under `rl`."""
    cases = [case for kind in ("eval", "rl") for path in sorted(glob.glob(os.path.join(ROOT, "configs", kind, "*.py")))
             if os.path.basename(path) != "__init__.py" for case in _documented(path)]
    for path, arg in cases:
        config = load_config(path if arg is None else f"{path}:{arg}")
        if "model" not in config:
            continue  # not an eval or RL run (configs/eval/adaptive_pdr_demo.py is a `prd-jax demo` config)
        assert tuple(sorted(config.sampling.keys())) == tuple(sorted(SAMPLING_KEYS)), (path, arg)
        rl = config.get("rl") or {}
        assert not [k for k in MOVED if k in config or k.split(".")[-1] in rl and k.startswith("rl.")], (path, arg)
    assert len(cases) >= 60
