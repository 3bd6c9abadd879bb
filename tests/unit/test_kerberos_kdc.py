"""The dev KDC (devcluster/kerberos.py) and the proxy's GSSAPI login (proxy/controlplane/kerberos.py) against a
real MIT Kerberos KDC on 127.0.0.1: a keytab logs in, and each usual failure is named in one line.

The broker's side of the login is played by python-gssapi as an acceptor with the broker's keytab (RFC 4752
server steps), so no JVM starts. Skipped, with the reason, where MIT's krb5kdc or the gssapi package is not
installed; the clock-skew test also needs libfaketime (apt-get install faketime).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from insync_proxy.devcluster import kerberos as devkdc
from insync_proxy.devcluster.kerberos import FAKETIME_LIBRARY, KdcError, LocalKdc, ensure_hosts

_MISSING = [name for name in ("krb5kdc", "kdb5_util", "kadmin.local")
            if shutil.which(name) is None and shutil.which(name, path="/usr/sbin:/usr/local/sbin:/sbin") is None]
pytestmark = pytest.mark.skipif(
    bool(_MISSING), reason=f"MIT Kerberos KDC not installed ({', '.join(_MISSING)} missing): {devkdc.INSTALL_HINT}")

gssapi = pytest.importorskip("gssapi", reason="the gssapi package is not installed: pip install gssapi")

from insync_proxy.proxy.controlplane.kerberos import (  # noqa: E402 - after the skip for a missing gssapi
    NO_SECURITY_LAYER,
    KerberosError,
    KerberosLogin,
    gssapi_exchange,
)

BROKER_HOST = "kafka-1.insync.test"
PROXY = "insync-proxy"


@pytest.fixture(scope="module", autouse=True)
def _restore_krb5_config() -> Iterator[None]:
    """The logins set KRB5_CONFIG (process-wide, as the proxy does): put it back for the rest of the run."""
    before = os.environ.get("KRB5_CONFIG")
    yield
    if before is None:
        os.environ.pop("KRB5_CONFIG", None)
    else:
        os.environ["KRB5_CONFIG"] = before


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKdc]:
    with LocalKdc(tmp_path_factory.mktemp("kdc")) as running:
        running.add_principal(PROXY)
        running.add_principal(f"kafka/{BROKER_HOST}")
        running.add_principal("client")
        yield running


class GssapiBroker:
    """The broker's side of SASL GSSAPI (RFC 4752), as Kafka's GssKrb5Server plays it: accept the context,
    then offer "no security layer" in a wrapped 4-byte message and read the client's wrapped choice."""

    def __init__(self, keytab: Path) -> None:
        # rcache none: the acceptor's replay cache would otherwise be a file under /var/tmp.
        creds = gssapi.Credentials(usage="accept", store={"keytab": str(keytab), "rcache": "none:"})
        self.context = gssapi.SecurityContext(creds=creds, usage="accept")
        self.choice: bytes | None = None
        self.offered = False

    async def send(self, token: bytes) -> bytes:
        if not self.context.complete:
            return bytes(self.context.step(token) or b"")
        if not self.offered:
            assert token == b"", "after mutual authentication the client asks for the offer with an empty token"
            self.offered = True
            return bytes(self.context.wrap(bytes([NO_SECURITY_LAYER]) + (65536).to_bytes(3, "big"), False).message)
        self.choice = self.context.unwrap(token).message
        return b""


def _login(kdc: LocalKdc, principal: str = PROXY, keytab_of: str | None = None) -> KerberosLogin:
    return KerberosLogin(principal=kdc.principal(principal), keytab=str(kdc.keytab_path(keytab_of or principal)),
                         krb5_conf=str(kdc.krb5_conf))


async def _fail(login: KerberosLogin, host: str = BROKER_HOST) -> str:
    async def send(token: bytes) -> bytes:
        raise AssertionError("the login failed before anything reached the broker")

    with pytest.raises(KerberosError) as raised:
        await asyncio.wait_for(gssapi_exchange(send, login, host), 15)
    message = str(raised.value)
    # One line, and no chained traceback under it
    assert "\n" not in message and raised.value.__cause__ is None
    assert raised.value.__context__ is None or raised.value.__suppress_context__
    return message


async def test_a_principals_keytab_gets_a_ticket_and_logs_in(kdc: LocalKdc) -> None:
    # Given the proxy's keytab and a broker holding kafka/kafka-1.insync.test's keytab
    broker = GssapiBroker(kdc.keytab_path(f"kafka/{BROKER_HOST}"))
    # When the proxy logs in
    await asyncio.wait_for(gssapi_exchange(broker.send, _login(kdc), BROKER_HOST), 15)
    # Then the broker knows it as insync-proxy@INSYNC.TEST, which chose no security layer and names itself
    assert str(broker.context.initiator_name) == f"{PROXY}@{kdc.realm}"
    assert broker.choice == bytes([NO_SECURITY_LAYER, 0, 0, 0]) + f"{PROXY}@{kdc.realm}".encode()
    # And the KDC issued the ticket (the keytab got a TGT, then a service ticket)
    log = kdc.log_file.read_text()
    assert f"{PROXY}@{kdc.realm} for krbtgt/{kdc.realm}@{kdc.realm}" in log
    assert f"{PROXY}@{kdc.realm} for kafka/{BROKER_HOST}@{kdc.realm}" in log


def test_kinit_with_the_realms_krb5_conf_keeps_to_the_directory(kdc: LocalKdc) -> None:
    # Given the client's keytab; When kinit runs with the KDC's environment
    keytab = kdc.keytab_path("client")
    subprocess.run(["kinit", "-kt", str(keytab), "client"], env=kdc.env, check=True, timeout=15)
    listed = subprocess.run(["klist"], env=kdc.env, capture_output=True, text=True, check=True, timeout=15).stdout
    # Then the renewable ticket lands in the directory's cache, not /tmp/krb5cc_<uid>
    assert f"Ticket cache: FILE:{kdc.ccache}" in listed and f"krbtgt/{kdc.realm}@{kdc.realm}" in listed
    assert "renew until" in listed


async def test_a_keytab_without_the_principal_is_named(kdc: LocalKdc) -> None:
    # Given the client's keytab, which holds no key for insync-proxy
    login = _login(kdc, PROXY, keytab_of="client")
    # Then
    assert await _fail(login) == (
        f"keytab {login.keytab} has no key for principal {PROXY}@{kdc.realm}: list it with `klist -kt {login.keytab}`")


async def test_a_keytab_that_does_not_exist_is_named(kdc: LocalKdc) -> None:
    login = KerberosLogin(principal=PROXY, keytab=str(kdc.directory / "nope.keytab"), krb5_conf=str(kdc.krb5_conf))
    assert await _fail(login) == f"keytab {kdc.directory / 'nope.keytab'} does not exist"


async def test_an_unknown_service_principal_is_named(kdc: LocalKdc) -> None:
    # Given a broker reached by address: its principal names a host, kafka/127.0.0.1 is nobody
    message = await _fail(_login(kdc), host="127.0.0.1")
    # Then
    assert message.startswith(f"no service principal kafka/127.0.0.1@{kdc.realm}: the brokers' principals use "
                              "another host name than 127.0.0.1: "), message


async def test_a_kdc_that_is_down_is_named(tmp_path: Path) -> None:
    # Given a realm whose KDC has stopped (nothing listens on its port, TCP or UDP)
    with LocalKdc(tmp_path, realm="DOWN.TEST") as down:
        down.add_principal(PROXY)
    assert not down.running()
    # Then
    message = await _fail(_login(down))
    assert message == "cannot reach a KDC for realm DOWN.TEST: check krb5.conf's [realms] and that the KDC is up"


@pytest.mark.skipif(not FAKETIME_LIBRARY.exists(), reason=f"libfaketime not installed ({FAKETIME_LIBRARY}): "
                    "apt-get install faketime")
async def test_clock_skew_is_named(tmp_path: Path) -> None:
    # Given a KDC whose clock is 10 minutes ahead, and clients that do not correct for it (kdc_timesync 0:
    # with MIT's default, 1, they would adjust to the KDC's time)
    with LocalKdc(tmp_path, realm="SKEW.TEST", clock_offset=600, kdc_timesync=False) as skewed:
        skewed.add_principal(PROXY)
        # Then
        message = await _fail(_login(skewed))
    assert message == ("clock skew too great: the proxy's clock and the KDC's differ by more than 5 minutes: "
                       "sync the clocks (NTP)")


def test_add_principal_is_idempotent_and_a_failing_step_carries_its_stderr(kdc: LocalKdc) -> None:
    # Given a principal that exists: adding it again writes a keytab with the same key version
    keytab = kdc.add_principal("client")
    listed = subprocess.run(["klist", "-kt", str(keytab)], env=kdc.env, capture_output=True, text=True,
                            check=True, timeout=15).stdout
    assert "   1 " in listed and f"client@{kdc.realm}" in listed
    # When kadmin.local refuses a name (it exits 0 all the same): KdcError with its words
    with pytest.raises(KdcError, match="Malformed representation of principal"):
        kdc.add_principal("a@b@c")


def test_a_missing_kdc_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    with pytest.raises(KdcError, match="krb5kdc is not installed .*apt-get install krb5-kdc krb5-admin-server"):
        LocalKdc(tmp_path).start()


def test_a_port_in_use_is_refused_before_krb5kdc_starts(tmp_path: Path, kdc: LocalKdc) -> None:
    # Given the running KDC's port: a second KDC there would share it (krb5kdc binds with SO_REUSEADDR)
    second = LocalKdc(tmp_path, port=kdc.port)
    try:
        with pytest.raises(KdcError, match=f"port {kdc.port} of 127.0.0.1 is in use"):
            second.start(timeout=15)
    finally:
        second.stop()
    assert not second.running()


def test_ensure_hosts_leaves_names_that_resolve_alone(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    ensure_hosts(["localhost"], hosts_file=hosts)
    assert hosts.read_text() == "127.0.0.1 localhost\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may edit the hosts file")
def test_ensure_hosts_appends_a_marked_block_and_says_when_it_does_not_help(tmp_path: Path) -> None:
    # Given a hosts file the resolver does not read (so the name keeps not resolving)
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost")
    name = "nowhere-ensure-hosts.insync.test"
    try:
        socket.getaddrinfo(name, None)
        pytest.skip(f"{name} resolves on this machine")
    except socket.gaierror:
        pass
    # When / Then: the block is appended, and the name still not resolving is reported
    with pytest.raises(KdcError, match=f"{name} still do not resolve to 127.0.0.1"):
        ensure_hosts([name], hosts_file=hosts)
    assert hosts.read_text() == (f"127.0.0.1 localhost\n# BEGIN {devkdc.HOSTS_MARKER}\n127.0.0.1 {name}\n"
                                 f"# END {devkdc.HOSTS_MARKER}\n")
