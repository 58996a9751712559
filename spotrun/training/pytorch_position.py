"""Where a PyTorch run is, and the data order of an epoch: the positions :mod:`spotrun.training.pytorch` saves and
resumes (a training helper beside it, re-exported by it).

``torch`` is imported only when a function here runs; the agent copies this module beside :mod:`spotrun.training`.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Position", "epoch_order"]


class Position(NamedTuple):
    """Where the run is: ``step`` steps done, in ``epoch``, after its first ``batch`` batches.

    Parameters
    ----------
    step
        Steps completed over the whole run (names the checkpoint).
    epoch
        The epoch being trained (0-based).
    batch
        Batches of ``epoch`` already trained: the next one to train has this index.
    """

    step: int = 0
    epoch: int = 0
    batch: int = 0

    def advance(self, batches_per_epoch: int) -> Position:
        """The position after one more batch: the next epoch's start once ``batches_per_epoch`` are done."""
        if batches_per_epoch < 1:
            raise ValueError("batches_per_epoch must be at least 1")
        batch = self.batch + 1
        if batch >= batches_per_epoch:
            return Position(self.step + 1, self.epoch + 1, 0)
        return Position(self.step + 1, self.epoch, batch)


def epoch_order(size: int, epoch: int, seed: int) -> list[int]:
    """A shuffled order of ``range(size)`` that depends on ``(seed, epoch)`` only.

    As ``DistributedSampler.set_epoch`` does, the order comes from a generator seeded with ``seed + epoch``, so
    the permutation of a resumed epoch is the one the interrupted run was following, whatever the global
    generators did since.

    Parameters
    ----------
    size
        Number of samples.
    epoch
        The epoch.
    seed
        The run's seed.

    Returns
    -------
    list[int]
        A permutation of ``range(size)``.
    """
    import torch

    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return [int(index) for index in torch.randperm(size, generator=generator)]
