"""``spotrun simulate --plot``: progress against time for each policy from one start, as a PNG.

matplotlib is the optional ``sim`` extra, imported here only, when a plot is asked for.
"""

from __future__ import annotations

from pathlib import Path

from spotrun.cli.display.output import fail
from spotrun.model.deadline.policies import POLICIES
from spotrun.model.simulation.optimum import optimum
from spotrun.model.simulation.replay import optimum_interval, replay_policy, start_steps
from spotrun.model.simulation.runs import replay_of
from spotrun.model.simulation.traces import Trace

_COLOURS = {
    "on-demand": "tab:red",
    "spot-only": "tab:gray",
    "greedy": "tab:orange",
    "uniform-progress": "tab:blue",
    "spotrun": "tab:green",
}


def write_plot(path: Path, trace: Trace, job: object, step_seconds: int, starts: int, which: int) -> None:
    """Replay every policy from start number ``which`` of ``trace`` and draw work done against time.

    Parameters
    ----------
    path:
        The PNG written.
    trace, job:
        The trace and the :class:`~spotrun.model.simulation.replay.SimJob`.
    step_seconds, starts:
        As the table's replay took them (the start times are the same).
    which:
        Index into those start times.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: a file only
        import matplotlib.pyplot as plt
    except ImportError:
        raise fail("--plot needs matplotlib: pip install 'spotrun[sim]'", code=2) from None
    from spotrun.model.simulation.replay import SimJob

    assert isinstance(job, SimJob)
    replay = replay_of(trace, step_seconds)
    begins = start_steps(replay, job, starts)
    start = begins[min(which, len(begins) - 1)]
    horizon = job.deadline_hours * 1.25
    fig, (ax, strip) = plt.subplots(
        2, 1, figsize=(9, 5.5), sharex=True, gridspec_kw={"height_ratios": [6, 1]}, layout="constrained"
    )
    for name in POLICIES:
        run = replay_policy(name, job, replay, start, record=True)
        xs = [t for t, _ in run.progress if t <= horizon]
        ys = [w for t, w in run.progress if t <= horizon]
        label = f"{name}: ${run.cost:.0f}" + ("" if run.deadline_met else " (late)")
        ax.plot(xs, ys, label=label, color=_COLOURS.get(name), linewidth=2 if name == "spotrun" else 1.2)
    best = optimum(job, replay, start, optimum_interval(job), record=True)
    if best.cost is not None:
        ax.plot(
            [t for t, _ in best.progress],
            [w for _, w in best.progress],
            "--",
            color="tab:purple",
            label=f"optimum (knows the trace): ${best.cost:.0f}",
        )
    ax.plot(
        [0, job.deadline_hours], [0, job.work_hours], ":", color="tab:blue", label="uniform progress line"
    )
    ax.axvline(job.deadline_hours, color="black", linestyle="--", linewidth=1, label="deadline")
    ax.set_ylabel("work done (h)")
    ax.set_title(f"{trace.name}, start at {start * replay.step_hours:.0f} h")
    ax.legend(loc="upper left", fontsize=8)
    steps = int(horizon / replay.step_hours)
    spot = [1 if start + i < replay.steps and replay.spot[start + i] else 0 for i in range(steps)]
    strip.fill_between([i * replay.step_hours for i in range(steps)], spot, step="post", color="tab:green")
    strip.set_yticks([])
    strip.set_ylabel("spot", rotation=0, labelpad=15)
    strip.set_xlabel("hours after submission")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
