"""Protobuf's wire format, walked with views: the front door reads what it needs of a gRPC
message (`wire`, `uploads`) without a generated proto module and without copying tensors."""

from __future__ import annotations


class Malformed(ValueError):
    """Not a protobuf message."""


def varint(data: memoryview, pos: int) -> tuple[int, int]:
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


def fields(data: memoryview):
    """(field number, wire type, value) of a message: ints for varints, memoryviews for
    length-delimited fields; fixed-width fields are skipped."""
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, pos = varint(data, pos)
            yield number, kind, value
        elif kind == 2:
            size, pos = varint(data, pos)
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
