"""FrameSplitter: arbitrary chunking, zero-copy views, and the frame-size limit."""

from __future__ import annotations

import random

import pytest

from insync_proxy.protocol.errors import FrameTooLarge
from insync_proxy.protocol.framing import FrameSplitter, encode_frame


def _stream(payloads: list[bytes]) -> bytes:
    return b"".join(encode_frame(p) for p in payloads)


PAYLOADS = [b"", b"a", b"hello kafka", bytes(range(256)) * 40]


def test_frames_fed_one_byte_at_a_time_come_out_whole() -> None:
    splitter = FrameSplitter()
    out: list[bytes] = []
    for b in _stream(PAYLOADS):
        out.extend(bytes(f) for f in splitter.feed(bytes([b])))
    assert out == PAYLOADS
    assert splitter.buffered == 0


def test_frames_fed_in_random_chunks_come_out_whole() -> None:
    rng = random.Random(7)
    stream = _stream(PAYLOADS * 20)
    for _ in range(20):
        splitter = FrameSplitter()
        out: list[bytes] = []
        pos = 0
        while pos < len(stream):
            step = rng.randint(1, 5000)
            out.extend(bytes(f) for f in splitter.feed(stream[pos : pos + step]))
            pos += step
        assert out == PAYLOADS * 20


def test_frame_arriving_whole_is_a_view_into_the_chunk_without_copy() -> None:
    chunk = bytearray(_stream([b"abc", b"defg"]))
    frames = FrameSplitter().feed(chunk)
    assert [bytes(f) for f in frames] == [b"abc", b"defg"]
    assert all(f.obj is chunk for f in frames)


def test_size_above_limit_raises_frame_too_large_naming_size_and_limit() -> None:
    splitter = FrameSplitter(max_frame_size=1000)
    with pytest.raises(FrameTooLarge, match=r"1001.*1000.*max_frame_size"):
        splitter.feed(encode_frame(b"x" * 1001))


def test_negative_size_raises_frame_too_large_even_when_split() -> None:
    splitter = FrameSplitter()
    splitter.feed(b"\xff\xff")
    with pytest.raises(FrameTooLarge, match="negative"):
        splitter.feed(b"\xff\xfe")


def test_http_on_the_kafka_port_is_refused_as_too_large() -> None:
    with pytest.raises(FrameTooLarge):
        FrameSplitter().feed(b"GET / HTTP/1.1\r\n")


def test_encode_frame_prefixes_int32_size() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(memoryview(b"abc")) == b"\x00\x00\x00\x03abc"
