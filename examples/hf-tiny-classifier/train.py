"""Train a tiny BERT to classify generated sentences, with the Hugging Face Trainer, under spotrun's contract.

Nothing comes from a model hub: the model is built from a ``BertConfig`` (2 layers, hidden size 32), the
tokenizer is a word vocabulary over the text this script generates, and the text is generated from a seed.
So it runs with ``HF_HUB_OFFLINE=1``, in a few seconds on a CPU, and deterministically: an interrupted and
resumed run ends with the same weights and evaluation metrics as an uninterrupted one.

Run directly::

    HF_HUB_OFFLINE=1 python train.py    # checkpoints in ./checkpoints, model and metrics.json in ./output

Under spotrun the ``SPOTRUN_*`` variables choose the directories and the checkpoint interval, and the
checkpoint signal (SIGTERM) makes it save and exit (see ``spotrun.training.huggingface``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    EvalPrediction,
    PreTrainedModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)

from spotrun.training import huggingface

POSITIVE = ("good", "great", "fine", "happy", "bright", "calm", "kind", "warm")
NEGATIVE = ("bad", "poor", "sad", "dark", "cold", "harsh", "dull", "grim")
NEUTRAL = ("the", "a", "day", "was", "and", "very", "it", "film", "food", "room", "seemed", "quite")
SPECIAL = ("[PAD]", "[CLS]", "[UNK]")
WORDS_PER_SENTENCE = 10
METRICS_FILE = "metrics.json"
# The evaluation's figures that depend only on the model and the data (not its timing), so they can be compared.
COMPARED_METRICS = ("eval_loss", "eval_accuracy", "epoch")


def generate(count: int, seed: int) -> list[tuple[str, int]]:
    """Sentences of positive, negative and neutral words; the label is 1 when positive words outnumber negative."""
    rng = random.Random(seed)
    examples = []
    for _ in range(count):
        positive, negative = rng.sample(range(5), 2)  # never equal, so every sentence has a label
        words = [rng.choice(POSITIVE) for _ in range(positive)] + [
            rng.choice(NEGATIVE) for _ in range(negative)
        ]
        words += [rng.choice(NEUTRAL) for _ in range(WORDS_PER_SENTENCE - len(words))]
        rng.shuffle(words)
        examples.append((" ".join(words), int(positive > negative)))
    return examples


class WordTokenizer:
    """A word-level tokenizer over a fixed vocabulary: ``[CLS]`` then one id per word, padded to a length."""

    def __init__(self, vocabulary: list[str], length: int) -> None:
        self.vocabulary = vocabulary
        self.ids = {word: index for index, word in enumerate(vocabulary)}
        self.length = length

    @classmethod
    def build(cls) -> WordTokenizer:
        return cls([*SPECIAL, *sorted({*POSITIVE, *NEGATIVE, *NEUTRAL})], WORDS_PER_SENTENCE + 1)

    def encode(self, text: str) -> dict[str, torch.Tensor]:
        ids = [self.ids["[CLS]"]] + [self.ids.get(word, self.ids["[UNK]"]) for word in text.split()]
        ids = ids[: self.length]
        mask = [1] * len(ids) + [0] * (self.length - len(ids))
        ids += [self.ids["[PAD]"]] * (self.length - len(ids))
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}


class SentenceDataset(torch.utils.data.Dataset):
    """Encoded sentences and their labels, as the ``Trainer``'s default collator takes them."""

    def __init__(self, examples: list[tuple[str, int]], tokenizer: WordTokenizer) -> None:
        self.items = [{**tokenizer.encode(text), "labels": torch.tensor(label)} for text, label in examples]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.items[index]


class StepDelay(TrainerCallback):
    """Sleep after each step, so that progress (and an interruption) can be watched in a run of seconds."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        time.sleep(self.seconds)


def accuracy(prediction: EvalPrediction) -> dict[str, float]:
    predictions = np.argmax(prediction.predictions, axis=-1)
    return {"accuracy": float(np.mean(predictions == prediction.label_ids))}


def build_model(vocabulary_size: int, length: int) -> BertForSequenceClassification:
    """A two-layer BERT with hidden size 32, randomly initialised (from the seed set before)."""
    config = BertConfig(
        vocab_size=vocabulary_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=length,
        num_labels=2,
    )
    return BertForSequenceClassification(config)


def save_model(model: PreTrainedModel, tokenizer: WordTokenizer, path: Path) -> None:
    """The weights and config (``save_pretrained``) and the vocabulary, in one directory."""
    model.save_pretrained(path)
    (path / "vocab.json").write_text(json.dumps(tokenizer.vocabulary))


def main() -> None:
    parser = argparse.ArgumentParser(description="Train the hf-tiny-classifier BERT.")
    parser.add_argument(
        "--checkpoint-dir", type=Path, help="Default: $SPOTRUN_CHECKPOINT_DIR, else ./checkpoints."
    )
    parser.add_argument("--output-dir", type=Path, help="Default: $SPOTRUN_OUTPUT_DIR, else ./output.")
    parser.add_argument("--train-examples", type=int, default=384)
    parser.add_argument("--eval-examples", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument(
        "--max-steps",
        type=int,
        default=-1,
        help="Stop after this many steps (-1: all epochs; 48 by default).",
    )
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--step-seconds", type=float, default=0.0, help="Sleep per step, to make progress visible."
    )
    args = parser.parse_args()

    # Under torchrun every rank runs this script; only rank 0 reports progress and metrics to the agent.
    run = huggingface.run_from_env(
        checkpoint_dir=args.checkpoint_dir, output_dir=args.output_dir, model_name="model"
    )
    # One thread: the same float operations in the same order on any machine, so runs compare bit for bit. The
    # variable too: without it, accelerate gives each CPU rank of a torchrun group a thread count of its own
    # (physical cores / local processes) when the trainer starts.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    set_seed(args.seed)
    tokenizer = WordTokenizer.build()
    train_set = SentenceDataset(generate(args.train_examples, args.seed), tokenizer)
    eval_set = SentenceDataset(generate(args.eval_examples, args.seed + 1), tokenizer)
    model = build_model(len(tokenizer.vocabulary), tokenizer.length)

    trainer = Trainer(
        model=model,
        args=TrainingArguments(
            output_dir=str(huggingface.scratch_dir(run)),
            # No save_steps: the callback saves every SPOTRUN_CHECKPOINT_INTERVAL_STEPS (the manifest's interval).
            save_strategy="no",
            num_train_epochs=args.epochs,
            max_steps=args.max_steps,
            per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=args.eval_examples,
            learning_rate=args.lr,
            lr_scheduler_type="linear",
            warmup_steps=5,
            logging_steps=10,
            seed=args.seed,
            full_determinism=True,
            use_cpu=not torch.cuda.is_available(),
            dataloader_num_workers=0,
            report_to="none",
            disable_tqdm=True,
        ),
        train_dataset=train_set,
        eval_dataset=eval_set,
        compute_metrics=accuracy,
        callbacks=[StepDelay(args.step_seconds)] if args.step_seconds else [],
    )
    # On the checkpoint signal: saves that step, exits 128 + signal. Trainer's logs (loss every logging_steps, the
    # evaluation's eval_loss and eval_accuracy) reach the job's telemetry through the helper's callback.
    huggingface.train(trainer, run)

    metrics = trainer.evaluate()  # every rank evaluates its share; the metrics are the whole set's
    if not trainer.is_world_process_zero():
        return  # the model and metrics are the same on every rank: rank 0 writes them
    print(f"evaluation: {json.dumps(metrics)}", flush=True)
    (run.output_dir / METRICS_FILE).write_text(json.dumps({key: metrics[key] for key in COMPARED_METRICS}))
    run.save_model(lambda path: save_model(model, tokenizer, path))
    print(f"model written to {run.model_path}")


if __name__ == "__main__":
    main()
