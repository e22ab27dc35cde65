"""Training checkpoints (orbax), resume with fallback, preemption saves and exports.

- `Checkpointer`: an orbax `CheckpointManager` over `workdir/checkpoints`. Each step
  directory holds the train state pytree (`state/`, StandardSave) and a JSON `meta/`
  (data position, metrics). `restore_latest` falls back to older steps when the newest
  one is damaged, and moves the damaged ones aside to `workdir/checkpoints_corrupt/`.
- Typed PRNG key arrays in the state are stored as `jax.random.key_data` (uint32) and
  re-wrapped on restore from the key dtype in the abstract state; callers pass them as is.
- `params_digest`: sha256 over a pytree, for bit-exact comparisons across runs.
- `export_params` / `load_exported_params`: a params-only orbax checkpoint for eval.
- `export_hf`: `model.safetensors` + `config.json` that transformers loads, through the
  HF name mapping `prd_jax.model.hf_names` that import uses too.
- `describe`: a summary of a run's workdir for `prd-jax inspect`.
- `load_workdir`: a training workdir's policy (its model, tokenizer and a step's params), the
  one loader behind `prd-jax eval --config.checkpoint`, `serve --workdir` and `export --workdir`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import sys
import time
from typing import Any, Callable, Optional

import jax
import ml_dtypes
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

from prd_jax import fileio
from prd_jax.data.synthetic import CharVocab
from prd_jax.host import to_host
from prd_jax.model import hf_names
from prd_jax.model.config import NAMED_CONFIGS, ModelConfig
from prd_jax.model.decoder import param_shapes
from prd_jax.model.loader import LoadedModel, model_config, smollm2_gguf_path
from prd_jax.model.tokenizer import Tokenizer, for_model
from prd_jax.model.weights import param_shardings
from prd_jax.model.hf_names import hf_config  # noqa: F401  (re-exported: `checkpoint.hf_config`)

log = logging.getLogger(__name__)

CHECKPOINT_SUBDIR = "checkpoints"
CORRUPT_SUBDIR = "checkpoints_corrupt"
_DIGEST_KEY = "state_sha256"
# SIGTERM's conventional exit status (128 + 15): schedulers read it as "terminated".
PREEMPTED_EXIT_CODE = 143


def _path(workdir) -> epath.Path:
    workdir = os.fspath(workdir)
    return epath.Path(workdir if "://" in workdir else os.path.abspath(workdir))


def _handlers() -> dict:
    return {"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}


# --------------------------------------------------------------------------- PRNG keys

def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def encode_keys(tree):
    """Replace typed PRNG key arrays by their raw uint32 `key_data` (storable by orbax)."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _key_impl(abstract_key):
    impl = []
    jax.eval_shape(lambda k: impl.append(jax.random.key_impl(k)), abstract_key)
    return impl[0]


def _encode_abstract(abstract_state):
    def encode(x):
        if not _is_key(x):
            return x
        data = jax.eval_shape(jax.random.key_data, x)
        return jax.ShapeDtypeStruct(data.shape, data.dtype, sharding=getattr(x, "sharding", None))
    return jax.tree.map(encode, abstract_state)


def decode_keys(tree, abstract_state):
    """Inverse of `encode_keys`: re-wrap key data where `abstract_state` has a key dtype."""
    return jax.tree.map(
        lambda x, a: jax.random.wrap_key_data(x, impl=_key_impl(a)) if _is_key(a) else x,
        tree, abstract_state)


def abstract_like(tree):
    """`jax.ShapeDtypeStruct` (with sharding) for each array leaf: a `restore_latest` target."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


# --------------------------------------------------------------------------- digest

def _host(x) -> np.ndarray:
    if _is_key(x):
        x = jax.random.key_data(x)
    return np.ascontiguousarray(to_host(x))


def params_digest(params) -> str:
    """sha256 hex digest of a pytree: each leaf's key path, dtype, shape and bytes, in
    flattened key-path order. Equal trees give equal digests; any changed bit changes it."""
    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        arr = _host(leaf)
        h.update(f"{jax.tree_util.keystr(path)}|{arr.dtype}|{arr.shape}|{arr.nbytes}\n".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------- meta JSON

def _json_default(x):
    if isinstance(x, (np.ndarray, np.generic, jax.Array)):
        return np.asarray(x).tolist()
    raise TypeError(f"checkpoint meta value of type {type(x).__name__} is not JSON-serialisable; "
                    "allowed: dict/list/str/int/float/bool/None and numpy/jax scalars or arrays")


def _jsonable(meta: Optional[dict]) -> dict:
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise ValueError(f"checkpoint meta must be a dict, got {type(meta).__name__}")
    try:
        return json.loads(json.dumps(meta, default=_json_default))
    except (TypeError, ValueError) as e:
        raise ValueError(f"checkpoint meta: {e}") from None


# --------------------------------------------------------------------------- Checkpointer

class Checkpointer:
    """Periodic train-state checkpoints in `workdir/checkpoints`, newest `keep` kept.

    `verify_digest=True` also stores `params_digest(state)` in the step metadata and checks
    it on restore, which catches silent bit rot (costs one host copy of the state per save).
    """

    def __init__(self, workdir, *, save_every: int, keep: int, async_save: bool = True,
                 verify_digest: bool = False):
        if not isinstance(save_every, int) or save_every < 1:
            raise ValueError(f"Checkpointer save_every={save_every!r}; allowed: integer >= 1")
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"Checkpointer keep={keep!r}; allowed: integer >= 1")
        self.workdir = _path(workdir)
        self.directory = self.workdir / CHECKPOINT_SUBDIR
        self.save_every, self.keep, self.verify_digest = save_every, keep, verify_digest
        options = ocp.CheckpointManagerOptions(
            # Every `save_every` steps (and at a jax preemption sync point); unlike orbax's
            # default, no extra save of the first step.
            save_decision_policy=ocp.checkpoint_managers.AnySavePolicy([
                ocp.checkpoint_managers.FixedIntervalPolicy(save_every),
                ocp.checkpoint_managers.PreemptionCheckpointingPolicy()]),
            preservation_policy=ocp.checkpoint_managers.LatestN(n=keep),
            enable_async_checkpointing=async_save,
            cleanup_tmp_directories=True)  # unfinished saves of a killed run
        self._mngr = ocp.CheckpointManager(self.directory, options=options, item_handlers=_handlers())
        self._preempting = False

    def all_steps(self) -> list[int]:
        """Saved (finalized) steps, ascending."""
        return list(self._mngr.all_steps())

    def latest_step(self) -> Optional[int]:
        """The newest saved step, or None."""
        return self._mngr.latest_step()

    def save(self, step: int, state, meta: Optional[dict] = None, force: bool = False) -> bool:
        """Save `state` (a pytree of arrays) and JSON `meta` at `step` if `step % save_every
        == 0` or `force`; returns whether a save started. Steps at or below the latest saved
        step are skipped (steps are monotonic)."""
        step = int(step)
        latest = self._mngr.latest_step()
        if latest is not None and step <= latest:
            log.info("checkpoint: step %d not saved; step %d already exists", step, latest)
            return False
        state = encode_keys(state)
        custom = {_DIGEST_KEY: params_digest(state)} if self.verify_digest else None
        args = ocp.args.Composite(state=ocp.args.StandardSave(state),
                                  meta=ocp.args.JsonSave(_jsonable(meta)))
        return self._mngr.save(step, args=args, force=force, custom_metadata=custom)

    def wait(self) -> None:
        """Block until async saves (and old-step deletions) are finished."""
        self._mngr.wait_until_finished()

    def close(self) -> None:
        """Finish pending saves and release the manager."""
        self._mngr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def restore_step(self, step: int, abstract_state):
        """`(state, meta)` of one step; raises if it is missing or damaged."""
        args = ocp.args.Composite(state=ocp.args.StandardRestore(_encode_abstract(abstract_state)),
                                  meta=ocp.args.JsonRestore())
        out = self._mngr.restore(step, args=args)
        if out.meta is None:
            raise ValueError(f"checkpoint step {step}: meta JSON is missing")
        if self.verify_digest:
            expected = (self._mngr.metadata(step).custom_metadata or {}).get(_DIGEST_KEY)
            if expected is None:
                raise ValueError(f"checkpoint step {step}: no {_DIGEST_KEY} in its step metadata")
            actual = params_digest(out.state)
            if actual != expected:
                raise ValueError(f"checkpoint step {step}: state sha256 {actual[:16]}... does not "
                                 f"match the saved {expected[:16]}... (corrupt data)")
        return decode_keys(out.state, abstract_state), dict(out.meta)

    def restore_latest(self, abstract_state):
        """`(step, state, meta)` of the newest step that restores, or None.

        `abstract_state`: pytree of `jax.ShapeDtypeStruct` with `.sharding` (see
        `abstract_like`); arrays are restored straight into those shardings. A step that
        fails to restore is logged with its error and skipped; once an older step restores,
        the newer damaged ones are moved to `workdir/checkpoints_corrupt/`.
        """
        self.wait()
        self._mngr.reload()
        failed = []
        for step in sorted(self._mngr.all_steps(), reverse=True):
            try:
                state, meta = self.restore_step(step, abstract_state)
            except Exception as e:  # orbax/tensorstore raise assorted types on damaged files
                log.warning("checkpoint step %d in %s failed to restore (%s: %s); trying the previous step",
                            step, self.directory, type(e).__name__, str(e).splitlines()[0][:500])
                failed.append(step)
                continue
            for bad in failed:
                self._quarantine(bad)
            if failed:
                self._mngr.reload()
            log.info("checkpoint: restored step %d from %s", step, self.directory)
            return step, state, meta
        if failed:
            log.error("checkpoint: none of steps %s in %s restores; starting without a checkpoint",
                      failed, self.directory)
        return None

    def _quarantine(self, step: int) -> None:
        if jax.process_index() == 0:
            dest = self.workdir / CORRUPT_SUBDIR / f"{step}-{int(time.time())}"
            dest.parent.mkdir(parents=True, exist_ok=True)
            (self.directory / str(step)).rename(dest)
            log.warning("checkpoint step %d moved to %s (it failed to restore)", step, dest)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"prd_jax_checkpoint_quarantine_{step}")

    def install_preemption_handler(self, get_state: Callable[[], tuple], *,
                                   exit_code: int = PREEMPTED_EXIT_CODE, signum: int = signal.SIGTERM):
        """On `signum` (SIGTERM): save `get_state() -> (step, state, meta)`, wait for the
        write, log "preempted ... saved step N" and exit with `exit_code`.

        Python runs the handler in the main thread between bytecodes, i.e. after the
        current jitted step returns. Multi-host runs must deliver the signal to every
        process, and `get_state` must return the same step on all of them. Returns the
        previous handler.
        """
        def handler(sig, frame):
            if self._preempting:
                return
            self._preempting = True
            step, state, meta = get_state()
            log.warning("preempted by signal %d at step %d: saving a checkpoint", sig, step)
            self.save(step, state, meta, force=True)
            self.wait()
            log.warning("preempted by signal %d: saved step %d to %s; exiting with code %d",
                        sig, self.latest_step(), self.directory, exit_code)
            self.close()
            logging.shutdown()
            sys.exit(exit_code)

        return signal.signal(signum, handler)


# --------------------------------------------------------------------------- params-only export

def export_params(params, out_dir, *, overwrite: bool = False) -> str:
    """Write `params` as a params-only orbax checkpoint at `out_dir`; returns the path."""
    path = _path(out_dir)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(path, encode_keys(params), force=overwrite)
        ckptr.wait_until_finished()
    return os.fspath(path)


def load_exported_params(out_dir, abstract_params=None):
    """Params from `export_params`: into `abstract_params`' shardings, or as host numpy
    arrays when `abstract_params` is None."""
    path = _path(out_dir)
    if not path.exists():
        raise FileNotFoundError(f"exported params directory {path} does not exist")
    if abstract_params is None:
        with ocp.StandardCheckpointer() as ckptr:
            tree = ckptr.metadata(path).item_metadata.tree
        return _restore_host(path, tree)
    with ocp.StandardCheckpointer() as ckptr:
        return decode_keys(ckptr.restore(path, _encode_abstract(abstract_params)), abstract_params)


def _restore_host(path, tree_metadata, partial: bool = False):
    """Restore the arrays named by `tree_metadata` (a subtree when `partial`) as numpy."""
    item = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), tree_metadata)
    restore_args = jax.tree.map(lambda m: ocp.RestoreArgs(restore_type=np.ndarray), tree_metadata)
    with ocp.PyTreeCheckpointer() as ckptr:
        return ckptr.restore(path, args=ocp.args.PyTreeRestore(
            item=item, restore_args=restore_args, partial_restore=partial))


# --------------------------------------------------------------------------- HF export

_ST_NAMES = {np.dtype(np.float32): "F32", np.dtype(ml_dtypes.bfloat16): "BF16",
             np.dtype(np.float16): "F16"}
_EXPORT_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def hf_tensors(cfg: ModelConfig, params) -> dict[str, np.ndarray]:
    """Our param tree as HF-named host arrays in HF layout (`[out, in]` linear weights), by
    the same name mapping the importer uses (`prd_jax.model.hf_names`)."""
    return hf_names.to_hf_tensors(cfg, jax.tree.map(_host, params))


def write_safetensors(path, tensors: dict[str, np.ndarray]) -> None:
    """Write a `.safetensors` file (8-byte header length, JSON header, raw little-endian data)."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        if arr.dtype not in _ST_NAMES:
            raise ValueError(f"tensor {name!r} has dtype {arr.dtype}; allowed: {sorted(map(str, _ST_NAMES))}")
        blob = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _ST_NAMES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for blob in blobs:
            f.write(blob)


def export_hf(cfg: ModelConfig, params, out_dir, *, dtype: str = "float32") -> str:
    """Write `model.safetensors` and `config.json` loadable by
    `transformers.AutoModelForCausalLM.from_pretrained(out_dir)`; returns `out_dir`."""
    if dtype not in _EXPORT_DTYPES:
        raise ValueError(f"export_hf dtype={dtype!r}; allowed: {sorted(_EXPORT_DTYPES)}")
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {name: np.asarray(arr, dtype=_EXPORT_DTYPES[dtype])
               for name, arr in hf_tensors(cfg, params).items()}
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(cfg, dtype), f, indent=2)
    return out_dir


# --------------------------------------------------------------------------- inspection

class NoCheckpointError(FileNotFoundError):
    """A workdir has no readable checkpoint step; the message says where it looked."""


def _no_checkpoints(root, directory, steps) -> NoCheckpointError:
    if not root.exists():
        why = "the workdir does not exist"
    elif not directory.exists():
        why = f"no {CHECKPOINT_SUBDIR}/ directory"
    elif not steps:
        why = "no saved steps"
    else:
        why = f"none of steps {sorted(steps)} is readable"
    return NoCheckpointError(f"workdir {os.fspath(root)} has no checkpoints: looked in "
                             f"{os.fspath(directory)} ({why})")


class _DropReadOnlyNotices(logging.Filter):
    """orbax warns on every read-only `CheckpointManager` that it is read-only; we ask for it."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        return not (msg.startswith("Given directory is read only")
                    or msg.startswith("CheckpointManagerOptions.read_only=True"))


def _read_only_manager(directory):
    """A read-only orbax `CheckpointManager` over `directory`, without orbax's notices about it."""
    quiet = _DropReadOnlyNotices()
    absl_log = logging.getLogger("absl")
    absl_log.addFilter(quiet)
    try:
        options = ocp.CheckpointManagerOptions(read_only=True, create=False, save_interval_steps=0,
                                               cleanup_tmp_directories=False)
        return ocp.CheckpointManager(directory, options=options, item_handlers=_handlers())
    finally:
        absl_log.removeFilter(quiet)


def describe(workdir, *, require: bool = False) -> dict:
    """Summary of a run: newest step whose params read (as `latest_step` and `step`), its meta,
    parameter count, params digest, `workdir/config.json` and the last line of
    `workdir/metrics.jsonl`.

    Only the `params` subtree of the state is read, as host numpy arrays (no mesh needed), so
    a step whose optimizer state alone is damaged is still reported (a resume would skip it).
    With no readable step the step fields are None, or, with `require=True`, it raises
    `NoCheckpointError` saying where it looked.
    """
    root = _path(workdir)
    info: dict[str, Any] = {"workdir": os.fspath(root), "steps": [], "latest_step": None, "step": None,
                            "meta": None, "num_params": None, "params_digest": None,
                            "config": None, "last_metrics": None}
    config_path, metrics_path = os.fspath(root / "config.json"), os.fspath(root / "metrics.jsonl")
    if fileio.exists(config_path):
        info["config"] = fileio.read_json(config_path)
    if fileio.exists(metrics_path):
        lines = fileio.read_jsonl(metrics_path)
        info["last_metrics"] = lines[-1] if lines else None
    directory = root / CHECKPOINT_SUBDIR
    if directory.exists():
        with _read_only_manager(directory) as mngr:
            info["steps"] = list(mngr.all_steps())
            for step in sorted(info["steps"], reverse=True):
                try:
                    params = _restore_params_host(mngr, step)
                    meta = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
                except Exception as e:  # damaged step: report the newest one that reads
                    log.warning("describe: checkpoint step %d in %s failed to read (%s: %s)",
                                step, directory, type(e).__name__, str(e).splitlines()[0][:500])
                    continue
                info.update(latest_step=step, step=step, meta=meta, params_digest=params_digest(params),
                            num_params=int(sum(np.size(x) for x in jax.tree.leaves(params))))
                break
    if require and info["latest_step"] is None:
        raise _no_checkpoints(root, directory, info["steps"])
    return info


def _restore_params_host(mngr, step: int):
    tree = mngr.item_metadata(step)["state"]
    if tree is None:
        raise ValueError(f"checkpoint step {step}: no state metadata")
    tree = tree.tree
    if not isinstance(tree, dict) or "params" not in tree:
        keys = sorted(tree) if isinstance(tree, dict) else type(tree).__name__
        raise ValueError(f"checkpoint step {step}: state has no 'params' key (has {keys})")
    path = mngr.directory / str(step) / "state"
    return _restore_host(path, {"params": tree["params"]}, partial=True)["params"]


def latest_params(workdir) -> tuple[int, Any]:
    """`(step, params)` as host numpy arrays from the newest readable step of a training
    workdir (e.g. to start RL from an SFT run); damaged steps are skipped with a warning.
    Raises `NoCheckpointError` (a FileNotFoundError) saying where it looked when none reads."""
    return read_params(workdir)


def read_params(workdir, step: Optional[int] = None) -> tuple[int, Any]:
    """`(step, params)` as host numpy arrays: step `step` of a training workdir, or (None) its
    newest readable step (`latest_params`). A missing or unreadable `step` raises naming the
    saved steps."""
    root = _path(workdir)
    directory = root / CHECKPOINT_SUBDIR
    if not directory.exists():
        raise _no_checkpoints(root, directory, [])
    with _read_only_manager(directory) as mngr:
        steps = list(mngr.all_steps())
        if step is not None:
            if step not in steps:
                raise NoCheckpointError(f"workdir {os.fspath(root)} has no checkpoint step {step}; "
                                        f"saved steps: {sorted(steps)}")
            return step, _restore_params_host(mngr, step)
        for step in sorted(steps, reverse=True):
            try:
                return step, _restore_params_host(mngr, step)
            except Exception as e:  # damaged step: fall back to an older one
                log.warning("checkpoint step %d in %s failed to read (%s: %s)", step, directory,
                            type(e).__name__, str(e).splitlines()[0][:500])
    raise _no_checkpoints(root, directory, steps)


# --------------------------------------------------------------------------- a workdir's model

def parse_checkpoint(spec: str, field: str = "config.checkpoint") -> tuple[str, Optional[int]]:
    """"WORKDIR" or "WORKDIR@STEP" -> (workdir, step or None); a bad form raises naming `field`."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"{field}={spec!r}; allowed: a training workdir, optionally with @STEP (e.g. /tmp/sft@20)")
    workdir, at, step = spec.rpartition("@")
    if not at or "/" in step:  # no "@", or an "@" inside the path
        return spec, None
    if not workdir or not step.isdigit():
        raise ValueError(f"{field}={spec!r}: step {step!r} is not an integer >= 0; allowed: WORKDIR or "
                         "WORKDIR@STEP (e.g. /tmp/sft@20)")
    return workdir, int(step)


def resolve_checkpoint(spec: str, field: str = "config.checkpoint") -> tuple[str, int]:
    """(absolute workdir, step) of "WORKDIR[@STEP]": without @STEP its newest saved step. Errors
    (no workdir, no config.json, no such step) name `field`."""
    workdir, step = parse_checkpoint(spec, field)
    root = _path(workdir)
    try:
        if not fileio.exists(os.fspath(root / "config.json")):
            raise FileNotFoundError(f"workdir {os.fspath(root)} has no config.json (is it a `prd-jax train` "
                                    "workdir?)" if root.exists() else f"workdir {os.fspath(root)} does not exist")
        directory = root / CHECKPOINT_SUBDIR
        steps = []
        if directory.exists():
            with _read_only_manager(directory) as mngr:
                steps = sorted(mngr.all_steps())
        if not steps:
            raise _no_checkpoints(root, directory, steps)
        if step is not None and step not in steps:
            raise NoCheckpointError(f"workdir {os.fspath(root)} has no step {step}; saved steps: {steps}")
    except FileNotFoundError as e:
        raise type(e)(f"{field}={spec!r}: {e}") from None
    return os.fspath(root), steps[-1] if step is None else step


def run_model_config(run: dict) -> ModelConfig:
    """The ModelConfig a training run's resolved config (`workdir/config.json`) trained, as
    `train.setup.build_model` built it: a pretrained model's from its weights' header, else the
    named config, each with `model.overrides`."""
    m = run.get("model") or {}
    overrides = {k: tuple(v) if isinstance(v, list) else v for k, v in (m.get("overrides") or {}).items()}
    name = m.get("name", "")
    if m.get("init") == "pretrained":
        return model_config(name, m.get("path") or None, **overrides)
    if name not in NAMED_CONFIGS:
        raise ValueError(f"run config model.name={name!r}; allowed: {sorted(NAMED_CONFIGS)}")
    return NAMED_CONFIGS[name].replace(**overrides)


def run_tokenizer(run: dict, cfg: ModelConfig):
    """The tokenizer a training run used: `CharVocab` for tokenizer="char", else its model's."""
    m = run.get("model") or {}
    if run.get("tokenizer", "model") == "char":
        return for_model(CharVocab(), cfg)  # refuses a thinking switch: the char format has none
    path = m.get("path") or None
    if path is None and m.get("name") == "smollm2-135m":
        path = smollm2_gguf_path()
    if path is None:
        raise ValueError(f"run config model.path is empty: no tokenizer for model {m.get('name')!r} (no hub downloads)")
    tok = Tokenizer.from_gguf(path) if path.endswith(".gguf") else Tokenizer.from_hf_dir(path)
    return for_model(tok, cfg)


def load_workdir(workdir, step: Optional[int] = None, *, mesh=None, **overrides):
    """A training workdir's policy as a `model.LoadedModel`: the model and tokenizer its
    `config.json` names (`run_model_config`, `run_tokenizer`: char-vocabulary runs included),
    `overrides` (ModelConfig fields, e.g. dtype) on top, and the params of `step` (None: the
    newest readable step) placed on `mesh`. `source` is "WORKDIR@STEP"."""
    root = _path(workdir)
    config_path = os.fspath(root / "config.json")
    if not fileio.exists(config_path):
        raise FileNotFoundError(f"workdir {os.fspath(root)}: no config.json (is it a `prd-jax train` workdir?)")
    run = fileio.read_json(config_path)
    cfg = run_model_config(run).replace(**overrides)
    tokenizer = run_tokenizer(run, cfg)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise ValueError(f"workdir {os.fspath(root)}: tokenizer has {tokenizer.vocab_size} ids, the model "
                         f"{cfg.vocab_size}")
    step, host = read_params(root, step)
    specs = param_shapes(cfg)
    flat_host, flat_specs = jax.tree.leaves(host), jax.tree.leaves(specs)
    if jax.tree.structure(host) != jax.tree.structure(specs) or any(
            h.shape != s.shape for h, s in zip(flat_host, flat_specs)):
        raise ValueError(f"workdir {os.fspath(root)} step {step}: its params do not match the model its "
                         "config.json names")
    params = jax.tree.map(lambda h, s, sh: jax.device_put(np.asarray(h, s.dtype), sh), host, specs,
                          param_shardings(cfg, mesh))
    log.info("loaded %s step %d (%s, tokenizer %s)", os.fspath(root), step, cfg.family, type(tokenizer).__name__)
    return LoadedModel(cfg, params, tokenizer, mesh, f"{os.fspath(root)}@{step}")
