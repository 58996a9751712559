"""Train a small MLP regressor with minibatch SGD, under spotrun's checkpoint contract.

Deterministic: the same data and seed give the same ``model.npy`` bytes, whether the run is uninterrupted or
stopped and resumed any number of times, because each checkpoint holds the parameters, the momentum and the
random generator's exact state.

Run directly::

    python generate_data.py data
    python train.py                      # reads ./data, checkpoints in ./checkpoints, model in ./output

Under spotrun the ``SPOTRUN_*`` variables choose the directories and the checkpoint interval, and the
checkpoint signal (SIGTERM) makes it save and exit.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spotrun import training

HIDDEN = 32


@dataclass
class State:
    """Everything a resumed run needs to continue exactly where the saved one was."""

    step: int
    params: dict[str, np.ndarray]
    velocity: dict[str, np.ndarray]
    rng: np.random.Generator


def initial_state(features: int, seed: int) -> State:
    """Parameters, zero momentum and a fresh generator, all derived from ``seed``."""
    rng = np.random.Generator(np.random.PCG64(seed))
    params = {
        "w1": rng.standard_normal((features, HIDDEN)) / np.sqrt(features),
        "b1": np.zeros(HIDDEN),
        "w2": rng.standard_normal((HIDDEN, 1)) / np.sqrt(HIDDEN),
        "b2": np.zeros(1),
    }
    velocity = {name: np.zeros_like(value) for name, value in params.items()}
    return State(0, params, velocity, rng)


def save_state(directory: Path, state: State, padding_mb: int = 0) -> None:
    """Write a checkpoint: one .npy per array, and the step and generator state as JSON.

    ``padding_mb`` adds a file of that many MiB, standing in for the optimizer state of a large model, so that
    benchmarks can give the checkpoint upload a realistic duration. Resuming ignores it.
    """
    if padding_mb:
        (directory / "padding.bin").write_bytes(bytes(padding_mb * 1024 * 1024))
    for group, arrays in (("params", state.params), ("velocity", state.velocity)):
        for name, value in arrays.items():
            np.save(directory / f"{group}-{name}.npy", value)
    meta = {"step": state.step, "rng": state.rng.bit_generator.state}
    (directory / "state.json").write_text(json.dumps(meta))


def load_state(directory: Path) -> State:
    """Read a checkpoint written by :func:`save_state`."""
    meta = json.loads((directory / "state.json").read_text())
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = meta["rng"]
    arrays: dict[str, dict[str, np.ndarray]] = {"params": {}, "velocity": {}}
    for path in sorted(directory.glob("*.npy")):
        group, name = path.stem.split("-", 1)
        arrays[group][name] = np.load(path)
    return State(int(meta["step"]), arrays["params"], arrays["velocity"], rng)


def forward(params: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hidden activations and predictions."""
    hidden = np.tanh(x @ params["w1"] + params["b1"])
    return hidden, hidden @ params["w2"] + params["b2"]


def sgd_step(state: State, x: np.ndarray, y: np.ndarray, lr: float, momentum: float) -> float:
    """One minibatch step of SGD with momentum on the mean squared error; returns the batch loss."""
    params, velocity = state.params, state.velocity
    hidden, prediction = forward(params, x)
    error = prediction - y
    loss = float(np.mean(error**2))
    d_out = 2.0 * error / len(x)
    d_hidden = (d_out @ params["w2"].T) * (1.0 - hidden**2)
    grads = {
        "w2": hidden.T @ d_out,
        "b2": d_out.sum(axis=0),
        "w1": x.T @ d_hidden,
        "b1": d_hidden.sum(axis=0),
    }
    for name, grad in grads.items():
        velocity[name] = momentum * velocity[name] - lr * grad
        params[name] = params[name] + velocity[name]
    return loss


def flat_model(params: dict[str, np.ndarray]) -> np.ndarray:
    """The model as one float64 vector: w1 (8x32), b1 (32), w2 (32x1), b2 (1), each flattened in C order."""
    return np.concatenate([params[name].ravel() for name in ("w1", "b1", "w2", "b2")])


def main() -> None:
    parser = argparse.ArgumentParser(description="Train the tiny-regression MLP.")
    parser.add_argument("--data-dir", type=Path, help="Default: $SPOTRUN_DATA_DIR, else ./data.")
    parser.add_argument(
        "--checkpoint-dir", type=Path, help="Default: $SPOTRUN_CHECKPOINT_DIR, else ./checkpoints."
    )
    parser.add_argument("--output-dir", type=Path, help="Default: $SPOTRUN_OUTPUT_DIR, else ./output.")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--step-seconds", type=float, default=0.0, help="Sleep per step, to make progress visible."
    )
    parser.add_argument(
        "--checkpoint-padding-mb", type=int, default=0, help="Extra MiB in each checkpoint (benchmarks)."
    )
    args = parser.parse_args()

    run = training.Run.from_env(
        data_dir=args.data_dir,
        checkpoint_dir=args.checkpoint_dir,
        output_dir=args.output_dir,
        # No checkpoint interval here: spotrun sets it from the manifest's checkpoint.interval_steps
        # (SPOTRUN_CHECKPOINT_INTERVAL_STEPS); run directly, the contract's default applies.
        model_name="model.npy",
    )
    features = np.load(run.data_dir / "features.npy")
    targets = np.load(run.data_dir / "targets.npy")

    latest = run.latest_checkpoint()
    state = load_state(latest.path) if latest else initial_state(features.shape[1], args.seed)
    if latest:
        print(f"resumed from step {latest.step}", flush=True)

    while state.step < args.steps:
        batch = state.rng.choice(len(features), size=args.batch_size, replace=False)
        loss = sgd_step(state, features[batch], targets[batch], args.lr, args.momentum)
        state.step = step = state.step + 1
        run.report_metrics(step, loss=loss)  # the job's telemetry: spotrun report charts it
        if args.step_seconds:
            time.sleep(args.step_seconds)
        # checkpoint_due comes first so that it runs every step: it also reports the step reached to spotrun.
        if run.checkpoint_due(step) or run.stop_requested or step == args.steps:
            run.save_checkpoint(
                step, lambda directory: save_state(directory, state, args.checkpoint_padding_mb)
            )
            print(f"step {step} loss {loss:.6f}", flush=True)
            if run.stop_requested and step < args.steps:
                print(f"checkpoint signal: saved step {step}, exiting", flush=True)
                run.exit_for_preemption()

    _, prediction = forward(state.params, features)
    full_loss = float(np.mean((prediction - targets) ** 2))
    print(f"done: {state.step} steps, full-data loss {full_loss:.6f}")
    # A regression has no accuracy: its held-out measure is the mean squared error over all the data.
    run.report_metrics(state.step, full_data_loss=full_loss)
    run.save_model(lambda path: np.save(path, flat_model(state.params)))
    print(f"model written to {run.model_path}")


if __name__ == "__main__":
    main()
