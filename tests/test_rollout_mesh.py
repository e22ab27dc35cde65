"""`config.rollout`: the rollout mesh and placement (issue 48 §1, §2 placement).

Settings and their errors; the split rule; greedy rollouts in a rollout layout equal those in
the training layout token for token; RL runs with a rollout layout or `split` give the same
update as the default (colocated, the training mesh) run."""

import collections
import importlib.util
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax import cli
from prd_jax.checkpoint import describe, latest_params
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.mesh import make_mesh
from prd_jax.model.config import NAMED_CONFIGS
from prd_jax.model.decoder import init_params
from prd_jax.model.weights import param_shardings
from prd_jax.operators.lm import ModelLM
from prd_jax.sampling import SamplingConfig
from prd_jax.train.config import TrainConfig
from prd_jax.train.rollout_mesh import RolloutLayout, RolloutSettings, rollout_mesh, split_devices, train_mesh

ROOT = os.path.join(os.path.dirname(__file__), "..")
RL_TINY = os.path.join(ROOT, "configs", "rl", "tiny.py")
# a random tiny policy, greedy rollouts, a reward with spread (below): two steps of a whole run
RUN = ["--config.model.init=random", "--config.model.overrides.hidden=32", "--config.model.overrides.intermediate=64",
       "--config.model.overrides.num_layers=1", "--config.data.num_train=64", "--config.data.difficulty=(1,)",
       "--config.rl.prompts_per_step=2", "--config.rl.samples_per_prompt=4", "--config.rl.max_new_tokens=8",
       "--config.optim.weight_decay=0.0", "--config.sampling.temperature=0.0", "--config.steps=2",
       "--config.checkpoint_every=1", "--config.mesh=fsdp=4"]


def typed(*overrides):
    return TrainConfig.from_config(apply_overrides(load_config(RL_TINY), list(overrides)))


# ----------------------------------------------------------------------------- settings

@pytest.mark.parametrize("overrides,message", [
    (["--config.rollout.placement=apart"], "config.rollout.placement='apart'; allowed: ('colocated', 'split')"),
    (["--config.rollout.mesh=tensor=x"], "config.rollout.mesh='tensor=x': mesh spec"),
    (["--config.rollout.mesh=pipe=2"], "config.rollout.mesh='pipe=2': mesh axes ['pipe'] unknown"),
    (["--config.rollout.sample_devices=-2", "--config.rollout.placement=split"],
     "config.rollout.sample_devices=-2; must be >= 0"),
    (["--config.rollout.sample_devices=2"], "applies to placement='split' (placement='colocated')"),
])
def test_bad_rollout_settings_are_named(overrides, message):
    with pytest.raises(ValueError) as e:
        typed(*overrides)
    assert message in str(e.value)


def test_rollout_settings_through_overrides_and_print_config(capsys):
    tc = typed("--config.rollout.mesh=tensor=4", "--config.rollout.placement=split", "--config.rollout.sample_devices=4")
    assert tc.rollout == RolloutSettings(mesh="tensor=4", placement="split", sample_devices=4)
    assert typed().rollout == RolloutSettings(mesh="", placement="colocated", sample_devices=0)
    with pytest.raises(ValueError, match=r"config.rollout: unknown keys \['devices'\]"):
        RolloutSettings.from_config({"devices": 2})
    try:
        cli.main(["train", "--config", RL_TINY, "--print-config", "--config.rollout.mesh=tensor=2"])
    except SystemExit as e:
        assert e.code in (0, None)
    resolved = json.loads(capsys.readouterr().out)
    assert resolved["rollout"] == {"mesh": "tensor=2", "placement": "colocated", "sample_devices": 0}


def test_sft_refuses_a_rollout_group():
    sft = os.path.join(ROOT, "configs", "sft", "tiny.py")
    with pytest.raises(ValueError, match="config.rollout=.* is set but config.stage='sft'"):
        TrainConfig.from_config(apply_overrides(load_config(sft), ["--config.rollout.placement=split"]))


# ----------------------------------------------------------------------------- the split rule and meshes

Dev = collections.namedtuple("Dev", "id process_index")


def test_split_rule_gives_each_process_its_first_local_devices():
    devs = jax.devices()  # 8 simulated devices, one process
    sample, train = split_devices(RolloutSettings(placement="split"), devs)
    assert [d.id for d in sample] == [0, 1, 2, 3] and [d.id for d in train] == [4, 5, 6, 7]
    sample, train = split_devices(RolloutSettings(placement="split", sample_devices=2), devs)
    assert [d.id for d in sample] == [0, 1] and [d.id for d in train] == [2, 3, 4, 5, 6, 7]
    assert split_devices(RolloutSettings(), devs) == (list(devs), list(devs))
    # two processes x 2 devices: one device of each process samples, the other trains
    fake = [Dev(0, 0), Dev(1, 0), Dev(2, 1), Dev(3, 1)]
    sample, train = split_devices(RolloutSettings(placement="split"), fake)
    assert [d.id for d in sample] == [0, 2] and [d.id for d in train] == [1, 3]
    for bad in (3, 4):  # not a multiple of 2 processes; no training device left
        with pytest.raises(ValueError, match=f"config.rollout.sample_devices={bad}"):
            split_devices(RolloutSettings(placement="split", sample_devices=bad), fake)


def test_rollout_mesh_shapes_and_devices():
    tc = typed("--config.mesh=fsdp=4")
    mesh = train_mesh(tc)
    assert rollout_mesh(tc, mesh) is mesh  # the default: today's code path, nothing resharded
    assert RolloutLayout(None, mesh, mesh).put(params := {"w": jnp.ones(3)}) is params
    r = rollout_mesh(typed("--config.mesh=fsdp=4", "--config.rollout.mesh=tensor=2"), mesh)
    assert dict(r.shape) == {"data": 2, "fsdp": 1, "tensor": 2} and set(r.devices.flat) == set(mesh.devices.flat)
    tc = typed("--config.mesh=fsdp=4", "--config.rollout.placement=split")
    mesh = train_mesh(tc)
    r = rollout_mesh(tc, mesh)
    assert [d.id for d in mesh.devices.flat] == [4, 5, 6, 7] and dict(mesh.shape)["fsdp"] == 4
    assert [d.id for d in r.devices.flat] == [0, 1, 2, 3] and dict(r.shape) == {"data": 1, "fsdp": 4, "tensor": 1}
    with pytest.raises(ValueError, match="training mesh holds sampling devices"):
        rollout_mesh(tc, make_mesh("fsdp=4"))
    with pytest.raises(ValueError, match=r"config.rollout.mesh='tensor=3' .* does not tile the 4 devices"):
        rollout_mesh(typed("--config.mesh=fsdp=4", "--config.rollout.mesh=tensor=3"), make_mesh("fsdp=4"))


# ----------------------------------------------------------------------------- rollouts in the rollout layout

@pytest.mark.parametrize("spec,devices", [("tensor=2", None), ("data=2,tensor=2", None), ("tensor=4", "split")])
def test_greedy_rollouts_in_the_rollout_layout_equal_the_training_layout(spec, devices):
    """fsdp=4 training layout on devices 0-3; the rollout layout on the same devices, or on
    devices 4-7 (split). Greedy tokens equal; logprobs to fp32 reduction-order rounding."""
    cfg = NAMED_CONFIGS["tiny"].replace(dtype="float32")
    train = make_mesh("fsdp=4")
    params = jax.jit(lambda: init_params(cfg, jax.random.key(0)), out_shardings=param_shardings(cfg, train))()
    rdevs = jax.devices()[4:] if devices else list(train.devices.flat)
    rmesh = make_mesh({"data": -1, **{k: int(v) for k, v in (p.split("=") for p in spec.split(","))}}, rdevs)
    layout = RolloutLayout(cfg, train, rmesh)
    rparams = layout.put(params)
    assert all(x.sharding.mesh is rmesh or x.sharding.mesh == rmesh for x in jax.tree.leaves(rparams))
    q = rparams["layers"]["attn"]["q"]
    assert q.sharding.spec != params["layers"]["attn"]["q"].sharding.spec  # resharded: no fsdp axis
    rng = np.random.default_rng(0)
    prompts = np.zeros((4, 12), np.int32)
    lengths = np.array([12, 7, 3, 9], np.int32)
    for i, n in enumerate(lengths):
        prompts[i, 12 - n:] = rng.integers(1, cfg.vocab_size, n)
    keys = jax.random.split(jax.random.key(1), 4)
    scfg = SamplingConfig(num_samples=2, max_new_tokens=10, temperature=0.0)

    def sample(p, mesh):
        fn = jax.jit(lambda p, x, n, k: ModelLM(p, cfg, 0, mesh).generate(x, n, k, scfg))
        return jax.tree.map(np.asarray, fn(p, jnp.asarray(prompts), jnp.asarray(lengths),
                                           jax.device_put(keys, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))))

    a, b = sample(params, train), sample(rparams, rmesh)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    assert len(set(map(tuple, a.tokens.tolist()))) > 1  # rows differ: the test sees the prompts
    np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------- whole RL runs

def _run(tmp_path, monkeypatch, name, *extra):
    from prd_jax.train import rl as rl_mod
    from prd_jax.train.run import train

    monkeypatch.setattr(rl_mod.TaskReward, "grades", lambda self, texts, keys: [  # a reward with spread
        {"reward": float(len(t) % 2), "correct": float(len(t) % 2)} for t in texts])
    workdir = str(tmp_path / name)
    metrics = train(apply_overrides(load_config(RL_TINY), RUN + list(extra)), workdir, progress=False)
    _, params = latest_params(workdir)
    lines = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl"))]
    return metrics, params, describe(workdir)["params_digest"], lines


@pytest.mark.slow
def test_rollout_layout_and_split_give_the_colocated_update(tmp_path, monkeypatch):
    """Two greedy RL steps (train mesh fsdp=4): colocated on the training mesh (the default),
    colocated with a tensor=2 rollout layout, split (rollouts on devices 0-3, training on 4-7)
    and split with a data=2,tensor=2 rollout layout. Greedy tokens do not depend on the layout
    (test above); the losses and params are then equal. The train step is the same program on
    the same layout in all four; the only difference is the rollout logprobs (`old_logp`),
    whose sums run in another order on another layout: equal here bit for bit (the tiny model
    lets XLA:CPU keep the order), and asserted within 1e-6 relative where the layout changes."""
    base_m, base_p, base_digest, base_lines = _run(tmp_path, monkeypatch, "colocated")
    assert base_lines[0]["response_length"] > 0 and len(base_lines) == 2
    for name, extra, exact in [("layout", ["--config.rollout.mesh=tensor=2"], False),
                               ("split", ["--config.rollout.placement=split"], True),
                               ("split_layout", ["--config.rollout.placement=split",
                                                 "--config.rollout.mesh=data=2,tensor=2"], False)]:
        m, p, digest, lines = _run(tmp_path, monkeypatch, name, *extra)
        for key in ("reward/mean", "response_length"):  # the same greedy rollouts, hence rewards
            assert [x[key] for x in lines] == [x[key] for x in base_lines], (name, key)
        if exact:
            assert digest == base_digest and m["loss"] == base_m["loss"], name
        np.testing.assert_allclose([x["loss"] for x in lines], [x["loss"] for x in base_lines], rtol=1e-6)
        for x, y in zip(jax.tree.leaves(p), jax.tree.leaves(base_p)):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name,metric", [("tiny_pdr", "reward/operator"), ("tiny_pairrl", "verifier/reward")])
@pytest.mark.slow
def test_operator_verifier_and_eval_rollouts_split_equal_colocated(tmp_path, monkeypatch, name, metric):
    """Operator RL (PDR rounds) and PairRL verifier rows, with the held-out eval (Long-CoT, and
    PDR for tiny_pdr) each step: split with a tensor=2 rollout layout on devices 0-3 against
    colocated on the training mesh. One greedy step: equal metrics and params."""
    config = os.path.join(ROOT, "configs", "rl", f"{name}.py")
    extra = ["--config.steps=1", "--config.rl.samples_per_prompt=2", "--config.eval_every=1",
             "--config.rl.eval_problems=2"]
    runs = []
    for placement in ([], ["--config.rollout.placement=split", "--config.rollout.mesh=tensor=2"]):
        monkeypatch.setattr("prd_jax.train.rl.TaskReward.grades", lambda self, texts, keys: [
            {"reward": float(len(t) % 2), "correct": float(len(t) % 2)} for t in texts])
        workdir = str(tmp_path / f"{name}{len(runs)}")
        from prd_jax.train.run import train

        runs.append((train(apply_overrides(load_config(config), RUN + extra + placement), workdir, progress=False),
                     describe(workdir)["params_digest"]))
    (a, da), (b, db) = runs
    assert metric in a and "eval/long_cot/b_seq" in a and a["eval/long_cot/b_seq"] > 0
    assert {k: v for k, v in a.items() if not k.startswith("time/") and "per_s" not in k} == \
        {k: v for k, v in b.items() if not k.startswith("time/") and "per_s" not in k}
    assert da == db


# ----------------------------------------------------------------------------- from the compiled programs

HAS_LIBTPU = importlib.util.find_spec("libtpu") is not None


@pytest.mark.skipif(not HAS_LIBTPU, reason="needs libtpu: pip install -e '.[tpu-aot]' (make test installs it)")
@pytest.mark.slow
def test_compiled_decode_step_gathers_no_params_in_the_rollout_layout():
    """The tiny model (bf16) compiled for v5e:2x2 (4 chips). On the fsdp=4 training layout a
    decode step all-gathers every sharded weight; on the rollout layout data=4 (weights whole
    on each chip) it holds no collective at all; on data=2,tensor=2 no param is gathered either
    (the vocab-sharded embedding table is looked up shard by shard, `layers.embed_tokens_local`;
    the matmuls only all-reduce activations).
    The reshard into data=4 is its own program, and its all-gathers move exactly the params
    that fsdp shards (all but the norms), in fp32, once per RL step."""
    from prd_jax.aot.collectives import collectives, reshard_lowered, total_bytes
    from prd_jax.aot.decode_step import decode_step_lowered
    from prd_jax.sampling import SamplingConfig
    from prd_jax.aot.report import target_devices
    from prd_jax.aot.chips import parse_target
    from prd_jax.model.decoder import param_shapes

    devs = target_devices(parse_target("v5e:2x2"))
    cfg = NAMED_CONFIGS["tiny"].replace(dtype="bfloat16")
    train = make_mesh("fsdp=4", devs)
    d, v = cfg.hidden, cfg.vocab_size

    scfg = SamplingConfig(max_new_tokens=32, temperature=0.0)

    def step(mesh):  # one sampler decode step over a 64-slot cache (aot.decode_step, as --estimate compiles it)
        return collectives(decode_step_lowered(cfg, mesh, scfg, rows=8, prompt_len=32, gen_len=32).compile().as_text())

    fsdp = step(train)
    gathered = [c for c in fsdp if c.kind == "all-gather"]
    # per layer: q, k, v, o, gate, up, down, each gathered whole (bf16) in the step; the embedding/head
    assert (v, d) in {c.shapes[0] for c in gathered} and len(gathered) >= 7 * cfg.num_layers
    layers = param_shapes(cfg)["layers"]
    matrices = sum(int(np.prod(s.shape)) for s in jax.tree.leaves((layers["attn"], layers["mlp"])))
    assert matrices == cfg.num_layers * (64 * 64 * 2 + 64 * 32 * 2 + 64 * 128 * 3)
    assert total_bytes(fsdp, "all-gather") >= 2 * matrices  # each layer weight at least once, in bf16

    whole = make_mesh("data=4", devs)
    assert step(whole) == []
    tensor = step(make_mesh("data=2,tensor=2", devs))
    # no param is gathered; what is: the token choice's per-row candidates over the vocab-sharded
    # logits, rows x a few values
    param_shaped = {tuple(s.shape) for s in jax.tree.leaves(param_shapes(cfg))}
    tensor_gathers = [c for c in tensor if c.kind == "all-gather"]
    assert tensor_gathers and not {c.shapes[0] for c in tensor_gathers} & param_shaped
    assert sum(c.bytes for c in tensor_gathers) < 256

    reshard = collectives(reshard_lowered(cfg, train, whole).compile().as_text())
    sharded = [s for s, sh in zip(jax.tree.leaves(param_shapes(cfg)), jax.tree.leaves(param_shardings(cfg, train)))
               if not sh.is_fully_replicated]
    by_hand = sum(int(np.prod(s.shape)) * s.dtype.itemsize for s in sharded)
    assert by_hand == 360_448  # 90,112 fp32 params: the tiny model less its 320 norm scales
    assert {c.kind for c in reshard} == {"all-gather"} and total_bytes(reshard) == by_hand


@pytest.mark.skipif(not HAS_LIBTPU, reason="needs libtpu: pip install -e '.[tpu-aot]' (make test installs it)")
@pytest.mark.slow
def test_compile_lists_the_rollout_programs_on_the_rollout_mesh():
    """`prd-jax compile`'s programs for configs/rl/tiny.py (bf16) on v5e:2x2 with train mesh
    fsdp=4: the whole sampler program (prefill and decode loop) all-gathers weight shards on
    the training layout and none with `rollout.mesh=data=4`, beside which the reshard is its
    own program moving every fsdp-sharded fp32 param once. Under split the rollout programs
    sample on the devices the split rule gives them and no reshard program is listed."""
    from prd_jax.aot.chips import parse_target
    from prd_jax.aot.collectives import collectives, total_bytes
    from prd_jax.aot.report import build
    from prd_jax.model.decoder import param_shapes

    def programs(*extra):
        config = apply_overrides(load_config(RL_TINY), ["--config.model.overrides.dtype=bfloat16", *extra])
        mesh, progs, _ = build(config, parse_target("v5e:2x2"))
        return mesh, {p.name: p for p in progs}

    def gathers(program):
        return [c for c in collectives(program.lower().compile().as_text()) if c.kind == "all-gather"]

    mesh, progs = programs("--config.mesh=fsdp=4")
    assert set(progs) == {"train_step", "rl.rollout"} and len(gathers(progs["rl.rollout"])) > 0
    _, progs = programs("--config.mesh=fsdp=4", "--config.rollout.mesh=data=4")
    assert set(progs) == {"train_step", "rl.rollout", "rl.reshard"} and gathers(progs["rl.rollout"]) == []
    cfg = NAMED_CONFIGS["tiny"].replace(**load_config(RL_TINY).model.overrides.to_dict(), dtype="bfloat16")
    sharded = [s for s, sh in zip(jax.tree.leaves(param_shapes(cfg)), jax.tree.leaves(param_shardings(cfg, mesh)))
               if not sh.is_fully_replicated]
    assert total_bytes(gathers(progs["rl.reshard"])) == sum(int(np.prod(s.shape)) * 4 for s in sharded) == 1_638_400
    mesh, progs = programs("--config.mesh=fsdp=2", "--config.rollout.placement=split", "--config.rollout.mesh=data=2")
    assert set(progs) == {"train_step", "rl.rollout"} and dict(mesh.shape)["fsdp"] == 2
    assert gathers(progs["rl.rollout"]) == []
    params_sharding = jax.tree.leaves(progs["rl.rollout"].lower().compile().input_shardings[0][0])[0]
    assert len(params_sharding.device_set) == 2 and not params_sharding.device_set & set(mesh.devices.flat)
