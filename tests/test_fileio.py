"""Workdir files through `prd_jax.fileio` on a local path and on a URI filesystem.

TensorFlow's in-memory `ram://` filesystem stands in for gs://: a URI takes the same
`tf.io.gfile` path a bucket takes, with no network. (etils.epath, under the orbax
checkpoints, accepts only gs/s3/az/hf URIs and has no in-memory one, nor does it support
fsspec's memory://.)
"""

import json
import os
import re
import uuid

import ml_collections
import pytest

import fakes
from prd_jax import fileio


@pytest.fixture(params=["local", "ram"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "run")
    return f"ram://prd_jax_tests/{uuid.uuid4().hex}/run"


def test_round_trip_append_and_torn_line(root):
    assert fileio.is_uri(root) == root.startswith("ram://")
    fileio.makedirs(root)
    fileio.makedirs(root)  # exists already: fine
    path = os.path.join(root, "metrics.jsonl")
    assert not fileio.exists(path)
    fileio.write_text(path, '{"step": 1}\n')
    with fileio.open(path, "a") as f:
        f.write('{"step": 2}\n\n{"step": ')  # a blank line and a torn last line (killed writer)
    assert fileio.exists(path) and fileio.read_jsonl(path) == [{"step": 1}, {"step": 2}]
    fileio.write_text(os.path.join(root, "settings.json"), json.dumps({"seed": 0, "top_p": 0.95}))
    assert fileio.read_json(os.path.join(root, "settings.json")) == {"seed": 0, "top_p": 0.95}
    fileio.write_text(os.path.join(root, "settings.json"), "{}")  # replaced, not overwritten in place
    assert fileio.read_json(os.path.join(root, "settings.json")) == {}
    fileio.write_bytes(os.path.join(root, "pareto.png"), b"\x89PNG\x00")
    with fileio.open(os.path.join(root, "pareto.png"), "rb") as f:
        assert f.read() == b"\x89PNG\x00"


def test_trainer_files_and_continual_check(root):
    from prd_jax.tracking import Tracker
    from prd_jax.train.setup import check_continual
    from prd_jax.train.trainer import MetricsLog, save_config

    # no logger (TensorBoard events are clu's, through epath: gs:// but no ram://); this test is
    # about metrics.jsonl
    fileio.makedirs(root)
    save_config(ml_collections.ConfigDict({"stage": "rl", "rl": {"operator_fraction": 0.0}}), root)
    log = MetricsLog(root, 0, 2, progress=False, tracker=Tracker())
    log.write(1, {"loss": 1.5})
    log.write(2, {"loss": 1.25})
    log.close()
    assert fileio.read_jsonl(os.path.join(root, "metrics.jsonl")) == [{"step": 1, "loss": 1.5},
                                                                    {"step": 2, "loss": 1.25}]
    MetricsLog(root, 1, 2, progress=False, tracker=Tracker()).close()  # resumed at step 1: the step-2 line goes
    assert fileio.read_jsonl(os.path.join(root, "metrics.jsonl")) == [{"step": 1, "loss": 1.5}]
    # continual mode reads the baseline run's config.json from the same filesystem
    continual = ml_collections.ConfigDict({"continual": True, "model": {"init": "checkpoint", "init_workdir": root}})
    check_continual(continual)
    save_config(ml_collections.ConfigDict({"stage": "rl", "rl": {"operator_fraction": 0.5}}), root)
    with pytest.raises(ValueError, match="is not a baseline RL run.*operator_fraction=0.5"):
        check_continual(continual)
    continual.model.init_workdir = os.path.join(root, "missing")
    with pytest.raises(ValueError, match="needs config.model.init='checkpoint'.*no .*missing/config.json"):
        check_continual(continual)


@pytest.fixture(scope="module")
def tiny_eval():
    """(config, model, rows) of a cheap eval: a random tiny model on two synthetic problems."""
    return fakes.tiny_eval([dict(type="long_cot", max_new_tokens=4)])


@pytest.mark.slow
def test_eval_files_equal_on_both_filesystems(tmp_path, tiny_eval):
    from prd_jax.eval_config import EvalConfig
    from prd_jax.evaluate import check_settings, evaluate

    config, model, rows = tiny_eval
    roots = {"local": str(tmp_path / "eval"), "ram": f"ram://prd_jax_tests/{uuid.uuid4().hex}/eval"}
    files = {}
    for kind, root in roots.items():
        table = evaluate(config, root, model=model, rows=rows, progress=False)
        assert table[0]["problems"] == 2 and table[0]["k"] == 2
        assert evaluate(config, root, model=model, rows=rows, progress=False) == table  # rerun: all rows done
        files[kind] = {name: fileio.read_text(os.path.join(root, name))
                       for name in ("results.jsonl", "summary.md", "settings.json", "config.json")}
        # each invocation stamps its rows with its own run id: equal but for that
        files[kind]["results.jsonl"] = re.sub(r', "run_id": "[^"]*"', "", files[kind]["results.jsonl"])
        with fileio.open(os.path.join(root, "pareto.png"), "rb") as f:
            assert f.read(4) == b"\x89PNG"
    assert files["ram"] == files["local"]
    assert len(files["ram"]["results.jsonl"].splitlines()) == 4  # 2 problems x 2 samples, not rewritten
    other = ml_collections.ConfigDict(dict(config.to_dict(), sampling=dict(temperature=0.5)))
    with pytest.raises(ValueError, match="other settings.*temperature"):
        check_settings(EvalConfig.from_config(other), roots["ram"])
