"""The recovery bench's report: the figures of every run, their statistics, the verdicts and the table.

Kept apart from the measurement (:mod:`bench.recovery`, which runs the emulator) so that the arithmetic and its
wording are tested on recorded runs (``tests/unit/test_bench_recovery.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.common import TIMES, Stats, fmt, stats, verdict
from bench.recovery_timeline import RecoveryFigures, Timeline, recovery_figures

if TYPE_CHECKING:
    from bench.recovery import RecoveryConfig

# The targets: warning -> first resumed step within 1.3x the limit, and 0.6x the same job without overlap
LIMIT_TARGET = 1.3
BASELINE_TARGET = 0.6
NOTICE_SECONDS = 120.0  # the spot warning's lead on AWS's clock: the emulator reclaims the instance after it


def summarize(measured: list[dict[str, Any]], config: RecoveryConfig) -> dict[str, Any]:
    """The figures of every measurement, their statistics per configuration, and the verdicts.

    Beside the issue's two targets, two figures say what the second one can be measured against:

    - ``floor_over_baseline``: the medians over every run of ``limit / sequential``, the ratio to the baseline
      with no overhead on either side (:class:`~bench.recovery_timeline.RecoveryFigures`); a target below it
      cannot be met by removing overhead, only by an upload that takes longer against the boot;
    - ``overlap_over_reclaimed``: the recovery against a replacement launched when EC2 reclaims the old instance
      at the end of the two-minute notice, as a system that does not act on the warning launches one at the
      earliest: the notice (scaled) plus the baseline's launch -> first resumed step, both measured.
    """
    per: dict[bool, list[RecoveryFigures]] = {True: [], False: []}
    runs = []
    for item in measured:
        figures = recovery_figures(Timeline.from_dict(item["timeline"]))
        per[bool(item["overlap"])].append(figures)
        runs.append({**item, "figures": figures.as_dict()})
    parts = ("recovery", "boot", "upload", "restore", "limit", "ratio_to_limit", "sequential", "after_launch")
    summary = {
        ("overlap" if overlap else "baseline"): {
            part: stats(getattr(f, part) for f in figures).as_dict() for part in parts
        }
        for overlap, figures in per.items()
        if figures
    }
    verdicts: dict[str, Any] = {}
    if "overlap" in summary:
        ratio = summary["overlap"]["ratio_to_limit"]["median"]
        verdicts["recovery_over_limit"] = {
            "value": ratio,
            "target": LIMIT_TARGET,
            "met": ratio <= LIMIT_TARGET,
        }
    if "overlap" in summary and "baseline" in summary:
        recovery = summary["overlap"]["recovery"]["median"]
        ratio = recovery / summary["baseline"]["recovery"]["median"]
        verdicts["overlap_over_baseline"] = {
            "value": ratio,
            "target": BASELINE_TARGET,
            "met": ratio <= BASELINE_TARGET,
        }
        every = per[True] + per[False]
        floor = stats(f.limit for f in every).median / stats(f.sequential for f in every).median
        verdicts["floor_over_baseline"] = {
            "value": floor,
            "target": BASELINE_TARGET,
            "met": floor <= BASELINE_TARGET,
        }
        reclaimed = NOTICE_SECONDS * config.time_scale + summary["baseline"]["after_launch"]["median"]
        verdicts["overlap_over_reclaimed"] = {
            "value": recovery / reclaimed,
            "reclaimed_seconds": reclaimed,
            "target": BASELINE_TARGET,
            "met": recovery / reclaimed <= BASELINE_TARGET,
        }
    return {"config": config.__dict__, "runs": runs, "summary": summary, "verdicts": verdicts}


def markdown(results: dict[str, Any]) -> str:
    """The section's table: medians [ranges] per configuration side by side, the verdicts, the config."""
    summary, config = results["summary"], results["config"]
    columns = [name for name in ("overlap", "baseline") if name in summary]
    heads = {"overlap": "replacement on the warning", "baseline": "replacement after the old one is gone"}
    rows = [
        ("warning → first resumed step", "recovery", " s"),
        ("boot (launch → reachable)", "boot", " s"),
        ("upload of the restored checkpoint", "upload", " s"),
        ("restore", "restore", " s"),
        ("limit max(boot, upload) + restore", "limit", " s"),
        ("recovery ÷ limit", "ratio_to_limit", TIMES),
        ("sequential limit (commit - warning) + boot + restore", "sequential", " s"),
        ("replacement's launch → first resumed step", "after_launch", " s"),
    ]
    lines = [
        "| | " + " | ".join(heads[c] for c in columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    for label, part, unit in rows:
        cells = [fmt(_stats(summary[c][part]), unit, 2 if unit == TIMES else 1) for c in columns]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lost = {
        c: [r["figures"]["steps_lost"] for r in results["runs"] if r["overlap"] == (c == "overlap")]
        for c in columns
    }
    lines.append(
        "| steps lost (each run) | " + " | ".join(", ".join(map(str, lost[c])) for c in columns) + " |"
    )
    lines.append("")
    verdicts = results["verdicts"]
    if "recovery_over_limit" in verdicts:
        v = verdicts["recovery_over_limit"]
        lines.append(
            f"- Recovery ≤ {LIMIT_TARGET} \u00d7 the limit (medians of the ratio per run): {v['value']:.2f}\u00d7 "
            f"{verdict(v['met'])}."
        )
    if "overlap_over_baseline" in verdicts:
        v = verdicts["overlap_over_baseline"]
        floor = verdicts["floor_over_baseline"]["value"]
        reclaimed = verdicts["overlap_over_reclaimed"]
        lines += [
            f"- Recovery ≤ {BASELINE_TARGET} \u00d7 the no-overlap baseline (ratio of medians): {v['value']:.2f}\u00d7 "
            f"{verdict(v['met'])}.",
            f"  - With no overhead on either side (median limit ÷ median sequential limit, every run) the ratio "
            f"would be {floor:.2f}\u00d7: "
            + (
                "the target is below what removing overhead can reach at this boot and checkpoint size."
                if floor > BASELINE_TARGET
                else "within reach of the target."
            ),
            f"  - Against a replacement launched when EC2 reclaims the old instance, at the end of the notice "
            f"({NOTICE_SECONDS * config['time_scale']:g} s, then the baseline's launch → first step: "
            f"{reclaimed['reclaimed_seconds']:.1f} s), what a control plane that does not act on the warning gets at "
            f"best: {reclaimed['value']:.2f}\u00d7.",
        ]
    n = {c: summary[c]["recovery"]["n"] for c in columns}
    boot = config["boot_delay_seconds"] + config["ssm_registration_delay_seconds"]
    lines += [
        "",
        f"Config: boot {boot:g} s on AWS's clock (EC2 running after {config['boot_delay_seconds']:g} s, its SSM "
        f"agent registered {config['ssm_registration_delay_seconds']:g} s later) at time scale "
        f"{config['time_scale']:g} (= {boot * config['time_scale']:g} s), checkpoint padding "
        f"{config['checkpoint_padding_mb']} MiB, steps of {config['step_seconds']:g} s and a checkpoint every "
        f"{config['checkpoint_interval_steps']} steps, interrupted once the first checkpoint is committed; "
        f"{' and '.join(f'{n[c]} {c}' for c in columns)} runs, interleaved, each in a fresh process. "
        "Medians [min\u2013max]. The machine (2 cores) was shared with other work: ranges are wide.",
    ]
    return "\n".join(lines)


def _stats(d: dict[str, Any]) -> Stats:
    return Stats(d["median"], d["min"], d["max"], d["n"])
