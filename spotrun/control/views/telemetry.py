"""What the REST API reads of a job's telemetry: the series its agents put in the jobs bucket.

Each node's agent puts a part of JSON lines under the job's telemetry prefix every ``telemetry_seconds``
(:func:`spotrun.model.layout.telemetry_key`); :func:`job_telemetry` reads them back for ``GET
/jobs/{id}/telemetry``, the report and the dashboard, within bounds an API call can keep (the API function has
29 s and 512 MB, and Lambda answers at most 6 MB): at most :data:`MAX_PARTS` parts and :data:`MAX_READ_BYTES`
bytes are read, evenly spread over the job's parts (the first and the last kept) when it has more, and the
answer holds at most :data:`MAX_ANSWER_POINTS` points, each series thinned evenly to its share.

Each node's latest GPU sample rides on its heartbeats and is kept on the job record
(:func:`spotrun.control.agent_reports.keep_gpu_sample`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Final, TypeVar

from pydantic import Field

from spotrun.control.ports import JobStore, ObjectMissing, Objects
from spotrun.model.errors import JobNotFound
from spotrun.model.job.telemetry import GpuPoint, JobTelemetry, MetricPoint, assemble, thin
from spotrun.model.layout import parse_telemetry_key, telemetry_prefix

# A part holds 30 s of one node's lines on AWS: 400 parts are 3 h 20 min of one node, read whole; a longer job is
# read at an even spread of its parts. Eight parallel GETs of ~40 ms each keep 400 parts near 2 s. Parsing is the
# larger cost: 8 MiB of metric lines took 3.1 s and 190 MB on a 2-core dev machine (32 MiB: 16.7 s), and the API
# function has a fraction of a core at 512 MB; 4 MiB keeps a call within seconds and ~100 MB.
MAX_PARTS: Final = 400
MAX_READ_BYTES: Final = 4 * 1024 * 1024
READ_THREADS: Final = 8
# A GPU point is ~160 bytes of JSON, a metric point ~100: 25,000 points stay near 4 MB, under Lambda's 6 MB.
MAX_ANSWER_POINTS: Final = 25_000

P = TypeVar("P", MetricPoint, GpuPoint)


class TelemetryAnswer(JobTelemetry):
    """:class:`JobTelemetry`, with how much of the job's telemetry was read to build it."""

    job_id: str
    parts: int = Field(description="Parts the job's agents put so far.")
    parts_read: int = Field(
        description="Parts read for this answer: all of them, or an even spread when there were more than "
        f"{MAX_PARTS} or they held more than {MAX_READ_BYTES // (1024 * 1024)} MiB (thinned is then true)."
    )
    bytes_read: int = Field(description="Bytes of the parts read.")


def job_telemetry(
    job_id: str,
    *,
    store: JobStore,
    objects: Objects,
    jobs_bucket: str,
    max_parts: int = MAX_PARTS,
    max_bytes: int = MAX_READ_BYTES,
    max_points: int = MAX_ANSWER_POINTS,
) -> TelemetryAnswer:
    """The job's training metrics and GPU readings, in time order, from the parts its agents put.

    Parameters
    ----------
    job_id
        The job.
    store, objects
        Ports to the job store (does the job exist?) and S3.
    jobs_bucket
        Where the parts are.
    max_parts, max_bytes
        The most parts, and bytes of parts, read; more are read as an even spread.
    max_points
        The most points in the answer, over every series.

    Returns
    -------
    TelemetryAnswer
        The series; empty for a job whose agents put nothing yet.

    Raises
    ------
    JobNotFound
        When no job has that id.
    """
    if store.get(job_id) is None:
        raise JobNotFound(f"no job with id {job_id!r}")
    listed = []
    for key, size in objects.list_keys(jobs_bucket, telemetry_prefix(job_id)):
        where = parse_telemetry_key(key)
        if where is not None:
            listed.append((where, key, size))
    listed.sort()
    chosen = _spread(listed, max_parts, max_bytes)

    def read(item: tuple[tuple[int, int, int], str, int]) -> tuple[int, int, str] | None:
        (attempt, node, _), key, _ = item
        try:
            return attempt, node, objects.get_bytes(jobs_bucket, key).decode("utf-8", errors="replace")
        except ObjectMissing:
            return None  # deleted since the listing (the job's objects expire)

    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        parts = [part for part in pool.map(read, chosen) if part is not None]
    telemetry = _fit(assemble(parts), max_points)
    return TelemetryAnswer(
        **telemetry.model_dump(),
        job_id=job_id,
        parts=len(listed),
        parts_read=len(chosen),
        bytes_read=sum(size for _, _, size in chosen),
    ).model_copy(update={"thinned": telemetry.thinned or len(chosen) < len(listed)})


def _spread(
    listed: list[tuple[tuple[int, int, int], str, int]], max_parts: int, max_bytes: int
) -> list[tuple[tuple[int, int, int], str, int]]:
    """All the parts when they fit the bounds; else an even spread of them that does (first and last kept)."""
    total = sum(size for _, _, size in listed)
    if len(listed) <= max_parts and total <= max_bytes:
        return listed
    average = max(1, total // max(1, len(listed)))
    count = min(max_parts, len(listed), max(1, max_bytes // average))
    while count > 0:
        chosen = thin(listed, count)
        if sum(size for _, _, size in chosen) <= max_bytes:
            return chosen
        count -= max(1, count // 10)
    return []


def _fit(telemetry: JobTelemetry, max_points: int) -> JobTelemetry:
    """The telemetry with at most ``max_points`` points, each series thinned evenly to an equal share."""
    gpu_series: dict[tuple[int, int, int], list[GpuPoint]] = {}
    for point in telemetry.gpu:
        gpu_series.setdefault((point.attempt, point.node, point.gpu), []).append(point)
    total = len(telemetry.gpu) + sum(len(points) for points in telemetry.metrics.values())
    if total <= max_points:
        return telemetry
    share = max(2, max_points // max(1, len(gpu_series) + len(telemetry.metrics)))
    metrics = {name: thin(points, share) for name, points in telemetry.metrics.items()}
    gpu = sorted(
        (point for series in gpu_series.values() for point in thin(series, share)),
        key=lambda p: (p.at, p.node, p.gpu),
    )
    return telemetry.model_copy(update={"metrics": metrics, "gpu": gpu, "thinned": True})
