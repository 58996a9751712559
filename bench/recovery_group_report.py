"""The group recovery bench's report: every run's figures, their statistics per configuration, and the table.

Kept apart from the measurement (:mod:`bench.recovery_group`, which runs the emulator) so that the arithmetic and
its wording are tested on recorded runs (``tests/unit/test_bench_recovery_group.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.common import TIMES, Stats, fmt, stats
from bench.recovery_group_timeline import HEALTHY, NEW, ROLES, WARNED, GroupTimeline, group_figures
from spotrun.model.job.interruption_rate import NOTICE_SECONDS

if TYPE_CHECKING:
    from bench.recovery_group import GroupRecoveryConfig

HEADS = {
    "keep": "healthy node kept, replacement on the warning (spotrun)",
    "relaunch": "whole group relaunched on the warning, once the attempt ended (spotrun, keeping off)",
    "reclaimed": "whole group relaunched once EC2 reclaimed the warned node (the peers' timing)",
}
# Each baseline kept is compared with (:data:`bench.recovery_group.MODES`).
BASELINES = ("relaunch", "reclaimed")
PARTS = (
    "recovery",
    "recovery_aws",
    "launch",
    "boot",
    "commit",
    "restart",
    "gpu_seconds_lost",
    "gpu_seconds_lost_aws",
)
# The ratios shown, keep over each baseline (ratio of medians): the figures that carry over to AWS are the AWS ones.
COMPARED = {
    "recovery": "warning → first resumed step, wall",
    "recovery_aws": "warning → first resumed step, AWS's clock",
    "gpu_seconds_lost": "GPU-seconds lost, wall",
    "gpu_seconds_lost_aws": "GPU-seconds lost, AWS's clock",
}


def summarize(
    measured: list[dict[str, Any]], config: GroupRecoveryConfig, load: Any = None
) -> dict[str, Any]:
    """The figures of every measurement, their statistics per configuration, and keep ÷ each baseline.

    ``ratios`` maps each of :data:`BASELINES` measured alongside ``keep`` to ``{part: keep median ÷ its
    median}`` for the parts of :data:`COMPARED` (a part whose baseline median is 0 is left out).

    Parameters
    ----------
    measured
        What each ``--once`` child printed (``mode``, ``timeline``, ...), in the order run.
    config
        The configuration they ran with (its ``time_scale`` converts the boots to AWS's clock).
    load
        The machine's load averages before and after the runs, shown with the config.
    """
    per: dict[str, list[Any]] = {}
    runs = []
    for item in measured:
        figures = group_figures(GroupTimeline.from_dict(item["timeline"]), config.time_scale)
        per.setdefault(item["mode"], []).append(figures)
        runs.append({**item, "figures": figures.as_dict()})
    summary: dict[str, Any] = {}
    for mode in HEADS:
        if mode not in per:
            continue
        of_mode = per[mode]
        summary[mode] = {part: stats(getattr(f, part) for f in of_mode).as_dict() for part in PARTS}
        for role in ROLES:
            summary[mode][f"lost_{role}"] = stats(f.lost_by_role[role] for f in of_mode).as_dict()
            summary[mode][f"lost_{role}_aws"] = stats(f.lost_by_role_aws[role] for f in of_mode).as_dict()
    ratios = {
        baseline: {
            part: summary["keep"][part]["median"] / summary[baseline][part]["median"]
            for part in COMPARED
            if summary[baseline][part]["median"] > 0
        }
        for baseline in BASELINES
        if "keep" in summary and baseline in summary
    }
    return {
        "config": dict(config.__dict__),
        "load": load,
        "runs": runs,
        "summary": summary,
        "ratios": ratios,
    }


def _stats(d: dict[str, Any]) -> Stats:
    return Stats(d["median"], d["min"], d["max"], d["n"])


def markdown(results: dict[str, Any]) -> str:
    """The section's table: medians [ranges] per configuration side by side, the ratios, what is counted."""
    summary, config = results["summary"], results["config"]
    columns = [mode for mode in HEADS if mode in summary]
    scale = config["time_scale"]
    rows = [
        ("warning → first resumed step, wall", "recovery", " s"),
        (f"the same on AWS's clock (boots and a waited notice \u00d7 {1 / scale:g})", "recovery_aws", " s"),
        ("warning → the first new node launched, wall", "launch", " s"),
        ("new node(s) launch → reachable, wall", "boot", " s"),
        ("warning → the restored group checkpoint committed", "commit", " s"),
        ("last new node reachable → first resumed step", "restart", " s"),
        ("GPU-seconds lost, wall", "gpu_seconds_lost", " GPU-s"),
        ("· the warned node", f"lost_{WARNED}", " GPU-s"),
        ("· the healthy node (kept waiting, or until released)", f"lost_{HEALTHY}", " GPU-s"),
        ("· the new node(s), from running", f"lost_{NEW}", " GPU-s"),
        ("GPU-seconds lost, AWS's clock", "gpu_seconds_lost_aws", " GPU-s"),
        ("· the warned node", f"lost_{WARNED}_aws", " GPU-s"),
        ("· the healthy node", f"lost_{HEALTHY}_aws", " GPU-s"),
        ("· the new node(s)", f"lost_{NEW}_aws", " GPU-s"),
    ]
    lines = [
        "| | " + " | ".join(HEADS[c] for c in columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    for label, part, unit in rows:
        cells = [fmt(_stats(summary[c][part]), unit, 1) for c in columns]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for label, key in (
        ("old nodes released before the resumed step (each run)", "nodes_released"),
        ("steps lost (each run)", "steps_lost"),
    ):
        each = {c: [str(r["figures"][key]) for r in results["runs"] if r["mode"] == c] for c in columns}
        lines.append(f"| {label} | " + " | ".join(", ".join(each[c]) for c in columns) + " |")
    lines.append("")
    against = {"relaunch": "relaunched on the warning", "reclaimed": "relaunched once EC2 reclaimed the node"}
    for baseline, ratios in results["ratios"].items():
        for part, label in COMPARED.items():
            if part in ratios:
                lines.append(
                    f"- kept ÷ {against[baseline]}, {label} (ratio of medians): {ratios[part]:.2f}{TIMES}."
                )
    boot = config["boot_delay_seconds"] + config["ssm_registration_delay_seconds"]
    n = {c: summary[c]["recovery"]["n"] for c in columns}
    host = " (rank 0's host, the c10d store)" if config["warned_node"] == 0 else ""
    load = results.get("load")
    loads = (
        ""
        if not load
        else f" Load average (1 min) {load['before']:.1f} before the runs, {load['after']:.1f} after."
    )
    lines += [
        "",
        "GPU-seconds lost: per instance, the seconds EC2 bills (state `running`; `pending` and `shutting-down` are "
        "not billed) between the warning and the resumed attempt's first step, less the old group's training after "
        "the warning up to its last progress write when the restored checkpoint holds that step (the save it "
        "resumes from counts as work, its upload does not), times the instance's GPUs, summed over nodes. A kept "
        "node waiting for its replacement counts. AWS's clock: for the resumed step and a node billed until it, "
        f"each second inside a new node's launch → reachable span, and in the `reclaimed` column inside the "
        f"warning → reclaim span (the notice, {NOTICE_SECONDS:g} s \u00d7 {scale:g}), counts {1 / scale:g} (the "
        f"emulator's boot is {boot:g} s \u00d7 {scale:g}); every other second as measured (checkpoint save and "
        "upload, torchrun's "
        "start, rendezvous and restore at this machine's speed, "
        "with a model of a few KiB); a node released before the resumed step as measured.",
        "",
        "Where they differ: the relaunch on the warning waits for the group checkpoint's commit and the attempt's "
        "end before it launches, then boots two instances; the kept group boots one from the warning, while the "
        "healthy node waits billed. With this model's checkpoint (committed within about a second of the warning) "
        "the first saves little time; the `recovery` section shows the overlap with 96 and 256 MiB checkpoints. "
        "The `reclaimed` column is the peers' timing (SkyPilot managed jobs, dstack: they learn of the loss when "
        "EC2 reclaims the node at the end of the notice, then relaunch the whole group): its launch is held until "
        "then. It keeps spotrun's checkpoint on the warning and release of the old nodes once it is committed, "
        "which a peer does not do (it resumes from its last periodic checkpoint and its healthy node runs until "
        "it notices the loss), so its losses are a lower bound on a peer's. Not measured: a pool with room for "
        "one instance but not two (the kept group's replacement fits, a whole-group relaunch must move or wait).",
        "",
        f"Config: the pytorch-digits example's 2-node job (torchrun, gloo over loopback addresses), node "
        f"{config['warned_node']}{host} warned once the group's first checkpoint is "
        f"committed; boot {boot:g} s on AWS's clock (EC2 running after {config['boot_delay_seconds']:g} s, its SSM "
        f"agent registered {config['ssm_registration_delay_seconds']:g} s later) at time scale {scale:g} "
        f"(= {boot * scale:g} s); steps of {config['step_seconds']:g} s and a checkpoint every "
        f"{config['checkpoint_interval_steps']} steps; {', '.join(f'{n[c]} {c}' for c in columns)} runs, "
        f"interleaved, each in a fresh process. Medians [min\u2013max].{loads}",
    ]
    return "\n".join(lines)
