"""The one UTF-8 validation (`readability_triton.texts`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from readability_triton import texts


def naive_first_invalid(items):
    for i, item in enumerate(items):
        try:
            item.decode("utf-8")
        except UnicodeDecodeError:
            return i
    return None


@given(st.lists(st.binary(max_size=12), max_size=12))
def test_first_invalid_utf8_matches_per_item_decoding(items):
    assert texts.first_invalid_utf8(items) == naive_first_invalid(items)


def test_first_invalid_utf8_cannot_be_fooled_across_items():
    # "é" split across two items: each half alone is invalid, the concatenation is valid.
    a, b = "é".encode()[:1], "é".encode()[1:]
    assert texts.first_invalid_utf8([b"ok", a, b]) == 1
    assert texts.first_invalid_utf8([b"ok", b"x" + a]) == 1
    assert texts.first_invalid_utf8([b"ok", b]) == 1
    assert texts.first_invalid_utf8(["naïve ☃ 😀".encode(), b""]) is None


def test_as_utf8_and_as_str_name_the_bad_text():
    assert texts.as_utf8(["a", b"b", bytearray(b"c"), memoryview(b"d")]) == [b"a", b"b", b"c", b"d"]
    assert texts.as_str([b"caf\xc3\xa9", "x"]) == ["café", "x"]
    with pytest.raises(ValueError, match=r"^text 1 is not valid UTF-8 \(invalid start byte at byte 0\)"):
        texts.as_utf8([b"ok", b"\xff"])
    with pytest.raises(ValueError, match=r"^text 1 is not valid Unicode: it holds the lone surrogate U\+D800"):
        texts.as_utf8(["ok", "\ud800"])
    with pytest.raises(ValueError, match=r"^text 0 is not valid UTF-8"):
        texts.as_str([b"\xe2\x82", b"\xacabc"])
    with pytest.raises(TypeError, match="text 1 is a int"):
        texts.as_utf8(["ok", 3])
    with pytest.raises(TypeError, match="sequence of texts"):
        texts.as_utf8("one text")
    assert texts.to_rows([b"a", b"b"]).shape == (2, 1)
