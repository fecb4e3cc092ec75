"""What tritonserver 2.51's answers mean to the front door and the supervisor: the one
module that reads Triton's error messages.

A message can carry the client's own words: tritonserver echoes a model name it does not
serve ("Request for unknown model: 'is not healthy' ..."), an input name, a parameter. So
nothing is decided on text alone:

- the status code comes first: a dead stub is an internal error (HTTP 500, gRPC INTERNAL:
  python_backend raises "Stub process '<instance>' is not healthy." as
  TRITONSERVER_ERROR_INTERNAL), a refusal by the pipeline's entrance is UNAVAILABLE (HTTP
  503, gRPC UNAVAILABLE, `stub.admission`); a client's error is a 4xx / INVALID_ARGUMENT /
  NOT_FOUND and never means either;
- then only the message's own form: the instance a dead stub names must be an instance of a
  model this repository serves (`<model>_<i>_<j>`);
- and the door's reading is a suspicion, not a verdict: it holds its queue and asks the
  supervisor, which repairs on its own evidence (the processes, a canary) or releases the
  hold at once (`server.health.Supervisor.confirm`).
"""

from __future__ import annotations

import re
from typing import Collection

#: python_backend r24.10 (pb_stub / python_be.cc): a request reached a stub that died or
#: stopped answering its health check.
_DEAD_STUB = re.compile(r"Stub process '([A-Za-z0-9_.-]+?)_\d+_\d+' is not healthy")
#: In every refusal by the pipeline's entrance (`stub.admission`, in the first step): the
#: request was refused before any step computed it, so sending it again is safe.
SHED_SIGNS = ("parameter MAX_PENDING_REQUESTS", "parameter MAX_QUEUE_SECONDS")
#: What an answer says when tritonserver's port refused the connection (it is restarting):
#: gRPC's words, and the front door's own 503 for HTTP (`frontdoor.http_front`).
NO_CONNECTION_SIGNS = ("failed to connect to all addresses", "tritonserver refused the connection")
#: Answers that mean "busy, not broken": a queue timeout, the first step's load shedding, a
#: deadline that passed while the canary waited behind real work.
BUSY_SIGNS = ("timeout expired", "busy:", "deadline exceeded", "timed out", "timeout")
#: Answers that mean a model of the repository is not served.
MISSING_SIGNS = ("has no available versions", "is not found", "unknown model", "is not ready")

#: The status codes of the kinds above, as HTTP statuses and gRPC code names.
INTERNAL = (500, "INTERNAL")
UNAVAILABLE = (503, "UNAVAILABLE")


def _text(message: str | bytes | None) -> str:
    if isinstance(message, bytes):
        return message.decode("utf-8", "replace")
    return message or ""


def _code_is(code: int | str | None, kind: tuple[int, str]) -> bool:
    """Whether an HTTP status (int) or a gRPC code (its name, or a grpc.StatusCode) is `kind`."""
    if isinstance(code, int):
        return code == kind[0]
    name = getattr(code, "name", code)
    return isinstance(name, str) and name.rpartition(".")[2] == kind[1]


def dead_stub_models(message: str | bytes | None) -> list[str]:
    """The models a Triton error message reports with an unhealthy stub (whatever its code:
    the supervisor's canary reads its own answers with it)."""
    return sorted(set(_DEAD_STUB.findall(_text(message))))


def dead_stub(code: int | str | None, message: str | bytes | None, served: Collection[str]) -> list[str]:
    """The models of `served` whose stub an answer says is dead: only an internal error
    (HTTP 500, gRPC INTERNAL) naming an instance of a served model counts; [] otherwise."""
    if not _code_is(code, INTERNAL):
        return []
    return [model for model in dead_stub_models(message) if model in served]


def is_shed(code: int | str | None, message: str | bytes | None) -> bool:
    """Whether an answer is a refusal by the pipeline's entrance (UNAVAILABLE, with one of
    SHED_SIGNS): nothing computed it."""
    text = _text(message)
    return _code_is(code, UNAVAILABLE) and any(sign in text for sign in SHED_SIGNS)


def is_no_connection(code: int | str | None, message: str | bytes | None) -> bool:
    """Whether an answer says the request never reached tritonserver (UNAVAILABLE, with
    one of NO_CONNECTION_SIGNS)."""
    text = _text(message)
    return _code_is(code, UNAVAILABLE) and any(sign in text for sign in NO_CONNECTION_SIGNS)


def classify(message: str) -> str:
    """The kind of a failed canary's error message (`server.health.Probe`): "dead", "busy",
    "missing" or "down". The canary's request is the supervisor's own (a served model, its
    own text), so its answers cannot carry a client's words."""
    text = message.lower()
    if dead_stub_models(message):
        return "dead"
    if any(sign in text for sign in BUSY_SIGNS):
        return "busy"
    if any(sign in text for sign in MISSING_SIGNS):
        return "missing"
    return "down"
