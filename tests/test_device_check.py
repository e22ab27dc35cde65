"""The accelerator check (issue 48 §4): `benchmarks/device_check.sh` parses, and its CPU dry
run prints every stage's figure beside its reference; the byte and FLOP models it reports
against hand counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "device_check.sh")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import device_check  # noqa: E402
import sampler_throughput  # noqa: E402
import train_step  # noqa: E402

# The dry run's stand-in for Qwen3-1.7B: V=256, D=64, F=128, 2 layers, 4 heads, 2 KV heads of 16.
# Per layer: q 64*64 + k, v 2*64*32 + o 64*64 + q/k norms 2*16 + MLP 3*64*128 + 2 norms 2*64
# = 37,024; two layers, the tied table 256*64 and the final norm 64: 90,496 parameters.
TINY_QWEN3_PARAMS = 2 * 37_024 + 256 * 64 + 64


def test_script_parses():
    assert subprocess.run(["bash", "-n", SCRIPT], capture_output=True).returncode == 0


def test_script_rejects_bad_wheel_folders(tmp_path):
    for args, message in ((["--wheels", str(tmp_path / "absent")], "is not a folder"),
                          (["--wheels", str(tmp_path)], "no .whl files in"),
                          (["--wheels"], "--wheels needs a folder"),
                          (["--fetch-wheels"], "--fetch-wheels needs a folder")):
        proc = subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)


def test_decode_bytes_hand_count():
    cfg = device_check.TINY["smollm2-135m"].replace(dtype="bfloat16", param_dtype="bfloat16")
    # tiny llama: per layer 4*64*64 - 2*64*32 (GQA) + 3*64*128 + 2*64 = 36,992; x2 + 256*64 + 64.
    params = 2 * 36_992 + 256 * 64 + 64
    assert cfg.num_params() == params == 90_432
    # batch 2, 29 positions: 2 bytes per weight and per cached element (2 layers x K and V x 2 heads x 16).
    assert sampler_throughput.decode_bytes_per_step(cfg, 2, 29) == 2 * params + 2 * (2 * 29 * 2 * 2 * 2 * 16)
    untied = cfg.replace(tie_embeddings=False)  # the input table is read for the batch's rows only
    assert sampler_throughput.decode_bytes_per_step(untied, 2, 29) == (
        2 * (params + 2 * 64) + 2 * (2 * 29 * 2 * 2 * 2 * 16))


def test_train_flops_hand_count():
    cfg = device_check.TINY["qwen3-1.7b"]
    assert cfg.num_params() == TINY_QWEN3_PARAMS
    tokens = 2 * 32  # 6 N T + 12 L H Dh S T (PaLM appendix B)
    assert train_step.model_flops_per_step(cfg, 2, 32) == 6 * TINY_QWEN3_PARAMS * tokens + 12 * 2 * 4 * 16 * 32 * tokens


def test_requires_closure_follows_requirements_without_extras():
    closure = device_check.requires_closure(["flax"])
    assert {"flax", "jax", "optax", "numpy"} <= closure
    assert "pytest" not in device_check.requires_closure(["ml-collections"])  # an extra's ("dev") only


def test_bad_arguments_name_the_field(capsys):
    with pytest.raises(SystemExit):
        device_check.main(["--dry-run", "--stages", "greedy,nope"])
    assert "--stages='greedy,nope'; allowed" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the test process's jax runs on the CPU
        device_check.main(["--stages", "moe"])
    assert "the full check needs a GPU" in capsys.readouterr().err


@pytest.fixture(scope="module")
def dry_run():
    env = dict(os.environ, PYTHON=sys.executable, DEVICE_CHECK_DRY_RUN="1")
    proc = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, env=env, timeout=1800, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
               if line.startswith(device_check.TAG + " ")]
    return {"records": records, "stdout": proc.stdout}


def _stage(dry_run, name):
    return [r for r in dry_run["records"] if r["stage"] == name]


@pytest.mark.slow
@pytest.mark.peer
def test_dry_run_greedy_equals_transformers(dry_run):
    (greedy,) = _stage(dry_run, "greedy")
    plan = device_check.DRY
    assert greedy["rows"] == plan.greedy_rows and greedy["new_tokens"] == plan.greedy_tokens
    assert greedy["jax_tokens"] == greedy["hf_tokens"]
    assert greedy["equal"] == greedy["total"] == plan.greedy_rows * plan.greedy_tokens
    assert greedy["first_divergence"] == [None] * plan.greedy_rows
    assert "tokens equal" in dry_run["stdout"]


@pytest.mark.slow
@pytest.mark.peer
def test_dry_run_sampler_beside_transformers_and_roofline(dry_run):
    rows = _stage(dry_run, "sampler")
    assert [(r["model"].split()[1], r["batch"]) for r in rows] == [
        ("llama", 2), ("llama", 4), ("qwen3", 2), ("qwen3", 4)]
    for r in rows:
        assert r["jax_tokens_per_s"] > 0 and r["hf_tokens_per_s"] > 0
        assert r["ratio"] == pytest.approx(r["jax_tokens_per_s"] / r["hf_tokens_per_s"])
        assert r["hbm_bytes_per_s"] == 4.8e12
        steps = {k: r[f"{k}_tokens_per_s"] / r["batch"] for k in ("jax", "hf")}
        for k, per_s in steps.items():
            assert r[f"{k}_hbm_share"] == pytest.approx(r["decode_bytes_per_step"] * per_s / 4.8e12)
    # tiny qwen3 at batch 2: prompts of 24 and 31 tokens, 4 new: 27 + 2 positions per row.
    assert rows[2]["decode_bytes_per_step"] == 2 * TINY_QWEN3_PARAMS + 2 * (2 * 29 * 2 * 2 * 2 * 16)


@pytest.mark.slow
@pytest.mark.peer
def test_dry_run_train_mfu_against_both_peaks(dry_run):
    (train,) = _stage(dry_run, "train")
    assert train["model_flops_per_step"] == 6 * TINY_QWEN3_PARAMS * 64 + 12 * 2 * 4 * 16 * 32 * 64
    assert train["peak_flops"] == device_check.H200_BF16_DENSE_FLOPS == 989.4e12
    assert train["mfu"] == pytest.approx(train["model_flops_per_step"] / train["step_s"] / 989.4e12)
    assert train["mfu_vs_matmul"] == pytest.approx(
        train["model_flops_per_step"] / train["step_s"] / train["matmul_peak_flops"])
    assert 0 < train["mfu_vs_matmul"]


@pytest.mark.slow
@pytest.mark.peer
def test_dry_run_moe_grouped_beside_dense(dry_run):
    (moe,) = _stage(dry_run, "moe")
    for shape in ("decode", "train"):
        r = moe[shape]
        assert r["grouped_ms"] > 0 and r["dense_ms"] > 0
        assert r["dense_over_grouped"] == pytest.approx(r["dense_ms"] / r["grouped_ms"])


@pytest.mark.slow
@pytest.mark.peer
def test_dry_run_imports_are_listed_and_ends(dry_run):
    (imports,) = _stage(dry_run, "imports")
    assert imports["unlisted"] == []
    assert {"gguf", "ml-collections"} <= set(imports["beyond_image"])  # the tokenizer, the configs
    assert imports["wheels"] == ["gguf", "ml-collections"]
    (done,) = _stage(dry_run, "done")
    assert done["dry_run"] is True and done["backend"] == "cpu"
    assert [r["stage"] for r in dry_run["records"]][-2:] == ["imports", "done"]
