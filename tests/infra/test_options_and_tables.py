"""Context options and the permission tables, checked without a synth."""

from __future__ import annotations

from aws_cdk import App

from infra.constructs.iam.bucket_access import BUCKET_ACCESS
from infra.constructs.iam.permissions import FUNCTION_GRANTS, SETTING_GRANTS
from infra.options import DLAMI_PARAMETER, StackOptions
from spotrun.aws.settings import Settings
from spotrun.shape import SHAPE


def test_options_default_without_context_and_convert_context_strings() -> None:
    # Given an app without context and one with -c style strings
    defaults = StackOptions.from_context(App().node)
    chosen = StackOptions.from_context(
        App(
            context={
                "data_buckets": "raw-data, curated",
                "nat_gateways": "2",
                "gpu_low_utilization_percent": "35",
                "availability_zones": ["eu-west-1a", "eu-west-1b"],
            }
        ).node
    )

    # Then defaults are safe, and strings become the fields' types
    assert defaults.vpc_id is None
    assert defaults.ami_ssm_parameter == DLAMI_PARAMETER
    assert defaults.nat_gateways == 1
    assert chosen.data_buckets == ("raw-data", "curated")
    assert chosen.nat_gateways == 2
    assert chosen.gpu_low_utilization_percent == 35.0
    assert chosen.availability_zones == ("eu-west-1a", "eu-west-1b")


def test_permission_tables_name_only_declared_functions_buckets_and_settings() -> None:
    # Given the shape's names
    functions = {spec.name for spec in SHAPE.functions}
    buckets = {spec.logical_name for spec in SHAPE.buckets}

    # Then no table entry is stale (a renamed function would silently lose its grants)
    assert set(FUNCTION_GRANTS) <= functions
    assert {function for function, _ in BUCKET_ACCESS} <= functions
    assert {bucket for _, bucket in BUCKET_ACCESS} <= buckets
    assert set(SETTING_GRANTS) <= set(Settings.model_fields)


def test_every_function_reading_a_bucket_declares_its_access() -> None:
    # Given the functions that read a bucket setting
    readers = {
        (spec.name, setting.removesuffix("_bucket"))
        for spec in SHAPE.functions
        for setting in spec.settings
        if setting.endswith("_bucket")
    }

    # Then each has its keys declared (the synth stops otherwise)
    assert readers <= set(BUCKET_ACCESS)
