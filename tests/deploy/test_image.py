"""The container image, built and run for real: `scripts/build-image` builds the Dockerfile with podman, then its
entrypoint runs from the image's own filesystem against a real Kafka.

Which build the image holds follows the suite's: `./scripts/test` runs everything interpreted, so its image holds
the interpreted wheel (`COMPILE=0`, tag `localhost/insync-proxy:test`); `INSYNC_TEST_IMAGE_COMPILE=1` builds the
image as shipped, with the compiled wheel (`COMPILE=1`, the Dockerfile's default; tag `...:test-compiled`), and the
tests check that the compiled data path is what runs. CI runs these tests that way in its compiled step, after the
suite (.ci/run; `./scripts/test-compiled-image`): mypyc's compile, two minutes of CPU, stays out of the suite's time,
as the compiled unit tests do.

Where no Docker engine or image registry is reachable (this project's machines), the build runs with
podman on a Python base made from Debian's packages (scripts/build-image). `podman run` cannot run it
here (its runtime lacks the cgroup and rlimit rights of this sandbox), so the image's filesystem is
mounted (`podman create` + `podman mount`) and its ENTRYPOINT and CMD run in it as `chroot
--userspec=10001:10001` would (done in the child before exec, see ImageProxy._enter), with only the
image's ENV, in its WORKDIR: what `docker run` would run. The network is the host's, so
the proxy reaches the test cluster on loopback and the test reaches the proxy there.

The image is built once per test session (podman's layer cache makes a rebuild after a source change
quick), by one worker: the four tests are one group (tests/conftest.py work_unit). `./scripts/test` starts
the same build in the background before pytest (beside pip, on a bare machine); scripts/build-image takes a
lock, so the build here waits for that one and finds every layer cached. The base, once made, stays in
podman's image store: a second run (even from a fresh clone) builds in about 10 s. The build's duration and the image's size are printed. Skipped, with the reason printed, where
podman cannot be installed or chroot is not allowed (not root, no apt-get, not Linux).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.proxy_process import free_port_base
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster, _die_with_parent, free_port
from tests.deploy.tools import REPO
from tests.helpers import consume_values


def _compiled_image() -> bool:
    """INSYNC_TEST_IMAGE_COMPILE: 1 builds and checks the compiled image, 0 (the default) the interpreted one."""
    value = os.environ.get("INSYNC_TEST_IMAGE_COMPILE", "0")
    if value not in ("0", "1"):
        raise pytest.UsageError(f"INSYNC_TEST_IMAGE_COMPILE={value!r}: expected 0 (the interpreted image) or 1 "
                                "(the compiled image, as shipped)")
    return value == "1"


#: The build under test: the compiled wheel (as shipped) or the interpreted one (the suite's default).
COMPILED = _compiled_image()
#: Its tag; ./scripts/test's background build uses the same (scripts/test).
IMAGE = "localhost/insync-proxy:test-compiled" if COMPILED else "localhost/insync-proxy:test"
BUILD_SCRIPT = REPO / "scripts" / "build-image"
#: A cold build (base image, apt, pip, mypyc on 2 shared cores) takes minutes; a warm one seconds.
BUILD_TIMEOUT = 2400.0
UID = "10001"
STARTING_ERRORS = (urllib.error.URLError, ConnectionError, TimeoutError, OSError)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(BUILD_TIMEOUT + 600)]


def _cannot_build_reason() -> str | None:
    """Why this machine cannot build and chroot-run the image, or None."""
    if sys.platform != "linux":
        return f"podman and chroot need Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "not root: installing podman, making the base (debootstrap) and chroot need root"
    if shutil.which("podman") is None and shutil.which("apt-get") is None:
        return "no podman, and no apt-get to install it"
    if shutil.which("chroot") is None:
        return "no chroot command"
    return None


def _podman(*args: str, timeout: float = 120.0) -> str:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"podman {' '.join(args)}: {result.stderr.strip()}"
    return result.stdout.strip()


@dataclass(frozen=True)
class BuiltImage:
    """The image under test and its configuration (`podman image inspect`'s Config)."""

    name: str
    config: dict[str, Any]
    size_bytes: int
    build_seconds: float

    @property
    def env(self) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.config.get("Env") or [])

    @property
    def healthcheck(self) -> list[str]:
        """The HEALTHCHECK command as an argv (exec form: ["CMD", ...])."""
        test = (self.config.get("Healthcheck") or {}).get("Test") or []
        assert test[:1] == ["CMD"], f"HEALTHCHECK must be in exec form, got {test}"
        return list(test[1:])


@pytest.fixture(scope="session")
def built_image(tmp_path_factory: pytest.TempPathFactory) -> BuiltImage:
    """The Dockerfile built once per session with scripts/build-image (COMPILE=1 or 0: `COMPILED`)."""
    reason = _cannot_build_reason()
    if reason is not None:
        print(f"SKIP test_image: {reason}")
        pytest.skip(reason)
    log = tmp_path_factory.mktemp("image-build") / "build.log"
    started = time.monotonic()
    with log.open("w") as out:
        result = subprocess.run([str(BUILD_SCRIPT), IMAGE], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env={**os.environ, "COMPILE": "1" if COMPILED else "0"},
                                timeout=BUILD_TIMEOUT)
    elapsed = time.monotonic() - started
    lines = log.read_text(errors="replace").splitlines()
    if result.returncode == 3:  # the script's "cannot build here": its last line says why
        reason = lines[-1] if lines else "scripts/build-image cannot build here"
        print(f"SKIP test_image: {reason}")
        pytest.skip(reason)
    assert result.returncode == 0, f"scripts/build-image failed ({log}):\n" + "\n".join(lines[-40:])
    inspected = json.loads(_podman("image", "inspect", IMAGE))[0]
    # podman keeps the HEALTHCHECK (docker format only) beside Config, not in it
    config = {**inspected["Config"], "Healthcheck": inspected.get("Healthcheck") or inspected["Config"].get("Healthcheck")}
    image = BuiltImage(IMAGE, config, int(inspected["Size"]), elapsed)
    print(f"\nimage {IMAGE} ({'compiled' if COMPILED else 'interpreted'}): scripts/build-image took {elapsed:.0f} s, image size {image.size_bytes / 1e6:.0f} MB")
    return image


@dataclass
class ImageProxy:
    """The image's ENTRYPOINT + CMD running from a mounted container filesystem with chroot."""

    image: BuiltImage
    bootstrap_servers: str
    bootstrap_port: int = field(default_factory=free_port)
    broker_port_base: int = field(default_factory=free_port_base)
    admin_port: int = field(default_factory=free_port)
    container: str = ""
    root: Path = Path("/nonexistent")
    process: subprocess.Popen[bytes] | None = None
    log_file: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="insync-proxy-image-")) / "proxy.log")

    def mount(self) -> None:
        """A container of the image (never started by podman) and its filesystem mounted."""
        self.container = _podman("create", "--name", f"insync-proxy-smoke-{uuid.uuid4().hex[:8]}", self.image.name)
        self.root = Path(_podman("mount", self.container))

    def environment(self, **extra: str) -> dict[str, str]:
        """The image's ENV, the brokers and the admin port (as `docker run -e` would set them)."""
        return {
            **self.image.env,
            "INSYNC_PROXY_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            # the HEALTHCHECK reads it too (Dockerfile): the admin port when it is not 9190
            "INSYNC_PROXY_ADMIN_PORT": str(self.admin_port),
            **extra,
        }

    def _enter(self) -> None:
        """In the child, before exec: what `chroot --userspec=10001:10001 ROOT` does, then cd WORKDIR, and
        the parent-death signal set after the uid change (a change of credentials clears it), so the proxy
        dies with the test process even if that is killed."""
        os.chroot(self.root)
        os.chdir(self.image.config.get("WorkingDir") or "/")
        os.setgroups([])
        os.setgid(int(UID))
        os.setuid(int(UID))
        _die_with_parent()

    def _popen_args(self, **env: str) -> dict[str, Any]:
        """Run as the image's USER, with only the image's ENV (the executable found on the image's PATH,
        inside the chroot), in its WORKDIR."""
        user = self.image.config.get("User") or ""
        assert user.split(":")[0] == UID, f"the image runs as {user!r}, not uid {UID}"
        return {"env": self.environment(**env), "preexec_fn": self._enter, "stdin": subprocess.DEVNULL}

    def start(self) -> None:
        """ENTRYPOINT + CMD, plus the free ports this machine has for the listener (other tests run too)."""
        command = [*self.image.config["Entrypoint"], *self.image.config["Cmd"],
                   "--bootstrap-port", str(self.bootstrap_port), "--broker-port-base", str(self.broker_port_base)]
        with self.log_file.open("ab") as log:
            # the debug scan of every response for a real broker address (counted in address_leaks_total)
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            **self._popen_args(INSYNC_PROXY_DEBUG_ADDRESS_LEAK_CHECK="true"))

    def run(self, command: Sequence[str], timeout: float = 30.0, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, **self._popen_args(**env))

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.bootstrap_port}"

    def ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the image's proxy exited with {self.process.returncode}:\n{self.log_tail()}")
        with urllib.request.urlopen(f"{self.admin_url}/readyz", timeout=2) as response:
            return bool(response.status == 200)

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"{self.admin_url}/metrics", timeout=5) as response:
            return str(response.read().decode())

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self) -> int | None:
        """SIGTERM (the image's STOPSIGNAL), SIGKILL after 40 s; then the whole session, then podman's
        mount and container: nothing the test started is left behind."""
        code = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(40)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(10)
            code = self.process.returncode
            try:  # anything the proxy started in its session (it starts none today)
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.container:
            subprocess.run(["podman", "umount", self.container], capture_output=True, timeout=60)
            subprocess.run(["podman", "rm", "--force", "--volumes", self.container], capture_output=True, timeout=60)
            self.container = ""
        return code


@pytest.fixture
def image_proxy(built_image: BuiltImage, kafka_cluster: LocalKafkaCluster) -> Iterator[ImageProxy]:
    """The image's entrypoint, ready (`/readyz`), in front of the test cluster."""
    proxy = ImageProxy(built_image, kafka_cluster.bootstrap_servers)
    try:
        proxy.mount()
        proxy.start()
        wait_until(proxy.ready, timeout=90, what="the image's proxy to be ready (/readyz)", retry_on=STARTING_ERRORS)
        yield proxy
    finally:
        proxy.stop()


def _samples(metrics: str, name: str) -> list[dict[str, str]]:
    """The label sets of `name`'s samples whose value is not 0."""
    found = []
    for line in metrics.splitlines():
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$", line)
        if m and m.group(1) == name and float(m.group(3)) != 0:
            found.append(dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or "")))
    return found


def test_image_entrypoint_as_uid_10001_produces_through_the_build_it_holds(
    image_proxy: ImageProxy, kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    """Given the built image's entrypoint running as uid 10001 with its default config, when a real client
    produces with acks=all through it, then the records are read back through it, /metrics counts them,
    and the build the image holds (compiled or interpreted: `COMPILED`) is what runs."""
    from confluent_kafka import Producer

    assert image_proxy.process is not None
    status = Path(f"/proc/{image_proxy.process.pid}/status").read_text()
    assert re.search(rf"^Uid:\s+{UID}\s", status, re.M), status

    kafka_cluster.create_topic(topic_name, 3, 3)
    values = [f"image-{i}".encode() for i in range(30)]
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": image_proxy.bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 60000})
    for value in values:
        producer.produce(topic_name, value, on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(90) == 0, "records still undelivered after 90 s"
    assert errors == []

    read = consume_values({"bootstrap.servers": image_proxy.bootstrap}, topic_name, len(values))
    assert sorted(read) == sorted(values)

    metrics = image_proxy.metrics_text()
    produced = [s for s in _samples(metrics, "insync_proxy_produce_partitions_total") if s.get("topic") == topic_name]
    assert produced and {s["acks_requested"] for s in produced} == {"-1"}, produced
    assert _samples(metrics, "insync_proxy_address_leaks_total") == []  # the debug scan is on: start()
    build = _samples(metrics, "insync_proxy_build_info")
    assert [b.get("compiled") for b in build] == ["true" if COMPILED else "false"], build
    expected = "data path: compiled with mypyc" if COMPILED else "data path: interpreted"
    assert expected in image_proxy.log_text(), image_proxy.log_tail()


def test_image_holds_the_source_under_test(built_image: BuiltImage) -> None:
    """Every Python file of the installed package in the image is the one this test run imports: the
    image is not a stale build (e.g. a layer cache that reused an older install)."""
    import insync_proxy

    package = Path(insync_proxy.__file__).parent

    def source(relative: Path) -> Path:  # through the package's links to the top-level folders
        return package / relative

    image = ImageProxy(built_image, bootstrap_servers="")
    try:
        image.mount()
        installed = sorted(image.root.glob("usr/local/lib/python3*/site-packages/insync_proxy"))
        assert len(installed) == 1, installed
        files = list(installed[0].rglob("*.py"))
        assert len(files) > 50, files
        differ = [str(f.relative_to(installed[0])) for f in files
                  if not source(f.relative_to(installed[0])).is_file()
                  or f.read_bytes() != source(f.relative_to(installed[0])).read_bytes()]
        assert differ == [], f"the image's package is not the source under test: {differ[:10]}"
    finally:
        image.stop()


def test_image_healthcheck_command_passes_against_the_running_proxy_and_fails_without_one(
    image_proxy: ImageProxy,
) -> None:
    """Given the running image, the Dockerfile's HEALTHCHECK command (as the image stores it) exits 0;
    pointed at a port nobody serves, it fails: it checks the proxy, not only that Python starts."""
    command = image_proxy.image.healthcheck
    healthy = image_proxy.run(command)
    assert healthy.returncode == 0, healthy.stderr
    nobody = image_proxy.run(command, INSYNC_PROXY_ADMIN_PORT=str(free_port()))
    assert nobody.returncode != 0


def test_image_stops_on_its_stop_signal_and_drains(image_proxy: ImageProxy) -> None:
    """Given the running image, its STOPSIGNAL ends the proxy cleanly (exit 0, the drain logged)."""
    assert image_proxy.image.config.get("StopSignal") == "SIGTERM"
    assert image_proxy.stop() == 0, image_proxy.log_tail()
    assert "stopped" in image_proxy.log_text(), image_proxy.log_tail()
