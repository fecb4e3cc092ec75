"""`triton_messages`: what each message a real tritonserver 2.51 answers means, one test per
message, to the front door, the supervisor's canary and the client; and whether a served
tritonserver still says what is recorded here.

Every message below was answered by a real tritonserver 2.51 (the nvidia-pytriton 0.7.0
wheel's, on CPU) to tritonclient 2.73.0 (grpcio 1.85.3) over HTTP and gRPC, on the `portable`
repository of `tiny_artifacts` (`served.assemble_portable`), with, beside it, two trivial
Python models that sleep 1 s per execute (max_batch_size 1): one with a queue policy
`REJECT` after 200 ms, one with `max_queue_size: 1`. Four requests at once at either gave
their queue's answers. The HTTP and gRPC texts are the same unless both are given; HTTP
statuses are tritonserver's own mapping of its codes (http_server.cc).
"""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from readability_triton import contracts as C
from readability_triton import triton_messages as M
from readability_triton import validation
from readability_triton.client.readability import is_busy, is_transient, refused_text
from readability_triton.errors import ClientError
from readability_triton.stub.admission import Admission

#: The models a front door of the portable repository serves (`Door.served`).
REPOSITORY_MODELS = frozenset(C.ALL_MODELS)


def shed(code, message) -> bool:
    """Whether the front door reads an answer as the entrance's refusal: sent again at once."""
    reading = M.classify(code, message)
    return reading.uncomputed and M.SHED in reading.signs


def no_connection(code, message) -> bool:
    """Whether the front door reads an answer as one that never reached tritonserver."""
    reading = M.classify(code, message)
    return reading.uncomputed and M.NO_CONNECTION in reading.signs


def dead_stubs(code, message, served) -> list[str]:
    """The models of `served` whose stub the front door reads an answer as saying died."""
    return list(M.classify(code, message, served).models)


# -- the recorded answers (status over HTTP, over gRPC, and the message) -------------------
#: infer of a model the repository does not hold ("nosuch").
UNKNOWN_MODEL = (404, "NOT_FOUND", "Request for unknown model: 'nosuch' is not found")
#: infer of the ensemble with an input it does not have ("WRONG", BYTES [1, 1]).
BAD_INPUT = (400, "INVALID_ARGUMENT", "unexpected inference input 'WRONG' for model 'readability'")
#: infer of the ensemble with a text that is not UTF-8 (b"broken \xff\xfe"): the entrance's
#: refusal (`validation`), prefixed by the ensemble.
BAD_TEXT = (400, "INVALID_ARGUMENT", "in ensemble 'readability', text 0 of the request is not valid UTF-8")
#: infer of the ensemble with a text of no words (b"  ...  ").
NO_WORDS = (
    400,
    "INVALID_ARGUMENT",
    "in ensemble 'readability', text 0 of the request holds no words (it is empty, or only spaces, "
    "punctuation or control characters): there is nothing to score",
)
#: the sleeping model with a queue policy: the requests that waited past its 200 ms.
QUEUE_TIMEOUT = (503, "UNAVAILABLE", "Request timeout expired")
#: the sleeping model with `max_queue_size: 1`: the requests that found its queue full.
QUEUE_FULL = (503, "UNAVAILABLE", "[request id: <id_unknown>] Exceeds maximum queue size")
#: the sleeping model unloaded (`TritonServer.unload`, explicit model control), then asked.
NO_VERSIONS = (404, "NOT_FOUND", "Request for unknown model: 'sleepy_full' has no available versions")
#: the ensemble asked after the python-backend stub of `postprocess` was killed (SIGKILL).
DEAD_STUB = (500, "INTERNAL", "in ensemble 'readability', Stub process 'postprocess_0_0' is not healthy.")
#: the ensemble asked while the pipeline's entrance sheds: its config's MAX_QUEUE_SECONDS set
#: to 1e-09 (any queueing at all passes it), requests sent one after another.
SHED_QUEUE = (
    503,
    "UNAVAILABLE",
    "in ensemble 'readability', busy: requests wait 0.0 s in the queue of preprocess (the limit is 1e-09 s, "
    "parameter MAX_QUEUE_SECONDS); retry in a moment",
)
#: the same with MAX_PENDING_REQUESTS 1 under 12 clients of 32 texts each.
SHED_PENDING = (
    503,
    "UNAVAILABLE",
    "in ensemble 'readability', busy: 8 requests are waiting inside the pipeline (the limit is 1, "
    "parameter MAX_PENDING_REQUESTS); retry in a moment",
)
#: gRPC: a call with client_timeout=0.3 s to the sleeping model (grpc's own words). Over
#: HTTP, tritonclient's network_timeout raises TimeoutError("timed out") instead.
DEADLINE_GRPC = ("DEADLINE_EXCEEDED", "Deadline Exceeded")
DEADLINE_HTTP = TimeoutError("timed out")
#: gRPC: the ensemble asked after the server stopped (grpc's words; the port varies). Over
#: HTTP, tritonclient raises ConnectionRefusedError(111, "Connection refused").
REFUSED_GRPC = (
    "UNAVAILABLE",
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:49993: "
    "Failed to connect to remote host: Connection refused",
)
REFUSED_HTTP = ConnectionRefusedError(111, "Connection refused")


def _both(answer):
    """The (code, message) pairs of a recorded answer as the door reads them: the HTTP status
    with the body tritonserver sends, and the gRPC code's name with its details."""
    http, grpc_code, message = answer
    return [(http, '{"error":"' + message.replace('"', '\\"') + '"}'), (f"StatusCode.{grpc_code}", message)]


def _client_errors(answer):
    """The errors tritonclient raises for a recorded answer, over HTTP and gRPC."""
    http, grpc_code, message = answer
    return [
        InferenceServerException(message, status=str(http)),
        InferenceServerException(message, f"StatusCode.{grpc_code}"),
    ]


def _canary(answer) -> str:
    """What the supervisor's canary makes of it (`canary_probe.check` reads its ClientError)."""
    return M.canary_kind(str(ClientError(f"readability at 127.0.0.1:8001: {_client_errors(answer)[1]}")))


def _read(answer, kind: M.Kind, uncomputed: bool = False, models: tuple[str, ...] = ()) -> None:
    for code, message in _both(answer):
        reading = M.classify(code, message, REPOSITORY_MODELS)
        assert (reading.kind, reading.uncomputed, reading.models) == (kind, uncomputed, models), (code, reading)


def test_an_unknown_model_is_the_clients_fault():
    _read(UNKNOWN_MODEL, M.Kind.CLIENT_FAULT)
    # a reader that named the model itself (the client, the canary) means one it expects served
    assert M.classify(404, UNKNOWN_MODEL[2]).kind is M.Kind.SERVER_FAULT
    assert all(is_transient(e) and not is_busy(e) for e in _client_errors(UNKNOWN_MODEL))
    assert _canary(UNKNOWN_MODEL) == "missing"


def test_an_unknown_input_is_the_clients_fault():
    _read(BAD_INPUT, M.Kind.CLIENT_FAULT)
    assert not any(is_transient(e) or is_busy(e) for e in _client_errors(BAD_INPUT))
    assert _canary(BAD_INPUT) == "down"


def test_a_text_the_entrance_refuses_is_the_clients_fault_and_names_the_text():
    _read(BAD_TEXT, M.Kind.CLIENT_FAULT)
    assert validation.size_and_encoding([b"broken \xff\xfe"], 100, where=M.IN_REQUEST) in BAD_TEXT[2]
    for exc in _client_errors(BAD_TEXT):
        assert not is_transient(exc) and not is_busy(exc)
        assert refused_text(ClientError(f"readability at x: {exc}")) == (0, "is not valid UTF-8")


def test_a_text_without_words_is_the_clients_fault_and_names_the_text():
    _read(NO_WORDS, M.Kind.CLIENT_FAULT)
    assert validation.NO_WORDS_AT.format(row=0) in NO_WORDS[2]
    assert M.refused_text(NO_WORDS[2]) == (0, validation.NO_WORDS)
    assert not any(is_transient(e) for e in _client_errors(NO_WORDS))


def test_a_queue_timeout_is_busy_and_may_have_been_computed_in_part():
    _read(QUEUE_TIMEOUT, M.Kind.BUSY)  # not uncomputed: the door does not send it again at once
    assert all(is_busy(e) for e in _client_errors(QUEUE_TIMEOUT))
    assert _canary(QUEUE_TIMEOUT) == "busy"


def test_a_full_queue_is_busy():
    _read(QUEUE_FULL, M.Kind.BUSY)
    assert all(is_busy(e) for e in _client_errors(QUEUE_FULL))
    assert _canary(QUEUE_FULL) == "busy"


def test_a_model_with_no_available_versions_is_the_servers_fault_for_a_served_model():
    _read(NO_VERSIONS, M.Kind.CLIENT_FAULT)  # 'sleepy_full' is no model of this repository
    served = M.classify(404, NO_VERSIONS[2].replace("sleepy_full", C.ENSEMBLE), REPOSITORY_MODELS)
    assert served.kind is M.Kind.SERVER_FAULT and M.MISSING in served.signs
    assert all(is_transient(e) and not is_busy(e) for e in _client_errors(NO_VERSIONS))  # loading again
    assert _canary(NO_VERSIONS) == "missing"


def test_a_dead_stub_is_named_by_its_instance():
    _read(DEAD_STUB, M.Kind.DEAD_STUB, models=(C.POSTPROCESS,))
    assert M.classify(500, DEAD_STUB[2], {C.BERT}).kind is M.Kind.SERVER_FAULT  # not a model of this repository
    # the same words under a client's code are the client's (tritonserver echoes names)
    assert M.classify(400, DEAD_STUB[2], REPOSITORY_MODELS).kind is M.Kind.CLIENT_FAULT
    assert M.classify("StatusCode.NOT_FOUND", DEAD_STUB[2], REPOSITORY_MODELS).models == ()
    assert all(is_transient(e) and not is_busy(e) for e in _client_errors(DEAD_STUB))
    assert _canary(DEAD_STUB) == "dead"


def test_the_entrances_refusal_for_queue_time_is_busy_and_uncomputed():
    _read(SHED_QUEUE, M.Kind.BUSY, uncomputed=True)
    assert shed(503, SHED_QUEUE[2]) and shed("StatusCode.UNAVAILABLE", SHED_QUEUE[2])
    assert all(is_busy(e) for e in _client_errors(SHED_QUEUE))
    assert _canary(SHED_QUEUE) == "busy"
    # the stub's own words (`stub.admission`), from the same definitions the door reads
    gate = Admission(0, 1e-9, [C.PREPROCESS])
    gate._judge({C.PREPROCESS: {"queue_us": 0.0, "success": 0.0, "pending": 0.0}}, 1.0)
    said = gate._judge({C.PREPROCESS: {"queue_us": 10.0, "success": 1.0, "pending": 0.0}}, 2.0)
    assert said and "in ensemble 'readability', " + said == SHED_QUEUE[2]


def test_the_entrances_refusal_for_waiting_requests_is_busy_and_uncomputed():
    _read(SHED_PENDING, M.Kind.BUSY, uncomputed=True)
    assert all(is_busy(e) for e in _client_errors(SHED_PENDING))
    assert _canary(SHED_PENDING) == "busy"
    said = Admission(1, 0.0, [C.BERT])._judge({C.BERT: {"pending": 8.0}}, 1.0)
    assert said and "in ensemble 'readability', " + said == SHED_PENDING[2]


def test_a_deadline_that_passed_is_busy_but_no_refusal():
    code, message = DEADLINE_GRPC
    reading = M.classify(f"StatusCode.{code}", message, REPOSITORY_MODELS)
    assert reading.kind is M.Kind.BUSY and not reading.uncomputed and not reading.busy
    exc = InferenceServerException(message, f"StatusCode.{code}")
    assert not is_busy(exc) and not is_transient(exc)  # the client's own deadline: not sent again
    assert _canary((504, code, message)) == "busy"  # a canary that waited behind real work
    assert not is_busy(DEADLINE_HTTP) and is_transient(DEADLINE_HTTP)  # an OSError, as any socket's


def test_a_refused_connection_is_busy_and_uncomputed():
    code, message = REFUSED_GRPC
    reading = M.classify(f"StatusCode.{code}", message, REPOSITORY_MODELS)
    assert (reading.kind, reading.uncomputed) == (M.Kind.BUSY, True) and no_connection(code, message)
    exc = InferenceServerException(message, f"StatusCode.{code}")
    assert is_transient(exc) and not is_busy(exc)
    assert _canary((503, code, message)) == "down"
    assert is_transient(REFUSED_HTTP) and not is_busy(REFUSED_HTTP)
    # the front door's own 503 over HTTP when tritonserver's port refused the connection
    door = f'{{"error": "{M.REFUSED_CONNECTION} (ClientConnectorError); retry in a moment"}}'
    assert M.classify(503, door).uncomputed


@pytest.mark.integration
def test_a_served_tritonserver_still_says_what_is_recorded(portable_server):
    """The recorded answers that cost no set-up, asked of the suite's shared server again:
    an unknown model, an unknown input, a text that is not UTF-8, over HTTP and gRPC."""
    from readability_triton.client.readability import text_input, triton_client

    for protocol, url in (("http", portable_server.http_url), ("grpc", portable_server.grpc_url)):
        module, client = triton_client(url, protocol)
        wrong = module.InferInput("WRONG", [1, 1], "BYTES")
        wrong.set_data_from_numpy(np.array([[b"x"]], dtype=object))
        asked = {  # the recorded answer: the model asked, the inputs sent
            UNKNOWN_MODEL: ("nosuch", [text_input(module, ["A text."])]),
            BAD_INPUT: (C.ENSEMBLE, [wrong]),
            BAD_TEXT: (C.ENSEMBLE, [text_input(module, [b"broken \xff\xfe"])]),
        }
        try:
            for (http, grpc_code, message), (model, inputs) in asked.items():
                with pytest.raises(InferenceServerException) as answer:
                    client.infer(model, inputs)
                status = str(http) if protocol == "http" else f"StatusCode.{grpc_code}"
                assert (answer.value.status(), answer.value.message()) == (status, message), protocol
        finally:
            client.close()
