"""The cost lines of a job's summary: each figure labelled by how it was bought, savings only where compared."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

from rich.console import Console

from spotrun.cli.display.summary import final_summary
from spotrun.control.views.jobs import job_view
from spotrun.model.capacity.pricing import job_cost
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import Job, JobStatus, ManifestSource

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def hour(number: int, lifecycle: str, price: float | None, zone: str = "us-east-1a", **fields) -> Attempt:
    source = "spot-price-history" if lifecycle == "spot" else "on-demand-table"
    return Attempt(
        number=number,
        instance_id=f"i-{number:017x}",
        instance_type="g5.xlarge",
        availability_zone=zone,
        lifecycle=lifecycle,
        price_per_hour=price,
        price_source=source if price is not None else "unknown",
        started_at=T0 + timedelta(hours=number - 1),
        ended_at=T0 + timedelta(hours=number),
        end_reason="completed",
        **fields,
    )


def summary_of(*attempts: Attempt, unused: tuple[Attempt, ...] = ()) -> str:
    job = Job(
        job_id="tiny-000000000001",
        name="tiny",
        status=JobStatus.SUCCEEDED,
        source=ManifestSource(),
        created_at=T0,
        updated_at=T0,
        attempts=list(attempts),
        unused_instances=list(unused),
    )
    job = job.model_copy(update={"cost": job_cost(job.billed_instances())})
    console = Console(width=220, file=io.StringIO())
    console.print(final_summary(job, T0 + timedelta(hours=5)))
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_an_on_demand_run_is_labelled_on_demand_and_claims_no_saving() -> None:
    # Given a job that ran one hour on demand at 1.006 USD/h
    # When its summary is shown
    text = summary_of(hour(1, "on-demand", 1.006))
    # Then the money is on-demand money and no saving is claimed
    assert "cost: $1.0060 at on-demand prices (1 instance)" in text
    assert "spot prices" not in text
    assert "saved" not in text


def test_a_spot_run_shows_its_saving_against_the_regions_on_demand_price_and_its_source() -> None:
    # Given an hour of spot at 0.3 USD/h in us-east-1
    # When its summary is shown
    text = summary_of(hour(1, "spot", 0.3))
    # Then the saving is against 1.006 USD/h, with where that figure comes from
    assert "cost: $0.3000 at spot prices (1 instance)" in text
    assert "spot saved 70.2 %: the same 1 spot instance would have cost $1.0060 on demand " in text
    assert "(on-demand-table 2026-01-21)" in text
    # And the summary says where each instance's price came from
    assert "prices: 1 instance from spot-price-history" in text


def test_a_mixed_run_is_split_and_saves_only_on_its_spot_part() -> None:
    # Given a spot hour at 0.5 then an on-demand hour at 1.006
    # When its summary is shown
    text = summary_of(hour(1, "spot", 0.5), hour(2, "on-demand", 1.006))
    # Then both parts are named, and the saving is the spot hour's against its on-demand price
    assert (
        "cost: $1.5060 = $0.5000 at spot prices (1 instance) + $1.0060 at on-demand prices (1 instance)"
        in text
    )
    assert "spot saved 50.3 %" in text


def test_a_region_without_figures_says_the_saving_is_unknown() -> None:
    # Given an hour of spot in sa-east-1, a region the on-demand table does not cover
    # When its summary is shown
    text = summary_of(hour(1, "spot", 0.5, zone="sa-east-1a"))
    # Then no saving is shown, and the summary says why
    assert "saved" not in text
    assert "saving unknown for 1 spot instance: no on-demand price for its type in its region" in text


def test_an_unpriced_instance_is_named_and_an_unused_standby_is_listed() -> None:
    # Given an on-demand hour at an unknown price, and a standby that ran unused
    standby = hour(2, "spot", 0.3).model_copy(update={"end_reason": "unused-standby"})
    # When the summary is shown
    text = summary_of(hour(1, "on-demand", None, zone="sa-east-1a"), unused=(standby,))
    # Then the unknown price is said, and the standby is one of the rows, billed at spot prices
    assert "1 instance ran at a price spotrun does not know" in text
    assert "unused-standby" in text
    assert "prices: 1 instance from unknown, 1 instance from spot-price-history" in text
    assert "cost: $0.3000 at spot prices (1 instance)" in text


def test_the_api_job_view_shows_each_price_source_the_split_cost_and_the_unused_standby() -> None:
    # Given a job with a spot attempt and an unused standby, costed
    standby = hour(2, "spot", 0.3).model_copy(update={"end_reason": "unused-standby"})
    job = Job(
        job_id="tiny-000000000001",
        name="tiny",
        status=JobStatus.SUCCEEDED,
        source=ManifestSource(),
        created_at=T0,
        updated_at=T0,
        attempts=[hour(1, "spot", 0.3)],
        unused_instances=[standby],
    )
    job = job.model_copy(update={"cost": job_cost(job.billed_instances())})
    # When the API shows it
    view = job_view(job).model_dump(mode="json")
    # Then each price says its source, the unused standby is listed, and the cost counts both instances
    assert view["attempts"][0]["price_source"] == "spot-price-history"
    assert [item["end_reason"] for item in view["unused_instances"]] == ["unused-standby"]
    assert view["cost"]["spot_instances"] == 2
    assert view["cost"]["on_demand_source"] == "on-demand-table 2026-01-21"
