"""The emulator's event buses and schedule group, from the shape (part of :func:`spotrun.local.provision`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spotrun.shape import DeploymentShape

if TYPE_CHECKING:
    from spotrun.local.provision import Deployment


def provision_buses_and_schedules(
    client: Callable[[str], Any], shape: DeploymentShape, dep: Deployment
) -> dict[str, str]:
    """Create each bus and the schedule group; return the settings that name them.

    The role Scheduler would assume is the emulator's one execution role: moto checks no permission.
    """
    dep.bus_names = {spec.logical_name: f"spotrun-{spec.logical_name}" for spec in shape.buses}
    for bus in dep.bus_names.values():
        client("events").create_event_bus(Name=bus)
    values = {spec.setting: dep.bus_names[spec.logical_name] for spec in shape.buses}
    if shape.schedule_target not in dep.function_arns:
        return values  # a smaller shape (some tests) without scheduled retraining
    client("scheduler").create_schedule_group(Name=shape.schedule_group)
    return {
        **values,
        "schedule_group": shape.schedule_group,
        "scheduler_role_arn": dep.role_arn,
        "scheduled_run_arn": dep.function_arns[shape.schedule_target],
    }
