"""The emulator at scale: N concurrent jobs, each interrupted once, on this machine's cores.

One measurement is one fresh process (``python -m bench.scale --once``) that starts the embedded runtime, drops
N copies of the example job at once, interrupts each one once at a planned step (the demo's injector), waits for
all of them and prints one JSON line: the wall time, the CPU seconds of the emulator and control plane (this
process: moto, the Lambda handlers, Step Functions' interpreter) and of the instances (the agents and the
training scripts, its reaped children), the interruptions planned, decided and taken effect (an attempt that
got the warning and ended on it) and whether each warning's checkpoint was committed, and each job's status
and model digest.

The baseline is the same measurement of another commit (``--baseline``, the branch point by default), extracted
with ``git archive`` into a temporary directory and run with that tree first on ``PYTHONPATH``; the two
alternate, run by run, so that the machine's load falls on both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from io import BytesIO
from pathlib import Path
from typing import Any

NAME = "scale"
JOBS = 8
TIME_SCALE = 0.02  # the e2e tests' and the demo's
PLANNED_OVER = 180  # interruptions are planned in the first 60 % of the example's 300 steps, as the demo does
MARGIN = 0.15
JOB_TIMEOUT = 900.0
# How often each job's waiter reads its record: a person following 8 jobs does not poll each 5 times a second.
WAIT_POLL_SECONDS = 0.5
REPO = Path(__file__).resolve().parent.parent


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def measure_once(jobs: int, seed: int) -> dict[str, Any]:
    """Run ``jobs`` concurrent example jobs, each interrupted once, in this process; return the figures."""
    from spotrun.local.chaos.injector import Injector
    from spotrun.local.chaos.plan import InterruptionSchedule, plan_interruptions
    from spotrun.local.demo import (
        EXAMPLE_DIR,
        drop_manifest,
        job_progress,
        local_runtime,
        upload_example,
        wait_for_job,
    )

    text = (EXAMPLE_DIR / "manifest.yaml").read_text()
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as scratch:
        started_cpu = _cpu()
        started = time.monotonic()
        with local_runtime(
            Path(scratch) / "runtime", time_scale=TIME_SCALE, log_file=Path(scratch) / "cp.log"
        ) as rt:
            upload_example(rt)
            ready_cpu = _cpu()
            ready = time.monotonic()

            def one(index: int) -> dict[str, Any]:
                manifest = text.replace("name: tiny-regression", f"name: scale-{seed}-{index}").encode()
                submitted = drop_manifest(rt, manifest, f"scale-{seed}-{index}.yaml")
                schedule = InterruptionSchedule(
                    plan_interruptions(1, PLANNED_OVER, seed=seed * 100 + index, margin=MARGIN)
                )
                refused: list[str] = []
                injector = Injector(
                    schedule,
                    job_progress(rt, submitted.job_id),
                    rt.interrupt,
                    on_interrupt=lambda _hit, error: refused.append(error) if error else None,
                )
                with injector:
                    job = wait_for_job(rt, submitted.job_id, timeout=JOB_TIMEOUT, poll=WAIT_POLL_SECONDS)
                by_number = {attempt.number: attempt for attempt in job.attempts}
                # A planned interruption took effect when the attempt it was decided for got the warning (its
                # notice recorded) and ended on it, not by completing its training.
                effects = [
                    (
                        hit.attempt,
                        by_number[hit.attempt].notice_at is not None,
                        by_number[hit.attempt].end_reason,
                        _checkpoint_committed(by_number[hit.attempt]),
                    )
                    if hit.attempt in by_number
                    else (hit.attempt, False, None, False)
                    for hit in schedule.hits
                ]
                return {
                    "job_id": job.job_id,
                    "effects": effects,
                    "status": job.status.value,
                    "model_sha256": job.model_sha256,
                    "planned": 1,
                    "decided": len(schedule.hits),
                    "refused": refused,
                    "pending": list(schedule.pending),
                    "interrupted_attempts": sum(1 for a in job.attempts if a.end_reason == "interrupted"),
                    "attempts": [
                        [a.number, a.end_reason, a.last_step, a.restored_step] for a in job.attempts
                    ],
                }

            with ThreadPoolExecutor(max_workers=jobs) as pool:
                results = list(pool.map(one, range(jobs)))
            done = time.monotonic()
            done_cpu = _cpu()
    return {
        "jobs": jobs,
        "wall_seconds": done - ready,
        "startup_seconds": ready - started,
        "startup_cpu_seconds": sum(ready_cpu) - sum(started_cpu),
        "control_plane_cpu_seconds": done_cpu[0] - ready_cpu[0],
        "instances_cpu_seconds": done_cpu[1] - ready_cpu[1],
        "results": results,
    }


def _checkpoint_committed(attempt: Any) -> bool:
    """Whether the warning's checkpoint was committed: the record's own field, or on a tree older than it
    (a baseline), the end reason ``interrupted``, which then meant the checkpoint was reported in time."""
    if "notice_checkpoint_committed" in type(attempt).model_fields:
        return attempt.notice_checkpoint_committed is True
    return bool(attempt.end_reason == "interrupted")


def took_effect(noticed: bool, end_reason: str | None) -> bool:
    """Whether an interruption took effect: its attempt got the warning and ended on it, not by completing."""
    return noticed and end_reason not in (None, "completed")


def summarize(once: dict[str, Any]) -> dict[str, Any]:
    """The verdicts of one measurement: all succeeded, one model, every planned interruption taken effect."""
    results = once["results"]
    digests = {result["model_sha256"] for result in results}
    return {
        "succeeded": sum(1 for result in results if result["status"] == "SUCCEEDED"),
        "identical_models": len(digests) == 1 and None not in digests,
        "planned": sum(result["planned"] for result in results),
        "taken_effect": sum(
            took_effect(noticed, reason) for r in results for _n, noticed, reason, _c in r["effects"]
        ),
        "checkpoint_committed": sum(
            sum(1 for _n, noticed, _r, committed in result["effects"] if noticed and committed)
            for result in results
        ),
        "control_plane_cpu_per_job": once["control_plane_cpu_seconds"] / once["jobs"],
        "instances_cpu_per_job": once["instances_cpu_seconds"] / once["jobs"],
    }


def _fresh(tree: Path | None, jobs: int, seed: int) -> dict[str, Any]:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    # As a script (not -m), so that the baseline's own tree, first on the path, provides spotrun.
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--once",
        "--jobs",
        str(jobs),
        "--seed",
        str(seed),
    ]
    done = subprocess.run(command, cwd=tree or REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bench.scale --once failed ({done.returncode}): {done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _extract(commit: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _range(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}\N{EN DASH}{max(values):.{digits}f}]"


def run(runs: int, jobs: int = JOBS, baseline: str | None = "main") -> dict[str, Any]:
    """``runs`` measurements of this tree and of ``baseline`` (a commit; None: none), interleaved.

    Returns
    -------
    dict
        The bench interface: ``name``, ``title``, ``markdown``, ``results``.
    """
    sides: dict[str, list[dict[str, Any]]] = {"this tree": []}
    with tempfile.TemporaryDirectory(prefix="bench-scale-base-") as scratch:
        base_tree = None
        if baseline is not None:
            base_commit = subprocess.run(
                ["git", "merge-base", "HEAD", baseline], cwd=REPO, capture_output=True, text=True, check=True
            ).stdout.strip()
            base_tree = _extract(base_commit, Path(scratch))
            sides[f"baseline {base_commit[:10]}"] = []
        for index in range(runs):
            for side in sides:
                tree = None if side == "this tree" else base_tree
                once = _fresh(tree, jobs, seed=index + 1)
                once["summary"] = summarize(once)
                sides[side].append(once)
    rows = []
    for side, measured in sides.items():
        summaries = [once["summary"] for once in measured]
        rows.append(
            f"| {side} | {_range([o['wall_seconds'] for o in measured])} "
            f"| {_range([s['control_plane_cpu_per_job'] for s in summaries], 2)} "
            f"| {_range([s['instances_cpu_per_job'] for s in summaries], 2)} "
            f"| {sum(s['succeeded'] for s in summaries)}/{jobs * len(measured)} "
            f"| {sum(s['taken_effect'] for s in summaries)}/{sum(s['planned'] for s in summaries)} "
            f"| {sum(s['checkpoint_committed'] for s in summaries)} "
            f"| {'yes' if all(s['identical_models'] for s in summaries) else 'NO'} |"
        )
    ours = [once["summary"] for once in sides["this tree"]]
    verdict = all(
        s["succeeded"] == jobs and s["identical_models"] and s["taken_effect"] == s["planned"] for s in ours
    )
    markdown = "\n".join(
        [
            f"Medians [min\N{EN DASH}max] of {runs} run(s) per side, interleaved, each in a fresh process; the "
            f"machine's {os.cpu_count()} cores. CPU is per job, after the runtime started.",
            "",
            "| tree | wall (s) | emulator + control plane CPU-s/job | instances CPU-s/job | SUCCEEDED "
            "| interruptions taken effect / planned | of which the warning's checkpoint committed | identical models |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
            *rows,
            "",
            f"Target (issue 12): {jobs} concurrent jobs each interrupted once all SUCCEEDED with identical models, "
            f"every planned interruption taking effect: **{'met' if verdict else 'NOT met'}**.",
            "An interruption takes effect when the attempt it was decided for got the warning (its notice is "
            "recorded) and ended on it rather than by completing; its checkpoint is committed when the record says "
            "the warning's checkpoint made it (`notice_checkpoint_committed`; on a baseline older than that field, "
            "the end reason `interrupted`).",
            f"Config: example tiny-regression (300 steps, checkpoint every 50), time scale {TIME_SCALE}, one "
            f"interruption per job planned over steps {PLANNED_OVER} with margin {MARGIN}.",
        ]
    )
    return {
        "name": NAME,
        "title": f"{jobs} concurrent jobs, each interrupted once",
        "markdown": markdown,
        "results": {"jobs": jobs, "runs": sides, "target_met": verdict},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--once", action="store_true", help="one measurement in this process, as a JSON line")
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--baseline", default="main", help="commit to compare with ('' for none)")
    args = parser.parse_args()
    if args.once:
        print(json.dumps(measure_once(args.jobs, args.seed)))
        return
    print(run(args.runs, args.jobs, args.baseline or None)["markdown"])


if __name__ == "__main__":
    main()
