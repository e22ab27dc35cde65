"""Task plug-ins (issue 14 §1): one module per family, looked up by name.

    from prd_jax.tasks import get_task
    task = get_task("humaneval")          # or gsm8k, math500, aime2024, aime2025, hmmt_feb2025,
                                          # livecodebench(_v5, _v6), codecontests, modchain, modinverse
    rows = task.problems(limit=4)
    task.grade(rows[0], completion)       # {"reward", "correct", "parsed", ...}

`base` holds `Task` and the registry; `math`, `humaneval`, `synthetic`, `livecodebench`,
`codecontests` and `hmmt` register the builtin tasks on import (`contest` is the code-contest
tasks' shared grading); `grading` holds the operators' host callbacks (`TaskGrader`,
`TaskGrouper`); `rows` reads data through the data layer. No JAX or TensorFlow is imported.
"""

from prd_jax.tasks.base import TASKS, Task, get_task, register_task, task_names
from prd_jax.tasks import humaneval, math, synthetic  # noqa: F401  (register the builtin tasks)
from prd_jax.tasks import codecontests, hmmt, livecodebench  # noqa: F401,E402  (contest and HMMT tasks)
from prd_jax.tasks.math import DATASET_TASKS


def task_for_config(config) -> Task:
    """The task a config selects: `config.task` when set, else the one its data implies (an
    eval config's `dataset`, a training config's synthetic `data.family` or `data.source`),
    so existing configs keep their behaviour. Raises naming the field and the allowed values."""
    name = config.get("task") if hasattr(config, "get") else None
    if name:
        return get_task(name)
    dataset = config.get("dataset") if hasattr(config, "get") else None
    data = config.get("data") if hasattr(config, "get") else None
    if not dataset and data is not None:
        source = data.get("source")
        dataset = data.get("family", "modchain") if source == "synthetic" else (data.get("mixture") or source)
    if dataset in DATASET_TASKS:
        return get_task(DATASET_TASKS[dataset])
    if dataset in TASKS:
        return get_task(dataset)
    by_seqio = [t for t in TASKS.values() if t.seqio_task and t.seqio_task == dataset]
    if by_seqio:
        return by_seqio[0]
    raise ValueError(f"config.task is unset and the data ({dataset!r}) implies no task; set config.task to one "
                     f"of {task_names()}")


__all__ = ["TASKS", "Task", "get_task", "register_task", "task_for_config", "task_names"]
