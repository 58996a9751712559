"""Ending the state machine executions that moto runs in threads of their own (they outlive the server)."""

from __future__ import annotations

import time
from typing import Any


def stop_running_executions(sfn: Any, account_id: str, region: str, timeout: float = 10.0) -> list[str]:
    """Stop every running execution and wait (up to ``timeout`` seconds) for moto's worker threads to end.

    Parameters
    ----------
    sfn
        A Step Functions client on the emulator.
    account_id, region
        Where moto keeps the executions.
    timeout
        Seconds to wait for the worker threads in all.

    Returns
    -------
    list of str
        ARNs of the executions that were running.
    """
    stopped = []
    for machine in sfn.list_state_machines()["stateMachines"]:
        running = sfn.list_executions(stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING")
        for execution in running["executions"]:
            sfn.stop_execution(executionArn=execution["executionArn"], error="Emulator.Stopped")
            stopped.append(execution["executionArn"])
    _interrupt_callbacks(account_id, region)
    _join_worker_threads(timeout)
    return stopped


def _interrupt_callbacks(account_id: str, region: str) -> None:
    # StopExecution does not wake a task waiting for its token without a timeout: wake every waiter.
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    backend = stepfunctions_parser_backends[account_id][region]
    for machine in getattr(backend, "state_machines", []):
        for execution in getattr(machine, "executions", []):
            env = getattr(getattr(execution, "exec_worker", None), "env", None)
            pool = getattr(getattr(env, "callback_pool_manager", None), "_pool", {})
            for endpoint in list(pool.values()):
                endpoint.interrupt_all()


def _join_worker_threads(timeout: float) -> None:
    from moto.stepfunctions.parser.utils import TMP_THREADS

    deadline = time.monotonic() + timeout
    for thread in list(TMP_THREADS):
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    # moto only ever appends to this list; drop the finished threads so that it does not grow forever.
    TMP_THREADS[:] = [thread for thread in TMP_THREADS if thread.is_alive()]
