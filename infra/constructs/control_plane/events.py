"""The EventBridge rules of :data:`spotrun.shape.SHAPE`, each delivering to its function.

Patterns come from :func:`spotrun.shape.rule_pattern`, the same function the emulator uses, so a rule scoped to a
bucket matches that bucket's real (generated) name here and its local name there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.shape_tags import mark
from spotrun.shape import DeploymentShape, rule_pattern


def event_pattern(pattern: Mapping[str, Any]) -> events.EventPattern:
    """Turn an EventBridge pattern (``{"detail-type": [...], ...}``) into CDK's :class:`EventPattern`."""
    return events.EventPattern(**{key.replace("-", "_"): value for key, value in pattern.items()})


class Buses(Construct):
    """One custom bus per :class:`~spotrun.shape.BusSpec`.

    Attributes
    ----------
    buses
        Setting that carries the bus's name (``event_bus_name``) -> bus.
    by_name
        Logical name (``events``) -> bus, for the rules that listen on one.
    """

    def __init__(self, scope: Construct, construct_id: str, *, shape: DeploymentShape):
        super().__init__(scope, construct_id)
        self.buses: dict[str, events.EventBus] = {}
        self.by_name: dict[str, events.EventBus] = {}
        for spec in shape.buses:
            bus = events.EventBus(self, spec.logical_name.capitalize(), description=spec.description)
            mark(bus, "bus", spec.logical_name)
            self.buses[spec.setting] = bus
            self.by_name[spec.logical_name] = bus


class Rules(Construct):
    """One rule per :class:`~spotrun.shape.RuleSpec`.

    Attributes
    ----------
    rules
        Rule name (as declared) -> rule.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        shape: DeploymentShape,
        bucket_names: Mapping[str, str],
        functions: Mapping[str, lambda_.IFunction],
        buses: Mapping[str, events.IEventBus],
    ):
        super().__init__(scope, construct_id)
        self.rules: dict[str, events.Rule] = {}
        for spec in shape.rules:
            rule = events.Rule(
                self,
                "".join(part.capitalize() for part in spec.name.split("-")),
                description=spec.description,
                event_pattern=event_pattern(rule_pattern(spec, dict(bucket_names))),
                # The default bus unless the rule names one of spotrun's (by its logical name).
                event_bus=None if spec.bus is None else buses[spec.bus],
            )
            # Events arrive at least once and handlers are idempotent, so retrying a failed delivery is safe.
            rule.add_target(
                targets.LambdaFunction(
                    functions[spec.target_function], retry_attempts=8, max_event_age=Duration.hours(2)
                )
            )
            mark(rule, "rule", spec.name)
            self.rules[spec.name] = rule
