"""A small CNN on scikit-learn's handwritten digits, under spotrun's checkpoint contract, alone or under torchrun.

Deterministic: the same arguments and number of processes give the same ``model.safetensors`` bytes, whether
the run is uninterrupted or stopped and resumed any number of times (see ``spotrun.training.pytorch``). The data
is ``sklearn.datasets.load_digits``, bundled with scikit-learn: nothing is downloaded.

Run directly::

    python train.py                                # checkpoints in ./checkpoints, model in ./output
    torchrun --nproc-per-node 2 train.py           # the same with DDP: gloo on CPU, nccl with CUDA

Under spotrun the ``SPOTRUN_*`` variables choose the directories and the checkpoint interval, and the
checkpoint signal (SIGTERM) makes every rank save and exit after the same step.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import time

import numpy as np
import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional

from spotrun import training
from spotrun.training import pytorch, pytorch_ddp

TRAIN_SAMPLES = 1536  # of the 1797 digits; the rest measure the accuracy


class DigitsCNN(nn.Module):
    """Two small convolutions and a linear head for the 8x8 digits; dropout makes the RNG matter."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.dropout = nn.Dropout(0.1)
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        hidden = functional.relu(self.conv1(images))
        hidden = functional.max_pool2d(functional.relu(self.conv2(hidden)), 2)
        return self.head(self.dropout(hidden.flatten(1)))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--max-steps", type=int, default=0, help="Stop after this many steps (0: all epochs)."
    )
    parser.add_argument("--batch-size", type=int, default=32, help="Samples per rank per step.")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="Sleep per step (to watch it run).")
    parser.add_argument("--checkpoint-interval", type=int, default=20, help="Steps, when run on its own.")
    return parser.parse_args()


def deterministic(seed: int) -> None:
    """Seed every generator and ask torch for reproducible kernels on one thread."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # what CUDA's deterministic GEMMs need


def start_group() -> torch.device:
    """Join torchrun's process group when there is one; the device this rank trains on."""
    cuda = torch.cuda.is_available()
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl" if cuda else "gloo")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def main() -> None:
    args = parse_args()
    run = pytorch.run_from_env(
        checkpoint_interval_steps=args.checkpoint_interval, model_name="model.safetensors"
    )
    deterministic(args.seed)
    device = start_group()
    train(args, run, device)
    if dist.is_initialized():
        # train()'s DDP wrapper is gone by now: destroyed after its process group, it can hang the exit.
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def train(args: argparse.Namespace, run: training.Run, device: torch.device) -> None:
    """Train (or resume) to the last epoch; rank 0 saves the model."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = pytorch.rank()

    digits = load_digits()
    images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    labels = torch.tensor(digits.target, dtype=torch.int64)
    train_images, train_labels = images[:TRAIN_SAMPLES], labels[:TRAIN_SAMPLES]
    global_batch = args.batch_size * world
    batches_per_epoch = TRAIN_SAMPLES // global_batch
    total_steps = batches_per_epoch * args.epochs

    model: nn.Module = DigitsCNN().to(device)
    if world > 1:
        # Gradients summed in rank order: bit-exact resumes with any number of processes (see the helper).
        model = pytorch_ddp.ordered_gradient_sum(nn.parallel.DistributedDataParallel(model))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps)
    checkpointer = pytorch.TorchCheckpointer(run, model, optimizer, scheduler)
    position = checkpointer.resume(map_location=device)
    if rank == 0:
        print(f"world {world}, {total_steps} steps, starting at {position}", flush=True)

    model.train()
    while position.epoch < args.epochs and not 0 < args.max_steps <= position.step:
        # The epoch's order depends on (seed, epoch) only: a resumed epoch follows the interrupted one's.
        order = pytorch.epoch_order(TRAIN_SAMPLES, position.epoch, args.seed)
        start = position.batch * global_batch + rank * args.batch_size
        batch = torch.tensor(order[start : start + args.batch_size])
        inputs, targets = train_images[batch].to(device), train_labels[batch].to(device)
        optimizer.zero_grad()
        loss = functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        scheduler.step()
        position = position.advance(batches_per_epoch)
        if rank == 0:
            print(f"step {position.step} loss {loss.item():.6f}", flush=True)
            # The job's telemetry (spotrun report charts it); the run of ranks other than 0 drops it.
            run.report_metrics(position.step, loss=loss.item())
        if args.step_seconds:
            time.sleep(args.step_seconds)
        checkpointer.step_done(position)  # saves when due or stopping; exits after saving on a stop

    if rank == 0:
        net = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        net.eval()  # the plain module: DDP's forward could start a collective the other ranks never join
        with torch.no_grad():
            predicted = net(images[TRAIN_SAMPLES:].to(device)).argmax(1).cpu()
        accuracy = (predicted == labels[TRAIN_SAMPLES:]).float().mean().item()
        print(f"held-out accuracy {accuracy:.3f}", flush=True)
        run.report_metrics(position.step, accuracy=accuracy)
        run.save_model(pytorch.save_safetensors(net))


if __name__ == "__main__":
    main()
