"""How much work a KServe v2 inference request carries, read off the wire without decoding
its tensors: its texts, each weighed by its length.

The pipeline's cost of a text grows with its length up to what BERT reads (256 tokens, about
`FULL_TEXT_BYTES` of English), so a text counts `work_of(length)`: 1 from that length on, in
proportion below it, and at least `MIN_WORK` (tokenizing, featurizing and the hops cost
something for any text). Where the lengths cannot be read, each text counts 1.

- gRPC: `inference.ModelInferRequest` (field 5 `inputs`: `InferInputTensor`, whose field 3
  is `shape` and field 5 `contents`, with `bytes_contents` as field 8; field 7
  `raw_input_contents`: per input, 4-byte little-endian lengths each followed by the bytes),
  read by walking protobuf's wire format with views, never copying the tensors, and with no
  generated proto module.
- HTTP: the JSON inference header (the whole body, or its first
  `Inference-Header-Content-Length` bytes, followed by the binary tensors), after the front
  has inflated a compressed body.

A request that cannot be read counts as one text and is sent on: tritonserver then answers
what is wrong with it, as it would without the front door.
"""

from __future__ import annotations

import json
import struct

#: Default largest request body or gRPC message: 64 texts of the largest text the steps
#: accept (100,000 bytes), escaped as JSON, with room to spare.
DEFAULT_MAX_REQUEST_BYTES = 16 << 20
#: A text this long (bytes) or longer fills BERT's 256 tokens: one text of work.
FULL_TEXT_BYTES = 1200
#: The least a text counts.
MIN_WORK = 0.1
#: What tritonserver 2.51 answers for a request that reached a python-backend stub that died.
DEAD_STUB_SIGN = "is not healthy"
#: In every refusal by the pipeline's entrance (`stub.admission`, in the first step): the request
#: was refused before any step computed it, so sending it again is safe.
SHED_SIGNS = ("parameter MAX_PENDING_REQUESTS", "parameter MAX_QUEUE_SECONDS")


#: What an answer says when tritonserver's port refused the connection (it is restarting):
#: gRPC's words, and the front door's own 503 for HTTP (`http_front`).
NO_CONNECTION_SIGNS = ("failed to connect to all addresses", "tritonserver refused the connection")


def is_no_connection(message: str | bytes) -> bool:
    """Whether an error says the request never reached tritonserver (see NO_CONNECTION_SIGNS)."""
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
    return any(sign in text for sign in NO_CONNECTION_SIGNS)


def is_shed(message: str | bytes) -> bool:
    """Whether an error message is a refusal by the pipeline's entrance (see SHED_SIGNS)."""
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
    return any(sign in text for sign in SHED_SIGNS)


_INPUTS, _RAW = 5, 7  # ModelInferRequest
_SHAPE, _CONTENTS = 3, 5  # InferInputTensor
_BYTES_CONTENTS = 8  # InferTensorContents


class Malformed(ValueError):
    """Not a request this module can read (tritonserver will say why)."""


def work_of(length: int) -> float:
    """The work of one text of `length` bytes, in full texts."""
    return max(MIN_WORK, min(1.0, length / FULL_TEXT_BYTES))


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise Malformed("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(data: memoryview):
    """(field number, wire type, value) of a message: ints for varints, memoryviews for
    length-delimited fields; fixed-width fields are skipped."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, pos = _varint(data, pos)
            yield number, kind, value
        elif kind == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise Malformed("truncated field")
            yield number, kind, data[pos : pos + size]
            pos += size
        elif kind == 1:
            pos += 8
        elif kind == 5:
            pos += 4
        else:
            raise Malformed(f"wire type {kind}")
    if pos != len(data):
        raise Malformed("truncated fixed-width field")


def _serialized_lengths(blob: memoryview, count: int) -> list[int] | None:
    """The lengths of the first `count` elements of a serialized BYTES tensor (each a
    4-byte little-endian length, then the bytes), or None where it does not parse."""
    lengths, pos = [], 0
    for _ in range(count):
        if pos + 4 > len(blob):
            return None
        (size,) = struct.unpack_from("<I", blob, pos)
        pos += 4 + size
        if pos > len(blob):
            return None
        lengths.append(size)
    return lengths


def _weighed(texts: int, lengths: list[int] | None) -> tuple[int, float]:
    if lengths is None or len(lengths) < texts:
        return texts, float(texts)
    return texts, sum(work_of(n) for n in lengths[:texts])


def grpc_work(message: bytes) -> tuple[int, float]:
    """(texts, work) of a serialized ModelInferRequest: its first input's batch size, and
    its texts weighed by length ((1, 1.0) where it cannot be read)."""
    try:
        first = None
        raw = None
        for number, kind, value in _fields(memoryview(message)):
            if number == _INPUTS and kind == 2 and first is None:
                first = value
            elif number == _RAW and kind == 2 and raw is None:
                raw = value
        if first is None:
            return 1, 1.0
        texts, inline, shaped = 1, None, False
        for inner, inner_kind, value in _fields(first):
            if inner == _SHAPE and inner_kind == 0:  # not packed: its first element is the batch size
                if not shaped:
                    texts, shaped = max(1, int(value)), True
            elif inner == _SHAPE:
                texts = max(1, _varint(value, 0)[0])
            elif inner == _CONTENTS and inner_kind == 2:
                inline = [len(v) for n, k, v in _fields(value) if n == _BYTES_CONTENTS and k == 2]
        lengths = inline if inline else (_serialized_lengths(raw, texts) if raw is not None else None)
        return _weighed(texts, lengths)
    except Malformed:
        return 1, 1.0


def _json_lengths(data, limit: int) -> list[int] | None:
    flat: list[int] = []
    todo = [data]
    while todo and len(flat) < limit:
        item = todo.pop(0)
        if isinstance(item, list):
            todo[:0] = item
        elif isinstance(item, str):
            flat.append(len(item.encode("utf-8", "surrogatepass")))
        else:
            return None
    return flat


def http_work(body: bytes, header_length: int | None = None) -> tuple[int, float]:
    """(texts, work) of a KServe v2 JSON inference request ((1, 1.0) where it cannot be read)."""
    header = body[:header_length] if header_length else body
    try:
        request = json.loads(header)
        tensor = next(t for t in request.get("inputs") or () if isinstance(t.get("shape"), list))
        shape = tensor["shape"]
        texts = max(1, int(shape[0])) if shape and isinstance(shape[0], int) else 1
    except (ValueError, AttributeError, TypeError, StopIteration, KeyError):
        return 1, 1.0
    lengths = None
    if "data" in tensor:
        lengths = _json_lengths(tensor["data"], texts)
    elif header_length and tensor is request["inputs"][0]:
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        if isinstance(size, int):
            lengths = _serialized_lengths(memoryview(body)[header_length : header_length + size], texts)
    return _weighed(texts, lengths)
