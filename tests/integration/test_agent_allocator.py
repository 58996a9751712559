"""The agent's allocator settings: freed transfer buffers stay in the process instead of going back to the kernel."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import spotrun.agent.__main__ as agent_main

# A transfer's buffer pattern, in a fresh interpreter: bodies that grow as they arrive (collected piece by piece,
# as the CRT collects a small object's body), handed to other threads that read a piece of each and free it.
CHURN = """
import json, queue, resource, sys, threading
from spotrun.agent.transfer.allocator import keep_transfer_buffers
tuned = keep_transfer_buffers() if sys.argv[1] == "tuned" else None
bodies = queue.Queue(maxsize=64)
def receive():
    for _ in range(250):
        body = bytearray()
        while len(body) < (1 << 20):
            body += bytes(16 << 10)
        bodies.put(body)
def check():
    while (body := bodies.get()) is not None:
        bytes(body[: 256 << 10])
receivers = [threading.Thread(target=receive) for _ in range(4)]
checkers = [threading.Thread(target=check) for _ in range(8)]
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for thread in receivers + checkers:
    thread.start()
for thread in receivers:
    thread.join()
for _ in checkers:
    bodies.put(None)
for thread in checkers:
    thread.join()
print(json.dumps({"tuned": tuned, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def churn(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_fixed_thresholds_keep_freed_buffers_out_of_the_kernel():
    # Given the same buffer churn with glibc's dynamic thresholds, and with the agent's fixed ones
    default, tuned = churn("default"), churn("tuned")

    # Then both thresholds were set, and the freed buffers were reused rather than faulted in again (measured:
    # 29,000-43,000 minor faults against 79,000-99,000; one threshold alone, or none, faults as often or more)
    assert tuned["tuned"] is True
    assert tuned["faults"] * 1.5 < default["faults"], (default, tuned)


def test_the_agent_sets_the_allocator_before_anything_else(monkeypatch):
    # Given an allocator setting that records its call and stops the agent there, and a step or a resident agent
    # that would fail the test if reached first
    class Called(Exception):
        pass

    def record() -> bool:
        raise Called

    def reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("the agent went on before setting its allocator")

    monkeypatch.setattr(agent_main, "keep_transfer_buffers", record)
    monkeypatch.setattr(agent_main, "bootstrap_region", reached)
    monkeypatch.setattr(agent_main, "serve", reached)

    # When the agent starts, to run a step or to serve as the resident agent
    # Then it sets the allocator first, before any transfer or fork
    for argv in (["run", "--command-uri", "s3://bucket/jobs/x/agent/attempt-001-stage.json"], ["serve"]):
        with pytest.raises(Called):
            agent_main.main(argv)
