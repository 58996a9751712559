"""The price each launched instance is recorded at, per region, and where that figure came from."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spotrun.control.capacity.launch import launch_instance
from spotrun.model.job.record import ManifestSource, new_job
from spotrun.model.manifest.parse import parse_manifest_text
from tests.unit.fakes import FakeCompute

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def launched(zone: str, spot_price: float | None, *, spot: bool = True):
    manifest = parse_manifest_text(
        "name: tiny\nresources: {instance_types: [g5.xlarge]}\n"
        f"capacity: {{spot: {str(spot).lower()}}}\ntraining: {{command: [python, t.py]}}\n"
    )
    job = new_job("tiny-1", "tiny", ManifestSource(), manifest.model_dump(mode="json"), T0)
    compute = FakeCompute(zones={"subnet-a": zone}, price=spot_price)
    return launch_instance(
        job, compute=compute, subnet_ids=("subnet-a",), launch_template_name="lt", interruptions=0, now=T0
    )


@pytest.mark.parametrize(
    ("zone", "spot_price", "spot", "price", "source"),
    [
        # the pool's price from DescribeSpotPriceHistory
        ("eu-west-1a", 0.41, True, 0.41, "spot-price-history"),
        # no history for the pool: its region's on-demand price, an upper bound
        ("eu-west-1a", None, True, 1.123, "estimate"),
        # on demand in eu-west-1: eu-west-1's price, not us-east-1's 1.006
        ("eu-west-1a", None, False, 1.123, "on-demand-table"),
        ("ap-northeast-1c", None, False, 1.459, "on-demand-table"),
        # a region without figures: unknown, never another region's price
        ("sa-east-1a", None, False, None, "unknown"),
    ],
)
def test_an_attempt_records_its_regions_price_and_its_source(
    zone: str, spot_price: float | None, spot: bool, price: float | None, source: str
) -> None:
    # Given a g5.xlarge launched in a zone
    # When the attempt is made
    attempt = launched(zone, spot_price, spot=spot)
    # Then its price is that of the pool or of its own region, and says where it came from
    assert (attempt.lifecycle, attempt.price_per_hour, attempt.price_source) == (
        "spot" if spot else "on-demand",
        price,
        source,
    )
