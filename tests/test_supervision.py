"""The supervisor's judgement, without a server: what is evidence (a dead process, a stub
gone, a step that makes no progress with work queued, a wrong canary, a model gone) and
what is not (a slow or shed canary under load). The real server runs it in
test_supervision_served.py."""

from __future__ import annotations

import pytest

from readability_triton import contracts as C
from readability_triton import triton_messages as M
from readability_triton.repository.canary import Canary
from readability_triton.server import health as H
from readability_triton.server import processes as P

CANARY = Canary("a text", {C.SCORE: 1.0, C.BERT_SCORE: 1.1, C.FOREST_SCORE: -0.2}, 1e-3)


class FakeProcess:
    def __init__(self, pid=100):
        self.pid, self.returncode = pid, None

    def poll(self):
        return self.returncode


class FakeServer:
    http_url = grpc_url = "127.0.0.1:1"
    answers_live = True

    def live(self, timeout=2.0):
        return self.answers_live

    def __init__(self):
        self.process = FakeProcess()
        self.executions = {"bert": 5, "validate": 9}
        self.pending = {"bert": 0}
        self.stops, self.starts = [], 0

    @property
    def pid(self):
        return self.process.pid

    def execution_counts(self):
        return dict(self.executions)

    def pending_requests(self):
        return dict(self.pending)

    def stop(self, **kw):
        self.stops.append(kw)

    def start(self, timeout):
        self.starts += 1
        self.process = FakeProcess(pid=200 + self.starts)


@pytest.fixture
def world(monkeypatch):
    """A fake server, its stubs (pid -> instance; `dead` holds the gone ones) and the
    canary's next answers."""
    state = {
        "stubs": {100: {11: "featurize_0_0", 12: "bert_0_0"}, 201: {21: "featurize_0_0", 22: "bert_0_0"}},
        "dead": set(),
        "answers": [],
    }
    monkeypatch.setattr(
        H, "python_stubs", lambda pid: {p: i for p, i in state["stubs"].get(pid, {}).items() if p not in state["dead"]}
    )
    monkeypatch.setattr(H, "alive", lambda pid: pid not in state["dead"])
    state["stopped"] = set()
    monkeypatch.setattr(H, "stopped", lambda pid: pid in state["stopped"])
    monkeypatch.setattr(H, "reap_zombies", lambda keep=(): [])

    def fake_check(url, protocol="http", timeout=10.0, canary=None, model=C.ENSEMBLE):
        return state["answers"].pop(0) if state["answers"] else H.Probe("ok", "fine", 0.01)

    monkeypatch.setattr(H, "check", fake_check)
    server = FakeServer()
    supervisor = H.Supervisor(server, interval=0.01, canary=CANARY, stall_timeout=10.0)
    supervisor.started()
    return server, supervisor, state


def rounds(supervisor, n=2):
    """Checks until the canary sent in the first round has been judged; what was repaired."""
    done = []
    for _ in range(n):
        done.append(supervisor.check_once())
        if supervisor._probe_thread is not None:
            supervisor._probe_thread.join()
    done.append(supervisor.check_once())
    return [d for d in done if d]


def test_a_slow_or_shed_canary_under_load_is_not_evidence(world):
    server, supervisor, state = world
    state["answers"] = [
        H.Probe("busy", "in ensemble 'readability', Request timeout expired", 60.0),
        H.Probe(M.canary_kind("busy: 9 requests are waiting"), "busy: 9 requests are waiting", 0.01),
        H.Probe(M.canary_kind("[StatusCode.DEADLINE_EXCEEDED] Deadline Exceeded"), "deadline", 60.0),
    ]
    server.pending = {"bert": 40}
    for _ in range(3):
        assert rounds(supervisor) == []
        server.executions["bert"] += 1  # work moves on
        status = supervisor.status()
        assert status["live"] and status["ready"], status
    assert server.stops == [] and server.starts == 0


def test_a_dead_stub_is_evidence_and_the_restart_drains_without_waiting_for_it(world):
    server, supervisor, state = world
    state["dead"].add(11)
    assert supervisor.check_once() == "restart"
    assert supervisor.check_once() is None
    assert server.starts == 1
    assert server.stops == [
        {"drain": True, "drain_timeout": supervisor.drain_timeout, "timeout": 5, "abandon": ["featurize"]}
    ]
    assert supervisor.status()["ready"] and supervisor.restarts == 1
    assert [kind for _, kind, _ in supervisor.events][:2] == ["unhealthy", "restart"]


def test_a_step_that_makes_no_progress_with_work_queued_is_stuck(world, monkeypatch):
    server, supervisor, _ = world
    clock = [1000.0]
    monkeypatch.setattr(H.time, "monotonic", lambda: clock[0])
    server.pending = {"bert": 3}
    assert supervisor.stalled() == []
    clock[0] += 9.0
    assert supervisor.stalled() == []
    server.executions["bert"] += 1  # progress: the clock starts again
    clock[0] += 9.0
    assert supervisor.stalled() == []
    clock[0] += 10.5
    assert supervisor.stalled() == ["bert"]
    server.pending = {"bert": 0}  # nothing queued: idle, not stuck
    assert supervisor.stalled() == []


def test_a_wrong_answer_is_healed_and_a_wrong_repository_is_not_restarted_in_a_loop(world):
    server, supervisor, state = world
    wrong = CANARY.judge({C.SCORE: -0.24, C.BERT_SCORE: 1.1, C.FOREST_SCORE: -0.2})
    assert wrong and "SCORE -0.24" in wrong
    state["answers"] = [H.Probe("wrong", wrong, 0.1), H.Probe("ok", "fine", 0.1)]
    assert rounds(supervisor) == ["restart"]
    assert supervisor.status()["ready"] and server.starts == 1
    # the repository's own files answer wrong: the restart does not help; no restart loop
    state["answers"] = [H.Probe("wrong", wrong, 0.1)] * 10
    assert rounds(supervisor) == ["restart"]
    assert not supervisor.status()["ready"] and "still fails" in supervisor.status()["problem"]
    assert rounds(supervisor, 3) == []  # backing off
    assert supervisor.status()["live"]


def test_a_model_loaded_again_replaces_its_stub_and_that_is_not_death(world):
    server, supervisor, state = world
    state["dead"].add(11)
    state["stubs"][100][31] = "featurize_0_0"  # the model-control API started a new stub for it
    assert supervisor.check_once() is None and supervisor.dead_stubs() == []
    state["dead"].add(31)  # and that one dies
    assert supervisor.check_once() == "restart"


def test_a_server_that_died_is_restarted_without_a_drain(world):
    server, supervisor, _ = world
    server.process.returncode = -9
    assert supervisor.check_once() == "restart"
    assert server.stops[0]["drain"] is False and server.starts == 1


def test_a_dead_stub_answer_with_nothing_behind_it_ends_the_hold_at_once(world):
    """The front door's suspicion (a client can make tritonserver echo 'is not healthy'):
    every stub runs and the canary is right, so nothing is restarted and the hold ends."""
    server, supervisor, state = world
    dismissed = []
    supervisor.dismiss = lambda: dismissed.append(1)
    supervisor.poke()
    supervisor._stop.set()  # one round of run(), then out
    supervisor._suspected, suspected = False, supervisor._suspected
    assert suspected and supervisor.check_once() is None
    assert supervisor.confirm() is None
    assert dismissed == [1] and server.stops == [] and server.starts == 0
    assert [kind for _, kind, _ in supervisor.events] == ["dismissed"]
    assert "nothing to repair" in supervisor.events[-1][2]


def test_a_dead_stub_answer_the_canary_confirms_is_repaired(world):
    server, supervisor, state = world
    dismissed = []
    supervisor.dismiss = lambda: dismissed.append(1)
    state["answers"] = [H.Probe("dead", "Stub process 'bert_0_0' is not healthy.", 0.01, dead_stubs=["bert"])]
    assert supervisor.confirm() == "restart"
    assert dismissed == [] and server.starts == 1 and server.stops[0]["abandon"] == ["bert"]


def test_a_stopped_server_is_not_ready_at_once_and_is_killed_and_restarted(world, monkeypatch):
    server, supervisor, state = world
    monkeypatch.setattr(H, "STOPPED_GRACE", 0.01)
    state["stopped"].add(server.pid)
    status = supervisor.status()
    assert status["live"] and not status["ready"] and "is stopped" in status["problem"]
    assert supervisor.check_once() == "restart"
    assert server.stops[0]["kill"] is True and server.stops[0]["drain"] is False
    assert supervisor.status()["ready"]  # the new process runs
    # a process continued within the grace is not repaired
    state["stopped"].add(server.pid)
    monkeypatch.setattr(H, "stopped", lambda pid: state["stopped"].discard(pid) is None and False)
    assert supervisor.check_once() is None and server.starts == 1


def test_a_server_silent_on_its_own_liveness_endpoint_is_not_ready_then_repaired(world, monkeypatch):
    server, supervisor, _ = world
    clock = [1000.0]
    monkeypatch.setattr(H.time, "monotonic", lambda: clock[0])
    supervisor.freeze_timeout = 20.0
    supervisor._liveness = object()  # as if watch_liveness ran (its thread is not needed here)
    supervisor.started()
    clock[0] += H.LIVE_GRACE - 1
    assert supervisor.status()["ready"]
    clock[0] += 2
    status = supervisor.status()
    assert not status["ready"] and "/v2/health/live" in status["problem"]
    assert supervisor.check_once() is None  # silent, not yet for freeze_timeout: no statistics asked
    clock[0] += 20
    assert supervisor.check_once() == "restart" and server.stops[-1]["kill"] is True
    clock[0] += 1
    assert supervisor.status()["ready"]  # started() counts from the restart


def test_the_liveness_thread_notes_each_answer(world):
    server, supervisor, _ = world
    supervisor._answered_at = 0.0
    supervisor.watch_liveness()
    try:
        deadline = __import__("time").monotonic() + 5
        while supervisor.silent() > 60 and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.01)
        assert supervisor.silent() < 5
    finally:
        supervisor.stop()


@pytest.mark.parametrize(
    "message, kind",
    [
        ("in ensemble 'readability', Stub process 'featurize_0_0' is not healthy.", "dead"),
        ("Request for unknown model: 'readability' is not found", "missing"),
        ("in ensemble 'readability', Request timeout expired", "busy"),
        ("in ensemble 'readability', busy: 9 requests are waiting inside the pipeline", "busy"),
        ("[StatusCode.DEADLINE_EXCEEDED] Deadline Exceeded", "busy"),
        ("failed to connect to all addresses; connection refused", "down"),
    ],
)
def test_what_a_failed_canary_means(message, kind):
    assert M.canary_kind(message) == kind
    assert H.Probe(kind, message, 0.0).evidence == (kind in ("dead", "missing"))


def test_the_canary_round_trips_through_the_repository(tmp_path):
    (tmp_path / C.ENSEMBLE / "1").mkdir(parents=True)
    assert Canary.load(str(tmp_path)) is None
    CANARY.save(str(tmp_path))
    assert Canary.load(str(tmp_path)) == CANARY
    assert CANARY.judge({C.SCORE: 1.0004, C.BERT_SCORE: 1.1, C.FOREST_SCORE: -0.2}) is None
    assert "nan" in CANARY.judge({C.SCORE: float("nan"), C.BERT_SCORE: 1.1, C.FOREST_SCORE: -0.2})


def test_instance_names_map_to_models():
    assert P.instance_model("featurize_0_0") == "featurize"
    assert P.instance_model("bert_portable_x_1_3") == "bert_portable_x"
    assert P.instance_model("postprocess") == "postprocess"


def _failing_starts(server, failures: int, status: int):
    """server.start fails its first `failures` times, its process ended with `status`."""
    real_start = server.start

    def start(timeout):
        if server.starts < failures:
            server.starts += 1
            server.process = FakeProcess(pid=300 + server.starts)
            server.process.returncode = status
            raise RuntimeError(f"tritonserver exited with status {status} before it was ready")
        real_start(timeout)

    server.start = start


@pytest.mark.parametrize("aborts", [1, 3])
def test_a_server_that_aborts_while_it_starts_again_is_started_again_in_the_same_repair(world, monkeypatch, aborts):
    # Triton 2.51 now and then aborts (status -6) while it starts after a stub was killed,
    # for seconds in a row: the abuse suite's kill_stub then restarted 2 and 3 times and
    # honest requests failed between the repairs
    server, supervisor, state = world
    monkeypatch.setattr(H, "ABORT_PAUSES", (0.01, 0.02, 0.03, 0.04))
    _failing_starts(server, aborts, -6)
    held = []
    supervisor.hold, supervisor.release = (lambda: held.append("hold")), (lambda: held.append("release"))
    state["dead"].add(11)
    assert supervisor.check_once() == "restart"
    assert server.starts == aborts + 1 and supervisor.restarts == 1 and held == ["hold", "release"]
    assert server.stops[-1] == {"drain": False, "timeout": 5}
    assert supervisor.status()["ready"]
    again = [e["message"] for e in supervisor.status()["events"] if "starting it once more" in e["message"]]
    assert len(again) == aborts
    assert [m.rsplit("once more", 1)[1] for m in again] == ["", " in 0.01 s", " in 0.02 s"][:aborts]


@pytest.mark.parametrize("status, starts", [(-6, 6), (1, 2)])
def test_a_server_that_keeps_failing_to_start_is_left_failed_after_its_attempts(world, monkeypatch, status, starts):
    """Aborts: the first retry and one after each pause; any other failure (a model that
    does not load): one retry, then the next repair's backoff."""
    server, supervisor, state = world
    monkeypatch.setattr(H, "ABORT_PAUSES", (0.01, 0.02, 0.03, 0.04))
    _failing_starts(server, 100, status)
    state["dead"].add(11)
    assert supervisor.check_once() == "restart"
    assert server.starts == starts and supervisor.restarts == 1
    assert not supervisor.status()["ready"]
    assert supervisor.status()["events"][-1]["message"].startswith("tritonserver did not start again:")


def test_a_confirmed_dead_stub_during_the_repairs_backoff_holds_nothing(world, monkeypatch):
    server, supervisor, state = world
    dismissed = []
    supervisor.dismiss = lambda: dismissed.append(1)
    supervisor._next_repair = H.time.monotonic() + 60  # backing off after repairs that did not help
    state["answers"] = [H.Probe("dead", "Stub process 'bert_0_0' is not healthy.", 0.01, dead_stubs=["bert"])]
    assert supervisor.confirm() is None
    assert dismissed == [1] and server.starts == 0


def test_the_supervisors_events_are_bounded(world):
    _, supervisor, _ = world
    for n in range(H.MAX_EVENTS * 3):
        supervisor._event("dismissed", f"event {n}")
    assert len(supervisor.events) == H.MAX_EVENTS and supervisor.events[-1][2] == f"event {H.MAX_EVENTS * 3 - 1}"
