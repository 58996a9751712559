"""`make bench`: run the benchmarks and write their results as JSON and a markdown table in bench/results/."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.recovery import RecoveryConfig, measure
from bench.simulate import main as simulate_main

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=RecoveryConfig.runs, help="runs per configuration")
    parser.add_argument("--boot-delay", type=float, default=RecoveryConfig.boot_delay_seconds)
    parser.add_argument("--padding-mb", type=int, default=RecoveryConfig.checkpoint_padding_mb)
    args = parser.parse_args()
    simulate_main()  # first: it needs no emulator, and its results stand whatever the recovery bench does
    config = RecoveryConfig(
        runs=args.runs, boot_delay_seconds=args.boot_delay, checkpoint_padding_mb=args.padding_mb
    )
    result = measure(config)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "recovery.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "| overlap | recovery (s) | replacement boot seen (s) | steps lost |",
        "| --- | ---: | ---: | ---: |",
        *(
            f"| {'yes' if run['overlap'] else 'no'} | {run['recovery_seconds']:.2f} | {run['boot_seconds']:.2f} "
            f"| {run['steps_lost']} |"
            for run in result["runs"]  # type: ignore[attr-defined]
        ),
        "",
        f"Median recovery: {result['median_recovery_seconds_with_overlap']:.2f} s with the replacement launched on "
        f"the warning, {result['median_recovery_seconds_without_overlap']:.2f} s without: "
        f"{result['speedup_without_over_with']}x. Emulated boot delay {result['emulated_boot_delay_seconds']:.1f} s, "
        f"checkpoint padding {config.checkpoint_padding_mb} MB, time scale {config.time_scale}.",
    ]
    (RESULTS / "recovery.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
