"""One eval setup for `prd-jax eval` and `prd-jax compile` (issue 45 §7, issue 49 §1).

Every eval config x ARG builds, through the function the compile path calls
(`aot.programs.eval_setup`), the context of every operator it runs (nothing traced or
compiled). Before the one setup, `prd-jax compile` read `config.templates` raw and failed on
`templates=''` (the task's own set) for 2 of the 86 cases of commit 3e2a66a: gptoss20b_v1_infer.py:hmmt_feb2025
and qwen3_4b_v1_matched_calls.py:hmmt_feb2025.
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import os
import pathlib

import pytest

from prd_jax.aot import programs as PG
from prd_jax.aot.report import tokenizer_for
from prd_jax.backends import BackendConfig, make_remote_lm
from prd_jax.backends.for_eval import check_remote_config
from prd_jax.config_io import load_config
from prd_jax.eval_setup import EvalSetup
from prd_jax.tasks import get_task

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILES = sorted(p for p in glob.glob(str(ROOT / "configs" / "eval" / "*.py")) if not p.endswith("__init__.py"))
DEMO_CONFIGS = {"adaptive_pdr_demo.py"}  # `prd-jax demo` configs: no `model`, not eval or compile configs


def _args(path):
    spec = importlib.util.spec_from_file_location("eval_config_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(getattr(module, "ARGS", (None,)))


CASES = [(p, a) for p in FILES if os.path.basename(p) not in DEMO_CONFIGS for a in _args(p)]
_TOKENIZERS: dict = {}


def _tokenizer(config):
    """`tokenizer_for` once per model (loading a tokenizer takes about a second)."""
    key = (config.model, config.get("model_path"), config.get("tokenizer"))
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = tokenizer_for(config)[0]
    return _TOKENIZERS[key]


def test_every_eval_config_is_enumerated():
    names = {(os.path.basename(p), a) for p, a in CASES}
    assert {("gptoss20b_v1_infer.py", "hmmt_feb2025"), ("qwen3_4b_v1_matched_calls.py", "hmmt_feb2025"),
            ("smollm2_gsm8k.py", None)} <= names
    for name in DEMO_CONFIGS:  # skipped only because it is not an eval config
        assert not isinstance(load_config(str(ROOT / "configs" / "eval" / name)).get("model"), str)


@pytest.mark.parametrize("path,arg", CASES, ids=[f"{os.path.basename(p)}:{a}" for p, a in CASES])
def test_compile_path_builds_every_operator_context(path, arg):
    config = load_config(path if arg is None else f"{path}:{arg}")
    setup = PG.eval_setup(config, _tokenizer(config))
    task = get_task(config.task)
    assert setup.task is task and setup.templates == (config.get("templates") or task.templates)
    specs = setup.specs()
    assert len(specs) == len(config.operators)
    for spec in specs:
        ctx = setup.context(spec)
        assert ctx.grader.task is task  # the oracle grades with the config's task, not a default one
        assert ctx.templates._set_name == setup.templates
        assert ctx.sampling.stop_ids == tuple(setup.tokenizer.stop_ids)
    backend = BackendConfig.from_config(config.get("backend"))
    if backend.remote:  # its remote LM honours every field of the config (`RemoteLM.check`; nothing sent)
        check_remote_config(setup.config, backend.replace_key_env())
        lm, wire = make_remote_lm(backend.replace_key_env(), setup.tokenizer)
        assert setup.with_lm(lm, wire).lm is lm


def test_eval_and_compile_share_contexts_and_the_task_prompt_set():
    """The HMMT row of the V1 configs leaves `templates` empty: the task's own set ("default")."""
    config = load_config(str(ROOT / "configs/eval/gptoss20b_v1_infer.py") + ":hmmt_feb2025")
    assert config.templates == ""
    tok = _tokenizer(config)
    compile_setup = PG.eval_setup(config, tok)
    lm, wire = make_remote_lm(BackendConfig.from_config(config.backend), tok)  # its vLLM backend; nothing sent
    assert wire is tok  # token mode compiles the templates with the local tokenizer itself
    eval_setup = EvalSetup.from_config(config).with_lm(lm, tok)
    assert compile_setup.templates == eval_setup.templates == "default"
    for spec in eval_setup.specs():  # one cached context per (tokenizer, settings, task)
        assert compile_setup.context(spec) is eval_setup.context(spec)
    code = load_config(str(ROOT / "configs/eval/gptoss20b_v1_infer.py") + ":codecontests")
    assert PG.eval_setup(code, tok).templates == "code"
    with pytest.raises(ValueError, match="no tokenizer yet"):
        EvalSetup.from_config(config).context(eval_setup.specs()[0])


def test_unknown_prompt_set_is_refused_naming_the_field():
    config = load_config(str(ROOT / "configs/eval/gptoss20b_v1_infer.py") + ":hmmt_feb2025")
    config.templates = "fancy"
    with pytest.raises(ValueError, match=r"fancy.*allowed: \['code', 'compact', 'default'"):
        EvalSetup.from_config(config)


def test_aot_does_not_import_evaluate():
    """`aot/` builds eval contexts through `eval_setup`, not evaluate's private helpers."""
    for path in (ROOT / "prd_jax" / "aot").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "prd_jax.evaluate", path.name
            elif isinstance(node, ast.Import):
                assert all(a.name != "prd_jax.evaluate" for a in node.names), path.name
