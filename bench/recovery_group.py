"""Recovery of a 2-node job when one node is warned: the healthy node kept against the whole group relaunched.

One measurement (``python -m bench.recovery_group --once --mode MODE``, a fresh process each) runs the
pytorch-digits example's 2-node job (``examples/pytorch-digits/multinode.yaml``: torchrun's c10d rendezvous and
gloo across two simulated instances, each its own loopback address) through the real control plane in the
embedded runtime, with every instance reachable 120 s after its launch on AWS's clock (6 s at the time scale
0.05: EC2 running after 60 s, its SSM agent registered 60 s later). Once the group's first checkpoint is
committed, one node gets the spot warning (``runtime.interrupt``); the measurement ends when the resumed attempt
has trained its first step.

Three configurations (:data:`MODES`) run interleaved (A B C A B C ...):

- ``keep``: spotrun (``keep_healthy_nodes`` and ``overlap_replacement`` true): the replacement is launched on
  the warning, the healthy node is kept and joins it;
- ``relaunch``: spotrun without keeping (both false): nothing is launched on the warning; once the group's
  checkpoint is committed and the attempt ended, every node is released and a whole new group launched;
- ``reclaimed``: the peers' timing (both false, and EC2 launches nothing before it has reclaimed the warned node
  at the end of its two-minute notice: :func:`bench.recovery.launch_after`). SkyPilot's managed jobs and dstack
  do not act on the warning: they learn of the loss when EC2 takes the instance back, then relaunch the whole
  group, so this is when their new group is launched at the earliest. The rest is spotrun's (the checkpoint on
  the warning, the old nodes released once it is committed), which a peer does not do: this mode gives the
  peers both, so what it loses is a lower bound on theirs.

A probe thread polls every :data:`bench.recovery.POLL_SECONDS` what the emulator exposes (each instance's EC2
state, boot and SSM registration; the warned node's IMDS notice), what the instances write (complete checkpoint
directories; rank 0's progress file of each attempt, whose modification time is its step's) and the commit markers
in moto's S3 backend. :mod:`bench.recovery_group_timeline` says what is computed from it; the single-node
:mod:`bench.recovery` explains why these events are the ones timed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bench.common import MeasurementError, child_main, config_flags, interleaved, run_once
from bench.recovery import RecoveryProbe, await_seen, interruption
from bench.recovery_group_report import markdown, summarize
from bench.recovery_group_timeline import (
    HEALTHY,
    NEW,
    WARNED,
    GroupTimeline,
    IncompleteTimeline,
    NodeSeen,
    group_figures,
)

Mode = Literal["keep", "relaunch", "reclaimed"]
MODES: tuple[Mode, ...] = ("keep", "relaunch", "reclaimed")
CODE_PREFIX = "examples/pytorch-digits/code/"
PROGRESS = re.compile(r"progress-attempt-(\d+)$")


@dataclass(frozen=True)
class GroupRecoveryConfig:
    """What one measurement is made of."""

    time_scale: float = 0.05
    # As the single-node bench: reachable 120 s after the launch on AWS's clock, every pool alike.
    boot_delay_seconds: float = 60.0
    ssm_registration_delay_seconds: float = 60.0
    step_seconds: float = 0.05
    checkpoint_interval_steps: int = 10
    epochs: int = 40  # never reached: the measurement ends at the resumed attempt's first step
    warned_node: int = 0  # node 0 hosts global rank 0 and the c10d store: the group's hardest node to lose
    timeout_seconds: float = 240.0


# -- the measurement (in the child process) ---------------------------------------------------------------


class GroupProbe(RecoveryProbe[GroupTimeline]):
    """Polls the runtime's instances and S3 and fills a :class:`GroupTimeline` (see the module docstring)."""

    thread_name = "group-recovery-probe"

    def __init__(self, runtime: Any, job_id: str):
        super().__init__(runtime, job_id, GroupTimeline())
        self.old_attempt: int | None = None  # set before the warning: the attempt it interrupts
        self.old_nodes: frozenset[str] | None = None  # and that attempt's instances
        self.warned: Any = None

    def reclaim_seen(self, at: float) -> None:
        self.timeline.reclaimed = at

    def warn(self, sim: Any, attempt: Any) -> None:
        """Name the node about to be warned and the attempt it runs, before the warning is sent."""
        self.old_nodes = frozenset(attempt.instance_ids())
        self.old_attempt, self.warned = attempt.number, sim

    def _node(self, sim: Any, now: float) -> None:
        from spotrun.local.capacity.catalog import INSTANCE_TYPES

        t = self.timeline
        seen = t.nodes.get(sim.instance_id)
        if seen is None:
            # Before the warning every instance is the old group's (one job runs); after it, only the attempt's.
            role = HEALTHY if self.old_nodes is None or sim.instance_id in self.old_nodes else NEW
            if sim is self.warned:
                role = WARNED
            info = INSTANCE_TYPES.get(sim.instance_type)
            seen = t.nodes[sim.instance_id] = NodeSeen(role=role, gpus=info.gpus if info else 1, launched=now)
        if seen.running is None and sim.booted.is_set():
            seen.running = now
        if seen.reachable is None and sim.managed:
            seen.reachable = now
        if seen.ended is None and (sim.ended.is_set() or sim.state in ("shutting-down", "terminated")):
            seen.ended = now

    def poll(self, now: float) -> None:
        """Record what changed since the last poll."""
        from spotrun.agent.supervision.progress import read_progress
        from spotrun.model.layout import local_checkpoints

        t = self.timeline
        sims = self.runtime.instances
        for sim in sims:
            self._node(sim, now)
            if t.nodes[sim.instance_id].role == NEW or t.first_step is not None:
                continue  # the old group's checkpoints only: a kept node saves the resumed attempt's too
            for step, _ in local_checkpoints(self._paths(sim).checkpoint_dir):
                t.old_saved.setdefault(step, now)
        for step in t.old_saved:
            if step not in t.old_committed and (at := self._committed_at(step)) is not None:
                t.old_committed[step] = at
                self.first_commit.set()
        if self.warned is None:
            return
        if t.warning is None:
            if self.warned.metadata.instance_action is None:
                return
            t.warning = now
            for instance_id, seen in t.nodes.items():
                if instance_id == self.warned.instance_id:
                    seen.role = WARNED
                elif instance_id not in (self.old_nodes or ()):
                    seen.role = NEW
        for sim in sims:
            for progress_file in self._paths(sim).runtime_dir.glob("progress-attempt-*"):
                match = PROGRESS.search(progress_file.name)
                if match is None or (progress := read_progress(progress_file)) is None:
                    continue
                mark = (progress.step, progress.updated_at.timestamp())
                if int(match.group(1)) == self.old_attempt:
                    t.old_last_progress = mark
                elif int(match.group(1)) > (self.old_attempt or 0) and t.first_step is None:
                    t.first_step = mark
                    self.resumed.set()


def _manifest(config: GroupRecoveryConfig) -> bytes:
    from spotrun.shape import REPO_ROOT

    text = (REPO_ROOT / "examples" / "pytorch-digits" / "multinode.yaml").read_text()
    edits = {
        "name: pytorch-digits-2-nodes": "name: recovery-group-bench",
        "  workdir: .": f"  code: s3://spotrun-jobs-local/{CODE_PREFIX}",
        'train.py, --epochs, "3"]': (
            f'train.py, --epochs, "{config.epochs}", --step-seconds, "{config.step_seconds}"]'
        ),
        "    interval_steps: 10\n": f"    interval_steps: {config.checkpoint_interval_steps}\n",
    }
    for old, new in edits.items():
        if old not in text:
            raise RuntimeError(
                f"the example's multinode.yaml changed ({old!r}): update the bench's edits of it"
            )
        text = text.replace(old, new)
    return text.encode()


def _upload_code(runtime: Any) -> None:
    """The example's code in the jobs bucket, as ``training.workdir: .`` would upload it."""
    from spotrun.shape import REPO_ROOT

    s3 = runtime.client("s3")
    for path in sorted(p for p in (REPO_ROOT / "examples" / "pytorch-digits").iterdir() if p.is_file()):
        s3.put_object(
            Bucket=runtime.settings.jobs_bucket,
            Key=CODE_PREFIX + path.name,
            Body=path.read_bytes(),
            ChecksumAlgorithm="SHA256",
        )


def measure_once(config: GroupRecoveryConfig, mode: Mode, workdir: Path) -> dict[str, Any]:
    """Run the 2-node job in this process's emulator, warn one node once, and return what was seen."""
    from spotrun.aws.adapters import job_store
    from spotrun.local.capacity.catalog import default_pools
    from spotrun.local.demo import control_plane_logs, drop_manifest
    from spotrun.local.runtime import LocalRuntime

    # The default pools, each holding two whole groups, every instance booting alike.
    pools = [
        dataclasses.replace(p, boot_delay_seconds=config.boot_delay_seconds, capacity=max(p.capacity, 4))
        for p in default_pools()
    ]
    runtime = LocalRuntime(
        workdir,
        time_scale=config.time_scale,
        pools=pools,
        settings_overrides={"overlap_replacement": mode == "keep", "keep_healthy_nodes": mode == "keep"},
    )
    runtime.manager.ssm_registration_delay_seconds = config.ssm_registration_delay_seconds
    with control_plane_logs(workdir / "control-plane.log"), runtime:
        _upload_code(runtime)
        store = job_store(runtime.settings.jobs_table, runtime.settings.region)
        submitted = drop_manifest(runtime, _manifest(config), "recovery-group-bench.yaml")
        with GroupProbe(runtime, submitted.job_id) as probe:
            job = await_seen(
                probe.first_commit, probe, store, submitted.job_id, config.timeout_seconds, "a commit"
            )
            attempt = job.open_attempt
            if attempt is None or len(attempt.nodes) < 2:
                raise RuntimeError(f"no open group attempt once a checkpoint was committed: {attempt!r}")
            warned = runtime.instance(attempt.nodes[config.warned_node].instance_id)
            probe.warn(warned, attempt)
            hold = mode == "reclaimed"
            with interruption(
                runtime, probe, warned.instance_id, hold_launch=hold, time_scale=config.time_scale
            ):
                job = await_seen(
                    probe.resumed, probe, store, submitted.job_id, config.timeout_seconds, "the resumed step"
                )
    resumed = job.attempts[-1] if job is not None and job.attempts else None
    probe.timeline.restored_step = None if resumed is None else resumed.restored_step
    return {
        "mode": mode,
        "timeline": probe.timeline.as_dict(),
        "instance_types": sorted({runtime.instance(i).instance_type for i in probe.timeline.nodes}),
        "kept": [n.instance_id for n in (resumed.nodes if resumed else []) if n.kept_from is not None],
    }


# -- the section (in the parent process) ------------------------------------------------------------------


def run(runs: int, config: GroupRecoveryConfig | None = None) -> dict[str, Any]:
    """Measure ``runs`` interruptions in each of :data:`MODES`, interleaved, each in a fresh process."""
    config = config or GroupRecoveryConfig()
    before = os.getloadavg()[0]
    measured = []
    for index, mode in interleaved(MODES, runs):
        print(f"   recovery_group run {index + 1}/{runs}, {mode}", flush=True)
        item = run_once("bench.recovery_group", ["--mode", mode, *config_flags(config)], timeout=600)
        try:
            group_figures(GroupTimeline.from_dict(item["timeline"]), config.time_scale)
        except IncompleteTimeline as exc:
            raise MeasurementError(f"recovery_group run {index + 1} ({mode}): {exc}: {item}") from exc
        measured.append(item)
    results = summarize(measured, config, {"before": before, "after": os.getloadavg()[0]})
    return {
        "name": "recovery_group",
        "title": (
            "Recovery of a 2-node job: the healthy node kept against the whole group relaunched, on the warning "
            "and once EC2 reclaimed the node"
        ),
        "markdown": markdown(results),
        "results": results,
    }


if __name__ == "__main__":
    child_main(sys.argv[1:], GroupRecoveryConfig, MODES, measure_once)
