"""`prd-jax` as a new user meets it: `generate` on the embedded SmolLM2 (greedy by default,
the completion alone on stdout), `inspect` (quiet logs, `step`, a clear error for a workdir
without checkpoints), one-line errors for bad configs, overrides and flags, the notebook on a
missing workdir, the TensorFlow-free core imports and a `--help` that imports no jax."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from prd_jax import cli


_LOADED = {}


@pytest.fixture
def cached_load(monkeypatch):
    """The CLI's `load_model` memoised across this module's generate tests; loading SmolLM2
    from its GGUF dominates their run time."""
    real_load = cli.load_model

    def load(*args):
        if args not in _LOADED:
            _LOADED[args] = real_load(*args)
        return _LOADED[args]

    monkeypatch.setattr(cli, "load_model", load)
    return load


@pytest.mark.slow
def test_generate_json_record(capsys, cached_load):
    cli.main(["generate", "--model", "smollm2-135m", "--prompt", "What is 2+2?", "--chat",
              "--max-new-tokens", "6", "--temperature", "1.0", "--top-k", "40", "--num-samples", "3",
              "--seed", "1", "--json"])
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    from prd_jax.model.tokenizer import Tokenizer
    from prd_jax.model.loader import smollm2_gguf_path

    tok = Tokenizer.from_gguf(smollm2_gguf_path())
    assert record["prompt_ids"] == tok.encode_chat([{"role": "user", "content": "What is 2+2?"}])
    samples = [record] + record["samples"]
    assert len(samples) == 3
    for s in samples:
        assert 1 <= len(s["completion_ids"]) <= 6
        assert len(s["logprobs"]) == len(s["completion_ids"])
        assert all(lp <= 0.0 for lp in s["logprobs"])
        assert s["text"] == tok.decode(s["completion_ids"])
    # Same seed, same samples: there is no hidden RNG state.
    cli.main(["generate", "--prompt", "What is 2+2?", "--chat", "--max-new-tokens", "6",
              "--temperature", "1.0", "--top-k", "40", "--num-samples", "3", "--seed", "1", "--json"])
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["completion_ids"] == record["completion_ids"]
    np.testing.assert_allclose(again["logprobs"], record["logprobs"], atol=1e-5)


def test_sampling_without_seed_is_refused():
    with pytest.raises(SystemExit, match=r"--seed is required when sampling \(--temperature=0.7 > 0\)"):
        cli.main(["generate", "--prompt", "hi", "--temperature", "0.7"])


@pytest.mark.slow
def test_generate_without_flags_is_greedy(capsys, cached_load):
    """No --temperature or --seed: greedy decoding (each token the argmax of the model's
    logits given the tokens before it); no --prompt: the default prompt."""
    import jax.numpy as jnp

    from prd_jax.model import forward

    cli.main(["generate", "--chat", "--max-new-tokens", "8", "--json"])
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    model = cached_load("smollm2-135m", None, None, "float32")  # the model the CLI decoded with
    assert record["prompt_ids"] == model.tokenizer.encode_chat([{"role": "user", "content": cli.DEFAULT_PROMPT}])
    completion = record["completion_ids"]
    assert 2 <= len(completion) <= 8
    tokens = jnp.asarray([record["prompt_ids"] + completion[:-1]], jnp.int32)
    logits, _ = forward(model.cfg, model.params, tokens, jnp.arange(tokens.shape[1])[None])
    tail = np.asarray(logits[0, len(record["prompt_ids"]) - 1:], np.float64)
    assert np.argmax(tail, axis=-1).tolist() == completion
    # The recorded logprobs are those of the argmax tokens: -logsumexp(row - row max).
    logp = -np.log(np.exp(tail - tail.max(-1, keepdims=True)).sum(-1))
    np.testing.assert_allclose(record["logprobs"], logp, atol=2e-3)


@pytest.mark.slow
def test_generate_prints_the_completion_alone(capsys, cached_load):
    """Default verbosity, in a fresh process that chooses its own JAX platform: stdout is the
    greedy completion and nothing else (no `---`), stderr holds no INFO line (the sampler's
    compile line) and no TPU / libtpu warning; `--verbose` brings the compile line back."""
    args = ["generate", "--chat", "--max-new-tokens", "6"]
    cli.main(args + ["--json"])
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["text"].strip() and len(record["completion_ids"]) >= 2
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    proc = subprocess.run([sys.executable, "-m", "prd_jax.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == record["text"] + "\n"
    noisy = [ln for ln in proc.stderr.splitlines() if ln.startswith("INFO") or "TPU" in ln or "libtpu" in ln]
    assert not noisy, proc.stderr
    cli.main(args + ["--verbose"])
    assert capsys.readouterr().out == "---\n" + record["text"] + "\n"


def test_help_imports_no_jax():
    """`prd-jax --help` (and a command's --help) parses flags without importing jax or the
    train / eval / aot / model modules: each command imports its modules when it runs."""
    code = ("import sys\nfrom prd_jax.cli import main\n"
            "for argv in (['--help'], ['compile', '--help'], ['generate', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit as e:\n        assert e.code == 0, e.code\n"
            "heavy = ('jax', 'jax.numpy', 'flax', 'orbax', 'numpy', 'prd_jax.train', 'prd_jax.evaluate',\n"
            "         'prd_jax.aot', 'prd_jax.model', 'prd_jax.sampling', 'prd_jax.serve', 'prd_jax.demo')\n"
            "print('LOADED', sorted(m for m in heavy if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "LOADED []", proc.stdout[-500:]
    commands = ("generate", "demo", "eval", "train", "compile", "serve", "inspect")
    assert all(c in proc.stdout.split("{", 1)[1].split("}", 1)[0].split(",") for c in commands), proc.stdout[:800]


# --------------------------------------------------------------------------- inspect, logs, errors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tiny_workdir(tmp_path_factory):
    """A workdir with one checkpoint (step 3) of the tiny model's params."""
    import jax
    import jax.numpy as jnp

    from prd_jax.checkpoint import Checkpointer
    from prd_jax.model import get_model_config
    from prd_jax.model.decoder import param_shapes

    workdir = tmp_path_factory.mktemp("inspect") / "run"
    params = jax.tree.map(lambda s: jnp.full(s.shape, 0.5, s.dtype), param_shapes(get_model_config("tiny")))
    with Checkpointer(workdir, save_every=1, keep=1, async_save=False) as ckpt:
        ckpt.save(3, {"params": params, "step": jnp.int32(3)}, {"data_position": 30})
    return str(workdir)


def _prd_jax(*args):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-m", "prd_jax.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)


@pytest.mark.slow
def test_inspect_is_quiet_and_reports_step(tiny_workdir):
    from prd_jax.model import get_model_config

    proc = _prd_jax("inspect", "--workdir", tiny_workdir, "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["step"] == info["latest_step"] == 3 and info["steps"] == [3]
    assert info["num_params"] == get_model_config("tiny").num_params() and info["meta"] == {"data_position": 30}
    lines = proc.stderr.splitlines()
    assert not [ln for ln in lines if ln.startswith("INFO") or "absl" in ln or "orbax" in ln], proc.stderr
    # --verbose brings orbax's INFO lines (handler registries, metadata stores) back.
    verbose = _prd_jax("inspect", "--workdir", tiny_workdir, "--json", "--verbose")
    assert verbose.returncode == 0 and json.loads(verbose.stdout)["step"] == 3
    assert any(ln.startswith("INFO absl:") for ln in verbose.stderr.splitlines()), verbose.stderr


def test_inspect_missing_workdir_fails_with_where_it_looked(tmp_path, capsys):
    missing = str(tmp_path / "no" / "such" / "dir")
    for extra in ([], ["--json"]):
        with pytest.raises(SystemExit) as e:
            cli.main(["inspect", "--workdir", missing, *extra])
        assert e.value.code == cli.EXIT_ERROR
        out, err = capsys.readouterr()
        assert out == ""  # nothing printed as `None`
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"prd-jax inspect: error: workdir {missing} has no checkpoints: looked in "
                              f"{os.path.join(missing, 'checkpoints')} (the workdir does not exist)"), err
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit):
        cli.main(["inspect", "--workdir", str(tmp_path / "empty")])
    assert "(no checkpoints/ directory)" in capsys.readouterr().err
    from prd_jax.checkpoint import NoCheckpointError

    with pytest.raises(NoCheckpointError, match="has no checkpoints"):  # --verbose: the exception itself
        cli.main(["inspect", "--workdir", missing, "--verbose"])


SFT_TINY = os.path.join(ROOT, "configs", "sft", "tiny.py")


@pytest.mark.parametrize("args,message", [
    (["train", "--config", "configs/sft/no_such.py", "--workdir", "W"],
     "config file 'configs/sft/no_such.py' does not exist"),
    (["train", "--config", SFT_TINY, "--workdir", "W", "--config.optim.learning_rat=1e-3"],
     "config has no field 'optim.learning_rat'"),
    (["eval", "--config", SFT_TINY, "--workdir", "W", "--config.steps=many"],
     "--config.steps='many': expected int"),
])
def test_config_errors_are_one_line(tmp_path, capsys, args, message):
    args = [str(tmp_path / a) if a == "W" else a for a in args]
    with pytest.raises(SystemExit) as e:
        cli.main(args)
    assert e.value.code == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"prd-jax {args[0]}: error: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    with pytest.raises((ValueError, FileNotFoundError), match=message.replace("(", r"\(")):
        cli.main(args + ["--verbose"])


@pytest.mark.parametrize("args,message", [
    (["generate", "--temperature", "hot"], "argument --temperature: invalid float value: 'hot'"),
    (["generate", "--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
    (["inspect"], "the following arguments are required: --workdir"),
])
def test_bad_flag_values_are_one_line(capsys, args, message):
    with pytest.raises(SystemExit) as e:
        cli.main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_bad_flag_value_in_a_subprocess_has_no_traceback():
    proc = _prd_jax("train", "--config", "configs/sft/no_such.py", "--workdir", "unused")
    assert proc.returncode == cli.EXIT_ERROR
    assert proc.stderr.strip().splitlines()[-1].startswith("prd-jax train: error: config file"), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.slow
def test_notebook_on_a_missing_workdir_says_where_it_looked(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    missing = str(tmp_path / "no_runs_here")
    monkeypatch.setenv("PRD_WORKDIRS", missing)
    nb = nbformat.read(os.path.join(ROOT, "notebooks", "analyze_runs.ipynb"), as_version=4)
    with pytest.raises(CellExecutionError) as e:
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": ROOT}}).execute()
    msg = str(e.value)
    assert "FileNotFoundError" in msg, msg[-2000:]
    assert f"{missing}: no eval workdir (results.jsonl) or training workdir" in msg, msg[-2000:]


def test_core_imports_do_not_load_tensorflow():
    code = ("import sys; import prd_jax.model, prd_jax.sampling, prd_jax.mesh, prd_jax.cli; "
            "bad = [m for m in ('tensorflow', 'seqio', 'tensorflow_datasets', 'torch') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
