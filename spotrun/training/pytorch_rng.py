"""The random generators of a PyTorch training process, captured and restored for an exact resume.

Part of :mod:`spotrun.training.pytorch` (which saves them in every checkpoint, one entry per rank); ``torch`` and
NumPy are imported only when a function runs.
"""

from __future__ import annotations

import random
from typing import Any


def capture_rng() -> dict[str, Any]:
    """The state of every random number generator this process uses, in a form ``torch.load`` accepts safely.

    Returns
    -------
    dict
        ``python`` (``random.getstate()``), ``numpy`` (the global generator's, as plain values; absent without
        NumPy), ``torch`` (the CPU generator's) and ``cuda`` (one per device; empty without CUDA).
    """
    import torch

    state: dict[str, Any] = {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    try:
        import numpy
    except ImportError:
        pass
    else:
        name, keys, pos, has_gauss, cached = numpy.random.get_state(legacy=True)  # legacy=True: a tuple
        # A tensor, not an ndarray: weights_only loading (torch.load's default) refuses NumPy objects.
        state["numpy"] = (
            name,
            torch.from_numpy(numpy.asarray(keys, dtype="int64")),
            int(pos),
            int(has_gauss),
            float(cached),
        )
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back what :func:`capture_rng` captured.

    Parameters
    ----------
    state
        A :func:`capture_rng` result.

    Raises
    ------
    RuntimeError
        When the checkpoint has CUDA generators but this process sees another number of devices.
    """
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda:
        if not torch.cuda.is_available() or torch.cuda.device_count() != len(cuda):
            raise RuntimeError(
                f"the checkpoint holds {len(cuda)} CUDA generator(s); this process sees "
                f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} device(s)"
            )
        torch.cuda.set_rng_state_all(cuda)
    if "numpy" in state:
        import numpy

        name, keys, pos, has_gauss, cached = state["numpy"]
        numpy.random.set_state((name, keys.numpy().astype("uint32"), pos, has_gauss, cached))
