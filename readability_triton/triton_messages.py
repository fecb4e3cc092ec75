"""What tritonserver 2.51's answers mean: the one module that reads Triton's error messages,
for the front door, the supervisor, the client and the stub alike, and that holds the words
the project's own refusals share with them (the pipeline's entrance, `stub.admission`; a
step's refusal of one text, `validation`; the front door's "busy").

`classify(code, message, served)` reads a failed answer as one of four kinds (`Kind`):

- **busy**: retry later. Nothing computed it (the pipeline's entrance shed it; tritonserver's
  port refused the connection while it restarts: `Reading.uncomputed`), or it waited out a
  queue (Triton's "Request timeout expired", "Exceeds maximum queue size", the front door's
  own "busy: ...") or a deadline;
- **dead stub**: a python-backend stub of a model this repository serves has died (Triton
  2.51 never restarts it: the supervisor does);
- **client fault**: the request itself is at fault (a model or input it names, a text a step
  refuses); sending it again changes nothing;
- **server fault**: anything else the server did (a model of the repository not served, an
  internal error).

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

Words alone decide only where there is no status: the supervisor's canary (`canary_kind`),
whose requests are its own, so no client's words can be in them, and a client's error that
carries none (a refused connection, a timeout of its own).

tests/test_triton_messages.py holds the messages a real tritonserver 2.51 answers, one test
each, and asks a served one for some of them again.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Collection

from . import contracts as C


class Kind(enum.Enum):
    """What a failed answer means to whoever sent the request (the module doc)."""

    BUSY = "busy"
    DEAD_STUB = "dead stub"
    CLIENT_FAULT = "client fault"
    SERVER_FAULT = "server fault"


# -- the words the project's own refusals carry ------------------------------------------
#: How every refusal for load begins: the front door's (`frontdoor.gate`, `frontdoor.door`)
#: and the pipeline entrance's (`stub.admission`).
BUSY = "busy:"
#: In every refusal by the pipeline's entrance (`stub.admission`, in the first step): the
#: request was refused before any step computed it, so sending it again is safe.
SHED_PENDING = f"parameter {C.MAX_PENDING_REQUESTS}"
SHED_QUEUE = f"parameter {C.MAX_QUEUE_SECONDS}"
SHED_SIGNS = (SHED_PENDING, SHED_QUEUE)
#: The front door's 503 when tritonserver's port refused the connection (`frontdoor.http_front`).
REFUSED_CONNECTION = "tritonserver refused the connection"
#: The front door's answer for a model this repository does not serve, worded as
#: tritonserver's own (`not_served`).
NOT_HERE_SIGNS = ("is not served here",)
#: Where a step says which text of a request it refuses (`validation`, `stub.requests`):
#: "text N of the request <why>".
IN_REQUEST = " of the request"

# -- the words of answers, by family (in lower case, but where "case as written") -------
#: python_backend r24.10 (stub_launcher.cc, in answer to every request sent to it): a stub
#: that died or stopped answering its health check. Case as written.
_DEAD_STUB = re.compile(r"Stub process '([A-Za-z0-9_.-]+?)_\d+_\d+' is not healthy")
DEAD_SIGNS = ("not healthy",)
#: gRPC's words, and the front door's own 503 for HTTP, when tritonserver's port refused the
#: connection (it is restarting). Case as written.
NO_CONNECTION_SIGNS = ("failed to connect to all addresses", REFUSED_CONNECTION)
#: A queue that is full or timed out: the front door's and the entrance's "busy: ...", and
#: core r24.10's UNAVAILABLE "Request timeout expired" (dynamic_batch_scheduler.cc) and
#: "Exceeds maximum queue size" (scheduler_utils.cc).
FULL_SIGNS = (BUSY, "request timeout expired", "exceeds maximum queue size")
#: A deadline that passed: gRPC's "Deadline Exceeded", a socket's "timed out", a canary
#: that waited behind real work.
LATE_SIGNS = ("deadline exceeded", "timed out", "timeout")
#: A model not served: core r24.10 (model_lifecycle.cc, model_repository_manager.cc)
#: "Request for unknown model: '<m>' is not found" / "... has no available versions".
MISSING_SIGNS = ("has no available versions", "is not found", "unknown model", "is not ready")
#: The model such an answer names (greedy: a name the client chose may hold quotes).
_UNKNOWN_MODEL = re.compile(r"Request for unknown model: '(.*)' (?:is not found|has no available versions|version )")
#: A server that cannot answer for a moment: core's "Server is stopping, ...", gRPC's
#: UNAVAILABLE, a connection refused or cut.
UNREACHABLE_SIGNS = (
    "server is stopping",
    "unavailable",
    "connection refused",
    "connection reset",
    "failed to connect",
    "broken pipe",
)
#: tritonclient's words for a request refused as invalid ("[StatusCode.INVALID_ARGUMENT]").
INVALID_SIGNS = ("invalid_arg",)

#: The families a message's words may hold (`Reading.signs`).
DEAD, SHED, NO_CONNECTION, FULL, LATE, MISSING, NOT_HERE, UNREACHABLE, INVALID = (
    "dead",
    "shed",
    "no connection",
    "full",
    "late",
    "missing",
    "not served",
    "unreachable",
    "invalid",
)
_CASED = {SHED: SHED_SIGNS, NO_CONNECTION: NO_CONNECTION_SIGNS}
_LOWER = {
    DEAD: DEAD_SIGNS,
    FULL: FULL_SIGNS,
    LATE: LATE_SIGNS,
    MISSING: MISSING_SIGNS,
    NOT_HERE: NOT_HERE_SIGNS,
    UNREACHABLE: UNREACHABLE_SIGNS,
    INVALID: INVALID_SIGNS,
}

# -- status codes ----------------------------------------------------------------------
#: HTTP statuses as gRPC code names: tritonserver's own mapping (http_server.cc,
#: HttpCodeFromError: INVALID_ARG, UNKNOWN, ALREADY_EXISTS and CANCELLED are all 400) and the
#: front door's (413 too large, 499 the client left). Another 4xx is the client's, another
#: 5xx unknown.
HTTP_CODES = {
    200: "OK",
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
#: The codes of a request at fault.
CLIENT_CODES = frozenset(
    {
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
        "FAILED_PRECONDITION",
        "OUT_OF_RANGE",
        "RESOURCE_EXHAUSTED",
        "CANCELLED",
        "UNIMPLEMENTED",
    }
)


def status_name(code: int | str | object | None) -> str | None:
    """The gRPC code name of an answer's status: an HTTP status (an int, or its digits as
    tritonclient's HTTP errors give it), a gRPC code (a grpc.StatusCode, "StatusCode.X" as
    tritonclient's gRPC errors give it, or "X"); None where there is none."""
    if isinstance(code, str) and code.strip().isdigit():
        code = int(code)
    if isinstance(code, int):
        if code in HTTP_CODES:
            return HTTP_CODES[code]
        return "OK" if 200 <= code < 300 else "INVALID_ARGUMENT" if 400 <= code < 500 else "UNKNOWN"
    name = getattr(code, "name", code)
    if not isinstance(name, str) or not name.strip():
        return None
    return name.strip().rpartition(".")[2].upper()


@dataclass(frozen=True)
class Reading:
    """What a failed answer means (`classify`)."""

    kind: Kind
    #: the families of words the message holds (DEAD, SHED, NO_CONNECTION, FULL, LATE,
    #: MISSING, NOT_HERE, UNREACHABLE, INVALID): words, not a verdict (`kind` is)
    signs: frozenset[str]
    #: refused before anything computed it (the entrance shed it, or tritonserver's port
    #: refused the connection): safe to send again at once
    uncomputed: bool = False
    #: the models whose stub died (kind DEAD_STUB)
    models: tuple[str, ...] = ()

    @property
    def busy(self) -> bool:
        """Refused because the server is full (the front door's or the entrance's "busy:", a
        queue timeout, a full queue): send again after a pause. A deadline of the caller's
        own that passed is busy in kind, but not a refusal."""
        return self.kind is Kind.BUSY and bool(self.signs & {SHED, FULL})

    @property
    def transient(self) -> bool:
        """May succeed when sent again a little later: a dead stub being replaced, a model
        being loaded again, a server stopping, restarting or unreachable; never the client's
        fault."""
        return self.kind is not Kind.CLIENT_FAULT and bool(self.signs & {DEAD, NO_CONNECTION, MISSING, UNREACHABLE})


def _text(message: str | bytes | bytearray | None) -> str:
    if isinstance(message, (bytes, bytearray)):
        return message.decode("utf-8", "replace")
    return message or ""


def _signs(text: str) -> frozenset[str]:
    lower = text.lower()
    found = {family for family, words in _CASED.items() if any(word in text for word in words)}
    found |= {family for family, words in _LOWER.items() if any(word in lower for word in words)}
    return frozenset(found)


def classify(
    code: int | str | object | None, message: str | bytes | bytearray | None, served: Collection[str] | None = None
) -> Reading:
    """What a failed answer means: `code` its status (HTTP or gRPC, `status_name`; None: the
    words alone decide, for a reader of its own requests' answers), `message` its text (an
    HTTP body as it came), `served` the models a dead stub must belong to (None: any).

    The status decides the kind; the words only tell apart what one status covers: INTERNAL
    is a dead stub where it names an instance of a served model, else a server fault;
    UNAVAILABLE and DEADLINE_EXCEEDED are busy; NOT_FOUND is a server fault where a model
    meant to be served is not (unloaded, or loading again: one of `served`, or with `served`
    None the reader's own), else the client's, as the other client codes are."""
    text = _text(message)
    signs = _signs(text)
    status = status_name(code)
    models = tuple(m for m in dead_stub_models(text) if served is None or m in served)
    uncomputed = status == "UNAVAILABLE" and bool(signs & {SHED, NO_CONNECTION})
    if status is None:
        if models:
            kind = Kind.DEAD_STUB
        elif signs & {INVALID, NOT_HERE}:
            kind = Kind.CLIENT_FAULT
        elif signs & {SHED, FULL, LATE, NO_CONNECTION, UNREACHABLE}:
            kind = Kind.BUSY
        else:
            kind = Kind.SERVER_FAULT
    elif status == "INTERNAL":
        kind = Kind.DEAD_STUB if models else Kind.SERVER_FAULT
    elif status in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
        kind = Kind.BUSY
    elif status == "NOT_FOUND" and MISSING in signs and NOT_HERE not in signs and _serves(text, served):
        kind = Kind.SERVER_FAULT
    elif status in CLIENT_CODES:
        kind = Kind.CLIENT_FAULT
    else:
        kind = Kind.SERVER_FAULT
    return Reading(kind, signs, uncomputed, models if kind is Kind.DEAD_STUB else ())


def _serves(text: str, served: Collection[str] | None) -> bool:
    """Whether the model a NOT_FOUND answer names is one of `served` (None: the reader's
    own request named it, so it is meant to be served)."""
    if served is None:
        return True
    named = _UNKNOWN_MODEL.search(text)
    return named is not None and named[1] in served


def dead_stub_models(message: str | bytes | bytearray | None) -> list[str]:
    """The models a Triton error message reports with an unhealthy stub, whatever its code
    (the words alone; `classify` weighs them)."""
    return sorted(set(_DEAD_STUB.findall(_text(message))))


def canary_kind(message: str) -> str:
    """The kind of a failed canary's error message (`server.canary_probe.Probe`): "dead",
    "busy", "missing" or "down". The canary's request is the supervisor's own (a served
    model, its own text), so its words alone decide: no client's words can be in them."""
    reading = classify(None, message)
    if reading.kind is Kind.DEAD_STUB:
        return "dead"
    if reading.signs & {SHED, FULL, LATE}:
        return "busy"
    if MISSING in reading.signs:
        return "missing"
    return "down"


def not_served(model: str) -> str:
    """The front door's answer for a model this repository does not serve (HTTP 404, gRPC
    NOT_FOUND), worded as tritonserver's own."""
    return f"Request for unknown model: '{model}' {NOT_HERE_SIGNS[0]}"


_TEXT_REFUSED = re.compile(r"text (\d+)" + re.escape(IN_REQUEST) + r" (.+)", re.S)


def refused_text(message: str) -> tuple[int, str] | None:
    """(the text's place in its request, why) where `message` is a step's refusal of one
    text of a request ("text N of the request <why>"), else None."""
    match = _TEXT_REFUSED.search(message)
    return None if match is None else (int(match[1]), match[2].strip())
