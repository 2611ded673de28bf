"""Private prompt learning (Duan et al., Flocks of Stochastic Parrots): prompted
classification with a causal LM, PromptDPSGD (soft prompt and prefix) and PromptPATE. The
functions the CLI calls; ``model`` is a name or a :class:`~privlm.models.LoadedModel`:

- ``load_task_file(path)`` / ``get_task(name)``, and ``task_data(task, TaskFiles(...), ...)``
- ``train_prompt_dpsgd(model, TaskExamples(task, records), out_dir, PromptDpSgdConfig(...),
  ledger=...)``
- ``run_prompt_pate(model, PateExamples(task, private, public), out_dir,
  PromptPateConfig(...), ledger=...)``
"""

from privlm.lazy import lazy_exports

EXPORTS = {
    "Task": "tasks",
    "get_task": "tasks",
    "load_task_file": "tasks",
    "task_from_spec": "tasks",
    "TaskFiles": "task_data",
    "ColumnOverrides": "task_data",
    "task_data": "task_data",
    "load_task_records": "task_data",
    "PromptDpSgdConfig": "prompt_dpsgd",
    "train_prompt_dpsgd": "prompt_dpsgd",
    "TaskExamples": "tasks",
    "PateExamples": "tasks",
    "PromptPateConfig": "pate_pipeline",
    "pate_ledger": "pate_pipeline",
    "run_prompt_pate": "pate_pipeline",
    "prompt_probabilities": "evaluate",
    "accuracy": "evaluate",
}
__getattr__ = lazy_exports(__name__, EXPORTS)
__all__ = sorted(EXPORTS)
