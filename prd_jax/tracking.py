"""Experiment tracking: one `Tracker` interface over TensorBoard (clu) and Weights & Biases.

`config.loggers` names the backends (`LOGGERS`) a train or eval run writes to; `open_tracker`
returns one `Tracker` that fans out to them. Training defaults to `("tensorboard",)` (as
before this module); eval defaults to `()` (its files, `summary.md` and `pareto.png`, are the
record; add loggers to see evals beside training runs).

- "tensorboard": clu's default metric writer in the workdir (events files; its logging
  writer echoes scalars to the log).
- "wandb": the `wandb` library; its run files go under `WORKDIR/wandb/` (a local workdir; a
  URI workdir leaves them in W&B's default `./wandb`). `config.wandb.*` (`WandbConfig`) names
  the project, entity, run name and group. Mode: `config.wandb.mode` when set, else the
  `WANDB_MODE` variable when set, else "online" when an API key is found (`WANDB_API_KEY` or a
  netrc entry for the W&B host) and "offline" otherwise (`wandb sync WORKDIR/wandb/offline-run-*`
  uploads it later). The key is left to W&B: it is never read into a config or written here.

Only process 0 writes (`open_tracker(main=...)`); other processes get the no-op `Tracker`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import netrc
import os
import urllib.parse
from typing import Iterable, Optional

import numpy as np
from PIL import Image

from prd_jax import fileio
from prd_jax.config_schema import group_from_raw

log = logging.getLogger(__name__)

LOGGERS = ("tensorboard", "wandb")
WANDB_MODES = ("", "online", "offline", "disabled")


def check_loggers(loggers, field: str = "config.loggers") -> tuple:
    """`loggers` as a tuple of backend names; raises naming the field and `LOGGERS` otherwise."""
    if isinstance(loggers, str) or not isinstance(loggers, (tuple, list)):
        raise ValueError(f"{field}={loggers!r}; must be a tuple of names from {LOGGERS}, "
                         f"e.g. --{field}=\"('tensorboard', 'wandb')\" (or () for none)")
    bad = [name for name in loggers if name not in LOGGERS]
    if bad:
        raise ValueError(f"{field}={tuple(loggers)!r}: unknown {bad}; allowed: {LOGGERS}")
    return tuple(dict.fromkeys(loggers))


@dataclasses.dataclass(frozen=True)
class WandbConfig:
    """`config.wandb`: where a "wandb" logger's run goes. `name` "" = the workdir's base name;
    `mode` "" = WANDB_MODE if set, else online with an API key, else offline."""

    project: str = "prd-jax"
    entity: str = ""
    name: str = ""
    group: str = ""
    mode: str = ""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if not isinstance(getattr(self, f.name), str):
                raise ValueError(f"config.wandb.{f.name}={getattr(self, f.name)!r}; must be a string")
        if self.mode not in WANDB_MODES:
            raise ValueError(f"config.wandb.mode={self.mode!r}; allowed: {WANDB_MODES} (\"\" = automatic)")
        if not self.project:
            raise ValueError("config.wandb.project is empty; name a W&B project")

    @classmethod
    def from_config(cls, config) -> "WandbConfig":
        """From `config.wandb` (a ConfigDict, dict or None = defaults); unknown keys raise naming the allowed."""
        return group_from_raw(cls, config, "wandb")


class Tracker:
    """Where a run's metrics go. This base writes nothing (processes other than 0, `loggers=()`)."""

    def scalars(self, step: int, values: dict) -> None:
        """Scalar metrics at `step` ({name: number}; "/" groups names)."""

    def text(self, step: int, name: str, text: str) -> None:
        """A text (markdown) at `step`, e.g. sample rollouts."""

    def table(self, name: str, rows: list, step: int = 0) -> None:
        """A table: `rows` of {column: value} (the columns of the first row)."""

    def image(self, name: str, path: str, step: int = 0) -> None:
        """An image file (PNG), e.g. `pareto.png`."""

    def config(self, values: dict) -> None:
        """The run's resolved config (a nested dict)."""

    def close(self) -> None:
        """Flush and finish."""


def _columns(rows: list) -> list:
    return list(rows[0]) if rows else []


def markdown_rows(rows: list) -> str:
    """`rows` as a markdown table (TensorBoard renders text as markdown)."""
    cols = _columns(rows)
    cell = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(lines + ["| " + " | ".join(cell(r.get(c, "")) for c in cols) + " |" for r in rows])


def read_image(path: str) -> Image.Image:
    """An RGB image from a local path or a URI (`prd_jax.fileio`)."""
    with fileio.open(path, "rb") as f, Image.open(f) as im:
        return im.convert("RGB")


def flat(values: dict, prefix: str = "") -> dict:
    """{"a/b": leaf} of a nested dict; lists and other non-scalars as JSON text."""
    out = {}
    for k, v in values.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v if isinstance(v, (bool, int, float, str)) else json.dumps(v, default=str)
    return out


class TensorBoardTracker(Tracker):
    """TensorBoard events in `workdir` through clu's default metric writer."""

    def __init__(self, workdir: str, main: bool = True):
        from clu import metric_writers  # loads TensorFlow

        self.writer = metric_writers.create_default_writer(workdir, just_logging=not main)

    def scalars(self, step, values):
        self.writer.write_scalars(step, {k: float(v) for k, v in values.items()})

    def text(self, step, name, text):
        self.writer.write_texts(step, {name: text})

    def table(self, name, rows, step=0):
        self.writer.write_texts(step, {name: markdown_rows(rows)})

    def image(self, name, path, step=0):
        self.writer.write_images(step, {name: np.asarray(read_image(path), dtype=np.uint8)[None]})

    def config(self, values):
        self.writer.write_texts(0, {"config": "```json\n" + json.dumps(values, indent=1, default=str) + "\n```"})
        self.writer.write_hparams(flat(values))

    def close(self):
        self.writer.flush()
        self.writer.close()


def _has_api_key() -> bool:
    """A W&B API key is available (the variable, or a netrc entry for the W&B host); the key is not read out."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urllib.parse.urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def wandb_mode(cfg: WandbConfig) -> Optional[str]:
    """The mode a run starts in (None: W&B reads WANDB_MODE itself)."""
    if cfg.mode:
        return cfg.mode
    if os.environ.get("WANDB_MODE"):
        return None
    return "online" if _has_api_key() else "offline"


class WandbTracker(Tracker):
    """A W&B run (`WandbConfig`); files under WORKDIR/wandb/ for a local workdir."""

    def __init__(self, workdir: str, cfg: WandbConfig):
        import wandb  # about 1.5 s to import: only runs that log to W&B pay it

        self.wandb = wandb
        local = "://" not in workdir
        if local:
            os.makedirs(workdir, exist_ok=True)
        name = cfg.name or os.path.basename(os.path.normpath(workdir))
        self.run = wandb.init(
            project=cfg.project, entity=cfg.entity or None, name=name, group=cfg.group or None,
            dir=workdir if local else None, mode=wandb_mode(cfg), reinit="create_new",
            settings=wandb.Settings(console="off", x_disable_stats=True, disable_git=True, save_code=False,
                                    silent=True))
        log.info("W&B run %s (%s) in %s", self.run.id, self.run.settings.mode, self.run.dir)

    def scalars(self, step, values):
        self.run.log({k: float(v) for k, v in values.items()}, step=step)

    def text(self, step, name, text):
        self.run.log({name: self.wandb.Html("<pre>" + _escape(text) + "</pre>")}, step=step)

    def table(self, name, rows, step=0):
        cols = _columns(rows)
        data = [[r.get(c) if isinstance(r.get(c), (bool, int, float, str)) else json.dumps(r.get(c), default=str)
                 for c in cols] for r in rows]
        self.run.log({name: self.wandb.Table(columns=cols, data=data)}, step=step)

    def image(self, name, path, step=0):
        self.run.log({name: self.wandb.Image(read_image(path))}, step=step)

    def config(self, values):
        self.run.config.update(values, allow_val_change=True)

    def close(self):
        self.run.finish()


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Trackers(Tracker):
    """Several trackers as one: each call goes to every one, in order."""

    def __init__(self, trackers: Iterable[Tracker]):
        self.trackers = list(trackers)

    def scalars(self, step, values):
        for t in self.trackers:
            t.scalars(step, values)

    def text(self, step, name, text):
        for t in self.trackers:
            t.text(step, name, text)

    def table(self, name, rows, step=0):
        for t in self.trackers:
            t.table(name, rows, step)

    def image(self, name, path, step=0):
        for t in self.trackers:
            t.image(name, path, step)

    def config(self, values):
        for t in self.trackers:
            t.config(values)

    def close(self):
        for t in self.trackers:
            t.close()


def open_tracker(loggers, workdir: str, wandb: Optional[WandbConfig] = None, main: bool = True) -> Tracker:
    """One `Tracker` for `loggers` (`LOGGERS` names) writing into `workdir`; process 0 (`main`)
    only, except TensorBoard's logging echo, which every process keeps (as training did)."""
    out = []
    for name in check_loggers(loggers):
        if name == "tensorboard":
            out.append(TensorBoardTracker(workdir, main))
        elif main:
            out.append(WandbTracker(workdir, wandb or WandbConfig()))
    return Trackers(out)
