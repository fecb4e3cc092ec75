"""How much work a KServe v2 inference request carries, read off the bytes that arrived
(never off what the request declares), and the client errors the front door answers itself.

**Work.** A text costs the pipeline in proportion to its length up to what BERT reads (256
tokens, about `FULL_TEXT_BYTES` of English), and past that featurize and the formulas still
read all of it. So a text of `n` bytes counts `Weigher.work_of(n)`: at least `MIN_WORK`
(tokenizing, featurizing and the hops cost something for any text), `n / FULL_TEXT_BYTES` up
to 1, and `byte_work` more for each byte past `FULL_TEXT_BYTES` (up to the steps' own limit
on a text, past which a text is refused at once). `byte_work` is measured: `serve`'s
warm-up times long texts beside full ones (`server.warmup`); on the MiniLM set a 100 KB
text costs about 2-4 full texts, on the tiny test set about 150.

The texts are counted from the data that arrived: a shape that declares 2,147,483,647 texts
beside one text is the client's error (400), not 2^31 texts of work that would make the
door refuse everyone else as busy while it is inside. A request of more texts than any model
takes (`MAX_TEXTS`) is refused the same way.

**Client errors.** tritonserver 2.51 answers HTTP 500 (a server error) to requests that are
plainly the client's: a body that is not a JSON object, negative or fractional dims, a number
out of range (`1e309`), a lone surrogate, BYTES data that is not strings, a negative
`priority` or `timeout`, an `Inference-Header-Content-Length` that cuts the JSON. The door
answers those 400 (`BadRequest`), with what is wrong, before they reach it; a body nested
too deeply for Python's parser is refused the same way.

- gRPC: `inference.ModelInferRequest` (field 4 `parameters`, field 5 `inputs`:
  `InferInputTensor`, whose field 2 is `datatype`, 3 `shape`, 5 `contents`, with
  `bytes_contents` as field 8; field 7 `raw_input_contents`: per input, for BYTES 4-byte
  little-endian lengths each followed by the bytes), read by walking protobuf's wire format
  with views, never copying the tensors, and with no generated proto module.
- HTTP: the JSON inference header (the whole body, or its first
  `Inference-Header-Content-Length` bytes, followed by the binary tensors), after the front
  has inflated a compressed body.

A request this module cannot weigh but that is not plainly wrong (a gRPC request with no
inputs, another datatype than BYTES) counts by its batch size and is sent on: tritonserver
then says what is wrong. Numbers are never walked one by one (a 9 MB body of 3 million
numbers once held the loop for a second): only texts are. A JSON object with a key twice is
the client's error: Python keeps the last, tritonserver the first, and a body that means two
things to the two readers (64 long texts weighed as one short one) is refused.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, replace

from .. import contracts as C
from .protobuf import Malformed, fields, varint
from .surrogates import lone_surrogate

#: Default largest request body or gRPC message: 64 texts of the largest text the steps
#: accept (100,000 bytes), escaped as JSON, with room to spare.
DEFAULT_MAX_REQUEST_BYTES = 16 << 20
#: A text this long (bytes) fills BERT's 256 tokens: one text of work.
FULL_TEXT_BYTES = 1200
#: The least a text counts.
MIN_WORK = 0.1
#: The work of each byte past FULL_TEXT_BYTES until the warm-up has measured it: a 100 KB
#: text counts 4 full texts (the MiniLM set's cost; the tiny set's is far higher, measured).
DEFAULT_BYTE_WORK = 3.0 / (C.DEFAULT_MAX_TEXT_BYTES - FULL_TEXT_BYTES)
#: The most texts one request may carry: the largest batch any model of the repository takes.
MAX_TEXTS = max(C.MAX_BATCH_SIZE.values())
#: The most leaves of a JSON value the door visits looking for texts (numbers are not texts).
MAX_LEAVES = 1 << 16
#: Parameters whose value tritonserver reads as an unsigned number.
UNSIGNED_PARAMETERS = ("priority", "timeout")

_BYTES_PER_ELEMENT = {
    "BOOL": 1,
    "UINT8": 1,
    "INT8": 1,
    "UINT16": 2,
    "INT16": 2,
    "FP16": 2,
    "BF16": 2,
    "UINT32": 4,
    "INT32": 4,
    "FP32": 4,
    "UINT64": 8,
    "INT64": 8,
    "FP64": 8,
}

_MODEL_NAME, _PARAMETERS, _INPUTS, _RAW = 1, 4, 5, 7  # ModelInferRequest
_DATATYPE, _SHAPE, _CONTENTS = 2, 3, 5  # InferInputTensor
_BYTES_CONTENTS = 8  # InferTensorContents
_KEY, _VALUE = 1, 2  # a map entry
_INT64_PARAM = 2  # InferParameter


class BadRequest(ValueError):
    """A request that is plainly the client's error: answered 400 / INVALID_ARGUMENT by the
    door, with this message, and never sent on."""


@dataclass(frozen=True)
class Weighed:
    """A request's texts and its work (texts weighed by length)."""

    texts: int
    work: float
    model: str = ""  # the model it names (gRPC; HTTP names it in the path)


@dataclass
class Weigher:
    """Weighs requests (see the module doc). `byte_work`: the work of a byte past
    FULL_TEXT_BYTES, measured by the warm-up; `max_text_bytes`: the steps' limit on a text."""

    byte_work: float = DEFAULT_BYTE_WORK
    max_text_bytes: int = C.DEFAULT_MAX_TEXT_BYTES
    max_texts: int = MAX_TEXTS

    def work_of(self, length: int) -> float:
        """The work of one text of `length` bytes, in full texts."""
        base = max(MIN_WORK, min(1.0, length / FULL_TEXT_BYTES))
        return base + max(0, min(length, self.max_text_bytes) - FULL_TEXT_BYTES) * self.byte_work

    def _weighed(self, batch: int, lengths: list[int] | None) -> Weighed:
        if (batch if lengths is None else len(lengths)) > self.max_texts:
            raise BadRequest(
                f"the request carries {batch if lengths is None else len(lengths)} texts; no model here takes more "
                f"than {self.max_texts} at once: send them in several requests"
            )
        if lengths is None:
            return Weighed(max(1, batch), float(max(1, batch)))
        return Weighed(max(1, len(lengths)), max(MIN_WORK, sum(self.work_of(n) for n in lengths)))

    def _counted(self, batch: int, lengths: list[int], elements: int, index: int, shape: list[int]) -> Weighed:
        """The texts that arrived, checked against the shape that declared them (BadRequest:
        more than any model takes, or not as many as declared)."""
        if len(lengths) <= self.max_texts and len(lengths) != elements:
            raise BadRequest(
                f"input {index}'s shape {list(shape)} declares {elements} elements, but its data holds {len(lengths)}"
            )
        return self._weighed(batch, lengths)

    # -- gRPC ------------------------------------------------------------------------
    def grpc(self, message: bytes) -> Weighed:
        """The texts and work of a serialized ModelInferRequest (BadRequest: see the module doc)."""
        try:
            inputs, raws, model = [], [], ""
            for number, kind, value in fields(memoryview(message)):
                if number == _MODEL_NAME and kind == 2:
                    model = bytes(value).decode("utf-8", "replace")
                elif number == _INPUTS and kind == 2:
                    inputs.append(value)
                elif number == _RAW and kind == 2:
                    raws.append(value)
                elif number == _PARAMETERS and kind == 2:
                    _grpc_parameter(value)
            if not inputs:
                return Weighed(1, 1.0, model)
            tensors = [_grpc_tensor(tensor) for tensor in inputs]
        except Malformed as err:
            raise BadRequest(f"the request is not a valid ModelInferRequest message ({err})") from None
        return replace(self._grpc_weighed(tensors, raws), model=model)

    def _grpc_weighed(self, tensors: list[tuple[list[int], str, list[int] | None]], raws: list) -> Weighed:
        index = next((i for i, t in enumerate(tensors) if t[1] == "BYTES"), 0)
        shape, datatype, inline = tensors[index]
        lengths: list[int] | None
        elements = math.prod(shape)
        batch = shape[0] if shape else 1
        if datatype != "BYTES":
            return self._weighed(batch, None)
        if inline is not None:
            lengths = inline
        elif raws and len(raws) == len(tensors):
            lengths = _serialized_lengths(raws[index])
            if lengths is None:
                raise BadRequest(f"input {index}'s raw contents are not a serialized BYTES tensor")
        else:
            return self._weighed(batch, None)  # tritonserver says what is missing
        return self._counted(batch, lengths, elements, index, shape)

    # -- HTTP ------------------------------------------------------------------------
    def http(self, body: bytes, header_length: str | None = None) -> Weighed:
        """The texts and work of a KServe v2 inference request over HTTP: `body` (inflated)
        and its `Inference-Header-Content-Length` header, if any (BadRequest: see the
        module doc)."""
        length = None
        if header_length is not None:
            if (
                not (header_length.isascii() and header_length.isdigit())
                or len(header_length) > 12
                or int(header_length) > len(body)
            ):
                raise BadRequest(
                    f"Inference-Header-Content-Length is {header_length[:20]!r}: it must be the size in bytes of the "
                    f"JSON header at the start of the body ({len(body)} bytes)"
                )
            length = int(header_length)
        header = body[:length] if length is not None else body
        request = _json_object(header, "the request" if length is None else "the JSON header")
        _http_parameters(request.get("parameters"), "the request")
        inputs = request.get("inputs")
        if not isinstance(inputs, list) or not inputs or not all(isinstance(t, dict) for t in inputs):
            raise BadRequest("the request's 'inputs' must be a non-empty list of tensors")
        binary = memoryview(body)[length:] if length is not None else memoryview(b"")
        offset, chosen, first = 0, None, None
        for i, tensor in enumerate(inputs):
            shape = _json_shape(tensor.get("shape"), i)
            datatype = tensor.get("datatype")
            parameters = tensor.get("parameters")
            _http_parameters(parameters, f"input {i}")
            size = (parameters or {}).get("binary_data_size")
            blob = None
            if size is not None:
                if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(binary):
                    raise BadRequest(f"input {i}'s binary_data_size does not fit the binary data that follows")
                blob = binary[offset : offset + size]
                offset += size
            if first is None:
                first = (i, shape, datatype, tensor, blob)
            if chosen is None and datatype == "BYTES":
                chosen = (i, shape, datatype, tensor, blob)
        picked = chosen or first
        assert picked is not None
        i, shape, datatype, tensor, blob = picked
        lengths: list[int] | None
        elements = math.prod(shape)
        batch = shape[0] if shape else 1
        if "data" in tensor and datatype != "BYTES":
            return self._weighed(batch, None)  # numbers: by the batch (tritonserver checks their count)
        if "data" in tensor:
            lengths = _json_strings(tensor["data"], min(elements, self.max_texts) + 1, i)
        elif blob is not None and datatype == "BYTES":
            lengths = _serialized_lengths(blob)
            if lengths is None:
                raise BadRequest(f"input {i}'s binary data is not a serialized BYTES tensor")
        elif blob is not None and datatype in _BYTES_PER_ELEMENT:
            if len(blob) != elements * _BYTES_PER_ELEMENT[datatype]:
                raise BadRequest(f"input {i}'s shape {shape} does not match its {len(blob)} bytes of {datatype}")
            return self._weighed(batch, None)
        else:
            return self._weighed(batch, None)  # tritonserver says what is missing
        return self._counted(batch, lengths, elements, i, shape)

    def generate(self, body: bytes) -> Weighed:
        """The texts and work of a `generate` or `generate_stream` request: a JSON object
        whose keys that name an input are that input (a string, or a list of them) and whose
        other keys, and those of its "parameters" object, are parameters or inputs by the
        same rule (tritonserver 2.51, `ConvertGenerateRequest`). Every string counts as a text
        of the key it is under (numbers count nothing); the request's texts are its largest
        key's."""
        request = _json_object(body, "the request")
        texts, lengths = 1, []
        for where in (request, request.get("parameters")):
            if not isinstance(where, dict):
                continue
            for key, value in where.items():
                if key in ("id", "parameters") or not isinstance(value, (str, list)):
                    continue
                found = _json_strings(value, self.max_texts + 1)
                if len(found) > self.max_texts:
                    raise BadRequest(
                        f"'{key}' carries more than {self.max_texts} texts; no model here takes more at once: "
                        "send them in several requests"
                    )
                texts = max(texts, len(found))
                lengths.extend(found)
        return Weighed(texts, max(MIN_WORK, sum(self.work_of(n) for n in lengths)))


# -- protobuf ----------------------------------------------------------------------------


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _grpc_tensor(tensor: memoryview) -> tuple[list[int], str, list[int] | None]:
    """(shape, datatype, the lengths of its inline bytes_contents or None)."""
    shape: list[int] = []
    datatype, inline = "", None
    for number, kind, value in fields(tensor):
        if number == _SHAPE and kind == 0:
            shape.append(_signed(value))
        elif number == _SHAPE and kind == 2:
            pos = 0
            while pos < len(value):
                dim, pos = varint(value, pos)
                shape.append(_signed(dim))
        elif number == _DATATYPE and kind == 2:
            datatype = bytes(value).decode("utf-8", "replace")
        elif number == _CONTENTS and kind == 2:
            found = [len(v) for n, k, v in fields(value) if n == _BYTES_CONTENTS and k == 2]
            inline = found if found else inline
    if any(dim < 0 for dim in shape):
        raise BadRequest(f"a tensor's shape {shape} has a negative dimension")
    if shape and shape[0] > MAX_TEXTS:
        raise BadRequest(
            f"the request carries {shape[0]} texts; no model here takes more than {MAX_TEXTS} at once: "
            "send them in several requests"
        )
    return shape, datatype, inline


def _grpc_parameter(entry: memoryview) -> None:
    """A negative priority or timeout (an int64 parameter) is the client's error."""
    key, value = "", None
    for number, kind, field_value in fields(entry):
        if number == _KEY and kind == 2:
            key = bytes(field_value).decode("utf-8", "replace")
        elif number == _VALUE and kind == 2:
            value = field_value
    if key not in UNSIGNED_PARAMETERS or value is None:
        return
    for number, kind, field_value in fields(value):
        if number == _INT64_PARAM and kind == 0 and _signed(field_value) < 0:
            raise BadRequest(f"the parameter {key!r} is {_signed(field_value)}; it must be 0 or more")


def _serialized_lengths(blob: memoryview, limit: int = MAX_TEXTS) -> list[int] | None:
    """The lengths of the elements of a serialized BYTES tensor (each a 4-byte
    little-endian length, then the bytes), at most `limit` + 1 of them; None where it does
    not parse."""
    lengths: list[int] = []
    pos = 0
    while pos < len(blob) and len(lengths) <= limit:
        if pos + 4 > len(blob):
            return None
        (size,) = struct.unpack_from("<I", blob, pos)
        pos += 4 + size
        if pos > len(blob):
            return None
        lengths.append(size)
    return lengths


# -- JSON --------------------------------------------------------------------------------


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object, refused (BadRequest) where it has a key twice: Python's json keeps the
    last, tritonserver's rapidjson the first."""
    found: dict = {}
    for key, value in pairs:
        if key in found:
            raise BadRequest(f"a JSON object has the key {key[:40]!r} twice")
        found[key] = value
    return found


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadRequest(f"the number {text[:40]} is out of range")
    return value


def _constant(name: str) -> float:
    raise BadRequest(f"{name} is not a JSON number")


#: The request decoder (`json.loads` with these arguments builds one for every call).
_DECODER = json.JSONDecoder(parse_float=_finite, parse_constant=_constant, object_pairs_hook=unique_keys)


def _json_object(data: bytes | memoryview, what: str) -> dict:
    """The JSON object in `data`. Bytes that are not UTF-8 are kept as they came (the steps
    refuse such a text, naming it); a lone surrogate escape is the client's error."""
    if lone_surrogate(data):
        raise BadRequest(f"{what} holds a \\u escape of a lone surrogate: not a Unicode character")
    try:
        text = bytes(data).decode("utf-8", "surrogateescape")
        if text.startswith("\ufeff"):
            raise BadRequest(f"{what} is not valid JSON (it starts with a byte order mark: send it without one)")
        request = _DECODER.decode(text)
    except BadRequest:
        raise
    except RecursionError:
        raise BadRequest(f"{what} nests too deeply to be a KServe v2 request") from None
    except ValueError as err:
        raise BadRequest(f"{what} is not valid JSON ({str(err)[:80]})") from None
    if not isinstance(request, dict):
        raise BadRequest(f"{what} must be a JSON object, not {type(request).__name__}")
    return request


def _json_shape(shape, index: int) -> list[int]:
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise BadRequest(f"input {index}'s shape must be a list of whole numbers, not {str(shape)[:40]}")
    if any(d < 0 for d in shape):
        raise BadRequest(f"input {index}'s shape {shape} has a negative dimension")
    if shape and shape[0] > MAX_TEXTS:
        raise BadRequest(
            f"the request carries {shape[0]} texts; no model here takes more than {MAX_TEXTS} at once: "
            "send them in several requests"
        )
    if math.prod(shape) > 1 << 40:
        raise BadRequest(f"input {index}'s shape {shape} is far larger than any request")
    return shape


def _http_parameters(parameters, where: str) -> None:
    if parameters is None:
        return
    if not isinstance(parameters, dict):
        raise BadRequest(f"{where}'s 'parameters' must be a JSON object")
    for key in UNSIGNED_PARAMETERS:
        value = parameters.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise BadRequest(f"the parameter {key!r} is {str(value)[:40]}; it must be a whole number, 0 or more")


def _json_strings(data, limit: int, index: int | None = None) -> list[int]:
    """The UTF-8 lengths of the strings among a JSON value's leaves (nested lists walked in
    order), at most `limit` of them, visiting at most MAX_LEAVES leaves. With `index` (a
    BYTES input's), every leaf must be a string."""
    flat: list[int] = []
    todo = [iter([data])]
    visited = 0
    while todo and len(flat) < limit and visited < MAX_LEAVES:
        item = next(todo[-1], StopIteration)
        if item is StopIteration:
            todo.pop()
        elif isinstance(item, list):
            todo.append(iter(item))
        elif isinstance(item, str):
            visited += 1
            flat.append(len(item.encode("utf-8", "surrogateescape")))
        elif index is not None:
            raise BadRequest(f"input {index} is BYTES: its data must be strings, not {type(item).__name__}")
        else:
            visited += 1
    return flat
