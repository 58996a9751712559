"""A PyTorch data pipeline that resumes exactly: a ``DataLoader`` whose position and generator are checkpointed.

Part of :mod:`spotrun.training.pytorch`: :func:`resumable_loader` builds a torchdata ``StatefulDataLoader``
(https://meta-pytorch.org/data/beta/torchdata.stateful_dataloader.html), which can say where it is in an epoch
(its sampler's generator and the batches yielded, its workers' snapshots) and continue from there; give it to
:class:`~spotrun.training.pytorch.TorchCheckpointer` as ``loaders={"train": loader}`` and every checkpoint holds
it. Three things a plain ``DataLoader`` gets wrong on a resume, this one gets right:

- **Its own generator.** Every ``iter(DataLoader)`` draws its workers' base seed, and a ``shuffle=True``
  sampler its seed, from the generator given as ``generator=``, else from torch's global one: a resumed run
  builds one iterator more than the uninterrupted one did, so dropout and everything else drawn from the global
  generator would diverge. The loader gets a ``torch.Generator`` of its own, seeded from ``seed``.
- **The generator after the epoch it resumes in.** ``StatefulDataLoader`` restores the sampler's generator to the
  epoch's start and redraws the permutation, but not the base seed drawn after it: with ``num_workers=0`` the
  next epoch's order would differ. The generator's state at the save is put back once the resumed epoch's
  iterator exists.
- **Workers that outlive the checkpoint signal.** Under ``torchrun`` the signal reaches each rank's whole
  process group (torchrun stops a rank with ``os.killpg``): the workers died of it and the rank crashed in the
  middle of its save (``DataLoader worker ... is killed by signal: Terminated``). Each worker moves to a process
  group of its own when it starts (the signal is blocked until then), so only the processes that save get it.
  The worker still ends with the loader (and, should the training process die, within the five seconds
  after which a worker checks that its parent lives).

Randomness drawn *inside* a worker (data augmentation in ``Dataset.__getitem__``) restarts from the worker's
seed on a resume: derive it from the sample's index and the epoch to keep it exact.

``torch`` and ``torchdata`` are imported only when a function here runs; the agent copies this module beside
:mod:`spotrun.training`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from spotrun.model.contract_variables import ENV_CHECKPOINT_SIGNAL

_LOADER_CLASS: Any = None


def checkpoint_signal(environ: dict[str, str] | None = None) -> signal.Signals:
    """The run's checkpoint signal (``SPOTRUN_CHECKPOINT_SIGNAL``), SIGTERM when unset."""
    env = os.environ if environ is None else environ
    return signal.Signals[(env.get(ENV_CHECKPOINT_SIGNAL) or "SIGTERM").strip().upper()]


def resumable_loader(
    dataset: Any,
    *,
    seed: int | None = None,
    worker_init_fn: Callable[[int], None] | None = None,
    **kwargs: Any,
) -> Any:
    """A ``StatefulDataLoader`` that a :class:`~spotrun.training.pytorch.TorchCheckpointer` resumes exactly.

    Parameters
    ----------
    dataset
        The dataset.
    seed
        Seeds the loader's own generator (shuffling, workers' seeds); None: ``torch.initial_seed()``, which is
        the script's ``torch.manual_seed`` and draws nothing from the global generator.
    worker_init_fn
        Run in each worker as ``DataLoader`` runs it, after the worker left the training process's group.
    **kwargs
        ``DataLoader`` arguments (``batch_size``, ``shuffle``, ``num_workers``, ``sampler``, ...);
        ``generator`` is refused: the loader's is seeded by ``seed``.

    Returns
    -------
    torchdata.stateful_dataloader.StatefulDataLoader
        The loader; its ``state_dict`` also holds its generator's state.
    """
    import torch

    if "generator" in kwargs:
        raise TypeError("resumable_loader seeds its own generator: give seed= instead of generator=")
    generator = torch.Generator()
    generator.manual_seed(torch.initial_seed() if seed is None else seed)
    shield = frozenset({checkpoint_signal()})
    start = functools.partial(_worker_start, worker_init_fn, shield)
    with warnings.catch_warnings():
        # StatefulDataLoader calls torch.set_vital, which torch 2.13 deprecates: nothing a user can act on.
        warnings.filterwarnings("ignore", message=".*set_vital.*")
        return _loader_class()(dataset, generator=generator, worker_init_fn=start, shield=shield, **kwargs)


def check_loader(name: str, loader: Any) -> None:
    """Refuse a loader that cannot resume exactly, saying what to use instead.

    Raises
    ------
    TypeError
        When it has no ``state_dict``/``load_state_dict`` (a plain ``DataLoader``).
    ValueError
        When it has no generator of its own.
    """
    if not hasattr(loader, "state_dict") or not hasattr(loader, "load_state_dict"):
        raise TypeError(
            f"loader {name!r} cannot say where it is in its epoch: build it with "
            "spotrun.training.pytorch.resumable_loader (a torchdata StatefulDataLoader)"
        )
    if getattr(loader, "generator", None) is None:
        raise ValueError(
            f"loader {name!r} draws its seeds from torch's global generator, which a resume puts out of step: "
            "build it with spotrun.training.pytorch.resumable_loader, or give it generator= of its own"
        )


def _loader_class() -> Any:
    """``ResumableLoader``, defined on first use so that torchdata is imported only by a script that uses it."""
    global _LOADER_CLASS
    if _LOADER_CLASS is not None:
        return _LOADER_CLASS
    from torchdata.stateful_dataloader import StatefulDataLoader

    class ResumableLoader(StatefulDataLoader):
        """``StatefulDataLoader`` with its generator in its state, starting its workers shielded."""

        def __init__(self, *args: Any, shield: frozenset[signal.Signals], **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._shield = shield
            self._generator_after_iter: Any = None

        def __iter__(self) -> Any:
            # Workers start with the signal blocked (fork and exec keep the mask): one started while the signal
            # goes to the group must not die of it before it has left the group.
            with _blocked(self._shield):
                iterator = super().__iter__()
            if self._generator_after_iter is not None:
                self.generator.set_state(self._generator_after_iter)
                self._generator_after_iter = None
            return iterator

        def state_dict(self) -> dict[str, Any]:
            with _blocked(self._shield):  # may start the workers of the iterator it describes
                state = super().state_dict()
            return {"loader": state, "generator": self.generator.get_state()}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            super().load_state_dict(state_dict["loader"])
            self._generator_after_iter = state_dict["generator"]

    _LOADER_CLASS = ResumableLoader
    return ResumableLoader


@contextlib.contextmanager
def _blocked(signals: frozenset[signal.Signals]) -> Iterator[None]:
    """Block ``signals`` in this thread for the block; one that arrived meanwhile is delivered at its end."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _worker_start(
    user_init: Callable[[int], None] | None, shield: frozenset[signal.Signals], worker_id: int
) -> None:
    """In a new worker: leave the training process's group, drop what was sent to it meanwhile, unblock."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    for signum in signal.sigpending() & shield:
        # Sent to the training process's group while this worker was still in it: meant for the trainer.
        signal.sigtimedwait({signum}, 0)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, shield)
    if user_init is not None:
        user_init(worker_id)
