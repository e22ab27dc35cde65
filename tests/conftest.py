"""Test set-up: 8 simulated CPU devices, configured before jax is imported."""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Benchmark data: the shared copy beside the repository, when there is one and PRD_DATA_DIR is unset
# (the library's own default is the user data dir that `prd-jax data get` fills; docs/data.md).
_SHARED_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.pardir, "shared", "data")
if os.path.isdir(_SHARED_DATA):
    os.environ.setdefault("PRD_DATA_DIR", os.path.normpath(_SHARED_DATA))

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

import gc  # noqa: E402

import pytest  # noqa: E402

# Every XLA:CPU executable holds a few memory mappings of JIT code, and jax keeps compiled
# executables cached for the life of the process. One pytest-xdist worker compiles thousands
# of programs (tests/test_rollout_batching.py and tests/test_sampling.py alone left 38,688
# mappings), and when the process reaches the kernel's `vm.max_map_count` (65,530 by default)
# an mmap inside XLA fails and the process dies (a plain process at 65,300 mappings died in
# its next compile; two clean-clone CI runs lost a worker to a segfault in XLA's compile at
# 98% of the suite, most likely this, not proven). Dropping jax's caches releases them (11,267
# -> 667 mappings after tests/test_sampling.py), so they are dropped once a worker passes
# MAX_MAPPINGS; compiled programs that tests hold themselves stay.
MAX_MAPPINGS = 30_000


def _mappings() -> int:
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:  # not Linux: no limit to watch
        return 0


@pytest.fixture(autouse=True)
def _release_compiled_programs():
    yield
    if _mappings() > MAX_MAPPINGS:
        jax.clear_caches()
        gc.collect()


# Files whose tests run longest start first: `make test` hands whole files to its two
# workers in collection order (`--dist loadfile`), so a long file collected last would run
# alone at the end (test_serve.py, ~13 minutes, did: docs/development.md).
LONG_FIRST = ("test_serve.py", "test_evaluate.py", "test_compile.py", "test_multiprocess.py", "test_demo.py",
              "test_rollout_batching.py", "test_operator_rl.py", "test_backend_client.py", "test_transformers_serve.py",
              "test_async_rl.py", "test_rollout_mesh.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))  # stable: order within a file kept


@pytest.fixture()
def spread_reward(monkeypatch):
    """RL rewards with spread for a random tiny model, which is never right (`fakes.spread_rewards`):
    groups get strict pairs and nonzero advantages."""
    from fakes import spread_rewards
    from prd_jax.train import rl as rl_mod

    monkeypatch.setattr(rl_mod.TaskReward, "grades", lambda self, texts, keys: spread_rewards(texts, keys))
