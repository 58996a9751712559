"""The GPUs of a simulated instance: a fake ``nvidia-smi`` on its PATH, and the readings tests and users drive.

EC2's GPU instances come with NVIDIA's driver and ``nvidia-smi`` (the Deep Learning AMIs do); spotrun's agent
reads its GPUs through three invocations of it. A simulated instance gets a stand-in answering those
(:mod:`spotrun.local.instances.nvidia_smi_program`) for the GPUs its type has in spotrun's catalog
(:data:`spotrun.model.capacity.instance_types.GPU_CATALOG`): ``bin/nvidia-smi`` under the instance's directory,
which :func:`spotrun.local.instances.agent_environment.agent_environment` puts first on the agent's PATH (the
training command inherits it).

The program reads ``gpu/state.json``, which only the runtime writes (atomically: a reader sees the old file or
the new one): the GPUs (name, UUIDs, memory), how to find the instance's training processes, and the values a
test or a user drives (:meth:`SimulatedGpus.drive`). The runtime never reads it back: the training script runs
as the same user and may rewrite it, which fools only its own node's readings (as a user could replace
``nvidia-smi`` on their own instance), never another instance's or the runtime's.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spotrun.local.instances import nvidia_smi_program
from spotrun.model.capacity.instance_types import GPU_CATALOG, InstanceTypeInfo
from spotrun.model.contract_variables import ENV_PROGRESS_FILE

# UUIDs stable per instance and GPU, so a test or a log names the same GPU every time.
_UUID_NAMESPACE = uuid.UUID("6b1d3c52-8e0b-4f5e-9a57-3f1f4c8a2d10")

# The product names nvidia-smi prints for the catalog's GPUs (e.g. "GPU 0: NVIDIA A10G (UUID: ...)" on g5).
_PRODUCT_NAMES = {
    "t4": "Tesla T4",
    "a10g": "NVIDIA A10G",
    "l4": "NVIDIA L4",
    "l40s": "NVIDIA L40S",
    "h100": "NVIDIA H100 80GB HBM3",
    "h200": "NVIDIA H200",
}


def product_name(info: InstanceTypeInfo) -> str:
    """The GPU's name as ``nvidia-smi`` prints it (``NVIDIA A10G``, ``NVIDIA A100-SXM4-40GB``...)."""
    if info.gpu_name == "v100":
        return f"Tesla V100-SXM2-{info.gpu_memory_gib}GB"
    if info.gpu_name == "a100":
        return f"NVIDIA A100-SXM4-{info.gpu_memory_gib}GB"
    return _PRODUCT_NAMES.get(info.gpu_name, f"NVIDIA {info.gpu_name.upper()}")


@dataclass(frozen=True)
class DrivenGpu:
    """What a test or a user set for one GPU; None: computed from the instance's training (busy or idle)."""

    index: int
    uuid: str
    utilization: float | None = None
    memory_percent: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The GPU as the state file and the control API show it."""
        return {
            "index": self.index,
            "uuid": self.uuid,
            "utilization": self.utilization,
            "memory_percent": self.memory_percent,
        }


class SimulatedGpus:
    """The GPUs of one simulated instance and its ``nvidia-smi``.

    Parameters
    ----------
    instance_id, instance_type
        The instance; a type missing from spotrun's GPU catalog has no GPU (and no ``nvidia-smi``).
    directory
        The instance's directory: ``bin/nvidia-smi`` and ``gpu/`` (the program and its state) go there.
    marker, rank_variable
        The variable every process of the instance carries (its value the instance id), and the one only
        torchrun's workers carry: how the program finds the instance's training processes.
    """

    def __init__(
        self, instance_id: str, instance_type: str, directory: Path, marker: str, rank_variable: str
    ):
        self.instance_id = instance_id
        self.marker = marker
        self.rank_variable = rank_variable
        self.info = GPU_CATALOG.get(instance_type)
        self.bin_dir = directory / "bin"
        self.gpu_dir = directory / "gpu"
        self.state_path = self.gpu_dir / nvidia_smi_program.STATE_FILE
        count = self.info.gpus if self.info is not None else 0
        self._gpus = [
            DrivenGpu(i, f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{instance_id}/{i}')}") for i in range(count)
        ]
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        """GPUs of the instance."""
        return len(self._gpus)

    @property
    def memory_total_mib(self) -> int:
        """Memory of each GPU, MiB (the catalog's GiB)."""
        return self.info.gpu_memory_gib * 1024 if self.info is not None else 0

    @property
    def executable(self) -> Path:
        """The instance's ``nvidia-smi``."""
        return self.bin_dir / "nvidia-smi"

    def install(self) -> None:
        """Put ``nvidia-smi`` (and the state it reads) in the instance's directory; nothing for a type without
        GPUs, whose instances have no NVIDIA driver."""
        if not self._gpus:
            return
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        self.gpu_dir.mkdir(parents=True, exist_ok=True)
        program = self.gpu_dir / "nvidia_smi.py"
        shutil.copyfile(nvidia_smi_program.__file__, program)
        self._write_state()
        # -I: neither the environment nor the user's site may change what runs; -S: stdlib only, faster start.
        wrapper = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S {shlex.quote(str(program))} "$@"\n'
        scratch = self.executable.with_name(".nvidia-smi.tmp")
        scratch.write_text(wrapper, encoding="utf-8")
        scratch.chmod(0o755)
        scratch.replace(self.executable)

    def driven(self) -> list[dict[str, Any]]:
        """Each GPU with the values driven on it (None where the reading follows the training)."""
        with self._lock:
            return [gpu.as_dict() for gpu in self._gpus]

    def drive(
        self,
        utilization: float | None = None,
        memory_percent: float | None = None,
        gpu: int | None = None,
    ) -> list[dict[str, Any]]:
        """Make one GPU (``gpu``) or every GPU read ``utilization`` and/or ``memory_percent`` until reset.

        A value left None keeps what was driven before (or the computed reading).

        Returns
        -------
        list[dict]
            Each GPU after the change (:meth:`driven`).

        Raises
        ------
        ValueError
            When the instance has no GPU, nothing is given, a value lies outside 0-100, or ``gpu`` is no index.
        """
        if not self._gpus:
            raise ValueError(f"{self.instance_id} has no GPU")
        if utilization is None and memory_percent is None:
            raise ValueError("give a utilization and/or a memory percent")
        for name, value in (("utilization", utilization), ("memory_percent", memory_percent)):
            if value is not None and not 0 <= value <= 100:
                raise ValueError(f"{name} must lie between 0 and 100, not {value:g}")
        if gpu is not None and not 0 <= gpu < len(self._gpus):
            raise ValueError(f"{self.instance_id} has GPUs 0 to {len(self._gpus) - 1}, not {gpu}")
        with self._lock:
            self._gpus = [
                DrivenGpu(
                    g.index,
                    g.uuid,
                    g.utilization if utilization is None else float(utilization),
                    g.memory_percent if memory_percent is None else float(memory_percent),
                )
                if gpu is None or g.index == gpu
                else g
                for g in self._gpus
            ]
            self._write_state()
            return [g.as_dict() for g in self._gpus]

    def reset(self) -> list[dict[str, Any]]:
        """Forget every driven value: the readings follow the training again."""
        with self._lock:
            self._gpus = [DrivenGpu(g.index, g.uuid) for g in self._gpus]
            if self._gpus:
                self._write_state()
            return [g.as_dict() for g in self._gpus]

    def _write_state(self) -> None:
        """Replace the state file whole (a concurrent ``nvidia-smi`` reads the old one or the new one)."""
        assert self.info is not None
        state = {
            "instance_id": self.instance_id,
            "name": product_name(self.info),
            "memory_total_mib": self.memory_total_mib,
            "marker": self.marker,
            "training_variable": ENV_PROGRESS_FILE,
            "rank_variable": self.rank_variable,
            "gpus": [g.as_dict() for g in self._gpus],
        }
        self.gpu_dir.mkdir(parents=True, exist_ok=True)
        scratch = self.gpu_dir / f".{nvidia_smi_program.STATE_FILE}.{os.getpid()}.{threading.get_ident()}"
        scratch.write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
        scratch.replace(self.state_path)
