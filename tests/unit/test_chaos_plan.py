"""Planned interruptions: where they fall, when one is due, and the thread that injects them."""

from __future__ import annotations

import itertools
import threading

import pytest

from spotrun.local.chaos.injector import Injector, Progress
from spotrun.local.chaos.plan import Hit, InterruptionSchedule, interruption_window, plan_interruptions


class FakeRuntime:
    """Records interruptions; refuses the instances it is told to refuse, as LocalRuntime.interrupt does."""

    def __init__(self, refuse: dict[str, Exception] | None = None):
        self.interrupted: list[str] = []
        self.refuse = refuse or {}
        self.called = threading.Event()

    def interrupt(self, instance_id: str) -> None:
        self.called.set()
        if instance_id in self.refuse:
            raise self.refuse[instance_id]
        self.interrupted.append(instance_id)


class ScriptedProgress:
    """A progress source that replays observations, then repeats the last one."""

    def __init__(self, *observations: Progress | None):
        self.observations = list(observations)

    def __call__(self) -> Progress | None:
        return self.observations.pop(0) if len(self.observations) > 1 else self.observations[0]


# ------------------------------------------------------------------------------------------- planning


def test_the_window_leaves_a_tenth_of_the_steps_alone_at_each_end() -> None:
    # Given the example's 300-step run
    # When the window of interruptible steps is computed
    window = interruption_window(300)

    # Then it spans steps 30 to 270
    assert window == (30, 270)


@pytest.mark.parametrize("seed", range(20))
def test_a_plan_is_distinct_sorted_inside_the_window_and_spread_out(seed: int) -> None:
    # Given a 300-step run and three interruptions
    # When they are planned
    steps = plan_interruptions(3, 300, seed)

    # Then there are three, ascending, inside [30, 270], at least the default gap (241 // 6 = 40) apart
    assert len(steps) == 3
    assert steps == sorted(steps)
    assert all(30 <= step <= 270 for step in steps)
    assert all(later - earlier >= 40 for earlier, later in itertools.pairwise(steps))


def test_the_same_seed_gives_the_same_plan_and_other_seeds_vary() -> None:
    # Given one run length
    # When plans are drawn with the same seed twice, and with many seeds
    first, again = plan_interruptions(2, 300, seed=42), plan_interruptions(2, 300, seed=42)
    many = {tuple(plan_interruptions(2, 300, seed=seed)) for seed in range(50)}

    # Then the seed fixes the plan, and the plans differ between seeds
    assert first == again
    assert len(many) > 40


def test_every_step_of_a_tight_window_can_be_drawn() -> None:
    # Given a 20-step run, whose window is steps 2 to 18
    # When one interruption is planned with many seeds
    drawn = {plan_interruptions(1, 20, seed=seed)[0] for seed in range(500)}

    # Then each step of the window comes up, and no other
    assert drawn == set(range(2, 19))


def test_no_interruption_plans_nothing() -> None:
    # Given / When zero interruptions are planned
    # Then the plan is empty
    assert plan_interruptions(0, 300, seed=1) == []


@pytest.mark.parametrize(
    ("count", "total", "gap", "message"),
    [
        (-1, 300, None, "negative"),
        (1, 1, None, "too short"),
        (18, 20, None, "do not fit"),
        (3, 300, 200, "do not fit"),
        (2, 300, 0, "min_gap"),
    ],
)
def test_impossible_plans_are_refused(count: int, total: int, gap: int | None, message: str) -> None:
    # Given a request that cannot be met
    # When it is planned
    # Then it is refused, saying why
    with pytest.raises(ValueError, match=message):
        plan_interruptions(count, total, seed=0, min_gap=gap)


# ------------------------------------------------------------------------------------------- schedule


def test_the_schedule_fires_once_the_step_is_reached_and_once_per_attempt() -> None:
    # Given interruptions planned at steps 100 and 200
    schedule = InterruptionSchedule([200, 100])

    # When attempt 1 reports steps 90, 105 and 230, then attempt 2 reports 150 and 210
    seen = [
        schedule.observe(1, "i-1", 90),
        schedule.observe(1, "i-1", 105),
        schedule.observe(1, "i-1", 230),
        schedule.observe(2, "i-2", None),
        schedule.observe(2, "i-2", 150),
        schedule.observe(2, "i-2", 210),
        schedule.observe(3, "i-3", 290),
    ]

    # Then attempt 1 is hit at 105 only (not again at 230), attempt 2 at 210, and nothing is left to fire
    assert seen == [
        None,
        Hit(attempt=1, instance_id="i-1", step=105, planned_step=100),
        None,
        None,
        None,
        Hit(attempt=2, instance_id="i-2", step=210, planned_step=200),
        None,
    ]
    assert schedule.pending == ()
    assert [hit.attempt for hit in schedule.hits] == [1, 2]


def test_an_older_attempt_seen_late_is_never_hit_again() -> None:
    # Given a schedule that hit attempt 2
    schedule = InterruptionSchedule([50, 60])
    assert schedule.observe(2, "i-2", 55) is not None

    # When a stale observation of attempt 1 arrives past the next step
    late = schedule.observe(1, "i-1", 80)

    # Then it fires nothing, and the planned step waits for attempt 3
    assert late is None
    assert schedule.pending == (60,)
    assert schedule.observe(3, "i-3", 61) == Hit(3, "i-3", 61, 60)


# ------------------------------------------------------------------------------------------- injector


def test_the_injector_interrupts_the_current_attempts_instance_when_due() -> None:
    # Given a plan at step 100 and a job whose attempt 1 trains on i-1, then attempt 2 on i-2
    runtime = FakeRuntime()
    hits: list[tuple[Hit, str | None]] = []
    progress = ScriptedProgress(
        None,
        Progress(1, "i-1", None),
        Progress(1, "i-1", 80),
        Progress(1, "i-1", 120),
        Progress(2, "i-2", 150),
    )
    injector = Injector(
        InterruptionSchedule([100]),
        progress,
        runtime.interrupt,
        on_interrupt=lambda h, e: hits.append((h, e)),
    )

    # When it polls through the observations
    decided = [injector.poll_once() for _ in range(6)]

    # Then only i-1 was interrupted, once, at step 120, and the listener was told so
    assert runtime.interrupted == ["i-1"]
    assert [hit for hit in decided if hit] == [Hit(1, "i-1", 120, 100)]
    assert hits == [(Hit(1, "i-1", 120, 100), None)]


def test_a_refused_interruption_is_reported_and_uses_up_its_step() -> None:
    # Given an attempt on an on-demand instance, which cannot be interrupted
    runtime = FakeRuntime(
        refuse={"i-od": ValueError("i-od is on-demand: only spot instances get interrupted")}
    )
    hits: list[tuple[Hit, str | None]] = []
    injector = Injector(
        InterruptionSchedule([10]),
        ScriptedProgress(Progress(1, "i-od", 15)),
        runtime.interrupt,
        on_interrupt=lambda h, e: hits.append((h, e)),
    )

    # When it polls twice
    injector.poll_once()
    injector.poll_once()

    # Then the refusal was reported once, and nothing was interrupted
    assert hits == [(Hit(1, "i-od", 15, 10), "i-od is on-demand: only spot instances get interrupted")]
    assert runtime.interrupted == []


def test_a_failing_progress_source_skips_the_poll() -> None:
    # Given a progress source that raises
    def broken() -> Progress | None:
        raise ConnectionError("emulator gone")

    injector = Injector(InterruptionSchedule([1]), broken, FakeRuntime().interrupt)

    # When it polls
    # Then nothing is decided and nothing raises
    assert injector.poll_once() is None


def test_the_injector_thread_polls_until_stopped_and_reports_progress_changes() -> None:
    # Given a job already past the planned step
    runtime = FakeRuntime()
    seen: list[Progress] = []
    injector = Injector(
        InterruptionSchedule([5]),
        ScriptedProgress(Progress(1, "i-1", 7)),
        runtime.interrupt,
        poll_seconds=0.01,
        on_progress=seen.append,
    )

    # When its thread runs for a while
    with injector:
        assert runtime.called.wait(2)
        threading.Event().wait(0.05)

    # Then the instance was interrupted once, and the unchanged progress was reported once
    assert runtime.interrupted == ["i-1"]
    assert seen == [Progress(1, "i-1", 7)]


class CountedProgress(ScriptedProgress):
    """A scripted progress source that counts how often it is read."""

    def __init__(self, *observations: Progress | None):
        super().__init__(*observations)
        self.reads = 0

    def __call__(self) -> Progress | None:
        self.reads += 1
        return super().__call__()


def test_the_injector_stops_reading_progress_once_nothing_is_left_to_inject() -> None:
    # Given a job past its one planned step, and nobody listening to its progress
    runtime = FakeRuntime()
    progress = CountedProgress(Progress(1, "i-1", 7))
    injector = Injector(InterruptionSchedule([5]), progress, runtime.interrupt, poll_seconds=0.01)

    # When its thread runs for many poll intervals after the interruption
    with injector:
        assert runtime.called.wait(2)
        threading.Event().wait(0.2)
        reads = progress.reads

    # Then it read the progress once: the poll that decided the interruption
    assert runtime.interrupted == ["i-1"]
    assert reads == 1
    assert injector.finished


def test_the_injector_polls_four_times_a_second_by_default() -> None:
    # Given an injector built with the defaults (the demo's and the e2e tests')
    injector = Injector(InterruptionSchedule([5]), ScriptedProgress(None), FakeRuntime().interrupt)
    # Then it polls every 0.25 s: a three-request poll ten times a second per job loaded the emulator
    assert injector.poll_seconds == 0.25
