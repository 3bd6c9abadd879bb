"""Bad input costs one connection, never the process nor other connections; SIGTERM drains."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

from confluent_kafka import Producer

from harness.proxy_process import ProxyProcess
from harness.raw_client import RawKafkaClient, batch, produce_request
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.protocol import ApiKey, ProduceResponse


def closed_by_proxy(sock: socket.socket, timeout: float = 30.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_garbage_huge_and_truncated_frames_close_only_their_own_connection(
    proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    kafka_cluster.create_topic(topic_name, 1, 3)
    producer = Producer({"bootstrap.servers": proxy.bootstrap(), "acks": "all", "linger.ms": 1})
    delivered: list[Any] = []
    stop = threading.Event()

    def keep_producing() -> None:
        i = 0
        while not stop.is_set():
            producer.produce(topic_name, f"steady-{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
            producer.poll(0.01)
            i += 1

    errors_before = proxy.metric("insync_proxy_frame_errors_total")
    worker = threading.Thread(target=keep_producing)
    worker.start()
    try:
        wait_until(lambda: len(delivered) > 20, 60, what="the steady producer to get going")
        host, port = proxy.bootstrap().rsplit(":", 1)
        # Garbage: not a Kafka frame at all (an HTTP request on the Kafka port)
        garbage = socket.create_connection((host, int(port)))
        garbage.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)) * 4)
        # A 2 GiB size prefix
        huge = socket.create_connection((host, int(port)))
        huge.sendall(struct.pack(">i", 2**31 - 1) + b"\x00" * 64)
        # A frame cut mid-way, then the client goes away
        cut = socket.create_connection((host, int(port)))
        cut.sendall(struct.pack(">i", 1000) + b"\x00\x03\x00\x0c" + b"\x00" * 100)
        cut.close()
        assert closed_by_proxy(garbage)
        assert closed_by_proxy(huge)
        garbage.close()
        huge.close()
        count_before = len(delivered)
        wait_until(lambda: len(delivered) > count_before + 50, 60, what="the producer to keep going")
    finally:
        stop.set()
        worker.join(30)
    assert producer.flush(60) == 0
    assert all(err is None for err in delivered)
    assert proxy.alive()
    assert proxy.metric("insync_proxy_frame_errors_total") >= errors_before + 2
    assert proxy.metric("insync_proxy_frame_errors_total", kind="too_large") >= 1
    assert "bad request frame" in proxy.log_file.read_text()


def test_sigterm_drains_in_flight_requests_then_exits(kafka_cluster: LocalKafkaCluster, topic_name: str) -> None:
    # A proxy of its own: this test stops it
    proxy = ProxyProcess(kafka_cluster).start()
    try:
        kafka_cluster.create_topic(topic_name, 1, 3)
        leader = kafka_cluster.wait_for_leader(topic_name, 0)
        with RawKafkaClient(f"127.0.0.1:{proxy.broker_port(leader)}") as client:
            # Given a request in flight that takes a while (a produce waiting on a paused follower)
            follower = next(b for b in kafka_cluster.brokers if b != leader)
            assert client.produce({(topic_name, 0): batch(b"warm")}, acks=-1)[(topic_name, 0)].error_code in (0, 6)
            kafka_cluster.pause_broker(follower)
            try:
                produced_before = proxy.metric("insync_proxy_requests_total", api="Produce")
                correlation_id = client.send(produce_request({(topic_name, 0): batch(b"in-flight")}, acks=-1), 9)
                wait_until(lambda: proxy.metric("insync_proxy_requests_total", api="Produce") > produced_before, 10,
                           what="the proxy to forward the in-flight request")
                started = time.monotonic()
                assert proxy.process is not None
                proxy.process.terminate()
                # Then new connections are refused while the in-flight request still gets its answer
                wait_until(lambda: not _can_connect(proxy.bootstrap()), 10, what="the listener to close")
            finally:
                kafka_cluster.resume_broker(follower)
            response = client.receive(ApiKey.PRODUCE, 9, correlation_id, ProduceResponse)
            assert len(response.responses) == 1
        exit_code = proxy.process.wait(40)
        assert exit_code == 0
        assert time.monotonic() - started < 35  # within the drain timeout (30 s) plus margin
        assert "stopping:" in proxy.log_file.read_text()
    finally:
        proxy.stop()


def _can_connect(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False
