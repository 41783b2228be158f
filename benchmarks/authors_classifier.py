"""Their classifier trainer (trainer_classifier.py) at our sentiment studies' settings: its flags, and the inputs the
runner hands it in place of the Hub's (our study's tokenizer and labelled split). benchmarks/authors_reference.py
drives it; its docstring says what the runner changes and why.
"""

from __future__ import annotations

from authors_flags import VARIANTS, warmup_flag

CLASSIFIER_VARIANTS = ("standard", "frozen_qk", "frozen_mlp", "mixit", "shaped")  # trainer_classifier.py's flags


def translate_classifier(run: dict) -> dict:
    """trainer_classifier.py's flags for one sentiment run. Their tokenizer and data come from the Hub; the
    runner hands their script ours instead (`kind: classifier`, see run_one and the docstring)."""
    variant = run["variant"]
    if variant not in CLASSIFIER_VARIANTS:
        raise ValueError(f"trainer_classifier.py has no weight freezing: variant {variant!r} has no counterpart; "
                         f"allowed: {', '.join(CLASSIFIER_VARIANTS)}")
    attention, _, freeze_qk, freeze_mlp = VARIANTS[variant]
    seq_len = int(run["task_params"].get("seq_len", 64))
    argv = ["--model_name_or_path=llama", "--llama3=True", "--task=yelp_polarity", f"--max_seq_len={seq_len}",
            f"--n_embd={run['d_model']}", f"--n_layer={run['n_layers']}", f"--n_head={run['n_heads']}",
            f"--seed={run['seed']}", f"--learning_rate={run['lr']}", f"--weight_decay={run['weight_decay']}",
            *warmup_flag(run), f"--per_device_train_batch_size={run['batch_size']}",
            f"--max_steps={run['steps']}", f"--shaped_attention={attention}", "--output_dir=out"]
    if freeze_qk:
        argv.append("--freeze_attention=True")
    if freeze_mlp:
        argv.append("--freeze_mlp=True")
    argv += ["--report_to=none", "--disable_tqdm=True"]
    return {"script": "trainer_classifier.py", "argv": argv, "pins": {}, "kind": "classifier",
            "task_info": {"task": "sentiment", "seq_len": seq_len}}


def sentiment_inputs(run: dict, text_files: list[str] | None = None) -> dict:
    """What the runner gives their classifier in place of the Hub's: our study's tokenizer (JSON), its special
    tokens, the labelled split (texts and class indices) and our token rows of both splits, to check theirs by."""
    from mixit_lab.models.tokenizer import BOS_TOKEN, PAD_TOKEN
    from mixit_lab.reproduce.corpora import choose_text
    from mixit_lab.training.tasks.corpora import with_tuning_split
    from mixit_lab.training.tasks.text import load_labelled_corpus
    from mixit_lab.training.tasks.registry import get_task

    kind = run.get("text", "sentiment")  # the study's corpus: the 1,000 sentences, or SST-2 (sst2)
    choice = choose_text(kind, text_files)
    if choice.skipped:
        raise SystemExit(f"{kind}: {choice.note}")
    task = get_task("sentiment", **{**run["task_params"], **choice.params})
    corpus = with_tuning_split(load_labelled_corpus(  # the texts behind task.train_rows / val_rows, in their order
        task.text_file, task.dataset, task.classes, task.val_fraction, task.max_docs, task.cache_dir, task.test_file,
        task.split_seed), task.tune_fraction, task.split_seed)
    return {
        "tokenizer": task.text_tokenizer.to_str(), "bos_token": BOS_TOKEN, "pad_token": PAD_TOKEN,
        "classes": task.classes, "source": choice.note,
        "train": {"text": corpus.train_texts, "label": task.train_labels.tolist(), "rows": task.train_rows.tolist()},
        "test": {"text": corpus.val_texts, "label": task.val_labels.tolist(), "rows": task.val_rows.tolist()},
    }


