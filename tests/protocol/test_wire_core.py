"""The compiled core (protocol/_wire.c) against the Python walks it stands in for.

For every frame, clean, cut or corrupted: where the core answers, its answer is the Python walk's, and where
the Python walk refuses the frame, the core answers None (the Python walk then raises its precise error).
On the frames producers send (one batch per partition, no tags) the core must answer, every version.

The core under test is the one built in place (`scripts/compile`) or, in an interpreted checkout, one this
module builds from protocol/_wire.c with the interpreter's own C compiler.
"""

from __future__ import annotations

import importlib.util
import random
import shutil
import struct
import subprocess
import sysconfig
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insync_proxy.protocol import kafka_versions, native
from insync_proxy.protocol.api_keys import ApiKey
from insync_proxy.protocol.errors import FrameTooLarge, ProtocolError
from insync_proxy.protocol.framing import FRAME, HEAD, FrameStream, whole_read_reference
from insync_proxy.protocol.headers import (
    RequestHeader,
    RequestHeaderPeek,
    RequestHeaderPeeker,
    _peek,
    encode_request_header,
    encode_response_with_header,
)
from insync_proxy.protocol.kafka_messages import (
    REQUEST_TYPES,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from insync_proxy.protocol.messages import encode_request, encode_response
from insync_proxy.protocol.produce import (
    _acks_at,
    _topic_id,
    _walk_request,
    _walk_response,
    produce_acks_offset,
    produce_partition_records,
    scan_produce_response,
)
from insync_proxy.proxy.observability.compiled import C_MODULE_NAMES

from ..source_tree import ROOT
from .frames import TOPIC_ID, produce_frame_with_batches, request_frame
from .fuzz import mutate
from .schema_gen import message_strategy

PRODUCE_VERSIONS = range(kafka_versions.PRODUCE_MIN_VERSION, kafka_versions.PRODUCE_MAX_VERSION + 1)


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    if native.WIRE is not None:
        return native.WIRE
    compiler = (sysconfig.get_config_var("CC") or "cc").split()
    if shutil.which(compiler[0]) is None:
        pytest.skip(f"no C compiler ({compiler[0]}) to build protocol/_wire.c; the Python walks run alone here")
    out = tmp_path_factory.mktemp("wire") / f"_wire{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run([*compiler, "-O2", "-Wall", "-Werror", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
                    str(ROOT / "protocol" / "_wire.c"), "-o", str(out)], check=True, capture_output=True)
    spec = importlib.util.spec_from_file_location("_wire", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    native.configure(module)
    return module


# -- the references ------------------------------------------------------------------------------------


def _python_request(frame: bytes, acks_offset: int) -> tuple[int, list[tuple[Any, int, int, int]]] | None:
    out: list[tuple[Any, int, int, int]] = []
    try:
        return _walk_request(frame, acks_offset, out)[0], out
    except ProtocolError:
        return None


def _python_acks_offset(frame: bytes, header_size: int) -> int:
    try:
        version = int.from_bytes(frame[2:4], "big", signed=True)
        if not 0 <= version <= kafka_versions.PRODUCE_MAX_VERSION:
            return -1
        return _acks_at(frame, version, header_size)
    except (ProtocolError, struct.error, IndexError):
        return -1


def _python_response(frame: bytes, version: int) -> tuple[int, list[Any], int] | None:
    try:
        return _walk_response(frame, version)
    except ProtocolError:
        return None


def _python_peek(frame: bytes) -> RequestHeaderPeek | None:
    try:
        return _peek(frame, None)
    except ProtocolError:
        return None


def check_request(core: ModuleType, frame: bytes, acks_offset: int) -> bool:
    """The core's walk is the Python walk's wherever it answers; True if it answered."""
    got = core.walk_produce_request(frame, acks_offset, _topic_id)
    if got is None:
        return False
    assert got == _python_request(frame, acks_offset)
    return True


def check_acks_offset(core: ModuleType, frame: bytes, header_size: int) -> bool:
    got = core.produce_acks_offset(frame, header_size)
    if got < 0:
        return False
    assert got == _python_acks_offset(frame, header_size)
    return True


def check_exchange(core: ModuleType, frame: bytes, header_size: int) -> bool:
    """The core's one call for a Produce exchange answers what its three calls answer; True if it found acks."""
    got = core.walk_produce_exchange(frame, header_size, _topic_id)
    offset = core.produce_acks_offset(frame, header_size)
    if got is None:
        assert offset < 0
        return False
    acks_offset, acks, partitions = got
    assert acks_offset == offset == _python_acks_offset(frame, header_size)
    assert acks == int.from_bytes(frame[acks_offset:acks_offset + 2], "big", signed=True)
    walked = core.walk_produce_request(frame, acks_offset, _topic_id)
    if -1 <= acks <= 1 and walked is not None:
        assert partitions == walked[1]
    else:
        assert partitions is None
    return True


def check_response(core: ModuleType, frame: bytes, version: int) -> bool:
    got = core.scan_produce_response(frame, version)
    if got is None:
        return False
    expected = _python_response(frame, version)
    assert expected is not None and expected[1] == []  # the core answers only where nothing failed
    assert got == (expected[0], expected[2])
    return True


def check_peek(core: ModuleType, frame: bytes) -> bool:
    got = core.peek_request_header(frame, b"\xff-nothing-cached")
    if got is None:
        return False
    expected = _python_peek(frame)
    api_key, api_version, correlation_id, raw, header_size = got
    if raw is not None:
        try:
            client_id: str | None = raw.decode("utf-8")
        except UnicodeDecodeError:
            assert expected is None  # the peeker raises the Python peek's MalformedFrame
            return True
    else:
        client_id = None
    assert expected is not None
    assert (api_key, api_version, correlation_id, client_id, header_size) == (
        expected.api_key, expected.api_version, expected.correlation_id, expected.client_id, expected.header_size)
    if raw is not None:  # the cached client id comes back as the same object
        assert core.peek_request_header(frame, raw)[3] is raw
    return True


# -- what producers send: the core answers, as the Python walk does ------------------------------------

layouts = st.lists(
    st.tuples(st.sampled_from(["orders", "t", "payments-eu", "ünïcode"]),
              st.lists(st.tuples(st.integers(0, 50), st.one_of(st.none(), st.lists(st.integers(1, 20), max_size=3))),
                       min_size=1, max_size=4)),
    min_size=0, max_size=3,
)


@pytest.mark.parametrize("version", range(3, kafka_versions.PRODUCE_MAX_VERSION + 1))
@settings(max_examples=15, deadline=None)
@given(acks=st.sampled_from([-2, -1, 0, 1, 5]), layout=layouts, client_id=st.none() | st.text(max_size=6))
def test_producers_requests_are_walked_by_the_core(
    core: ModuleType, version: int, acks: int, layout: list[tuple[str, list[tuple[int, list[int] | None]]]],
    client_id: str | None,
) -> None:
    frame = produce_frame_with_batches(version, acks, layout, client_id)
    offset = produce_acks_offset(frame)
    assert check_request(core, frame, offset)
    assert check_peek(core, frame)
    header_size = _peek(frame, None).header_size
    assert check_acks_offset(core, frame, header_size)
    assert core.produce_acks_offset(frame, header_size) == offset == produce_acks_offset(frame, header_size)
    assert check_exchange(core, frame, header_size)
    assert (core.walk_produce_exchange(frame, header_size, _topic_id)[2] is None) == (acks not in (-1, 0, 1))
    # and the functions the proxy calls take the core's answer
    walked = produce_partition_records(frame, offset)
    assert walked == _python_request(frame, offset)
    if version >= kafka_versions.PRODUCE_REQUEST_TOPIC_DATA_TOPIC_ID_SINCE and walked[1]:
        assert walked[1][0][0] == TOPIC_ID


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=10, deadline=None)
@given(partitions=st.lists(st.tuples(st.integers(0, 99), st.integers(-1, 2**40)), max_size=5),
       topics=st.integers(1, 3))
def test_acknowledged_answers_are_scanned_by_the_core(
    core: ModuleType, version: int, partitions: list[tuple[int, int]], topics: int
) -> None:
    response = ProduceResponse(responses=tuple(
        TopicProduceResponse(name=f"topic-{t}", topic_id=uuid.UUID(int=t + 1), partition_responses=tuple(
            PartitionProduceResponse(index=index, error_code=0, base_offset=offset) for index, offset in partitions))
        for t in range(topics)), throttle_time_ms=3)
    frame = encode_response_with_header(ApiKey.PRODUCE, version, 7, encode_response(response, version))
    assert check_response(core, frame, version)
    scan = scan_produce_response(frame, version)
    assert (scan.answered, scan.failed) == (topics * len(partitions), [])


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=10, deadline=None)
@given(layout=st.lists(st.tuples(st.sampled_from(["orders", "t", "ünïcode"]),
                                 st.lists(st.tuples(st.integers(0, 50), st.sampled_from([None, b""])), max_size=3)),
                       max_size=3))
def test_every_versions_generated_c_walk_answers_a_clean_request(
    core: ModuleType, version: int, layout: list[tuple[str, list[tuple[int, bytes | None]]]]
) -> None:
    # Given a request of any version (v0-v2 included) without tags, whose record sets are null or empty (no batch
    # header to read)
    request = ProduceRequest(acks=1, timeout_ms=30, topic_data=tuple(
        TopicProduceData(name=name, topic_id=uuid.UUID(int=len(name)), partition_data=tuple(
            PartitionProduceData(index=index, records=records) for index, records in partitions))
        for name, partitions in layout))
    frame = request_frame(request, version)
    # Then the core's generated walk of that version answers, as the Python walk does
    assert check_request(core, frame, produce_acks_offset(frame))


# -- any message of the generated classes, then cut and corrupted ---------------------------------------


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=20, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_any_produce_exchange_clean_cut_or_corrupt(core: ModuleType, version: int, data: st.DataObject,
                                                   seed: int) -> None:
    rng = random.Random(seed)
    request = data.draw(message_strategy(ProduceRequest, version))
    frame = request_frame(request, version, client_id=data.draw(st.none() | st.text(max_size=8)))
    offset = produce_acks_offset(frame)
    header_size = _peek(frame, None).header_size
    response = data.draw(message_strategy(ProduceResponse, version))
    answer = encode_response_with_header(ApiKey.PRODUCE, version, 7, encode_response(response, version))
    for candidate in [frame, *(mutate(frame, rng) for _ in range(30)), *(frame[:n] for n in range(len(frame)))]:
        check_request(core, candidate, offset)
        check_peek(core, candidate)
        check_acks_offset(core, candidate, header_size)
        check_exchange(core, candidate, header_size)
    for candidate in [answer, *(mutate(answer, rng) for _ in range(30)), *(answer[:n] for n in range(len(answer)))]:
        check_response(core, candidate, version)


def _request_keys() -> list[tuple[type[Any], int]]:
    return [(cls, v) for cls in REQUEST_TYPES.values() for v in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_every_request_header_clean_or_corrupt(core: ModuleType, data: st.DataObject, seed: int) -> None:
    cls, version = data.draw(st.sampled_from(_request_keys()))
    flexible = cls.FLEXIBLE_FROM is not None and version >= cls.FLEXIBLE_FROM
    tags = data.draw(st.lists(st.tuples(st.integers(0, 50), st.binary(max_size=4)), max_size=2,
                              unique_by=lambda t: t[0])) if flexible else []
    header = RequestHeader(request_api_key=cls.API_KEY, request_api_version=version,
                           correlation_id=data.draw(st.integers(-(2**31), 2**31 - 1)),
                           client_id=data.draw(st.none() | st.text(max_size=8)), unknown_tagged_fields=tuple(tags))
    frame = encode_request_header(header) + encode_request(data.draw(message_strategy(cls, version)), version)
    answered = check_peek(core, frame)
    # the core leaves header v0 and header tags to the Python peek, and reads every other header
    v0 = cls.API_KEY == ApiKey.CONTROLLED_SHUTDOWN and version == 0
    assert answered == (not v0 and not tags)
    rng = random.Random(seed)
    for _ in range(20):
        check_peek(core, mutate(frame, rng))
    # an API key or version nobody knows (yet) reads as Kafka's rule says: flexible above the highest key
    unknown = bytearray(frame)
    unknown[0:2] = (999).to_bytes(2, "big")
    check_peek(core, bytes(unknown))


def test_the_peeker_uses_the_core_and_its_cache(core: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    if native.WIRE is None:  # interpreted: give the peeker this module's own build of the core, counted
        from insync_proxy.protocol import headers

        def counted(frame: Any, cached: bytes) -> Any:
            calls.append(1)
            return core.peek_request_header(frame, cached)

        monkeypatch.setattr(headers, "_core_peek", counted)
    peeker = RequestHeaderPeeker()
    frame = request_frame(ProduceRequest(), 9, correlation_id=5, client_id="app-1")
    first = peeker.peek(frame)
    second = peeker.peek(frame)
    assert (first.api_key, first.api_version, first.correlation_id, first.client_id) == (0, 9, 5, "app-1")
    assert second.client_id is first.client_id  # decoded once per connection
    assert native.WIRE is not None or len(calls) == 2  # the core read both
    bad = bytearray(frame)
    bad[10:12] = b"\xff\xfe"
    with pytest.raises(ProtocolError, match="UTF-8"):
        peeker.peek(bytes(bad))


def test_the_core_refuses_what_is_not_a_buffer(core: ModuleType) -> None:
    with pytest.raises(TypeError):
        core.walk_produce_request("not bytes", 0, _topic_id)
    with pytest.raises(TypeError):
        core.peek_request_header(12, b"")
    assert core.scan_produce_response(b"", 99) is None  # a version it does not know: the Python walk says so


def _events(stream: FrameStream, chunks: list[bytes], pass_through: bool,
            frames_first: bool = False) -> list[tuple[int, bytes, bytes]]:
    """Every event of a stream fed these chunks, as bytes (with the frame's `framed` for FRAME events);
    `frames_first`: asking `next_frame()` before each `next()`, as the connection core does."""
    out: list[tuple[int, bytes, bytes]] = []
    for chunk in chunks:
        stream.feed(chunk)
        while True:
            value = stream.next_frame() if frames_first else None
            kind = FRAME
            if value is None:
                event = stream.next()
                if event is None:
                    break
                kind, value = event
            out.append((kind, bytes(value), bytes(stream.framed) if kind == FRAME else b""))
            if kind == HEAD and pass_through:
                stream.pass_through()
    return out


@settings(max_examples=150, deadline=None)
@given(payloads=st.lists(st.binary(max_size=300), max_size=8), cuts=st.lists(st.integers(0, 3000), max_size=6),
       junk=st.binary(max_size=6), pass_from=st.sampled_from([None, 64]), pass_through=st.booleans())
def test_the_core_splits_a_stream_as_the_python_reader_does(
    core: ModuleType, payloads: list[bytes], cuts: list[int], junk: bytes, pass_from: int | None, pass_through: bool,
) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads) + junk
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    chunks = [stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    results = []
    for split, frames_first in ((core.split_frame, False), (None, False), (core.split_frame, True)):
        reader = FrameStream(200, pass_from=pass_from)
        reader._split = split
        try:
            results.append((_events(reader, chunks, pass_through, frames_first), None))
        except FrameTooLarge as exc:  # a payload over 200 bytes, or junk read as a size
            results.append(([], str(exc)))
    assert results[0] == results[1] == results[2]


def test_the_cores_frame_views_are_slices_of_the_chunk(core: ModuleType) -> None:
    chunk = bytearray(struct.pack(">i", 3) + b"abc" + struct.pack(">i", 0) + b"x")
    view = memoryview(chunk)
    framed, payload, end = core.split_frame(view, 0, 100)
    assert (bytes(framed), bytes(payload), end) == (b"\x00\x00\x00\x03abc", b"abc", 7)
    assert (payload.nbytes, payload.shape, payload.strides, payload.readonly) == (3, (3,), (1,), False)
    assert bytes(payload[1:]) == b"bc" and payload.tolist() == list(b"abc") and payload.obj is chunk
    chunk[4] = ord("A")  # a view, not a copy: what the Python reader's slices are too
    assert bytes(payload) == b"Abc"
    empty = core.split_frame(view, 7, 100)
    assert (bytes(empty[0]), bytes(empty[1]), empty[2]) == (b"\x00" * 4, b"", 11)
    assert core.split_frame(view, 11, 100) is None  # one byte: not a frame yet
    assert core.split_frame(view, 0, 2) is None  # over the limit: the Python reader raises its error
    assert core.split_frame(bytes(chunk), 0, 100) is None  # not a memoryview
    assert core.split_frame(memoryview(bytes(chunk))[::2], 0, 100) is None  # not contiguous
    assert core.split_frame(view.cast("B", (3, 4)), 0, 100) is None  # not one dimension
    whole = memoryview(bytes(struct.pack(">i", 3) + b"abc"))
    whole_framed, whole_payload, whole_end = core.split_frame(whole, 0, 100)
    assert whole_framed is whole and bytes(whole_payload) == b"abc" and whole_end == 7  # a read of one frame: itself
    view.release()
    assert bytes(payload) == b"Abc"  # the slices keep the buffer
    assert core.split_frame(view, 0, 100) is None  # released


def test_the_core_tells_a_read_gathered_whole_from_anything_else(core: ModuleType) -> None:
    data = bytes(range(20))
    view, other = memoryview(data), memoryview(bytes(20))
    cases: list[tuple[list[object], bool]] = [
        ([view[0:5], view[5:20]], True),  # the read, frame by frame
        ([view], True),
        ([view[0:5]], False),  # a part of it: the rest held back or answered otherwise
        ([view[0:5], other[5:20]], False),  # a piece of another read
        ([view[0:5], bytes(view[5:20])], False),  # a copy, not a view
        ([view[0:5], view[5:20].cast("B", (3, 5))], False),  # not a byte view
        ([], False),
    ]
    for pieces, expected in cases:
        assert core.is_whole_read(data, pieces) is expected, pieces
        assert whole_read_reference(data, pieces) is expected, pieces  # type: ignore[arg-type]
    mutable = bytearray(data)
    assert core.is_whole_read(mutable, [memoryview(mutable)]) is False  # a read is bytes
    with pytest.raises(TypeError):
        core.is_whole_read(data, (view,))


def test_the_cores_view_of_a_read_is_memoryviews(core: ModuleType) -> None:
    view = core.view_of(b"abc")
    assert isinstance(view, memoryview) and view.readonly and bytes(view) == b"abc" and view.obj == b"abc"
    with pytest.raises(TypeError):
        core.view_of("not bytes")


@given(data=st.binary(max_size=12), pos=st.integers(-2, 14))
def test_the_cores_int_reads_are_structs(core: ModuleType, data: bytes, pos: int) -> None:
    view = memoryview(data)
    for read, fmt in ((core.int32_at, ">i"), (core.int16_at, ">h")):
        width = struct.calcsize(fmt)
        expected = struct.unpack_from(fmt, data, pos)[0] if 0 <= pos <= len(data) - width else None
        assert read(view, pos) == expected
        assert read(data, pos) is None  # not a memoryview: struct reads it


def test_the_core_decodes_a_topic_named_again_once(core: ModuleType) -> None:
    def topics(name: str) -> list[object]:
        frame = produce_frame_with_batches(12, -1, [(name, [(0, [1]), (1, [1])])])
        return [row[0] for row in core.walk_produce_request(frame, produce_acks_offset(frame), _topic_id)[1]]

    first, again = topics("orders"), topics("orders")
    assert first == again == ["orders", "orders"] and again[0] is first[0]  # decoded once, then the same object
    assert topics("paymänts") == ["paymänts"] * 2  # another name (UTF-8): decoded, and kept in its turn
    assert topics("orders")[0] is not first[0]  # not a cache of every name: only the last
    long_name = "t" * 249
    assert topics(long_name) == [long_name] * 2  # Kafka's longest name fits the kept bytes


def test_the_build_compiles_the_core() -> None:
    # setup.py builds protocol/_wire.c with the mypyc modules, and the stale check knows its source
    setup = (ROOT / "setup.py").read_text()
    assert '"insync_proxy.protocol._wire": "insync_proxy/protocol/_wire.c"' in setup
    assert Path(ROOT / "insync_proxy" / "protocol" / "_wire.c").is_file()
    assert C_MODULE_NAMES == {"_wire"}  # the startup line counts it as C
