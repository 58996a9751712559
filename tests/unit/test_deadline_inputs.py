"""The deadline policy's inputs about preemptions: one home (spotrun.model.deadline.inputs) for the control plane
and the simulator."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import spotrun.model.simulation.replay as simulation
from spotrun.model.deadline.inputs import SpotHistory, policy_params
from spotrun.model.deadline.state import Decision, JobState, PolicyParams, Running
from spotrun.model.deadline.stored_job import DeadlineAssumptions, job_params, spot_history
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.interruption_rate import PRIOR_SILENT_FRACTION, PRIOR_SPOT_HOURS
from spotrun.model.job.record import ManifestSource, new_job
from spotrun.model.manifest.parse import parse_manifest_document
from spotrun.model.simulation.replay import Replay, SimJob, replay_policy

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
KNOBS = {"restart_hours": 0.5, "checkpoint_hours": 0.1, "checkpoint_interval_hours": 1.0, "tick_hours": 0.5}


def test_one_early_preemption_does_not_read_as_a_pool_preempted_every_few_minutes() -> None:
    # Given a job preempted once, 6 minutes into its spot time
    history = SpotHistory(spot_hours=0.1, preemptions=1)
    # When the pool's mean spot time between preemptions is estimated
    # Then the prior (one preemption in 24 spot hours) keeps it near half a day, not 6 minutes
    assert history.spot_mtbf_hours(PRIOR_SPOT_HOURS) == pytest.approx((24 + 0.1) / 2)
    assert SpotHistory().spot_mtbf_hours(PRIOR_SPOT_HOURS) == pytest.approx(24)


def test_the_silent_share_starts_from_the_prior_and_follows_what_the_job_saw() -> None:
    assert SpotHistory().silent_share() == pytest.approx(PRIOR_SILENT_FRACTION)
    assert SpotHistory(5.0, 1, 1).silent_share() == pytest.approx((PRIOR_SILENT_FRACTION + 1) / 2)


def test_a_save_longer_than_the_notice_makes_every_preemption_lose_the_unsaved_work() -> None:
    # Given no silent preemption seen, and a 6-minute save: longer than a 2-minute notice, shorter than 10
    history = SpotHistory(5.0, 1, 0)
    # When the knobs are built
    outlasts = policy_params(history, notice_hours=2 / 60, **KNOBS)
    fits = policy_params(history, notice_hours=10 / 60, **KNOBS)
    # Then every preemption is expected to lose half an interval when the save outlasts it, the silent share's
    # part of that when it fits
    assert outlasts.loss_per_preemption_hours == pytest.approx(0.5)
    assert fits.loss_per_preemption_hours == pytest.approx(0.5 * history.silent_share())


def spot_attempt(number: int, start: float, hours: float) -> Attempt:
    began = T0 + timedelta(hours=start)
    return Attempt(
        number=number,
        instance_id=f"i-{number:04d}",
        instance_type="g5.xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=1.0,
        started_at=began,
        ended_at=began + timedelta(hours=hours),
        end_reason="interrupted",
        notice_at=None,  # silent: the instance died without the warning
    )


def test_the_control_plane_and_the_simulator_decide_on_the_same_knobs_after_preemptions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a trace of half-hour steps preempting spot twice (after 3 steps and after 2 more), a one-step restart,
    # every preemption silent; and the simulator's policy entry point wrapped to keep the knobs of each call
    job = SimJob(
        work_hours=20.0,
        deadline_hours=30.0,
        restart_hours=0.5,
        checkpoint_hours=0.1,
        spot_price=1.0,
        on_demand_price=3.0,
        checkpoint_interval_hours=1.0,
        silent_fraction=1.0,
    )
    calls: list[PolicyParams] = []
    real = simulation.decide

    def recording(policy: str, state: JobState, params: PolicyParams) -> Decision:
        calls.append(params)
        return real(policy, state, params)

    monkeypatch.setattr(simulation, "decide", recording)
    spot = (True, True, True, False, True, True, False, True)
    # When spot-only replays it, and the control plane builds its knobs for a job record with the same history:
    # two silent spot attempts of 1.5 h and 1 h (boots included)
    replay_policy("spot-only", job, Replay(0.5, spot), 0, 1.0)
    manifest = parse_manifest_document(
        {
            "name": "tiny",
            "resources": {"gpu_names": ["a10g"]},
            "capacity": {"deadline": "30h"},
            "training": {"command": ["python", "t.py"], "expected_hours": 20.0},
        }
    )
    record = new_job("tiny-1", "tiny", ManifestSource(bucket="b", key="k"), manifest, T0).model_copy(
        update={"attempts": [spot_attempt(1, 0.0, 1.5), spot_attempt(2, 2.0, 1.0)]}
    )
    assumed = DeadlineAssumptions(
        restart_hours=0.5, checkpoint_hours=0.1, checkpoint_interval_hours=1.0, tick_hours=0.5
    )
    now = T0 + timedelta(hours=3.5)
    # Then both saw 2.5 spot hours and two silent preemptions, and built the same knobs from them
    assert spot_history(record, now) == SpotHistory(2.5, 2, 2)
    # (waiting, after the second preemption: nothing on spot to lose)
    assert calls[-1] == job_params(record, now, assumed, Running.NOTHING)
    assert calls[-1] == policy_params(
        SpotHistory(2.5, 2, 2), notice_hours=job.notice_hours, exposed_hours=0.0, **KNOBS
    )


def test_the_emulator_scales_the_prior_and_the_notice_with_its_other_durations() -> None:
    # Given the control plane's assumptions at the emulator's time scale, and a job preempted once, at once
    assumed = DeadlineAssumptions().scaled(0.02)
    record = new_job(
        "tiny-1",
        "tiny",
        ManifestSource(bucket="b", key="k"),
        parse_manifest_document({"name": "tiny", "training": {"command": ["python", "t.py"]}}),
        T0,
    ).model_copy(update={"attempts": [spot_attempt(1, 0.0, 0.0)]})
    # When its knobs are built
    params = job_params(record, T0, assumed)
    # Then the pool's spot time between preemptions is the prior's, scaled (24 h x 0.02, over two preemptions)
    assert assumed.notice_hours == pytest.approx(2 / 60 * 0.02)
    assert params.spot_mtbf_hours == pytest.approx(PRIOR_SPOT_HOURS * 0.02 / 2)
