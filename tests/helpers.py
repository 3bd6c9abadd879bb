"""Small helpers for tests: reading a topic back, a clock stepped by hand."""

from __future__ import annotations

from harness.waiting import wait_until


def consume_values(
    config: dict[str, object], topic: str, expected: int, timeout: float = 90.0, drain_polls: int = 0
) -> list[bytes]:
    """Values of `topic` read from the beginning by a fresh consumer group until `expected` arrived.

    `config` holds at least bootstrap.servers (plus security settings); `drain_polls` more polls after
    that let a test see records that should not be there.
    """
    import uuid

    from confluent_kafka import Consumer

    consumer = Consumer({"group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **config})
    consumer.subscribe([topic])
    values: list[bytes] = []

    def poll_once() -> None:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value())

    try:
        wait_until(lambda: poll_once() or len(values) >= expected, timeout, interval=0,
                   what=f"{expected} records from {topic}")
        for _ in range(drain_polls):
            poll_once()
    finally:
        consumer.close()
    return values


class Clock:
    """A clock a test steps by hand: `clock.now += 1.5`; called, it says the time (starts at 1000 s)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
