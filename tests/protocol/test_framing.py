"""FrameSplitter and FrameStream: arbitrary chunking, zero-copy views, pass-through, the frame-size limit."""

from __future__ import annotations

import random
import struct

import pytest

from insync_proxy.protocol.errors import FrameTooLarge, MalformedFrame
from insync_proxy.protocol.framing import FRAME, HEAD, PART, FrameSplitter, FrameStream, encode_frame


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
    with pytest.raises(FrameTooLarge, match=r"1001.*1000.*max_frame_bytes"):
        splitter.feed(encode_frame(b"x" * 1001))


def test_negative_size_raises_frame_too_large_even_when_split() -> None:
    splitter = FrameSplitter()
    splitter.feed(b"\xff\xff")
    with pytest.raises(FrameTooLarge, match="negative"):
        splitter.feed(b"\xff\xfe")


def test_a_negative_size_is_said_as_negative_not_against_the_limit() -> None:
    with pytest.raises(FrameTooLarge) as refused:
        FrameSplitter(max_frame_size=1000).feed(b"\xff\xff\xff\xfe")
    assert str(refused.value).startswith("frame size -2 is negative: the peer is not speaking the Kafka protocol")
    assert "limit" not in str(refused.value)


def test_http_on_the_kafka_port_is_refused_as_too_large() -> None:
    with pytest.raises(FrameTooLarge):
        FrameSplitter().feed(b"GET / HTTP/1.1\r\n")


def test_encode_frame_prefixes_int32_size() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(memoryview(b"abc")) == b"\x00\x00\x00\x03abc"


def _stream_events(frames: list[bytes], cuts: list[int], pass_from: int, take: list[bool],
                   readonly: bool = True) -> list[tuple[str, bytes]]:
    """Feeds the frames' stream cut at `cuts` into a FrameStream; returns every frame in the order it
    completed, ("assembled", payload) or ("passed", prefix + payload), passing through the HEAD offers
    whose `take` flag is set."""
    stream = FrameStream(pass_from=pass_from, head_size=4)
    data = b"".join(encode_frame(f) for f in frames)
    bounds = [0, *sorted(set(cuts)), len(data)]
    out: list[tuple[str, bytes]] = []
    current = bytearray()
    offers = iter(take)
    for a, b in zip(bounds, bounds[1:], strict=False):
        chunk = data[a:b] if readonly else bytearray(data[a:b])
        stream.feed(chunk)
        while (event := stream.next()) is not None:
            kind, value = event
            if kind == FRAME:
                out.append(("assembled", bytes(value)))
            elif kind == HEAD:
                assert len(value) >= 4 and stream.size >= pass_from
                if next(offers, False):
                    stream.pass_through()
            else:
                current += value
                if stream.passing == 0:
                    out.append(("passed", bytes(current)))
                    current.clear()
        if isinstance(chunk, bytearray):
            chunk[:] = b"\xff" * len(chunk)  # the caller reuses its buffer: nothing held may change
    assert not current and stream.buffered == 0
    return out


def test_frame_stream_passes_or_assembles_every_frame_whatever_the_chunking() -> None:
    rng = random.Random(13)
    for _ in range(300):
        frames = [rng.randbytes(rng.choice([0, 1, 3, 4, 9, 50, 200, 1000])) for _ in range(rng.randrange(1, 6))]
        total = sum(len(f) + 4 for f in frames)
        cuts = [rng.randrange(1, total) for _ in range(rng.randrange(0, 8))] if total > 1 else []
        take = [rng.random() < 0.6 for _ in range(10)]
        readonly = rng.random() < 0.5
        out = _stream_events(frames, cuts, pass_from=rng.choice([0, 8, 100]), take=take, readonly=readonly)
        # Every frame comes out once, whole, in order: assembled ones as payloads, passed ones with prefix
        assert [data if kind == "assembled" else data[4:] for kind, data in out] == frames
        for kind, data in out:
            if kind == "passed":
                assert struct.unpack_from(">i", data)[0] == len(data) - 4


def test_frame_stream_offers_only_frames_cut_by_the_chunk_end() -> None:
    stream = FrameStream(pass_from=10)
    big, small = b"B" * 100, b"s" * 5
    data = encode_frame(small) + encode_frame(big)
    stream.feed(data[:40])
    assert stream.next() == (FRAME, memoryview(small))
    kind, head = stream.next() or (None, b"")
    assert kind == HEAD and bytes(head) == big[:40 - 13] and stream.size == 100
    stream.pass_through()
    kind, part = stream.next() or (None, b"")
    assert kind == PART and bytes(part) == data[9:40]
    assert stream.next() is None and stream.passing == 100 + 4 - 31
    stream.feed(data[40:] + encode_frame(small))
    kind, part = stream.next() or (None, b"")
    assert kind == PART and bytes(part) == data[40:] and stream.passing == 0
    assert stream.next() == (FRAME, memoryview(small))
    assert stream.next() is None


def test_frame_stream_rejects_oversized_frames() -> None:
    with pytest.raises(FrameTooLarge):
        stream = FrameStream(max_frame_size=1000, pass_from=10)
        stream.feed(struct.pack(">i", 1001))
        stream.next()
    stream = FrameStream(max_frame_size=1000, pass_from=10)
    stream.feed(b"\x00\x00")
    assert stream.next() is None
    stream.feed(b"\x10\x00")
    with pytest.raises(FrameTooLarge):
        stream.next()


def test_the_client_id_is_decoded_once_per_connection() -> None:
    from insync_proxy.protocol.headers import RequestHeaderPeeker, peek_request_header

    def frame(client_id: bytes, correlation_id: int) -> bytes:
        return struct.pack(">hhih", 3, 9, correlation_id, len(client_id)) + client_id + b"\x00"

    peeker = RequestHeaderPeeker()
    first = peeker.peek(frame(b"app-1", 1))
    second = peeker.peek(memoryview(frame(b"app-1", 2)))
    assert first.client_id == second.client_id == "app-1" and second.correlation_id == 2
    assert second.client_id is first.client_id  # the same str: not decoded again
    assert peeker.peek(frame("zürich".encode(), 3)).client_id == "zürich"
    assert peeker.peek(frame(b"app-1", 4)) == peek_request_header(frame(b"app-1", 4))
    with pytest.raises(MalformedFrame):
        peeker.peek(frame(b"\xff\xfe", 5))


def test_a_tls_client_hello_is_named_as_tls_to_a_plaintext_port_with_what_to_set() -> None:
    # A client left on security.protocol=SASL_SSL: its first bytes are a TLS handshake record (0x16 0x03 0x01 ...)
    client_hello = bytes.fromhex("16030101f4010001f00303") + b"\x00" * 32
    with pytest.raises(FrameTooLarge) as refused:
        FrameSplitter().feed(client_hello)
    text = str(refused.value)
    assert "is a TLS record (bytes 0x16030101)" in text and "the peer speaks TLS to a plaintext port" in text
    assert "security.protocol=PLAINTEXT or SASL_PLAINTEXT" in text and "[downstream_tls]" in text
    assert "raise max_frame_bytes" not in text  # not the advice for a big frame
    # A TLS alert (a TLS listener refusing a plaintext client) reads the same way
    with pytest.raises(FrameTooLarge, match="is a TLS record"):
        FrameSplitter().feed(bytes.fromhex("15030300020246"))


@pytest.mark.parametrize("start", [b"GET / HTTP/1.1\r\n", b"POST /x HTTP/1.1\r\n", b"HTTP/1.1 400 Bad Request\r\n"])
def test_an_http_request_or_answer_is_named_as_http(start: bytes) -> None:
    with pytest.raises(FrameTooLarge, match="the peer speaks HTTP, not the Kafka protocol") as refused:
        FrameSplitter().feed(start)
    assert "raise max_frame_bytes" not in str(refused.value)
