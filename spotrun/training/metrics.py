"""Training metrics a script reports: checked here, appended to ``$SPOTRUN_METRICS_FILE`` one JSON line each.

Each call of :meth:`spotrun.training.Run.report_metrics` appends ``{"step": 120, "values": {"loss": 0.41}}``
and a newline in one ``write`` to a file opened for appending, so a line is never interleaved with another
writer's. The agent tails the file, stamps each line with the time it read it, and ships it with the job's
telemetry (:mod:`spotrun.model.job.telemetry`, whose ``MetricsLine`` takes the same names and values).

The rules are checked when the script reports, not when the agent reads, so a mistake fails the script where its
author sees it, alone as under spotrun:

- a name is 1 to :data:`MAX_METRIC_NAME_LENGTH` characters of letters, digits and ``_ . / : -`` (CloudWatch takes
  it as a metric name as it is);
- a value is a finite real number (``float``, ``int``, NumPy's scalars); not a bool, not a tensor (``.item()``);
- at most :data:`MAX_METRIC_NAMES` names in one report;
- the step, when given, is a non-negative integer.

Part of the training helpers (:mod:`spotrun.training`): the standard library only.
"""

from __future__ import annotations

import json
import math
import numbers
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

# The same bounds as spotrun.model.job.telemetry's MetricName and MetricsLine (a unit test keeps them equal):
# this module cannot import pydantic, which the training command's interpreter may lack.
METRIC_NAME_PATTERN: Final = r"^[A-Za-z0-9_./:-]+$"
MAX_METRIC_NAME_LENGTH: Final = 64
MAX_METRIC_NAMES: Final = 32


def metrics_record(step: int | None, values: Mapping[str, object]) -> dict[str, object]:
    """The JSON object of one report, its names and values checked.

    Parameters
    ----------
    step
        The training step the values belong to; None: no step.
    values
        Metric values by name.

    Returns
    -------
    dict
        ``{"step": step, "values": {name: float}}`` (``step`` left out when None).

    Raises
    ------
    ValueError
        Naming what is wrong: an empty report, too many names, a name not of the pattern, a value that is not a
        finite real number, a step that is not a non-negative integer.
    """
    if step is not None and (isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0):
        raise ValueError(f"report_metrics: the step must be a non-negative integer or None, not {step!r}")
    if not values:
        raise ValueError("report_metrics: no values given (e.g. report_metrics(step, loss=0.41))")
    if len(values) > MAX_METRIC_NAMES:
        raise ValueError(f"report_metrics: {len(values)} names in one report, at most {MAX_METRIC_NAMES}")
    checked: dict[str, float] = {}
    for name, value in values.items():
        if (
            not isinstance(name, str)
            or len(name) > MAX_METRIC_NAME_LENGTH
            or not re.match(METRIC_NAME_PATTERN, name)
        ):
            raise ValueError(
                f"report_metrics: metric name {name!r} must be 1 to {MAX_METRIC_NAME_LENGTH} letters, digits "
                "or _ . / : -"
            )
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            hint = " (a tensor? pass .item())" if hasattr(value, "item") else ""
            raise ValueError(
                f"report_metrics: {name} must be a real number, not {type(value).__name__}{hint}"
            )
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"report_metrics: {name} is {number}, not a finite number")
        checked[name] = number
    return {"values": checked} if step is None else {"step": int(step), "values": checked}


class MetricsFile:
    """Appends reports to the metrics file; an unwritable file is said once on stderr, and training goes on."""

    def __init__(self, path: Path):
        self.path = path
        self.warned = False

    def append(self, record: dict[str, object]) -> None:
        """Append ``record`` as one JSON line, in one write, stamped with the time of the report (``at``, Unix s).

        The agent reads the file every few seconds; the stamp keeps reports made between two reads apart in time.
        """
        stamped = {**record, "at": round(time.time(), 3)}
        line = (json.dumps(stamped, separators=(",", ":")) + "\n").encode()
        try:
            # Opened per report: the script may fork (DataLoader workers), and a kept handle would be shared.
            with self.path.open("ab", buffering=0) as handle:
                handle.write(line)
        except OSError as exc:  # metrics are information only
            if not self.warned:
                print(f"spotrun.training: cannot write metrics to {self.path}: {exc}", file=sys.stderr)
                self.warned = True


# What the Hugging Face helper reports of Trainer's logs: the training curve and every evaluation's results. Its
# end-of-training summary (train_runtime, total_flos, ...) is one number each, not a series.
TRAINER_LOG_NAMES: Final = frozenset({"loss", "learning_rate", "grad_norm", "epoch"})
TRAINER_EVAL_PREFIX: Final = "eval_"


def trainer_metrics(logs: Mapping[str, object]) -> dict[str, float]:
    """The values of ``Trainer``'s ``logs`` (its ``on_log`` callback) that :mod:`spotrun.training.huggingface` reports.

    Parameters
    ----------
    logs
        What ``Trainer.log`` passed to the callbacks.

    Returns
    -------
    dict[str, float]
        ``loss``, ``learning_rate``, ``grad_norm``, ``epoch`` and every ``eval_*`` value that is a finite real
        number with a metric name's form, at most :data:`MAX_METRIC_NAMES`; empty when none is.
    """
    found: dict[str, float] = {}
    for name, value in logs.items():
        if name not in TRAINER_LOG_NAMES and not name.startswith(TRAINER_EVAL_PREFIX):
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            continue  # a NaN loss is in the log already; the series keeps numbers
        if len(name) <= MAX_METRIC_NAME_LENGTH and re.match(METRIC_NAME_PATTERN, name):
            found[name] = float(value)
        if len(found) == MAX_METRIC_NAMES:
            break
    return found
