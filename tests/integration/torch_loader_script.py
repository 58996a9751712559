"""A user's ordinary PyTorch loop on spotrun's helpers: a shuffling DataLoader with two workers, dropout.

Run by tests/integration/test_training_torch_loader.py, directly and as the agent's training command. The data
is made here from a fixed seed: nothing to stage.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.nn import functional
from torch.utils.data import TensorDataset

from spotrun.training import pytorch

SAMPLES = 256
EPOCHS = 4


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--step-seconds", type=float, default=0.0)
    args = parser.parse_args()
    run = pytorch.run_from_env(checkpoint_interval_steps=10, model_name="model.safetensors")
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    features = torch.randn(SAMPLES, 8)
    targets = (features.sum(1) > 0).long()
    dataset = TensorDataset(features, targets)
    loader = pytorch.resumable_loader(dataset, batch_size=16, shuffle=True, num_workers=2, seed=7)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    checkpointer = pytorch.TorchCheckpointer(run, model, optimizer, loaders={"train": loader})
    position = checkpointer.resume()
    print(f"resumed from step {position.step}", flush=True)
    model.train()
    while position.epoch < EPOCHS:
        for inputs, labels in loader:
            optimizer.zero_grad()
            loss = functional.cross_entropy(model(inputs), labels)
            loss.backward()
            optimizer.step()
            position = position.advance(len(loader))
            print(f"step {position.step} loss {loss.item():.6f}", flush=True)
            if args.step_seconds:
                time.sleep(args.step_seconds)
            checkpointer.step_done(position)
    run.save_model(pytorch.save_safetensors(model))


if __name__ == "__main__":
    main()
