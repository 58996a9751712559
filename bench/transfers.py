"""Transfers against the emulator's S3: staging and checkpoint upload beside AWS's CRT, the ceiling and s5cmd.

The emulator's S3 (a ``ThreadedMotoServer`` with the patches the runtime installs on it, ranged GETs included)
runs in a process of its own; every measurement runs in a fresh process (``python -m bench.transfers --once``),
``runs`` times, the tools interleaved (their order rotated each run), on two data sets: 1,000 files of 1 MiB and
4 files of 256 MiB. Each measurement times the transfer alone (not the interpreter's start) and reports MB/s
and the client's CPU seconds (``s5cmd``'s included). What one measurement does (spotrun, the CRT, the ceiling,
s5cmd), and the emulator's process, are :mod:`bench.transfer_tools` and :mod:`bench.transfer_crt`; this module
runs them, the ceiling at the best of :data:`CEILING_WORKERS` threads, and writes the report.

Two verdicts per case: spotrun at least 90 % of the ceiling and no slower than s5cmd; and whether AWS's CRT S3
client comes within 10 % of spotrun (:data:`CRT_MARGIN`) on both MB/s and client CPU-seconds per verified GiB
(what moves to a real instance: the emulator shares the client's two cores, so its MB/s do not).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench.transfer_tools import (
    BUCKET,
    CASES,
    CREDENTIALS,
    DATASETS,
    MIB,
    TOOLS,
    client,
    delete_prefix,
    once,
    process_cpu_seconds,
    seed,
    serve,
)

__all__ = ["BUCKET", "CASES", "DATASETS", "main", "run"]

CEILING_WORKERS = (8, 16, 32)
SPOTRUN_WORKERS = 32  # the agent default (spotrun.agent.transfer.download.DEFAULT_WORKERS)
TARGET_OF_CEILING = 0.9
CRT_MARGIN = 0.10  # the CRT replaces spotrun's engine when within this of it on both figures, in every case
GIB = 1024 * MIB
# How each tool verifies what it moves, object by object (bench.transfer_tools, bench.transfer_crt).
VERIFICATION = {
    "spotrun": "stage: every object against its full-object checksum (a CRC-32 here: one GET's computed as it is "
    "written, a ranged object's combined from its ranges' CRCs) and its size; upload: S3 checks a CRC-32 of each "
    "PutObject, of each part and of the whole multipart object (FULL_OBJECT), the marker keeps each file's SHA-256",
    "crt": "stage: the CRT checks every object against its full-object checksum (one GET: the response's; ranged: "
    "the whole object's, which it finds with a HeadObject, with each range's own where the response has one); "
    "upload: as spotrun's (the CRT computes the parts' CRC-32s, Python the whole file's and the SHA-256)",
    "ceiling": "stage: an object under 16 MiB by botocore (the response's CRC-32, zlib's), a ranged one not at all; "
    "upload: botocore's CRC-32 of each PutObject and each part, which S3 checks, nothing of the whole multipart "
    "object (it keeps no checksum)",
    "s5cmd": "none: its GETs ask for no checksum and its uploads carry none (the emulator keeps no checksum for them)",
}


def _median_range(values: list[float], digits: int = 0) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def _measure(
    endpoint: str, case: str, dataset: str, tool: str, workers: int, source: Path, work: Path, server: int
) -> dict:
    destination = work / f"dest-{uuid.uuid4().hex[:8]}"
    destination.mkdir()
    job = f"j-{uuid.uuid4().hex[:12]}"
    prefix = f"data/{dataset}/" if case == "stage" else f"jobs/{job}/checkpoints/step-000000000001/"
    command = [
        sys.executable,
        "-m",
        "bench.transfers",
        "--once",
        f"--endpoint={endpoint}",
        f"--case={case}",
        f"--tool={tool}",
        f"--workers={workers}",
        f"--prefix={prefix}",
        f"--source={source}",
        f"--destination={destination}",
    ]
    # The disk written clean first: the emulator spools every uploaded object to a file, and staging writes a GiB,
    # whose writeback would otherwise land in whichever measurement comes next (kernel CPU, disk queue).
    os.sync()
    served = process_cpu_seconds(server)
    try:
        done = subprocess.run(
            command, check=True, capture_output=True, text=True, env={**os.environ, **CREDENTIALS}
        )
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        result["server_cpu_seconds"] = process_cpu_seconds(server) - served
    finally:
        shutil.rmtree(destination, ignore_errors=True)
        if case == "upload":
            delete_prefix(client(endpoint), f"jobs/{job}/")
    result["mb_per_s"] = result["bytes"] / MIB / result["seconds"]
    result["cpu_seconds_per_gib"] = result["cpu_seconds"] / (result["bytes"] / GIB)
    return result


def run(runs: int) -> dict[str, Any]:
    """Measure staging and upload of both data sets ``runs`` times, interleaved; the bench interface."""
    need = 4 * sum(count * size for count, size in DATASETS.values())
    work = Path(tempfile.mkdtemp(prefix="spotrun-bench-transfers-"))
    if shutil.disk_usage(work).free < need:
        raise RuntimeError(
            f"{work}: needs {need // MIB} MiB free for sources, the emulator's copy and the staged one"
        )
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.transfers", "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **CREDENTIALS, "TMPDIR": str(work)},
    )
    samples: dict[str, list[dict[str, Any]]] = {}
    try:
        assert server.stdout is not None
        endpoint = json.loads(server.stdout.readline())["endpoint"]
        sources = seed(client(endpoint), work)
        tools = [
            ("spotrun", SPOTRUN_WORKERS),
            ("crt", SPOTRUN_WORKERS),
            ("s5cmd", 0),
            *(("ceiling", w) for w in CEILING_WORKERS),
        ]
        for index in range(runs):
            order = tools[index % len(tools) :] + tools[: index % len(tools)]
            for case in CASES:
                for dataset in DATASETS:
                    for tool, workers in order:
                        name = f"{case}/{dataset}/{tool}" + (f"/{workers}" if tool == "ceiling" else "")
                        samples.setdefault(name, []).append(
                            _measure(
                                endpoint, case, dataset, tool, workers, sources[dataset], work, server.pid
                            )
                        )
    finally:
        if server.stdin:
            server.stdin.close()
        server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    return _report(samples, runs)


def _report(samples: dict[str, list[dict[str, Any]]], runs: int) -> dict[str, Any]:
    rows = []
    verdicts = {}
    lines = [
        "| case | data | spotrun MB/s | ceiling MB/s (best threads) | s5cmd MB/s | spotrun / ceiling "
        "| spotrun / s5cmd | CPU-s spotrun / ceiling / s5cmd | emulator CPU-s spotrun / ceiling / s5cmd | verdict |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for case in CASES:
        for dataset in DATASETS:
            ours = [s["mb_per_s"] for s in samples[f"{case}/{dataset}/spotrun"]]
            theirs = [s["mb_per_s"] for s in samples[f"{case}/{dataset}/s5cmd"]]
            ceilings = {
                w: [s["mb_per_s"] for s in samples[f"{case}/{dataset}/ceiling/{w}"]] for w in CEILING_WORKERS
            }
            best = max(ceilings, key=lambda w: statistics.median(ceilings[w]))
            ceiling = ceilings[best]
            of_ceiling = statistics.median(ours) / statistics.median(ceiling)
            of_s5cmd = statistics.median(ours) / statistics.median(theirs)
            ok = of_ceiling >= TARGET_OF_CEILING and of_s5cmd >= 1.0
            verdicts[f"{case}/{dataset}"] = ok
            names = (
                f"{case}/{dataset}/spotrun",
                f"{case}/{dataset}/ceiling/{best}",
                f"{case}/{dataset}/s5cmd",
            )
            cpu = " / ".join(
                f"{statistics.median(s['cpu_seconds'] for s in samples[name]):.1f}" for name in names
            )
            server_cpu = " / ".join(
                _median_range([s["server_cpu_seconds"] for s in samples[name]], 1) for name in names
            )
            lines.append(
                f"| {case} | {dataset} | {_median_range(ours)} | {_median_range(ceiling)} ({best}) "
                f"| {_median_range(theirs)} | {of_ceiling:.2f} | {of_s5cmd:.2f} | {cpu} | {server_cpu} "
                f"| {'met' if ok else 'NOT met'} |"
            )
            rows.append(
                {
                    "case": case,
                    "dataset": dataset,
                    "spotrun_mb_per_s": ours,
                    "ceiling_mb_per_s": ceilings,
                    "best_ceiling_workers": best,
                    "s5cmd_mb_per_s": theirs,
                    "of_ceiling": of_ceiling,
                    "of_s5cmd": of_s5cmd,
                    "met": ok,
                }
            )
    config = (
        f"{runs} runs, each measurement a fresh process, tools interleaved (order rotated per run); data sets "
        + ", ".join(f"{name}: {count} x {size // MIB} MiB" for name, (count, size) in DATASETS.items())
        + f"; spotrun {SPOTRUN_WORKERS} workers (ranged GETs at most 4 per CPU), ceiling best of {CEILING_WORKERS} "
        "threads (ranges cut as spotrun's for that many), s5cmd defaults; "
        "the emulator's S3 in its own process (ThreadedMotoServer, the dispatch, range and upload patches). "
        "Medians [min-max]. Emulator CPU-s: what the emulator's S3 process ran during each measurement "
        "(/proc/<pid>/stat), on the same 2 cores as the client. Target: >= 90 % of the ceiling and >= s5cmd."
    )
    crt_lines, crt_rows = _crt_report(samples)
    crt_within = all(row["within"] for row in crt_rows)
    decision = (
        f"CRT within {CRT_MARGIN:.0%} of spotrun on MB/s and CPU-s per verified GiB in every case: "
        + ("yes" if crt_within else "no")
    )
    verifies = [f"- {tool}: {how}." for tool, how in VERIFICATION.items()]
    markdown = "\n".join(
        [*lines, "", config, "", *crt_lines, "", decision, "", "How each tool verifies:", *verifies, ""]
    )
    return {
        "name": "transfers",
        "title": "Staging and checkpoint upload against AWS's CRT, the ceiling and s5cmd",
        "markdown": markdown,
        "results": {
            "rows": rows,
            "verdicts": verdicts,
            "crt_rows": crt_rows,
            "crt_within_margin": crt_within,
            "verification": VERIFICATION,
            "runs": runs,
            "samples": samples,
        },
    }


def _crt_report(samples: dict[str, list[dict[str, Any]]]) -> tuple[list[str], list[dict[str, Any]]]:
    """The CRT beside spotrun, case by case: MB/s and client CPU-seconds per verified GiB, and the margin."""
    lines = [
        "| case | data | spotrun MB/s | CRT MB/s | CRT / spotrun | CPU-s per verified GiB spotrun | CRT "
        "| CRT / spotrun | CPU-s per GiB ceiling (threads) / s5cmd "
        "| emulator CPU-s spotrun / CRT | CRT within 10 % on both |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    rows = []
    for case in CASES:
        for dataset in DATASETS:
            ours, crt = samples[f"{case}/{dataset}/spotrun"], samples[f"{case}/{dataset}/crt"]
            speed = [s["mb_per_s"] for s in ours], [s["mb_per_s"] for s in crt]
            cpu = [s["cpu_seconds_per_gib"] for s in ours], [s["cpu_seconds_per_gib"] for s in crt]
            of_speed = statistics.median(speed[1]) / statistics.median(speed[0])
            of_cpu = statistics.median(cpu[1]) / statistics.median(cpu[0])
            within = of_speed >= 1 - CRT_MARGIN and of_cpu <= 1 + CRT_MARGIN
            ceilings = {w: samples[f"{case}/{dataset}/ceiling/{w}"] for w in CEILING_WORKERS}
            best = max(ceilings, key=lambda w: statistics.median(s["mb_per_s"] for s in ceilings[w]))
            unverified = " / ".join(
                _median_range([s["cpu_seconds_per_gib"] for s in group], 2)
                for group in (ceilings[best], samples[f"{case}/{dataset}/s5cmd"])
            )
            served = " / ".join(
                _median_range([s["server_cpu_seconds"] for s in group], 1) for group in (ours, crt)
            )
            lines.append(
                f"| {case} | {dataset} | {_median_range(speed[0])} | {_median_range(speed[1])} | {of_speed:.2f} "
                f"| {_median_range(cpu[0], 2)} | {_median_range(cpu[1], 2)} | {of_cpu:.2f} "
                f"| {unverified.replace(' / ', f' ({best}) / ', 1)} | {served} | {'yes' if within else 'no'} |"
            )
            rows.append(
                {
                    "case": case,
                    "dataset": dataset,
                    "spotrun_mb_per_s": speed[0],
                    "crt_mb_per_s": speed[1],
                    "crt_of_spotrun_mb_per_s": of_speed,
                    "spotrun_cpu_seconds_per_gib": cpu[0],
                    "crt_cpu_seconds_per_gib": cpu[1],
                    "crt_of_spotrun_cpu_per_gib": of_cpu,
                    "within": within,
                }
            )
    return lines, rows


def main() -> None:
    """``--serve`` (the emulator), ``--once`` (one measurement), or a whole run printing the markdown."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--once", action="store_true")
    parser.add_argument("--endpoint")
    parser.add_argument("--case", choices=CASES)
    parser.add_argument("--tool", choices=TOOLS)
    parser.add_argument("--workers", type=int, default=SPOTRUN_WORKERS)
    parser.add_argument("--prefix")
    parser.add_argument("--source")
    parser.add_argument("--destination")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.serve:
        serve()
    elif args.once:
        print(json.dumps(once(args)))
    else:
        print(run(args.runs)["markdown"])


if __name__ == "__main__":
    main()
