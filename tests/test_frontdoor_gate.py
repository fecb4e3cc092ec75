"""The front door's gate and wire reading, without a server: admission by work, fair shares
and order, abandoned work, deadlines, the measured rate; the batch size read off KServe v2
requests as tritonclient and curl send them."""

from __future__ import annotations

import math

import pytest
from test_triton_messages import dead_stubs, no_connection, shed

from readability_triton.frontdoor.gate import Gate, Refusal, Ticket


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _gate(**kw) -> tuple[Gate, Clock]:
    clock = Clock()
    kw.setdefault("rate", 10.0)
    kw.setdefault("aim", 1.0)  # the arithmetic below fills the whole stated wait
    return Gate(clock=clock, **kw), clock


def _serve(gate: Gate, clock: Clock, seconds: float, ok: bool = True) -> list[Ticket]:
    """Send on what the gate lets through, let `seconds` pass, answer them all."""
    sent = []
    while (ticket := gate.next()) is not None:
        sent.append(ticket)
    clock.now += seconds
    for ticket in sent:
        gate.done(ticket, ok=ok)
    return sent


def test_work_is_counted_in_texts_against_the_stated_wait():
    gate, _ = _gate(max_wait=10.0, rate=10.0)  # 100 texts fit
    assert isinstance(gate.offer("a", 64), Ticket)
    assert isinstance(gate.offer("a", 30), Ticket)  # 94 texts
    refused = gate.offer("a", 64)
    assert isinstance(refused, Refusal) and refused.kind == "busy"
    assert refused.reason.startswith("busy: 94 texts") and "retry in" in refused.reason
    assert 0 < refused.retry_after <= 10.0
    assert isinstance(gate.offer("a", 6), Ticket)  # small work still fits


def test_admission_keeps_headroom_below_the_stated_wait_for_a_pipeline_that_slows():
    gate = Gate(max_wait=10.0, rate=10.0, clock=Clock())  # the default aim: 75 of 100 texts
    assert gate.admitted_wait() == pytest.approx(7.5) and gate.capacity() == pytest.approx(75.0)
    assert isinstance(gate.offer("a", 64), Ticket)
    assert isinstance(gate.offer("a", 11), Ticket)  # 75 texts
    refused = gate.offer("a", 1)
    assert isinstance(refused, Refusal) and refused.kind == "busy"
    assert "the stated wait is 10 s, of which 7.5 s is admitted" in refused.reason
    assert gate.snapshot()["admitted_wait_s"] == pytest.approx(7.5)
    with pytest.raises(ValueError):
        Gate(aim=0.0)


def test_an_idle_pipeline_takes_a_request_larger_than_the_wait_allows():
    gate, _ = _gate(max_wait=1.0, rate=10.0)
    assert isinstance(gate.offer("a", 64), Ticket)
    assert isinstance(gate.offer("b", 64), Refusal)


def test_a_client_alone_may_use_all_the_room_but_only_its_share_once_others_come():
    gate, _ = _gate(max_wait=10.0, rate=10.0)  # 100 texts fit
    for _ in range(10):
        assert isinstance(gate.offer("abuser", 10), Ticket)
    assert gate.queued == 100_000  # thousandths of a text
    more = gate.offer("abuser", 1)
    assert isinstance(more, Refusal) and more.kind == "busy"
    assert more.reason.startswith("busy: 100 texts are waiting or in the pipeline ahead of this request")
    # another client's texts wait behind the abuser's in the fair order, one of its texts
    # for each of its own: it may place about half of what the wait allows
    placed = 0
    while isinstance(gate.offer("honest", 1), Ticket):
        placed += 1
    assert placed == 50
    # the share rule, where the fair order alone would let a client hold more: another
    # client's later texts do not wait before its own
    gate, _ = _gate(max_wait=10.0, rate=10.0)
    assert isinstance(gate.offer("early", 30), Ticket)
    for _ in range(6):
        assert isinstance(gate.offer("x", 10), Ticket)  # starts 0, 10, ... 50 in the order
    assert isinstance(gate.offer("y", 10), Ticket)
    refused = gate.offer("early", 5)  # 80 texts ahead of it, but 35 > its share of 33
    assert isinstance(refused, Refusal) and refused.kind == "share"
    assert "its share while 3 clients wait is 33" in refused.reason


def test_a_newcomer_is_not_refused_for_a_queue_it_would_not_wait_for():
    # the rate fell to 50 texts a second, then a flood filled the 2.01 s admitted (100.5 texts)
    gate, clock = _gate(max_wait=4.0, aim=0.5025, rate=100.0, inside=0.0, max_inside_requests=2, warmup=0)
    for _ in range(4):
        gate.offer("early", 10), gate.offer("early", 10)
        _serve(gate, clock, 0.4)  # 2 requests of 10 texts in 0.4 s: 50 texts a second
    assert gate.rate() == pytest.approx(50.0)
    flood = [gate.offer("flood", 10) for _ in range(11)]
    assert all(isinstance(t, Ticket) for t in flood[:10])
    refused = flood[10]
    assert isinstance(refused, Refusal) and refused.kind == "busy", refused
    assert refused.reason.startswith("busy: 100 texts are waiting or in the pipeline ahead of this request")
    honest = gate.offer("honest", 1)  # ahead of it in the fair order: the flood's first request
    assert isinstance(honest, Ticket) and gate.queued + honest.work > gate._capacity_units()
    # first, not eleventh: it starts with the flood's first request and ends sooner
    assert [gate.next(), gate.next()] == [honest, flood[0]]
    # a newcomer's place is after the tickets that start before it, not after the queue
    other = gate.offer("other", 5)
    assert isinstance(other, Ticket)
    assert gate.stats.refused == {"busy": 1, "share": 0, "closed": 0, "deadline": 0, "slowed": 0}


def test_requests_a_slowed_pipeline_cannot_answer_within_the_stated_wait_are_refused_uncomputed():
    # 9.5 s stated, 7.125 s admitted at 100 texts a second: 71 requests of 10 texts
    gate, clock = _gate(max_wait=9.5, aim=0.75, rate=100.0, inside=0.0, max_inside_requests=1, warmup=0)
    tickets = [gate.offer("flood", 10) for _ in range(72)]
    assert all(isinstance(t, Ticket) for t in tickets[:71]) and isinstance(tickets[71], Refusal)
    tickets = tickets[:71]
    # the pipeline halves: one request of 10 texts in 0.2 s. Its 8th answer (1.6 s in) lowers
    # the rate to 50, and 63 requests wait: the first 39 still end by 1.6 + 39 x 0.2 = 9.4 s
    for _ in range(8):
        _serve(gate, clock, 0.2)
    assert gate.rate() == pytest.approx(50.0) and gate.stats.refused["slowed"] == 0
    clock.now += 0.01
    sent = gate.next()
    assert sent is tickets[8]
    slowed = tickets[47:]
    assert gate.stats.refused["slowed"] == 24 and gate.late == slowed and gate.rechecks == 1
    assert all(t.state == "slowed" and t.refusal is not None and t.refusal.kind == "slowed" for t in slowed)
    reason = slowed[0].refusal.reason
    assert reason.startswith("busy: the pipeline slowed to 50.0 texts/s after this request was accepted")
    assert "within the stated wait of 9.5 s" in reason and "was not computed" in reason
    # until its work would be admitted again: 390 texts kept ahead and its 10, at 50 a second, less 7.125 s
    assert slowed[0].refusal.retry_after == pytest.approx(8.0 - 7.125)
    assert gate.queued == 38 * 10_000 and gate.stats.dropped == 0 and gate.stats.expired == 0
    # the kept ones are answered within the stated wait, and nothing more is refused
    clock.now += 0.19
    gate.done(sent)
    while _serve(gate, clock, 0.2):
        pass
    assert gate.stats.answered == 47 and gate.stats.refused["slowed"] == 24
    assert gate.answer_times()["max"] <= 9.5 and gate.queued == 0 and gate.inside == 0
    assert gate.snapshot()["refused"]["slowed"] == 24


def test_at_a_steady_rate_nothing_accepted_is_refused_later():
    # 100 texts a second whatever the request; a flood offers more than that, an honest client less
    gate, clock = _gate(max_wait=2.0, aim=0.75, rate=100.0, inside=0.0, max_inside_requests=1, warmup=0)
    for i in range(600):
        gate.offer("flood", 5)
        if i % 3 == 0:
            gate.offer("honest", 1)
        ticket = gate.next()
        clock.now += ticket.work / 1000 / 100
        gate.done(ticket)
    assert gate.rate() == pytest.approx(100.0) and gate.stats.refused["busy"] > 100
    assert gate.stats.refused["slowed"] == 0 and gate.answer_times()["max"] <= 2.0
    assert gate.rechecks == 0  # the rate never fell: the waiting requests were not even looked at


def test_a_repair_hold_is_not_taken_for_a_slowed_pipeline():
    gate, clock = _gate(max_wait=2.0, aim=0.75, rate=100.0, inside=0.0, max_inside_requests=1, warmup=0)
    held = [gate.offer("c", 10) for _ in range(15)]  # 1.5 s of work
    assert all(isinstance(t, Ticket) for t in held)
    gate.pause()
    clock.now += 5.0  # the repair
    gate.seed(50.0)  # its answerless seconds lowered the rate
    assert gate.next() is None and gate.rechecks == 0
    gate.resume()
    assert gate.next() is held[0]
    gate.seed(20.0)  # and it falls further after the repair
    clock.now += 0.1
    assert gate.next() is None  # one request inside: no room, but it looked
    assert gate.rechecks == 1 and gate.stats.refused["slowed"] == 0 and gate.queued == 14 * 10_000


def test_accepted_work_is_sent_on_in_fair_order():
    gate, _ = _gate(max_wait=100.0, rate=10.0, inside=0.0, max_inside_requests=1)
    first = [gate.offer("abuser", 1) for _ in range(5)]
    honest = gate.offer("honest", 1)
    order = []
    while True:
        ticket = gate.next()
        if ticket is None:
            break
        order.append(ticket.client)
        gate.done(ticket)
    assert order[:2] == ["abuser", "honest"], order  # the honest text is second, not sixth
    assert all(t.state == "done" for t in first + [honest])


def test_a_request_abandoned_while_it_waits_is_never_sent_on():
    gate, _ = _gate(max_wait=100.0, inside=0.0, max_inside_requests=1)
    a, b, c = (gate.offer("x", 2) for _ in range(3))
    assert gate.next() is a
    gate.drop(b)
    assert gate.queued == 2000 and b.state == "dropped"
    gate.done(a)
    assert gate.next() is c
    assert gate.stats.dropped == 1 and gate.stats.accepted == 3


def test_a_ticket_released_after_it_was_marked_sent_leaves_no_trace_inside():
    gate, _ = _gate()
    ticket = gate.offer("x", 3)
    assert gate.next() is ticket
    gate.release(ticket)
    assert (gate.inside, gate.inside_requests, ticket.state) == (0, 0, "dropped")
    gate.done(ticket)  # too late: nothing changes
    assert gate.inside == 0 and gate.stats.answered == 0


def test_the_rate_is_measured_from_answers_per_full_second_and_errors_do_not_count():
    gate, clock = _gate(max_wait=10.0, rate=100.0, inside=100.0, max_inside_requests=5, warmup=0)
    for _ in range(4):
        for _ in range(5):
            assert isinstance(gate.offer("c", 10), Ticket)
        assert len(_serve(gate, clock, 1.0)) == 5  # 5 requests: full; 50 texts a second
        clock.now += 5.0  # idle: not counted
    assert gate.rate() == pytest.approx(50.0)
    for _ in range(5):
        gate.offer("c", 10)
    _serve(gate, clock, 0.01, ok=False)  # fast refusals prove nothing
    assert gate.rate() == pytest.approx(200 / 4.01, rel=1e-3)
    assert gate.capacity() == pytest.approx(10 * gate.rate())


def test_answers_paced_by_the_clients_do_not_lower_the_rate():
    # two clients sending one text at a time, each answer 0.1 s on a loaded machine: the
    # pipeline holds 2 texts against the 20 the gate aims to keep in it, so its answers say
    # how fast the clients ask, not how fast it computes (measured, they said 20 texts/s)
    gate, clock = _gate(max_wait=2.0, rate=100.0, inside=0.2, warmup=0)
    for _ in range(100):
        gate.offer("honest-1", 1)
        gate.offer("honest-2", 1)
        _serve(gate, clock, 0.1)
    assert gate.rate() == pytest.approx(100.0)

    # a job's texts fill it: those answers are measured, and raise the rate
    def computed_at(speed: float) -> None:  # a pipeline that computes `speed` texts a second
        while gate.queued:
            sent = []
            while (ticket := gate.next()) is not None:
                sent.append(ticket)
            clock.now += sum(t.work for t in sent) / 1000 / speed
            for ticket in sent:
                gate.done(ticket)

    for _ in range(20):
        assert isinstance(gate.offer("job", 10), Ticket)
    computed_at(200.0)
    assert gate.rate() == pytest.approx(200.0)
    # answers paced by the clients but faster than the rate raise it: the pipeline is at
    # least that fast
    slow, slow_clock = _gate(max_wait=2.0, rate=10.0, inside=0.2, warmup=0)
    for _ in range(50):
        slow.offer("honest-1", 1)
        slow.offer("honest-2", 1)
        _serve(slow, slow_clock, 0.02)
    assert slow.rate() == pytest.approx(100.0)
    # and full for a window's length with slower answers, it is lowered
    for _ in range(15):
        for _ in range(8):
            assert isinstance(gate.offer("job", 10), Ticket)
        computed_at(50.0)
    assert gate.rate() == pytest.approx(50.0, rel=0.2)


def test_a_pipeline_that_slows_down_is_believed_at_once():
    # inside=0: full whenever 2 requests are inside
    gate, clock = _gate(max_wait=100.0, rate=200.0, inside=0.0, warmup=0)

    def full_for(seconds: float, speed: float) -> None:
        for _ in range(round(seconds / (20 / speed))):
            gate.offer("c", 10), gate.offer("c", 10)
            _serve(gate, clock, 20 / speed)

    full_for(15.0, 200.0)
    assert gate.rate() == pytest.approx(200.0)
    full_for(4.0, 100.0)  # the window says 179 texts a second; its last 3 s say 100
    assert gate.rate() == pytest.approx(100.0)
    full_for(2.0, 200.0)  # faster again: only the whole window may raise it
    assert 100.0 < gate.rate() < 200.0


def test_a_cold_starts_first_slow_answers_do_not_set_the_rate():
    # inside=0: full whenever 2 requests are inside, and at most 2 go in
    gate, clock = _gate(max_wait=10.0, rate=10.0, inside=0.0)  # warm-up: 8
    gate.offer("c", 0.3), gate.offer("c", 0.3)
    _serve(gate, clock, 2.0)  # the first answers, 2 s each: 0.3 texts a second
    assert gate.rate() == pytest.approx(10.0)
    for _ in range(3):
        gate.offer("c", 0.3), gate.offer("c", 0.3)
        _serve(gate, clock, 0.02)  # the 8th answer ends the warm-up: measured from here on
    for _ in range(10):
        gate.offer("c", 0.3), gate.offer("c", 0.3)
        _serve(gate, clock, 0.12)  # 5 texts a second
    assert gate.rate() == pytest.approx(5.0)
    # without a warm-up, a few answers may raise the rate but only 8 may lower it
    gate2, clock2 = _gate(max_wait=10.0, rate=10.0, inside=0.0, warmup=0)
    gate2.offer("c", 0.3), gate2.offer("c", 0.3)
    _serve(gate2, clock2, 2.0)
    assert gate2.rate() == pytest.approx(10.0)  # 2 slow answers: not enough to lower it
    for _ in range(3):
        gate2.offer("c", 0.3), gate2.offer("c", 0.3)
        _serve(gate2, clock2, 0.02)
    assert gate2.rate() == pytest.approx(2.4 / 2.06, rel=1e-3)  # 8: trusted, slow ones included
    gate3, clock3 = _gate(max_wait=100.0, rate=1.0, inside=0.0, warmup=0)
    gate3.offer("c", 5), gate3.offer("c", 5)
    _serve(gate3, clock3, 1.0)
    assert gate3.rate() == pytest.approx(10.0)  # two answers may raise it


def test_a_rate_measured_before_the_gate_opened_is_its_start_and_ends_the_warm_up():
    gate, clock = _gate(max_wait=10.0, rate=10.0, inside=0.0)  # warm-up: 8 answers
    gate.seed(60.0)
    assert gate.rate() == pytest.approx(60.0) and gate.capacity() == pytest.approx(600.0)
    for _ in range(5):
        gate.offer("c", 3), gate.offer("c", 3)
        _serve(gate, clock, 0.2)  # 30 texts a second, measured from the first answer on
    assert gate.rate() == pytest.approx(30.0)


def test_a_request_that_finds_nothing_waiting_and_room_inside_goes_straight_in():
    gate, _ = _gate(max_wait=1.0, rate=10.0, inside=0.0, max_inside_requests=4)  # room: 2 requests
    first = gate.offer("a", 1)
    assert isinstance(first, Ticket) and gate.next() is first  # inside now: 0.1 s of work
    second = gate.offer("b", 12)  # 13 texts > the 10 of the stated wait, but it would be sent at once
    assert isinstance(second, Ticket) and gate.next() is second
    third = gate.offer("c", 1)  # no room inside (2 requests): the stated wait decides
    assert isinstance(third, Refusal) and third.kind == "busy"


def test_no_second_request_goes_inside_behind_seconds_of_work():
    """Two requests of 64 full texts on MiniLM slowed to 15 texts/s were 8.4 s of work
    inside, past the 7.5 s admitted: every newcomer was refused behind them. A second
    request goes in only while the one inside is under a quarter of the stated wait."""
    gate, _ = _gate(max_wait=10.0, rate=10.0, inside=0.0, max_inside_requests=4)
    big = gate.offer("flood", 40)  # 4 s of work: over 2.5 s
    assert gate.next() is big and not gate.room()
    small, _ = _gate(max_wait=10.0, rate=10.0, inside=0.0, max_inside_requests=4)
    small.offer("a", 20)  # 2 s of work: a second may join it
    small.next()
    assert small.room()


def test_inside_tritonserver_stays_bounded_in_work_and_in_requests():
    gate, _ = _gate(rate=100.0, inside=0.1, max_inside_requests=3, max_wait=100.0)
    for _ in range(10):
        gate.offer("c", 1)
    sent = [gate.next() for _ in range(3)]
    assert all(sent) and gate.next() is None  # 3 requests: the request bound
    gate2, _ = _gate(rate=100.0, inside=0.1, max_inside_requests=48, max_wait=100.0)
    for _ in range(5):
        gate2.offer("c", 8)
    assert [gate2.next() is not None for _ in range(3)] == [True, True, False]  # 16 texts >= 10: full


def test_pause_holds_and_close_refuses():
    gate, _ = _gate()
    gate.pause()
    ticket = gate.offer("c", 1)
    assert isinstance(ticket, Ticket) and gate.next() is None
    gate.resume()
    assert gate.next() is ticket
    gate.close("shutting down")
    refused = gate.offer("c", 1)
    assert isinstance(refused, Refusal) and refused.kind == "closed" and refused.reason == "shutting down"


def test_a_deadline_shorter_than_any_answer_is_refused_and_a_late_ticket_never_sent():
    gate, clock = _gate(inside=0.0, max_inside_requests=1, max_wait=100.0)
    assert isinstance(gate.offer("c", 1, patience=0.001), Ticket)  # nothing measured yet: accepted
    _serve(gate, clock, 0.05)
    refused = gate.offer("c", 1, patience=0.01)
    assert isinstance(refused, Refusal) and refused.kind == "deadline" and "50 ms" in refused.reason
    blocker = gate.offer("b", 1)
    late = gate.offer("d", 1, patience=0.2)
    assert gate.next() is blocker
    clock.now += 0.19  # 10 ms left of its 200: less than the quickest answer
    gate.done(blocker)
    assert gate.next() is None and late.state == "late" and gate.late == [late]
    assert gate.queued == 0


def test_the_snapshot_names_every_count():
    gate, clock = _gate()
    gate.offer("c", 2)
    _serve(gate, clock, 0.1)
    snap = gate.snapshot()
    assert snap["accepted"] == 1 and snap["answered"] == 1 and snap["texts_waiting"] == 0
    assert set(snap["refused"]) == {"busy", "share", "closed", "deadline", "slowed"}
    assert math.isfinite(snap["rate_texts_per_s"])


# -- the door: a request the pipeline's entrance shed is sent again -----------------------


DEAD = "Stub process 'bert_0_0' is not healthy."


def _door_run(
    answers: list,
    max_wait: float = 10.0,
    patience: float | None = None,
    leave_after: float | None = None,
    gone_before: bool = False,
    gone_check=None,
    inline: bool = False,
):
    """Door.run for one request whose forward() answers `answers` in turn (a string with a
    shed sign is the entrance's refusal, DEAD a dead stub's answer, which a supervisor
    repairs at once); with `leave_after`, its client leaves after that many seconds; with
    `gone_before`, it had left before the send (the answer is then the exception raised).
    `inline`: run as the HTTP port runs it (in the caller's task, never cancelled: a client
    that leaves is seen by `client_gone` alone).
    (the final answer or None, how many sends, the snapshot, repairs, quickest())."""
    import asyncio

    from readability_triton.frontdoor import door as D

    async def main():
        repairs = []
        door = D.Door("127.0.0.1:1", "127.0.0.1:2", max_wait=max_wait)
        door.on_dead_stub = lambda: (repairs.append(1), door.loop.call_later(0.01, door._resume))
        door.loop = asyncio.get_running_loop()
        door._running = asyncio.Event()
        door._running.set()
        ticket = await door.admit("127.0.0.2", 1.0, patience)
        sends = []
        left: list[bool] = []

        async def forward():
            sends.append(1)
            await asyncio.sleep(0.001)
            return answers[min(len(sends), len(answers)) - 1]

        call = asyncio.ensure_future(
            door.run(
                ticket,
                forward,
                ok=lambda a: a == "ok",
                dead_stub=lambda a: a == DEAD,
                uncomputed=lambda a: shed(503, a),
                client_gone=gone_check or (lambda: gone_before or bool(left)),
                inline=inline,
            )
        )
        answer = None
        if inline and leave_after is not None:
            await asyncio.sleep(leave_after)
            left.append(True)  # its connection closed: the handler goes on, and sees it
            answer = await call
        elif gone_before:
            try:
                await call
            except D.ClientLeft as err:
                answer = err
        elif leave_after is not None:
            await asyncio.sleep(leave_after)
            call.cancel()
            await asyncio.sleep(0.3)  # what the door does after the client left
        else:
            answer = await call
        return answer, len(sends), door.gate.snapshot(), len(repairs), door.gate.quickest()

    return asyncio.run(main())


SHED = (
    "in ensemble 'readability', busy: 70 requests are waiting inside the pipeline "
    "(the limit is 64, parameter MAX_PENDING_REQUESTS); retry in a moment"
)


def test_shed_signs_match_what_the_entrance_says():
    from readability_triton.stub.admission import Admission

    metrics = {"bert": {"pending": 3.0, "queue_us": 0.0, "success": 0.0}}
    pending = Admission(2, 0.0, ["bert"])._judge(metrics, 1.0)
    waiting = Admission(0, 1.0, ["bert"])
    waiting._judge(metrics, 1.0)
    stuck = waiting._judge(metrics, 3.0)
    assert pending and stuck and shed(503, pending) and shed("UNAVAILABLE", stuck.encode())
    assert not shed(503, "text 0 of the request is not valid UTF-8") and not shed(503, DEAD)
    assert not shed(503, "in ensemble 'readability', Request timeout expired")  # may have been computed in part
    refused = "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:38647: Connection refused"
    assert no_connection("UNAVAILABLE", refused)
    assert no_connection(503, b'{"error": "tritonserver refused the connection (X)"}')
    assert not no_connection(503, "Socket closed") and not no_connection(503, SHED)


def test_the_same_words_under_a_client_errors_code_mean_nothing():
    """tritonserver echoes a model name it does not serve (NOT_FOUND), an input name
    (INVALID_ARGUMENT): such words are the client's, whatever they say."""
    import grpc

    echoed = f"Request for unknown model: '{SHED}' is not found"
    assert not shed(404, echoed) and not shed(grpc.StatusCode.NOT_FOUND, echoed)
    assert not no_connection(400, "unexpected input 'failed to connect to all addresses'")
    named = "Request for unknown model: 'Stub process 'bert_0_0' is not healthy' is not found"
    assert dead_stubs(404, named, {"bert"}) == [] and dead_stubs(grpc.StatusCode.NOT_FOUND, named, {"bert"}) == []
    assert dead_stubs(500, "Request for unknown model: 'is not healthy'", {"bert"}) == []
    assert dead_stubs(500, "in ensemble 'readability', " + DEAD, {"bert", "readability"}) == ["bert"]
    assert dead_stubs(grpc.StatusCode.INTERNAL, DEAD, {"bert"}) == ["bert"]
    assert dead_stubs("StatusCode.INTERNAL", DEAD, {"featurize"}) == []  # not a model of this repository


def test_a_shed_answer_is_sent_again_until_the_pipeline_takes_it():
    answer, sends, snap, _, quickest = _door_run([SHED, SHED, "ok"])
    assert answer == "ok" and sends == 3
    assert snap["resent"] == 2 and snap["answered"] == 1 and snap["requests_inside"] == 0
    assert quickest < 0.05  # the last try's time, not the pauses (0.05 s, 0.1 s) before it


def test_a_client_that_leaves_during_a_pause_is_not_sent_again():
    answer, sends, snap, _, _ = _door_run([SHED], leave_after=0.02)
    assert sends == 1 and snap["resent"] == 1
    assert snap["abandoned_after_send"] == 1 and snap["requests_inside"] == 0


def test_an_inline_run_sees_a_client_that_leaves_during_a_pause_and_does_not_send_again():
    answer, sends, snap, _, _ = _door_run([SHED], leave_after=0.02, inline=True)
    assert answer == SHED and sends == 1 and snap["resent"] == 1
    assert snap["abandoned_after_send"] == 1 and snap["requests_inside"] == 0
    answer, sends, snap, _, _ = _door_run([SHED, "ok"], inline=True)  # a client that stays
    assert answer == "ok" and sends == 2 and snap["answered"] == 1 and snap["requests_inside"] == 0


def test_a_client_gone_before_the_send_is_never_computed():
    """A client that sent its request and closed at once: its close is seen by the time the
    send starts, and the request is dropped uncomputed (Door.run raises ClientLeft)."""
    from readability_triton.frontdoor.door import ClientLeft

    for inline in (False, True):
        answer, sends, snap, _, _ = _door_run(["ok"], gone_before=True, inline=inline)
        assert isinstance(answer, ClientLeft) and sends == 0
        assert snap["dropped_before_compute"] == 1 and snap["abandoned_after_send"] == 0
        assert snap["answered"] == 0 and snap["requests_inside"] == 0 and snap["texts_inside"] == 0


def test_a_check_for_a_gone_client_that_fails_sends_the_request_and_leaks_nothing():
    def broken() -> bool:
        raise RuntimeError("no transport")

    answer, sends, snap, _, _ = _door_run(["ok"], gone_check=broken)
    assert answer == "ok" and sends == 1
    assert snap["answered"] == 1 and snap["requests_inside"] == 0 and snap["dropped_before_compute"] == 0


def test_a_resend_that_meets_a_dead_stub_waits_for_the_repair_and_goes_once_more():
    answer, sends, snap, repairs, _ = _door_run([SHED, DEAD, "ok"])
    assert answer == "ok" and sends == 3 and repairs == 1 and snap["resent"] == 1
    answer, sends, _, repairs, _ = _door_run([DEAD, DEAD, "ok"])  # one repair, one send more: as before
    assert answer == DEAD and sends == 2 and repairs == 1


def test_a_shed_answer_is_passed_on_once_the_longest_wait_is_spent():
    # a stated wait of 0.2 s allows two pauses (0.05 s, 0.1 s), not a third (0.2 s)
    answer, sends, snap, _, _ = _door_run([SHED], max_wait=0.2)
    assert answer == SHED and 2 <= sends <= 4 and snap["resent"] == sends - 1
    # a client that gives up sooner bounds it too: a 60 ms deadline leaves room for one pause
    answer, sends, *_ = _door_run([SHED], patience=0.06)
    assert answer == SHED and sends <= 2


def test_a_waiting_client_is_told_the_pipeline_slowed_and_its_request_is_never_sent():
    import asyncio

    from readability_triton.frontdoor import door as D

    async def main():
        door = D.Door("127.0.0.1:1", "127.0.0.1:2", max_wait=3.0)  # 3 s stated, 2.25 s admitted
        door.loop = asyncio.get_running_loop()
        door._running = asyncio.Event()
        door._running.set()
        door.gate.seed(100.0)
        inside = [await door.admit("a", 20.0) for _ in range(2)]  # sent on at once; then no room
        first = asyncio.ensure_future(door.admit("b", 10.0))
        second = asyncio.ensure_future(door.admit("b", 40.0))
        await asyncio.sleep(0.01)
        waited = (first.done(), second.done())
        door.gate.seed(25.0)  # slowed: the 50 texts up to the first's end take 2 s, the second's 90 3.6 s
        refusal = await asyncio.wait_for(second, 1.0)  # no answer comes: the door looks again by itself
        still = first.done()
        first.cancel()
        return inside, waited, refusal, still, door.gate.snapshot()

    inside, waited, refusal, still, snap = asyncio.run(main())
    assert all(t.state == "sent" for t in inside) and waited == (False, False)
    assert isinstance(refusal, Refusal) and refusal.kind == "slowed" and refusal.reason.startswith("busy: ")
    assert "slowed to 25.0 texts/s" in refusal.reason and "not computed" in refusal.reason
    assert not still  # the first still fits the stated wait: it waits for room
    assert snap["refused"]["slowed"] == 1 and snap["texts_waiting"] == 10 and snap["dropped_before_compute"] == 0


def test_a_dead_stub_answer_the_supervisor_dismisses_ends_the_hold_and_holds_nothing_for_a_while():
    """A client can make tritonserver say 'is not healthy' (a model of that name); the
    supervisor finds nothing to repair and dismisses the suspicion: the hold ends at once,
    and for SUSPICION_COOLDOWN s more such answers only tell the supervisor."""
    import asyncio

    from readability_triton.frontdoor import door as D

    async def main():
        told = []
        door = D.Door("127.0.0.1:1", "127.0.0.1:2")
        door.on_dead_stub = lambda: (told.append(1), door.loop.call_later(0.01, door._dismiss))
        door.loop = asyncio.get_running_loop()
        door._running = asyncio.Event()
        door._running.set()
        answers = iter([DEAD, "ok", DEAD, DEAD])

        async def forward():
            await asyncio.sleep(0.001)
            return next(answers)

        async def one():
            ticket = await door.admit("127.0.0.2", 1.0)
            return await door.run(ticket, forward, ok=lambda a: a == "ok", dead_stub=lambda a: a == DEAD)

        started = door.loop.time()
        first = await one()
        held = door.loop.time() - started
        second = await one()  # within the cooldown: told, sent once more at once, no hold
        return first, second, held, told, door.snapshot()

    first, second, held, told, snap = asyncio.run(main())
    assert first == "ok" and held < 0.5
    assert second == DEAD and len(told) == 2
    assert snap["holds"] == 1 and snap["holds_dismissed"] == 1 and snap["paused"] is False


def test_a_client_that_comes_back_at_once_keeps_its_place_and_the_memory_of_places_is_bounded(monkeypatch):
    """A closed loop of one request at a time has no work between its requests; it comes
    back at the end of its last request on the fair timeline, not at the present (where
    every such client would tie, and 50 addresses would win 50 turns)."""
    from readability_triton.frontdoor import fairness as F

    gate, clock = _gate()
    gate.offer("a", 4)
    _serve(gate, clock, 0.1)  # a's request goes on and is answered
    back = gate.offer("a", 4)  # at the end of its last one (4 texts), not at the present (0)
    newcomer = gate.offer("b", 1)
    assert isinstance(back, Ticket) and back.start == 4000.0 and newcomer.start == 0.0
    assert gate.next() is newcomer
    monkeypatch.setattr(F, "MAX_REMEMBERED", 8)
    for n in range(50):
        ticket = gate.offer(f"c{n}", 1)
        gate.drop(ticket)
    assert len(gate.ledger.finishes) <= 8


def test_a_newcomer_behind_nothing_but_the_work_inside_is_accepted_while_the_whole_wait_holds_it():
    """A flood's request of 80 texts inside (past the 75 admitted at 10 texts/s): a client
    with nothing queued ahead of it waits only for it, so it is accepted while that and its
    own fit the whole stated wait (100 texts); the flood's next does not fit."""
    gate = Gate(max_wait=10.0, rate=10.0, clock=Clock(), inside=0.0, max_inside_requests=2)
    gate.offer("flood", 80)
    gate.next()  # 8 s of work inside, past the 7.5 s admitted
    more = gate.offer("flood", 40)  # 80 + 40 > 100 even behind nothing queued
    assert isinstance(more, Refusal) and more.kind == "busy"
    honest = gate.offer("honest", 1)  # 81 <= 100: it waits only for the work inside
    assert isinstance(honest, Ticket)
    other = gate.offer("other", 5)  # behind the honest one, queued: the admitted wait decides
    assert isinstance(other, Refusal) and other.kind == "busy"


def test_the_second_look_counts_only_what_is_left_of_the_work_inside():
    """A request of 140 texts of long text inside, a small one accepted behind it; 5 s on the
    rate dips from 30 to 24 texts/s. Counted whole, the work inside (140 / 24 = 5.8 s) and the
    4.5 s waited pass the 10 s stated wait, and the small request was refused as slowed
    although most of that work was done; what is left of it is 140 - 5 x 24 = 20 texts."""
    gate, clock = _gate(max_wait=10.0, rate=30.0, inside=0.0, max_inside_requests=2)
    long = gate.offer("long", 140)
    assert gate.next() is long
    clock.now += 0.5
    small = gate.offer("honest", 0.1)
    assert isinstance(small, Ticket)
    clock.now += 4.5
    gate._basis = 30_000.0  # the highest rate since the last look
    gate.meter.units = lambda: 24_000.0
    assert gate.recheck() == 0 and small.state == "queued"
    clock.now += 6.0  # now it has waited 10.5 s: late however little is left
    gate._checked = -1e9
    gate._basis = 30_000.0
    assert gate.recheck() == 1 and small.state == "slowed"
