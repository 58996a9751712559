"""The ``nvidia-smi`` of a simulated instance: the three invocations spotrun's agent makes, in NVIDIA's formats.

Standard library only: :class:`spotrun.local.instances.gpus.SimulatedGpus` copies this file into the instance's
directory (``gpu/nvidia_smi.py``, beside the ``state.json`` the runtime writes) and puts a ``bin/nvidia-smi``
that runs it with the runtime's interpreter (``python -I -S``: no site, no environment) on the PATH of the
instance's agent and training. It answers:

- ``nvidia-smi --list-gpus`` (``-L``): ``GPU 0: NVIDIA A10G (UUID: GPU-...)``, one line per GPU;
- ``nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]`` for the fields ``index``, ``name``,
  ``uuid``, ``utilization.gpu``, ``memory.used``, ``memory.total``, ``memory.free``: one line per GPU, the values
  separated by ``", "``, with a header line (``utilization.gpu [%]``) and units (``97 %``, ``18000 MiB``) unless
  ``noheader`` / ``nounits``;
- ``nvidia-smi dmon --select t --count 1`` (``-s t -c 1``): PCIe throughput per GPU under dmon's two ``#``
  header lines (``# gpu   rxpci   txpci`` / ``# Idx    MB/s    MB/s``).

Anything else fails as nvidia-smi fails on an argument it refuses: a message naming ``nvidia-smi -h`` and exit
code 2 ("A supplied argument or flag is invalid", the RETURN VALUE section of nvidia-smi(1),
https://docs.nvidia.com/deploy/nvidia-smi/index.html).

Readings: a GPU is busy (90-98 % utilisation, PCIe traffic, memory held) while a training process of the instance
runs; idle (0 %, no PCIe traffic) while they are all stopped (SIGSTOP: chaos's hung training), memory still held
as a stopped CUDA process keeps its allocations; idle with nothing allocated when none exists. The training
processes are found as :meth:`spotrun.local.instances.instance.SimulatedInstance.rank_pids` finds them, by the
variables the state file names. Values the runtime drives (``LocalRuntime.set_gpu``) replace what is computed.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

STATE_FILE = "state.json"
INVALID_ARGUMENT = 2  # nvidia-smi(1), RETURN VALUE: "A supplied argument or flag is invalid"
OTHER_ERROR = 255  # nvidia-smi(1), RETURN VALUE: "Other error or internal driver error occurred"
HELP_HINT = "Please run 'nvidia-smi -h' for help."

BUSY_UTILIZATION = (90.0, 98.0)  # percent, while training runs
BUSY_MEMORY_PERCENT = (55.0, 75.0)  # each GPU holds a steady share of its memory, drawn from its UUID
BUSY_PCIE_RX_MB_S = (200.0, 900.0)  # host to device: batches copied in
BUSY_PCIE_TX_MB_S = (20.0, 150.0)  # device to host: losses, metrics, checkpoints

QUERY_FIELDS = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "utilization.gpu": "utilization.gpu [%]",
    "memory.used": "memory.used [MiB]",
    "memory.total": "memory.total [MiB]",
    "memory.free": "memory.free [MiB]",
}
USAGE = """NVIDIA System Management Interface -- spotrun's emulator

    nvidia-smi -L | --list-gpus
    nvidia-smi --query-gpu=FIELD[,FIELD...] --format=csv[,noheader][,nounits]
        FIELD: index, name, uuid, utilization.gpu, memory.used, memory.total, memory.free
    nvidia-smi dmon -s t -c 1 | dmon --select t --count 1
"""


class Refused(Exception):
    """An invocation nvidia-smi refuses: its message and exit code."""

    def __init__(self, message: str, code: int = INVALID_ARGUMENT):
        super().__init__(message)
        self.message = message
        self.code = code


# ------------------------------------------------------------------------------------------------ readings


def _state_letter(pid: str) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[0]


def training_state(state: dict[str, Any], proc_root: Path = Path("/proc")) -> str:
    """``"running"``, ``"stopped"`` (every rank stopped) or ``"none"``: the instance's training processes.

    The ranks are the processes whose environment holds the instance's marker and the training variable; when
    some of them also hold the rank variable (torchrun's workers), only those: a launcher that runs on while its
    workers are stopped computes nothing on the GPU.
    """
    marker = f"{state['marker']}={state['instance_id']}".encode()
    training = f"{state['training_variable']}=".encode()
    rank = f"{state['rank_variable']}=".encode()
    ranks: list[tuple[str, bool]] = []
    if not proc_root.is_dir():
        return "none"
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            variables = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker not in variables or not any(v.startswith(training) for v in variables):
            continue
        ranks.append((entry.name, any(v.startswith(rank) for v in variables)))
    workers = [pid for pid, is_worker in ranks if is_worker]
    letters = [_state_letter(pid) for pid in (workers or [pid for pid, _ in ranks])]
    alive = [letter for letter in letters if letter is not None and letter not in ("Z", "X")]
    if not alive:
        return "none"
    # T: stopped by a signal (SIGSTOP), t: stopped by a tracer; either way no kernel is launched.
    return "stopped" if all(letter in ("T", "t") for letter in alive) else "running"


def _steady_share(uuid: str) -> float:
    """The share of its memory a busy GPU holds: steady for the GPU (drawn from its UUID), as a training's is."""
    digest = hashlib.sha256(uuid.encode()).digest()
    low, high = BUSY_MEMORY_PERCENT
    return low + (high - low) * digest[0] / 255


def readings(state: dict[str, Any], training: str, rng: random.Random) -> list[dict[str, Any]]:
    """Each GPU's ``index, uuid, utilization (%), memory_used (MiB), rx, tx (MB/s)`` under ``training``."""
    total = int(state["memory_total_mib"])
    found = []
    for gpu in state["gpus"]:
        utilization = round(rng.uniform(*BUSY_UTILIZATION)) if training == "running" else 0
        if gpu.get("utilization") is not None:
            utilization = round(float(gpu["utilization"]))
        if gpu.get("memory_percent") is not None:
            memory_percent = float(gpu["memory_percent"])
        elif training == "none":
            memory_percent = 0.0
        else:
            memory_percent = _steady_share(gpu["uuid"]) + rng.uniform(-0.5, 0.5)
        used = min(total, max(0, round(total * memory_percent / 100)))
        # PCIe traffic follows the work: a GPU that computes nothing moves (next to) nothing.
        load = utilization / 100
        found.append(
            {
                "index": int(gpu["index"]),
                "uuid": gpu["uuid"],
                "utilization": utilization,
                "memory_used": used,
                "rx": round(load * rng.uniform(*BUSY_PCIE_RX_MB_S)),
                "tx": round(load * rng.uniform(*BUSY_PCIE_TX_MB_S)),
            }
        )
    return found


# ------------------------------------------------------------------------------------------------- answers


def list_gpus(state: dict[str, Any]) -> str:
    """``--list-gpus``: ``GPU 0: NVIDIA A10G (UUID: GPU-...)`` per GPU."""
    return "".join(f"GPU {gpu['index']}: {state['name']} (UUID: {gpu['uuid']})\n" for gpu in state["gpus"])


def query_gpu(
    state: dict[str, Any], fields_arg: str, format_arg: str | None, training: str, rng: random.Random
) -> str:
    """``--query-gpu=FIELDS --format=csv,...``: one CSV line per GPU (a header first unless ``noheader``)."""
    if format_arg is None:
        raise Refused(f'"--format=" switch is missing. {HELP_HINT}')
    options = [option.strip() for option in format_arg.split(",")]
    if "csv" not in options or any(o not in ("csv", "noheader", "nounits") for o in options):
        raise Refused(f'"--format={format_arg}" is not a valid format. {HELP_HINT}')
    fields = [field.strip() for field in fields_arg.split(",")]
    for field in fields:
        if field not in QUERY_FIELDS:
            raise Refused(f'Field "{field}" is not a valid field to query.')
    units = "nounits" not in options
    total = int(state["memory_total_mib"])
    lines = [] if "noheader" in options else [", ".join(QUERY_FIELDS[f] for f in fields)]
    for reading in readings(state, training, rng):
        values = {
            "index": str(reading["index"]),
            "name": str(state["name"]),
            "uuid": reading["uuid"],
            "utilization.gpu": f"{reading['utilization']}{' %' if units else ''}",
            "memory.used": f"{reading['memory_used']}{' MiB' if units else ''}",
            "memory.total": f"{total}{' MiB' if units else ''}",
            "memory.free": f"{total - reading['memory_used']}{' MiB' if units else ''}",
        }
        lines.append(", ".join(values[f] for f in fields))
    return "".join(line + "\n" for line in lines)


def dmon(state: dict[str, Any], args: list[str], training: str, rng: random.Random) -> str:
    """``dmon --select t --count 1``: PCIe rx/tx MB/s per GPU under dmon's two header lines."""
    options: dict[str, str] = {}
    names = {"-s": "select", "--select": "select", "-c": "count", "--count": "count"}
    position = 0
    while position < len(args):
        flag = args[position]
        if flag not in names:
            raise Refused(f"ERROR: Option {flag} is not recognized. {HELP_HINT}")
        if position + 1 >= len(args):
            raise Refused(f"ERROR: Option {flag} is missing its value. {HELP_HINT}")
        options[names[flag]] = args[position + 1]
        position += 2
    # Other metric groups, and an endless or longer watch, are not what the agent asks: refused, never faked.
    if options.get("select") != "t" or options.get("count") != "1":
        raise Refused(f"Invalid combination of input arguments. {HELP_HINT}")
    lines = ["# gpu   rxpci   txpci", "# Idx    MB/s    MB/s"]
    lines += [f"{r['index']:>5}{r['rx']:>8}{r['tx']:>8}" for r in readings(state, training, rng)]
    return "".join(line + "\n" for line in lines)


def answer(argv: list[str], state: dict[str, Any], proc_root: Path = Path("/proc")) -> str:
    """What ``nvidia-smi ARGV`` prints on an instance in ``state``.

    Raises
    ------
    Refused
        For any other invocation.
    """
    rng = random.Random()  # noqa: S311 - simulated readings, not secrets
    if argv in (["-h"], ["--help"]):
        return USAGE
    if argv in (["-L"], ["--list-gpus"]):
        return list_gpus(state)
    if argv and argv[0] == "dmon":
        return dmon(state, argv[1:], training_state(state, proc_root), rng)
    query: str | None = None
    format_arg: str | None = None
    for arg in argv:
        if arg.startswith("--query-gpu="):
            query = arg.split("=", 1)[1]
        elif arg.startswith("--format="):
            format_arg = arg.split("=", 1)[1]
        elif arg.startswith("-") and arg not in ("-L", "--list-gpus", "-h", "--help"):
            raise Refused(f"ERROR: Option {arg} is not recognized. {HELP_HINT}")
        else:
            raise Refused(f"Invalid combination of input arguments. {HELP_HINT}")
    if query is None:
        raise Refused(f"Invalid combination of input arguments. {HELP_HINT}")
    return query_gpu(state, query, format_arg, training_state(state, proc_root), rng)


def main(argv: list[str]) -> int:
    """Run as ``nvidia-smi``: print the answer, or the refusal on stderr with its exit code."""
    try:
        state = json.loads((Path(__file__).resolve().parent / STATE_FILE).read_text(encoding="utf-8"))
        if not isinstance(state, dict) or not state.get("gpus"):
            raise ValueError("no GPU")
    except (OSError, ValueError, AttributeError):
        # What a node whose driver cannot be reached says.
        sys.stderr.write("Failed to initialize NVML: Unknown Error\n")
        return OTHER_ERROR
    try:
        sys.stdout.write(answer(argv, state))
    except Refused as refused:
        sys.stderr.write(refused.message + "\n")
        return refused.code
    except (KeyError, TypeError, ValueError):
        sys.stderr.write("Failed to initialize NVML: Unknown Error\n")
        return OTHER_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
