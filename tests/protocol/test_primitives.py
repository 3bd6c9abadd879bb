"""Primitive wire types: known encodings, edge values, and malformed input as ProtocolError."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from insync_proxy.protocol.errors import InvalidValue, MalformedFrame, ProtocolError, TruncatedData
from insync_proxy.protocol.primitives import (
    Reader,
    Writer,
    encode_uvarint,
    encode_varint,
    encode_varlong,
    zigzag_decode,
    zigzag_encode,
)


@pytest.mark.parametrize(("value", "wire"), [
    (0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (-64, "7f"), (64, "8001"),
    (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f"),
])
def test_varint_uses_zigzag_like_kafka(value: int, wire: str) -> None:
    assert encode_varint(value).hex() == wire
    assert Reader(bytes.fromhex(wire)).varint() == value


def test_varlong_extremes_round_trip() -> None:
    for value in (-(2**63), 2**63 - 1, 0, -1, 300):
        assert Reader(encode_varlong(value)).varlong() == value
    assert encode_varlong(-(2**63)).hex() == "ffffffffffffffffff01"


@given(st.integers(0, 2**32 - 1))
def test_uvarint_round_trips(value: int) -> None:
    assert Reader(encode_uvarint(value)).uvarint() == value


@given(st.integers(-(2**63), 2**63 - 1))
def test_zigzag_is_a_bijection(value: int) -> None:
    assert zigzag_decode(zigzag_encode(value)) == value


def test_overlong_varint_is_malformed() -> None:
    with pytest.raises(MalformedFrame):
        Reader(b"\xff\xff\xff\xff\xff\x01").uvarint()
    with pytest.raises(MalformedFrame):
        Reader(b"\xff\xff\xff\xff\x7f").uvarint()  # 35 bits for a 32-bit value


def test_out_of_range_varint_is_refused_on_encoding() -> None:
    with pytest.raises(InvalidValue):
        encode_varint(2**31)
    with pytest.raises(InvalidValue):
        encode_uvarint(-1)


def test_fixed_width_integers_are_big_endian() -> None:
    w = Writer()
    w.int8(-2)
    w.int16(-2)
    w.int32(0x01020304)
    w.int64(-1)
    w.uint16(0xFFFE)
    w.uint32(0xFFFFFFFE)
    w.float64(1.5)
    w.boolean(True)
    data = w.getvalue()
    assert data.hex() == "fe" "fffe" "01020304" "ffffffffffffffff" "fffe" "fffffffe" "3ff8000000000000" "01"
    r = Reader(data)
    assert (r.int8(), r.int16(), r.int32(), r.int64(), r.uint16(), r.uint32(), r.float64(), r.boolean()) == (
        -2, -2, 0x01020304, -1, 0xFFFE, 0xFFFFFFFE, 1.5, True)


def test_uuid_round_trips_and_null_uuid_is_all_zero() -> None:
    u = uuid.UUID("0b8e6c51-2f5f-4a43-9c3e-6c1b5c1f0a01")
    w = Writer()
    w.uuid(u)
    w.uuid(None)
    r = Reader(w.getvalue())
    assert r.uuid() == u
    assert r.uuid() == uuid.UUID(int=0)


@pytest.mark.parametrize(("nullable", "compact", "value", "wire"), [
    (False, False, "ab", "00026162"),
    (True, False, None, "ffff"),
    (False, True, "ab", "036162"),
    (True, True, None, "00"),
    (True, True, "", "01"),
])
def test_strings_follow_kafka_length_rules(nullable: bool, compact: bool, value: str | None, wire: str) -> None:
    w = Writer()
    w.string(value, nullable, compact)
    assert w.getvalue().hex() == wire
    r = Reader(bytes.fromhex(wire))
    read = {(False, False): r.string, (True, False): r.nullable_string,
            (False, True): r.compact_string, (True, True): r.compact_nullable_string}[(nullable, compact)]
    assert read() == value


def test_null_for_non_nullable_string_is_refused_both_ways() -> None:
    with pytest.raises(MalformedFrame):
        Reader(b"\xff\xff").string()
    with pytest.raises(MalformedFrame):
        Reader(b"\x00").compact_string()
    with pytest.raises(InvalidValue):
        Writer().string(None, nullable=False, compact=True)


def test_invalid_utf8_is_malformed_not_unicode_error() -> None:
    with pytest.raises(MalformedFrame):
        Reader(b"\x00\x02\xff\xfe").string()


def test_bytes_are_zero_copy_views() -> None:
    data = bytearray(b"\x00\x00\x00\x03abc")
    view = Reader(data).bytes_()
    assert bytes(view) == b"abc"
    data[4] = ord("z")
    assert bytes(view) == b"zbc"  # a view into the input, not a copy
    assert Reader(b"\xff\xff\xff\xff").nullable_bytes() is None
    assert Reader(b"\x00").compact_nullable_bytes() is None
    assert bytes(Reader(b"\x03ab").compact_bytes()) == b"ab"


def test_array_length_larger_than_the_data_is_truncated() -> None:
    with pytest.raises(TruncatedData):
        Reader(b"\x7f\xff\xff\xff").array_length(compact=False)
    assert Reader(b"\xff\xff\xff\xff").array_length(compact=False) == -1
    assert Reader(b"\x00").array_length(compact=True) == -1


def test_tagged_fields_must_ascend_and_unknown_bytes_are_kept() -> None:
    section = bytes.fromhex("02" "01" "02" "aabb" "05" "00")
    assert [(t, bytes(d)) for t, d in Reader(section).tagged_fields()] == [(1, b"\xaa\xbb"), (5, b"")]
    with pytest.raises(MalformedFrame):
        Reader(bytes.fromhex("02" "05" "00" "01" "00")).tagged_fields()
    w = Writer()
    w.tagged_fields([(1, b"\xaa\xbb"), (5, b"")])
    assert w.getvalue() == section


@pytest.mark.parametrize("method", ["int8", "int16", "int32", "int64", "uuid", "float64", "uvarint", "string",
                                    "compact_string", "bytes_", "boolean", "tagged_fields"])
def test_every_reader_raises_truncated_data_on_empty_input(method: str) -> None:
    with pytest.raises(ProtocolError):
        getattr(Reader(b""), method)()


def test_boolean_other_than_zero_or_one_is_malformed() -> None:
    with pytest.raises(MalformedFrame):
        Reader(b"\x02").boolean()
