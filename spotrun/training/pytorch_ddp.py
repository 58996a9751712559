"""Bit-exact ``DistributedDataParallel``: gradients summed in rank order, so a resumed run under ``torchrun`` ends
with the bytes an uninterrupted one does (a training helper beside :mod:`spotrun.training.pytorch`).

``torch`` is imported only when the hook runs; the agent copies this module beside :mod:`spotrun.training`.
"""

from __future__ import annotations

from typing import Any


def ordered_gradient_sum(ddp_model: Any) -> Any:
    """Make a ``DistributedDataParallel`` model sum its gradients in rank order, so a resumed run stays exact.

    DDP all-reduces flat buckets of gradients, and a ring all-reduce adds each element's contributions in an
    order that depends on where the element sits in the bucket. DDP rebuilds its buckets after the first
    iteration of every process, so the step right after a resume is reduced with another layout than the same
    step of an uninterrupted run: with three or more ranks the float sums differ in the last bits (with two, the
    sum of two numbers does not depend on the order). This DDP communication hook gathers every rank's bucket
    and adds them in rank order, whatever the layout. It costs a gather instead of an all-reduce: meant for
    runs that must be bit-exact (and for small models).

    Parameters
    ----------
    ddp_model
        The ``torch.nn.parallel.DistributedDataParallel`` model, before its first step.

    Returns
    -------
    DistributedDataParallel
        ``ddp_model``, with the hook registered.
    """
    ddp_model.register_comm_hook(None, _ordered_mean)
    return ddp_model


# No annotations on purpose: DDP refuses a hook whose annotations are not its own types (strings, here).
def _ordered_mean(process_group, bucket):
    import torch
    import torch.distributed as dist

    group = process_group if process_group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    buffer = bucket.buffer()
    parts = [torch.empty_like(buffer) for _ in range(world)]

    def mean(_: Any) -> Any:
        total = parts[0].clone()
        for part in parts[1:]:
            total += part
        return total.div_(world)

    return dist.all_gather(parts, buffer, group=group, async_op=True).get_future().then(mean)
