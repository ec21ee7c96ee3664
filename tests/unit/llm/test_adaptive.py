"""The adaptive in-flight limit: its decisions on recorded latency sequences (grow, shrink, hold;
its ceiling and its floor of one; timeouts, 429/503, waiting requests, lost capacity), and its
figures on the simulated servers against the targets it was chosen for."""

from __future__ import annotations

import pytest

from prism.llm.adaptive import AdaptiveLimit, Decision, LatencyFloor, Outcome, Sample
from prism.testing.adaptive_sim import Load, Server, figures, simulate


def batching_latency(slots: int, alone_s: float = 2.0, slowdown: float = 0.05):
    """A batching server's latency with ``c`` in flight: its batch slows each request, and past
    its slots the rest queue."""

    def latency(c: int) -> float:
        batch = min(c, slots)
        return alone_s * (1 + slowdown * (batch - 1)) * max(1.0, c / slots)

    return latency


class Drive:
    """Feeds a controller the answers a server with the given latency would give at its limit,
    a second at a time (Little's law: ``limit / latency`` answers a second), deciding each second."""

    def __init__(self, controller: AdaptiveLimit, now: float = 0.0):
        self.controller, self.now = controller, now
        self.decisions: list[Decision] = []

    def second(self, latency_at, outcome: Outcome = "ok", in_flight: int | None = None, waiting: int | None = None):
        self.now += 1.0
        limit = self.controller.limit
        latency = latency_at(limit)
        for _ in range(max(1, round((in_flight or limit) / latency))):
            self.controller.record(Sample(latency, 1000, 100, outcome, in_flight), self.now)
        decision = self.controller.decide(self.now, waiting)
        self.decisions.append(decision)
        return decision

    def until_decided(self, latency_at, limit_s: float = 300.0, **kwargs) -> Decision:
        """Seconds until a decision other than "still measuring"."""
        end = self.now + limit_s
        while self.now < end:
            decision = self.second(latency_at, **kwargs)
            if not decision.reason.startswith("holding: measuring"):
                return decision
        raise AssertionError(f"no decision in {limit_s} s")

    def run(self, latency_at, seconds: float, **kwargs) -> list[Decision]:
        end, start = self.now + seconds, len(self.decisions)
        while self.now < end:
            self.second(latency_at, **kwargs)
        return self.decisions[start:]


def test_it_grows_while_latency_stays_at_its_floor():
    drive = Drive(AdaptiveLimit())
    first = drive.until_decided(lambda c: 2.0)
    assert (first.previous, first.limit) == (1, 2)
    assert first.reason == "adapting: latency 1.00x its floor"
    limits = [drive.until_decided(lambda c: 2.0).limit for _ in range(3)]
    assert limits == [4, 8, 16]  # doubling while nothing queues


def test_it_settles_at_the_knee_of_a_batching_server_and_holds():
    drive = Drive(AdaptiveLimit())
    decisions = drive.run(batching_latency(16), 600)
    late = [d.limit for d in decisions[-300:]]
    # Mostly at 16 to 18; now and then a step below, to measure the latency there again.
    assert 14 <= sum(late) / len(late) <= 19 and min(late) >= 10 and max(late) <= 20, late
    assert any(d.reason.startswith("shrank: queueing, latency rose") for d in decisions)
    assert any(d.reason.startswith(("holding: at the knee", "holding: queueing began at")) for d in decisions)


def test_on_a_one_slot_server_it_steps_back_to_one_and_stays():
    drive = Drive(AdaptiveLimit())
    assert drive.until_decided(lambda c: 2.0 * c).limit == 2
    back = drive.until_decided(lambda c: 2.0 * c)
    assert back.limit == 1 and back.reason == "shrank: queueing, latency rose 2.00x for 2.00x in flight"
    held = drive.until_decided(lambda c: 2.0 * c)
    assert held.limit == 1 and held.reason == "holding: queueing began at 2"
    assert max(d.limit for d in drive.run(lambda c: 2.0 * c, 600)) <= 2  # it looks again now and then


def test_it_respects_the_servers_enforced_slots():
    controller = AdaptiveLimit(start=4, enforced_slots=4)
    assert controller.limit == 4
    decision = Drive(controller).until_decided(lambda c: 2.0)
    assert (decision.limit, decision.reason) == (4, "holding: at the server's 4 slots")
    grown = Drive(AdaptiveLimit(upper_bound=3)).run(lambda c: 2.0, 120)
    assert max(d.limit for d in grown) == 3
    assert "holding: at its upper bound of 3" in {d.reason for d in grown}


def test_a_timeout_shrinks_it_once_and_never_below_one():
    controller = AdaptiveLimit(start=10)
    controller.record(Sample(30.0, 1000, 0, "timeout"), now=30.0)
    decision = controller.decide(30.0)
    assert (decision.previous, decision.limit, decision.reason) == (10, 7, "shrank: a timeout")
    # Another request sent before that shrink times out as well: the shrink has already answered it.
    controller.record(Sample(30.0, 1000, 0, "timeout"), now=31.0)
    assert controller.decide(31.0).limit == 7
    one = AdaptiveLimit()
    one.record(Sample(30.0, 1000, 0, "timeout"), now=30.0)
    assert one.decide(30.0) == Decision(1, "holding: a timeout, at 1", 1)


@pytest.mark.parametrize("status", ["429", "503"])
def test_an_overloaded_answer_shrinks_it(status):
    # The request path records a 429 or a 503 "overloaded" as this outcome.
    controller = AdaptiveLimit(start=8)
    controller.record(Sample(0.05, 1000, 0, "overloaded"), now=10.0)
    decision = controller.decide(10.0)
    assert (decision.limit, decision.reason) == (6, "shrank: the server is overloaded (429/503)")


def test_waiting_requests_shrink_it_a_step_per_latency_and_never_let_it_grow():
    drive = Drive(AdaptiveLimit(start=8))
    first = drive.second(lambda c: 2.0, waiting=3)
    assert (first.limit, first.reason) == (6, "shrank: the server reports 3 waiting")
    # One step per latency (2 s): what a step did shows only once its answers are back.
    assert drive.second(lambda c: 2.0, waiting=3).limit == 6
    assert drive.second(lambda c: 2.0, waiting=3).limit == 5
    assert drive.run(lambda c: 2.0, 60, waiting=0)[-1].limit > 5  # none waiting: it grows again
    waiting = drive.run(lambda c: 2.0, 60, waiting=1)
    assert all(d.limit <= d.previous for d in waiting) and waiting[-1].limit == 1
    assert waiting[-1].reason == "holding: the server reports 1 waiting, at 1"


def test_it_follows_a_server_that_lost_half_its_capacity():
    drive = Drive(AdaptiveLimit())
    drive.run(batching_latency(16), 400)
    before = drive.controller.limit
    assert before >= 14
    decisions = drive.run(batching_latency(8), 60)
    lost = next(d for d in decisions if d.changed)
    assert lost.reason.startswith("shrank: latency") and "what it was at" in lost.reason
    assert max(d.limit for d in decisions[-30:]) <= 8 + 2


def test_it_holds_when_demand_does_not_fill_the_limit():
    drive = Drive(AdaptiveLimit(start=8))
    decision = drive.until_decided(lambda c: 2.0, in_flight=2)
    assert (decision.limit, decision.reason) == (8, "holding: 2 of 8 in use")


def test_it_takes_no_step_that_could_carry_the_slowest_answers_to_the_timeout():
    # 2.6 s answers, a 5 s timeout: were the server one slot, two in flight would take 5.2 s.
    decision = Drive(AdaptiveLimit(timeout_s=5.0)).until_decided(lambda c: 2.6)
    assert (decision.limit, decision.reason) == (1, "holding: one more could reach the 5 s timeout")
    assert Drive(AdaptiveLimit(timeout_s=30.0)).until_decided(lambda c: 2.6).limit == 2


def test_requests_of_different_sizes_are_compared_as_one_size():
    # Alone, latency is 0.2 s + 0.1 ms a prompt token + 20 ms an output token: mixing sizes is not queueing.
    floor = LatencyFloor(creep_per_s=0.0)
    sizes = [(1000, 50), (8000, 50), (2000, 400), (500, 10)] * 50
    for prompt, output in sizes:
        floor.learn(0.2 + 1e-4 * prompt + 0.02 * output, prompt, output)
    as_first = {floor.as_reference(0.2 + 1e-4 * p + 0.02 * o, p, o) for p, o in sizes}
    assert max(as_first) / min(as_first) < 1.01
    controller = AdaptiveLimit()
    now = 0.0
    for _ in range(40):
        now += 1.0
        for prompt, output in sizes[:4]:
            controller.record(Sample(0.2 + 1e-4 * prompt + 0.02 * output, prompt, output), now)
        decision = controller.decide(now)
    assert decision.limit >= 8 and not any(d for d in [decision] if d.reason.startswith("shrank"))


def test_the_simulation_is_a_batching_server():
    steady = Load(size_spread=0.0, jitter=0.0, duration_s=120.0)
    assert simulate(Server(1, slowdown=0.0), steady, 1).throughput == pytest.approx(1.0, rel=0.02)
    full = simulate(Server(16), steady, 16)
    assert full.throughput == pytest.approx(16 / 1.75, rel=0.03) and full.timeouts == 0
    queued = simulate(Server(16), steady, 32)  # the same work, each request waiting a batch more
    assert queued.throughput == pytest.approx(full.throughput, rel=0.03)
    late = simulate(Server(1, slowdown=0.0), Load(timeout_s=3.0, size_spread=0.0, jitter=0.0, duration_s=120.0), 4)
    assert late.timeouts > 0 and late.useful_share < 0.5  # abandoned answers are computed all the same


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_simulated_figures_meet_the_targets(seed):
    found = figures(seed)
    assert found.best_cap == 16
    assert found.throughput_ratio >= 0.85 and found.batching_timeouts == 0
    assert found.one_slot_timeouts == 0 and found.one_slot_useful_share >= 0.95
    assert found.halved_timeouts <= 2 and found.halved_settle_s <= 30
