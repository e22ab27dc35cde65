"""Every config under configs/ loads and validates for each documented arg; the paper-scale
train configs carry the PDR paper's numbers and meshes that fill their hardware; the launch
scripts parse, start with a usage header and (local.sh, gpu_slurm.sbatch) hand each process
the right PRD_* variables."""

import glob
import importlib.util
import math
import os
import re
import stat
import subprocess
import textwrap
import time

import pytest

from prd_jax.config_io import apply_overrides, load_config
from prd_jax.mesh import parse_mesh_shape
from prd_jax.model.config import NAMED_CONFIGS
from prd_jax.train.optim import OptimConfig
from prd_jax.train.rl import RLConfig, batch_rows

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CONFIG_FILES = sorted(p for kind in ("sft", "rl", "eval")
                      for p in glob.glob(os.path.join(ROOT, "configs", kind, "*.py"))
                      if os.path.basename(p) != "__init__.py")
EXTRA_ARGS = {}  # documented args beyond ARGS
PAPER_DEVICES = {"v5p-128": 64, "v5p-64": 32, "8xh200": 8}
LAUNCH = {name: os.path.join(ROOT, "launch", name) for name in ("tpu_pod.sh", "gpu_slurm.sbatch", "local.sh")}


def _module(path):
    spec = importlib.util.spec_from_file_location("config_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rel(path):
    return os.path.relpath(path, ROOT)


def _args(path):
    """The args a config documents: its ARGS tuple (paper-scale configs), else the default."""
    module = _module(path)
    args = tuple(getattr(module, "ARGS", (None,)))
    return args + EXTRA_ARGS.get(os.path.basename(path), ())


CASES = [(path, arg) for path in CONFIG_FILES for arg in _args(path)]
PAPER = [(path, arg) for path, arg in CASES if arg in PAPER_DEVICES and "eval" not in os.path.dirname(path)]
PODS = [(path, arg) for path, arg in CASES if arg in PAPER_DEVICES]  # train and eval configs with a pod


def _load(path, arg):
    return load_config(path if arg is None else f"{path}:{arg}")


def test_discovery_finds_every_kind():
    kinds = {os.path.basename(os.path.dirname(p)) for p in CONFIG_FILES}
    assert kinds == {"sft", "rl", "eval"}
    names = {_rel(p) for p in CONFIG_FILES}
    for expected in ("configs/sft/qwen3_8b.py", "configs/sft/llama31_8b.py", "configs/rl/qwen3_8b.py",
                     "configs/rl/llama31_8b.py"):
        assert expected in names
    assert len(PAPER) == 24  # 12 paper-scale train configs x 2 hardware args


@pytest.mark.parametrize("path,arg", CASES, ids=[f"{_rel(p)}:{a}" for p, a in CASES])
def test_config_loads_and_validates(path, arg):
    config = _load(path, arg)
    kind = os.path.basename(os.path.dirname(path))
    if kind == "eval":
        assert config.operators, "an eval config names at least one operator"
        return
    assert config.stage == kind
    OptimConfig(**config.optim.to_dict())
    overrides = config.model.overrides.to_dict() if config.model.get("overrides") else {}
    model = NAMED_CONFIGS[config.model.name].replace(**overrides)  # ModelConfig validates dtypes
    if kind == "rl":
        rl = RLConfig.from_config(config)
        rows = batch_rows(rl)
        assert model.max_position >= rl.max_prompt_tokens + rl.max_new_tokens
    else:
        rows = config.batch_size
        assert model.max_position >= config.data.seq_len
    assert rows % config.grad_accum_steps == 0
    if config.mesh:  # paper scale: one sequence per (data, fsdp) batch shard per microbatch
        sizes = parse_mesh_shape(config.mesh)
        assert rows // config.grad_accum_steps == sizes["data"] * sizes["fsdp"]


@pytest.mark.parametrize("path", CONFIG_FILES, ids=[_rel(p) for p in CONFIG_FILES])
def test_docstring_says_how_to_run(path):
    doc = _module(path).__doc__ or ""
    assert "Command to run" in doc or "prd-jax" in doc


@pytest.mark.parametrize("path,arg", PAPER, ids=[f"{_rel(p)}:{a}" for p, a in PAPER])
def test_paper_mesh_fills_the_hardware(path, arg):
    config = _load(path, arg)
    sizes = parse_mesh_shape(config.mesh)
    assert all(s >= 1 for s in sizes.values()), f"{config.mesh}: explicit sizes, no -1"
    assert math.prod(sizes.values()) == PAPER_DEVICES[arg]
    doc = _module(path).__doc__
    assert "ESTIMATE" in doc and "§" in doc  # honest runtime estimate; the paper section cited


@pytest.mark.parametrize("path,arg", PAPER, ids=[f"{_rel(p)}:{a}" for p, a in PAPER])
def test_paper_numbers(path, arg):
    c = _load(path, arg)
    o = c.model.overrides
    assert (o.dtype, o.param_dtype, o.remat) == ("bfloat16", "float32", True)
    assert c.tokenizer == "model" and c.model.name in ("qwen3-8b", "llama3.1-8b", "qwen3-4b-instruct-2507",
                                                       "gpt-oss-20b")
    if c.stage == "sft":
        assert c.model.init == "pretrained" and c.data.path and not c.data.mixture  # chat traces
        # PDR App. B.3: 2M-token batches of 32768-token sequences, lr 2e-5, 8B tokens
        assert c.data.seq_len == 32768 and c.batch_size * c.data.seq_len == 2 ** 21
        assert c.optim.learning_rate == 2e-5 and c.optim.warmup_steps > 0
        assert c.steps == math.ceil(8e9 / 2 ** 21) == 3815
        assert c.optim.warmup_steps + c.optim.decay_steps == c.steps
        assert c.grad_accum_steps > 1
    elif os.path.basename(path).startswith(("qwen3_4b", "gptoss20b")):  # V1 PairRL / PointRL, RL baseline (V1 §5)
        rl = RLConfig.from_config(c)
        assert (rl.advantage, rl.loss, rl.eps_low, rl.eps_high, rl.kl_coef) == ("dr_grpo", "ppo", 0.2, 0.28, 0.0)
        assert rl.aggregation == "seq_mean_token_sum_norm" and rl.minibatches > 1  # Dr.GRPO; the clip acts
        assert rl.prompts_per_step == 64
        assert c.model.name == ("gpt-oss-20b" if "gptoss20b" in path else "qwen3-4b-instruct-2507")
        if rl.verifier != "none":
            assert (rl.verifier_coef, rl.verifier_threshold, rl.verifier_baseline) == (1.0, 0.2, "group")
        assert c.optim.learning_rate == 1e-6 and c.model.init == "pretrained"
    else:
        rl = RLConfig.from_config(c)
        assert rl.prompts_per_step * rl.samples_per_prompt == 1024
        assert (rl.samples_per_prompt, rl.max_new_tokens, rl.max_prompt_tokens) == (32, 16384, 1152)
        assert (rl.sampling.temperature, rl.sampling.top_p, rl.loss, rl.aux_sft_coef) == (1.0, 1.0, "cispo", 0.1)
        assert (c.optim.learning_rate, c.steps) == (5e-7, 800)  # PDR App. B.3
        assert c.model.init == "checkpoint"
        base = os.path.basename(path).replace("_continual_pdr", "").replace("_baseline", "").replace("_pdr", "")
        sft = load_config(os.path.join(ROOT, "configs", "sft", base) + f":{arg}")
        if "_pdr" in path:  # operator RL: half the prompts roll out the PDR round (paper §4.2)
            assert rl.operator_fraction == 0.5 and rl.operator.schedule == (4, 1) and rl.operator.k == 2
            assert rl.operator.selector in ("self_pointwise", "pairwise_v1")  # ranked top-k, not random-k
        assert (c.model.name, c.mesh) == (sft.model.name, sft.mesh)


@pytest.mark.parametrize("path", sorted({p for p, _ in PAPER}), ids=lambda p: _rel(p))
@pytest.mark.parametrize("bad", [None, "v4-8", "8xH200 "])
def test_unknown_arg_names_the_allowed_values(path, bad):
    with pytest.raises(ValueError, match=r"v5p-(128|64).*8xh200"):
        _load(path, bad)


@pytest.mark.parametrize("path,arg", PAPER, ids=[f"{_rel(p)}:{a}" for p, a in PAPER])
def test_documented_overrides_apply(path, arg):
    """Every `--config.x=v` in the docstring names a real field with a value of its type."""
    doc = _module(path).__doc__
    overrides = [o for o in re.findall(r"--config\.[\w.]+=[^\s\\]+", doc) if "$" not in o and "(" not in o]
    assert overrides
    for item in overrides:
        apply_overrides(_load(path, arg), [item])


def test_multi_node_override_keeps_one_sequence_per_shard():
    c = apply_overrides(load_config(os.path.join(ROOT, "configs", "rl", "qwen3_8b.py:8xh200")),
                        ["--config.mesh=data=8,fsdp=2,tensor=4", "--config.grad_accum_steps=64"])
    sizes = parse_mesh_shape(c.mesh)
    assert math.prod(sizes.values()) == 64
    assert 1024 // c.grad_accum_steps == sizes["data"] * sizes["fsdp"]


# ---------------------------------------------------------------- launch scripts


@pytest.mark.parametrize("name", sorted(LAUNCH))
def test_launch_script_parses_and_has_usage_header(name):
    path = LAUNCH[name]
    subprocess.run(["bash", "-n", path], check=True, capture_output=True)
    with open(path) as f:
        lines = f.read().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert lines[1].startswith("# Usage:"), "line 2 is the usage line"
    header = []
    for line in lines[1:]:
        if not line.startswith("#"):
            break
        header.append(line)
    assert len(header) >= 5, "a header comment explains the usage"
    text = "\n".join(lines)
    assert "set -euo pipefail" in text
    assert "/work/" not in text and "/root" not in text  # no path of one machine
    assert os.stat(path).st_mode & stat.S_IXUSR


def _fake_exe(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/usr/bin/env bash\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


def test_local_sh_gives_each_process_its_id(tmp_path):
    fake = _fake_exe(tmp_path, "prd-jax", """\
        echo "$PRD_COORDINATOR $PRD_NUM_PROCESSES $PRD_PROCESS_ID $JAX_PLATFORMS $XLA_FLAGS | $*" \\
            > "$OUT/$PRD_PROCESS_ID"
    """)
    env = {**os.environ, "PRD_JAX": fake, "OUT": str(tmp_path), "LOG_DIR": str(tmp_path / "logs"),
           "PRD_PORT": "23456", "DEVICES_PER_PROCESS": "4", "XLA_FLAGS": ""}
    r = subprocess.run([LAUNCH["local.sh"], "3", "cfg.py:x", "wd", "--config.steps=2"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    for i in range(3):
        line = (tmp_path / str(i)).read_text().split()
        assert line[:4] == ["127.0.0.1:23456", "3", str(i), "cpu"]
        assert line[4] == "--xla_force_host_platform_device_count=4"
        assert line[6:] == ["train", "--no-progress", "--config", "cfg.py:x", "--workdir", "wd",
                            "--config.steps=2"]


def test_local_sh_fails_and_stops_the_rest_when_one_process_fails(tmp_path):
    fake = _fake_exe(tmp_path, "prd-jax", """\
        if [[ "$PRD_PROCESS_ID" == 1 ]]; then exit 7; fi
        exec sleep 60
    """)
    env = {**os.environ, "PRD_JAX": fake, "LOG_DIR": str(tmp_path / "logs"), "PRD_PORT": "23457"}
    t0 = time.monotonic()
    r = subprocess.run([LAUNCH["local.sh"], "3", "cfg.py", "wd"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1
    assert time.monotonic() - t0 < 15, "the sleeping processes were stopped, not waited for"
    assert "process 1 exited with status 7" in r.stderr


def test_gpu_slurm_exports_prd_variables_per_task(tmp_path):
    _fake_exe(tmp_path, "scontrol", 'printf "gpu-node-a\\ngpu-node-b\\n"\n')
    _fake_exe(tmp_path, "srun", """\
        while [[ "$1" != bash ]]; do shift; done  # drop srun's own flags
        for id in 0 1 2 3; do SLURM_PROCID=$id SLURM_LOCALID=$((id % 2)) "$@" || exit; done
    """)
    fake = _fake_exe(tmp_path, "prd-jax", """\
        echo "$PRD_COORDINATOR $PRD_NUM_PROCESSES $PRD_PROCESS_ID ${CUDA_VISIBLE_DEVICES:-all} | $*"
    """)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "PRD_JAX": fake,
           "SLURM_JOB_NODELIST": "gpu-node-[a-b]", "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2"}
    env.pop("PRD_PORT", None)
    r = subprocess.run(["bash", LAUNCH["gpu_slurm.sbatch"], "cfg.py:8xh200", "/shared/wd", "--config.steps=1"],
                       env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    # first the fit check (`prd-jax compile`, once, with the same overrides), then the 4 tasks
    assert re.fullmatch(r".*\| compile --config cfg\.py:8xh200 --devices \d+ --config\.steps=1", lines[0]), lines[0]
    assert lines[1:] == [f"gpu-node-a:12355 4 {i} {i % 2} | train --no-progress --config cfg.py:8xh200 "
                         "--workdir /shared/wd --config.steps=1" for i in range(4)]


@pytest.mark.parametrize("path,arg", PODS, ids=[f"{_rel(p)}:{a}" for p, a in PODS])
def test_pod_configs_declare_a_target_their_mesh_fills(path, arg):
    """`prd-jax compile` reads `config.target`; its device count is the mesh's."""
    from prd_jax.aot.chips import parse_target

    config = _load(path, arg)
    target = parse_target(config.target)
    assert target.devices == PAPER_DEVICES[arg] == math.prod(parse_mesh_shape(config.mesh).values())
    assert target.chip.platform == ("tpu" if arg.startswith("v5p") else "gpu")
