"""`config.loggers` (prd_jax.tracking): validation, the W&B mode rule, an eval's summary and a
training run's metrics read back from W&B's offline record file and TensorBoard's events, and
the eval progress bar (issue 47 §2)."""

from __future__ import annotations

import glob
import json
import os

import ml_collections
import numpy as np
import pytest

import fakes
from prd_jax import tracking
from prd_jax.config_io import apply_overrides, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVAL = os.path.join(ROOT, "configs", "eval", "smollm2_gsm8k.py")
SFT = os.path.join(ROOT, "configs", "sft", "tiny.py")
FAKE_KEY = "f" * 8 + "0123456789abcdef0123456789abcdef"  # 40 characters, as a W&B key; never valid


def test_loggers_and_wandb_fields_are_validated():
    assert tracking.check_loggers(["wandb", "tensorboard", "wandb"]) == ("wandb", "tensorboard")
    with pytest.raises(ValueError, match=r"config.loggers=\('tb',\): unknown \['tb'\]; allowed: \('tensorboard', 'wandb'\)"):
        tracking.check_loggers(("tb",))
    with pytest.raises(ValueError, match="config.loggers='wandb'; must be a tuple of names"):
        tracking.check_loggers("wandb")
    with pytest.raises(ValueError, match=r"config.wandb.mode='cloud'; allowed: \('', 'online', 'offline', 'disabled'\)"):
        tracking.WandbConfig(mode="cloud")
    with pytest.raises(ValueError, match=r"config.wandb: unknown keys \['projekt'\]; allowed: \['project'"):
        tracking.WandbConfig.from_config({"projekt": "x"})


def test_overrides_reach_eval_and_train_configs():
    from prd_jax.config_check import check_train_config
    from prd_jax.eval_config import EvalConfig

    both = ["--config.loggers=('tensorboard', 'wandb')", "--config.wandb.project=ablations",
            "--config.wandb.mode=offline"]
    ec = EvalConfig.from_config(apply_overrides(load_config(EVAL), both))
    assert (ec.loggers, ec.wandb.project, ec.wandb.mode, ec.wandb.name) == (("tensorboard", "wandb"), "ablations",
                                                                             "offline", "")
    assert EvalConfig.from_config(load_config(EVAL)).loggers == ()  # eval: no tracker unless asked
    train = apply_overrides(load_config(SFT), both)
    assert tuple(train.loggers) == ("tensorboard", "wandb") and train.wandb.project == "ablations"
    check_train_config(train)
    with pytest.raises(ValueError, match="config.loggers.*allowed: \\('tensorboard', 'wandb'\\)"):
        check_train_config(apply_overrides(load_config(SFT), ["--config.loggers=('mlflow',)"]))
    with pytest.raises(ValueError, match="config.loggers"):
        EvalConfig.from_config(apply_overrides(load_config(EVAL), ["--config.loggers=('mlflow',)"]))


def test_wandb_mode_is_offline_without_a_key(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.delenv("NETRC", raising=False)
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    assert tracking.wandb_mode(tracking.WandbConfig()) == "offline"
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    assert tracking.wandb_mode(tracking.WandbConfig()) == "online"
    assert tracking.wandb_mode(tracking.WandbConfig(mode="offline")) == "offline"  # the config decides first
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert tracking.wandb_mode(tracking.WandbConfig()) is None  # W&B reads WANDB_MODE itself


def read_wandb(workdir: str):
    """(history {step: {key: value}}, config, summary, run dir) of the one offline run under
    WORKDIR/wandb, read from its `run-*.wandb` record file with W&B's own reader."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal.datastore import DataStore

    [run_dir] = glob.glob(os.path.join(workdir, "wandb", "offline-run-*"))
    [path] = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    key = lambda item: item.key or ".".join(item.nested_key)  # noqa: E731
    history, config, summary = {}, {}, {}
    store = DataStore()
    store.open_for_scan(path)
    while (data := store.scan_data()) is not None:
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.setdefault(rec.history.step.num, {}).update(
                {key(i): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "config":
            config.update({key(i): json.loads(i.value_json) for i in rec.config.update})
        elif kind == "summary":
            summary.update({key(i): json.loads(i.value_json) for i in rec.summary.update})
    return history, {k: v for k, v in config.items() if not k.startswith("_")}, summary, run_dir


def read_events(workdir: str) -> dict:
    """{tag: [(step, value)]} of the TensorBoard events in `workdir` (scalars as floats, texts as
    str, images as their encoded PNG bytes)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(workdir, size_guidance={"tensors": 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["tensors"]:
        for ev in acc.Tensors(tag):
            value = tensor_util.make_ndarray(ev.tensor_proto)
            value = value.item() if value.ndim == 0 else value
            out.setdefault(tag, []).append((ev.step, value.decode() if isinstance(value, bytes) else value))
    return out


@pytest.fixture(scope="module")
def tiny_eval():
    """A random tiny model on two synthetic problems (CharVocab): an eval in seconds."""
    return fakes.tiny_eval([dict(type="long_cot", max_new_tokens=4),
                            dict(type="sr", rounds=1, max_new_tokens=4, candidate_max_tokens=4, truncation_head=2)])


def _summary_md_means(workdir: str) -> dict:
    """operator -> mean@k as summary.md prints it (3 decimals)."""
    lines = open(os.path.join(workdir, "summary.md")).read().splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| operator | problems"))
    cols = [c.strip() for c in lines[head].strip("|").split("|")]
    out = {}
    for ln in lines[head + 2:]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip("|").split("|")]
        out[cells[0]] = float(cells[cols.index("mean@k")].split()[0])
    return out


@pytest.mark.slow
def test_eval_summary_reads_back_from_wandb_offline_and_tensorboard(tiny_eval, tmp_path, monkeypatch):
    from prd_jax.evaluate import TRACKED, evaluate

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)  # a key in the environment: must reach no file
    config, model, rows = tiny_eval
    config = ml_collections.ConfigDict(config.to_dict())
    config.loggers = ("tensorboard", "wandb")
    config.wandb = dict(project="prd-jax-tests", name="tiny-eval", mode="offline")
    workdir = str(tmp_path / "eval")
    table = evaluate(config, workdir, model=model, rows=rows, progress=False)

    history, logged_config, summary, run_dir = read_wandb(workdir)
    assert os.path.dirname(os.path.dirname(run_dir)) == workdir  # the run's files are in the workdir
    assert list(history) == [0]
    means = _summary_md_means(workdir)
    assert set(means) == {t["operator"] for t in table} and len(means) == 2
    for t in table:
        op = t["operator"]
        for name in TRACKED:
            assert history[0][f"eval/{op}/{name}"] == pytest.approx(t[name], nan_ok=True)
            assert summary[f"eval/{op}/{name}"] == pytest.approx(t[name], nan_ok=True)
        assert round(history[0][f"eval/{op}/mean_at_k"], 3) == means[op]  # the numbers summary.md prints
    assert logged_config == json.loads(json.dumps(config.to_dict()))
    media = os.path.join(run_dir, "files", history[0]["eval/summary.path"])
    logged = json.load(open(media))
    assert logged["columns"][:4] == ["operator", "problems", "k", "mean_at_k"]
    assert [r[:4] for r in logged["data"]] == [[t["operator"], t["problems"], t["k"], t["mean_at_k"]] for t in table]
    png = os.path.join(run_dir, "files", history[0]["eval/pareto.path"])
    from PIL import Image

    assert Image.open(png).size == Image.open(os.path.join(workdir, "pareto.png")).size
    md = open(os.path.join(run_dir, "files", history[0]["eval/summary_md.path"])).read()
    assert "| operator | problems | k | mean@k |" in md

    events = read_events(workdir)
    for t in table:
        [(step, value)] = events[f"eval/{t['operator']}/mean_at_k"]
        assert step == 0 and value == pytest.approx(t["mean_at_k"], rel=1e-6)
    summary_md = open(os.path.join(workdir, "summary.md")).read()
    [(_, text)] = events["eval/summary_md"]
    assert text in summary_md and text.startswith("| operator |")
    assert json.loads(events["config"][0][1].strip("`").removeprefix("json\n")) == json.loads(json.dumps(config.to_dict()))
    [(_, image)] = events["eval/pareto"]
    assert image[2][:4] == b"\x89PNG"

    leaked = [p for p in glob.glob(os.path.join(workdir, "**"), recursive=True)
              if os.path.isfile(p) and FAKE_KEY.encode() in open(p, "rb").read()]
    assert leaked == []


@pytest.mark.slow
def test_training_metrics_read_back_from_wandb_offline_and_tensorboard(tmp_path, monkeypatch):
    from prd_jax.train.run import train

    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    config = apply_overrides(load_config(SFT), ["--config.steps=2", "--config.loggers=('tensorboard', 'wandb')",
                                                "--config.wandb.project=prd-jax-tests"])
    workdir = str(tmp_path / "sft")
    train(config, workdir, progress=False)
    lines = [json.loads(ln) for ln in open(os.path.join(workdir, "metrics.jsonl"))]
    assert [ln["step"] for ln in lines] == [1, 2]
    history, logged_config, summary, _ = read_wandb(workdir)  # offline: no key in this environment
    events = read_events(workdir)
    for line in lines:
        step = line["step"]
        for name, value in line.items():
            if name != "step":
                assert history[step][name] == pytest.approx(value, nan_ok=True), name
                assert dict(events[name])[step] == pytest.approx(value, rel=1e-6, nan_ok=True), name
    assert summary["loss"] == pytest.approx(lines[-1]["loss"])
    assert logged_config == json.loads(json.dumps(config.to_dict()))
    assert json.loads(events["config"][0][1].strip("`").removeprefix("json\n")) == logged_config


@pytest.mark.slow
def test_eval_progress_bar_counts_problems_and_tokens(tiny_eval, tmp_path, capsys):
    from prd_jax.evaluate import evaluate

    config, model, rows = tiny_eval
    evaluate(config, str(tmp_path / "quiet"), model=model, rows=rows, progress=False)
    assert "eval" not in capsys.readouterr().err  # no bar
    table = evaluate(config, str(tmp_path / "shown"), model=model, rows=rows, progress=True)
    err = capsys.readouterr().err
    final = err.replace("\r", "\n").strip().splitlines()[-1]
    assert "8/8" in final and "problem" in final  # 2 operators x 2 samples x 2 problems
    tokens = sum(json.loads(ln)["b_total"] for ln in open(tmp_path / "shown" / "results.jsonl"))
    rate = float(final.split("tok/s=")[1].split(",")[0].rstrip("]"))
    assert tokens > 0 and rate > 0 and len(table) == 2
    assert "requests" not in final  # in-graph: no requests to count


def test_eval_cli_no_progress_reaches_the_harness(monkeypatch):
    from prd_jax import cli, evaluate

    seen = {}
    monkeypatch.setattr(evaluate, "evaluate", lambda config, workdir, progress=True: seen.update(progress=progress))
    for argv, expected in ((["--no-progress"], False), ([], True)):
        cli.main(["eval", "--config", EVAL, "--workdir", "W", *argv])
        assert seen.pop("progress") is expected


def test_remote_progress_counts_requests(capsys):
    from prd_jax.evaluate import Progress

    bar = Progress(4, True)  # the counters are the LM's (`BatchStats.counts`): a remote LM's requests
    bar.update(2, tokens=10, requests=3)
    bar.update(2, tokens=0, requests=5)
    bar.close()
    final = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "4/4" in final and "requests=8" in final and "tok/s=" in final
    assert np.isclose(bar.tokens, 10) and bar.counts["requests"] == 8
