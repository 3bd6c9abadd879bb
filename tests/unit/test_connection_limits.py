"""When a listener refuses a connection: max_connections and the file descriptor limit (plain numbers)."""

from __future__ import annotations

from insync_proxy.proxy.datapath.listeners import FD_HEADROOM, FDS_PER_CONNECTION, FileDescriptors


def test_far_from_the_limit_nothing_is_counted() -> None:
    counted: list[bool] = []

    def count() -> int:
        counted.append(True)
        return 0

    fds = FileDescriptors(limit=1_000_000, count_open=count)
    assert not fds.full(1000)
    assert counted == []  # /proc/self/fd is listed only near the limit


def test_near_the_limit_the_open_descriptors_decide() -> None:
    open_now = 100
    fds = FileDescriptors(limit=256, count_open=lambda: open_now)
    assert not fds.full(30)
    # The accepted socket is counted already; its upstream one and the headroom must fit too
    open_now = 256 - FD_HEADROOM - (FDS_PER_CONNECTION - 1)
    assert not fds.full(30)
    open_now += 1
    assert fds.full(30)


def test_connections_whose_upstream_is_not_open_yet_count_too() -> None:
    # A burst of accepts: 110 client sockets open, none of their upstream connections yet
    fds = FileDescriptors(limit=256, count_open=lambda: 120)
    fds.base = 10
    assert fds.full(110)  # 10 + 2 x 111 + 32 of headroom is above 256, whatever /proc says (121 + 1 + 32)
    assert not fds.full(50)
