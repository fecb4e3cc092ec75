"""The front door's reading of requests, without a server: texts and work counted from the
bytes that arrived (never from a declared shape), long texts weighed past BERT's window,
and the client errors tritonserver 2.51 answers 500 to, refused here as 400 with what is
wrong (tests/test_front_door.py sends the same requests to a real serve)."""

from __future__ import annotations

import json

import pytest

from readability_triton.frontdoor import uploads
from readability_triton.frontdoor.wire import FULL_TEXT_BYTES, MAX_TEXTS, MIN_WORK, BadRequest, Weigher

W = Weigher(byte_work=0.001)


def test_a_text_weighs_its_length_and_more_past_what_bert_reads():
    assert W.work_of(0) == MIN_WORK and W.work_of(FULL_TEXT_BYTES) == 1.0
    assert W.work_of(FULL_TEXT_BYTES // 2) == pytest.approx(0.5)
    assert W.work_of(FULL_TEXT_BYTES + 1000) == pytest.approx(2.0)  # 1000 bytes past it at 0.001 each
    capped = Weigher(byte_work=0.001, max_text_bytes=10_000)
    assert capped.work_of(1_000_000) == capped.work_of(10_000)  # past the steps' limit it is refused at once


def _grpc_request(texts: list[bytes], packed: bool = True, raw: bool = True, shape=None, model="readability") -> bytes:
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model)
    request.parameters["priority"].int64_param = 1
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=shape or [len(texts), 1])
    tensor.parameters["binary_data_size"].int64_param = 9
    request.outputs.add(name="SCORE")
    if raw:
        request.raw_input_contents.append(b"".join(len(t).to_bytes(4, "little") + t for t in texts))
    else:
        tensor.contents.bytes_contents.extend(texts)
    data = request.SerializeToString()
    if not packed:  # the shape as repeated varints (what a proto2-style writer may send)
        n = len(texts)
        data = data.replace(bytes([0x1A, 0x02, n, 0x01]), bytes([0x18, n, 0x18, 0x01]))
    return data


@pytest.mark.parametrize("n", [1, 7, 64, 127])
def test_grpc_texts_and_work_are_read_off_the_message(n):
    texts = [b"x" * (FULL_TEXT_BYTES * 2), b"y" * (FULL_TEXT_BYTES // 4)] * n
    texts = texts[:n]
    want = sum(W.work_of(len(t)) for t in texts)
    for raw in (True, False):
        weighed = W.grpc(_grpc_request(texts, raw=raw))
        assert (weighed.texts, weighed.model) == (n, "readability") and weighed.work == pytest.approx(want)


def test_grpc_unpacked_shapes_empty_and_malformed_messages():
    assert W.grpc(_grpc_request([b"a" * 600] * 5, packed=False)).work == pytest.approx(2.5)
    assert (W.grpc(b"").texts, W.grpc(b"").work) == (1, 1.0)  # no inputs: tritonserver says what is wrong
    for broken in (b"\x2a\xff\xff\xff\xff\x0f", _grpc_request([b"abc"] * 3)[:-5]):
        with pytest.raises(BadRequest, match="not a valid ModelInferRequest"):
            W.grpc(broken)


def test_a_declared_shape_never_outweighs_the_data_that_arrived():
    """The attack: shape [2147483647, 1] beside one tiny text counted 2^31 texts while it
    was inside, and everyone else was refused as busy."""
    with pytest.raises(BadRequest, match="2147483647 texts; no model here takes more than 256"):
        W.grpc(_grpc_request([b"x"], shape=[2147483647, 1]))
    with pytest.raises(BadRequest, match=r"declares 5 elements, but its data holds 3"):
        W.grpc(_grpc_request([b"x"] * 3, shape=[5, 1]))
    with pytest.raises(BadRequest, match=r"declares 2 elements, but its data holds 3"):
        W.grpc(_grpc_request([b"x"] * 3, shape=[2, 1], raw=False))
    with pytest.raises(BadRequest, match="negative dimension"):
        W.grpc(_grpc_request([b"x"], shape=[-1, 1]))
    from tritonclient.grpc import service_pb2

    short = service_pb2.ModelInferRequest.FromString(_grpc_request([b"abc"] * 3))
    short.raw_input_contents[0] = (100).to_bytes(4, "little") + b"abc"  # a length past its end
    with pytest.raises(BadRequest, match="not a serialized BYTES tensor"):
        W.grpc(short.SerializeToString())


def test_grpc_negative_priority_or_timeout_is_the_clients_error():
    from tritonclient.grpc import service_pb2

    for key in ("priority", "timeout"):
        request = service_pb2.ModelInferRequest.FromString(_grpc_request([b"abc"]))
        request.parameters[key].int64_param = -1
        with pytest.raises(BadRequest, match=f"'{key}' is -1"):
            W.grpc(request.SerializeToString())


def _http(texts, shape=None, **extra) -> bytes:
    tensor = {"name": "TEXT", "shape": shape or [len(texts), 1], "datatype": "BYTES", "data": texts}
    return json.dumps({"inputs": [tensor], **extra}).encode()


def test_http_texts_and_work_from_json_and_from_the_binary_tensor():
    texts = ["a" * 600, "b" * 2400, "c"]
    weighed = W.http(_http(texts))
    assert weighed.texts == 3 and weighed.work == pytest.approx(0.5 + W.work_of(2400) + MIN_WORK)
    blob = b"".join(len(t).to_bytes(4, "little") + t.encode() for t in texts)
    header = json.dumps(
        {
            "inputs": [
                {"name": "TEXT", "shape": [3, 1], "datatype": "BYTES", "parameters": {"binary_data_size": len(blob)}}
            ]
        }
    ).encode()
    assert W.http(header + blob, str(len(header))).work == pytest.approx(weighed.work)
    with pytest.raises(BadRequest, match="binary_data_size does not fit"):
        W.http(header + blob[:10], str(len(header)))
    nested = W.http(_http([["a" * 600], ["b" * 600]], shape=[2, 1]))
    assert nested.texts == 2 and nested.work == pytest.approx(1.0)


# Each a request tritonserver 2.51 answers HTTP 500 (a server error) and the door 400.
CLIENT_ERRORS = {
    "a shape of 2^31 texts beside one": (_http(["x"], shape=[2147483647, 1]), None, "no model here takes more"),
    "a negative dimension": (_http(["x"], shape=[-1, 1]), None, "negative dimension"),
    "a dimension of 1e300": (
        b'{"inputs":[{"name":"TEXT","shape":[1e300,1],"datatype":"BYTES","data":["x"]}]}',
        None,
        "whole numbers",
    ),
    "a number out of range": (_http(["x"])[:-1] + b', "parameters": {"x": 1e309}}', None, "out of range"),
    "a lone surrogate": (
        b'{"inputs":[{"name":"TEXT","shape":[1,1],"datatype":"BYTES","data":["\\ud800"]}]}',
        None,
        "lone surrogate",
    ),
    "a number where BYTES data is text": (_http([5]), None, "must be strings"),
    "a body that is not JSON": (b"hello", None, "not valid JSON"),
    "a body that is JSON null": (b"null", None, "must be a JSON object"),
    "a negative priority": (_http(["x y"], parameters={"priority": -1}), None, "'priority' is -1"),
    "a negative timeout": (_http(["x y"], parameters={"timeout": -1}), None, "'timeout' is -1"),
    "a header length that cuts the JSON": (_http(["x y"]), "20", "not valid JSON"),
    "a header length longer than the body": (_http(["x y"]), "5000", "Inference-Header-Content-Length"),
    "a 5,000-digit header length": (_http(["x y"]), "9" * 5000, "Inference-Header-Content-Length"),
    "a superscript digit as the header length": (_http(["x y"]), "\u00b2", "Inference-Header-Content-Length"),
    "JSON nested 100,000 deep": (b"[" * 100_000 + b"]" * 100_000, None, "nests too deeply"),
    "more elements than the shape": (_http(["a", "b", "c"], shape=[2, 1]), None, "declares 2 elements"),
    "no inputs": (b'{"inputs": []}', None, "non-empty list"),
}


@pytest.mark.parametrize("name", CLIENT_ERRORS)
def test_each_client_error_is_refused_with_what_is_wrong(name):
    body, header_length, words = CLIENT_ERRORS[name]
    with pytest.raises(BadRequest, match=words):
        W.http(body, header_length)


def test_what_tritonserver_accepts_is_not_refused():
    """A surrogate pair is a character; an escaped backslash before 'u' is not an escape;
    bytes that are not UTF-8 go on (the steps refuse such a text, naming it); NaN is a number
    tritonserver reads."""
    assert W.http(b'{"inputs":[{"name":"TEXT","shape":[1,1],"datatype":"BYTES","data":["\\ud83d\\ude00"]}]}').texts == 1
    assert W.http(b'{"inputs":[{"name":"TEXT","shape":[1,1],"datatype":"BYTES","data":["\\\\ud800"]}]}').texts == 1
    assert W.http(b'{"inputs":[{"name":"TEXT","shape":[1,1],"datatype":"BYTES","data":["\xff\xfe"]}]}').work == MIN_WORK
    assert W.http(_http(["x"])[:-1] + b', "parameters": {"x": 0.5, "priority": 3}}').texts == 1


def _decodes_to_a_lone_surrogate(value) -> bool:
    """The oracle: Python's json joins the escapes of a pair into one character, so any
    surrogate left in a decoded string came from a lone escape."""
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(_decodes_to_a_lone_surrogate(v) for v in value.values())
    if isinstance(value, list):
        return any(_decodes_to_a_lone_surrogate(v) for v in value)
    return False


def test_lone_surrogate_escapes_are_found_exactly_as_a_json_decoder_reads_them():
    """Over random mixes of surrogate escapes (halves, pairs, upper and lower case), escaped
    backslashes, other escapes and text, the door refuses exactly the requests whose decoded
    text holds a lone surrogate, and no other: an escaped backslash before "u" is text, a
    pair is one character, and a high half followed by the text "ud800" and then a low
    escape is two lone halves."""
    import random

    pieces = ["\\ud800", "\\uDBFF", "\\udc00", "\\uDFFF", "\\ud83d\\ude00", "\\u0041", "\\\\", "a", "u", "\\u00e9"]
    pieces += ["d800", "\\n"]
    rng = random.Random(54)
    verdicts = set()
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 7)))
        body = ('{"inputs":[{"name":"TEXT","shape":[1,1],"datatype":"BYTES","data":["' + text + '"]}]}').encode()
        lone = _decodes_to_a_lone_surrogate(json.loads(body))
        try:
            W.http(body)
            said = False
        except BadRequest as err:
            said = "lone surrogate" in str(err)
        assert said == lone, text
        verdicts.add(lone)
    assert verdicts == {True, False}
    # an escaped backslash, the text "ud800", then a lone low escape
    with pytest.raises(BadRequest, match="lone surrogate"):
        W.http(b'{"inputs":[{"name":"TEXT","shape":[1,1],"datatype":"BYTES","data":["\\\\ud800\\udc00"]}]}')


def test_a_body_with_a_byte_order_mark_is_told_so():
    with pytest.raises(BadRequest, match="byte order mark"):
        W.http("\ufeff".encode() + _http(["x y"]))


def test_generate_requests_are_weighed_by_their_texts():
    one = W.generate(json.dumps({"TEXT": "a" * 600}).encode())
    assert (one.texts, one.work) == (1, pytest.approx(0.5))
    many = W.generate(json.dumps({"TEXT": ["a" * 1200] * 8, "id": "x" * 5000, "flag": True}).encode())
    assert (many.texts, many.work) == (8, pytest.approx(8.0))
    inside = W.generate(json.dumps({"parameters": {"TEXT": ["a" * 1200] * 3}}).encode())
    assert inside.texts == 3
    with pytest.raises(BadRequest, match="more than 256 texts"):
        W.generate(json.dumps({"TEXT": ["a"] * (MAX_TEXTS + 1)}).encode())
    for bad in (b"null", b"[1]", b'{"TEXT": "\\ud800"}', b"{"):
        with pytest.raises(BadRequest):
            W.generate(bad)


def test_a_huge_flat_array_is_read_only_as_far_as_it_can_count():
    body = _http([""] * 2_000_000, shape=[1, 1])
    with pytest.raises(BadRequest, match="declares 1 elements, but its data holds 2"):
        W.http(body)


def test_model_loads_with_file_content_are_found_in_both_protocols():
    assert uploads.http_uploads(b'{"parameters": {"config": "{}", "file:1/model.py": "aW1wb3J0"}}')
    assert uploads.http_uploads(b'{"parameters": {"\\u0066ile:1/model.py": "aW1wb3J0"}}')  # an escaped key
    assert not uploads.http_uploads(b'{"parameters": {"config": "{}"}}') and not uploads.http_uploads(b"")
    assert uploads.http_uploads(b"{not json") and uploads.http_uploads(b"[]")  # unreadable: refused
    from tritonclient.grpc import service_pb2

    request = service_pb2.RepositoryModelLoadRequest(model_name="x")
    request.parameters["config"].string_param = "{}"
    assert not uploads.grpc_uploads(request.SerializeToString())
    request.parameters["file:1/model.py"].bytes_param = b"import os"
    assert uploads.grpc_uploads(request.SerializeToString())
    assert uploads.grpc_uploads(b"\x2a\xff\xff")


def test_a_key_twice_is_refused_where_python_and_tritonserver_would_read_different_requests():
    """Python's json keeps a key's last value, tritonserver's rapidjson its first: 64 long
    texts then one short one were weighed as the short one, and a load's files hidden
    behind a second, empty "parameters" passed the upload refusal."""
    long = {"name": "TEXT", "shape": [64, 1], "datatype": "BYTES", "data": ["x" * 100_000] * 64}
    short = {"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["hi"]}
    body = b'{"inputs": ' + json.dumps([long]).encode() + b', "inputs": ' + json.dumps([short]).encode() + b"}"
    with pytest.raises(BadRequest, match="the key 'inputs' twice"):
        W.http(body)
    with pytest.raises(BadRequest, match="twice"):
        W.generate(b'{"TEXT": "a", "TEXT": "b"}')
    assert uploads.http_uploads(b'{"parameters": {"file:1/model.py": "aW1w"}, "parameters": {}}')


def test_numbers_are_never_walked_and_never_count_as_texts():
    import time

    numbers = json.dumps(
        {"inputs": [{"name": "INPUT_IDS", "shape": [3, 1_000_000], "datatype": "INT64", "data": [0] * 3_000_000}]}
    ).encode()
    started = time.perf_counter()
    weighed = W.http(numbers)
    assert (weighed.texts, weighed.work) == (3, 3.0)
    assert time.perf_counter() - started < 0.5 * 2  # the parse itself, not a walk of 3 million numbers
    ids = W.generate(json.dumps({"INPUT_IDS": [[1] * 300], "ATTENTION_MASK": [[1] * 300]}).encode())
    assert (ids.texts, ids.work) == (1, MIN_WORK)  # bert's inputs: no texts, not 300 of them


def test_more_texts_than_any_model_takes_are_refused_however_the_shape_puts_them():
    with pytest.raises(BadRequest, match="300 texts|257 texts"):
        W.http(_http(["x"] * 300, shape=[1, 300]))
    blob = b"".join((1).to_bytes(4, "little") + b"x" for _ in range(300))
    header = json.dumps(
        {
            "inputs": [
                {"name": "TEXT", "shape": [1, 300], "datatype": "BYTES", "parameters": {"binary_data_size": len(blob)}}
            ]
        }
    ).encode()
    with pytest.raises(BadRequest, match="257 texts"):
        W.http(header + blob, str(len(header)))
