"""Tasks: one registry (`TASKS`) of the algorithmic tasks of the paper, the text tasks, and your own.

    from mixit_lab.training.tasks import TASKS, get_task
    task = get_task("addition", digits=10)
    tokens, mask = task.sample(1000, generator=torch.Generator().manual_seed(0))
    TASKS["sentiment"].needs_corpus, TASKS["sentiment"].is_classifier()   # facts of a task: ask its class

    base.py         Task, the batch format, TrainStream (training batches that never hold an eval row)
    algorithmic.py  addition, dyck, retrieval, khop, modadd, memorize
    text.py         lm, sentiment, over corpora.py (local files), hub.py (Hugging Face datasets),
                    bpe.py (tokenizers) and cache.py (the token cache)
    registry.py     TASKS, get_task, register_task, import paths (`package.module:Class`)

A task of your own is a subclass of Task in your own module, registered with `@register_task` or named
by its import path (`get_task("my_pkg.tasks:Reverse")`, `mixit train --task my_pkg.tasks:Reverse`); see
docs/guides/tasks.md and examples/my_task.py.
"""

from __future__ import annotations

from .algorithmic import Addition, Dyck, KHop, Memorize, ModAdd, Retrieval
from .base import (
    DEFAULT_EVAL_SIZE, EVAL_SEED, Batch, Task, TaskError, TrainStream, attach_tokenizer, parameter_names, row_hash,
)
from .registry import (
    ALGORITHMIC_TASKS, BUILTIN_TASKS, TASKS, TaskImportError, TaskNotTrusted, TaskOption, check_task, check_task_class,
    get_task, is_import_path, load_task_class, register_task, resolved_task_params, task_class, task_code_trusted,
    task_import_path, task_parameters, task_record, trust_task_code,
)
from .text import LanguageModeling, SentimentClassification

__all__ = [
    "ALGORITHMIC_TASKS", "Addition", "BUILTIN_TASKS", "Batch", "DEFAULT_EVAL_SIZE", "Dyck", "EVAL_SEED", "KHop",
    "LanguageModeling", "Memorize", "ModAdd", "Retrieval", "SentimentClassification", "TASKS", "Task",
    "TaskError", "TaskImportError", "TaskNotTrusted", "TaskOption", "TrainStream", "attach_tokenizer", "check_task",
    "check_task_class", "get_task", "is_import_path", "load_task_class", "parameter_names", "register_task",
    "resolved_task_params", "row_hash", "task_class", "task_code_trusted", "task_import_path", "task_parameters", "task_record",
    "trust_task_code",
]
