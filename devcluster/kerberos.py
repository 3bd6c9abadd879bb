"""A real MIT Kerberos KDC on 127.0.0.1 for the tests and the dev cluster (GSSAPI listeners).

Everything lives in one directory: kdc.conf, a krb5.conf for the clients, the database, its stash, the log
and one keytab per principal. Nothing global is read or written: the MIT tools run with KRB5_CONFIG and
KRB5_KDC_PROFILE pointing at the directory's files, so /etc/krb5.conf and /etc/krb5kdc are left alone.
The one exception is `ensure_hosts`, which maps the test host names (the brokers' service principals name
hosts, e.g. kafka/kafka-1.insync.test) to 127.0.0.1 in /etc/hosts.

Clients use the directory's krb5.conf: `KRB5_CONFIG=<kdc.krb5_conf>` for MIT libraries (kinit, kcat's
Cyrus SASL, python-gssapi) and `-Djava.security.krb5.conf=<kdc.krb5_conf>` for the JVM (which ignores
KRB5_CONFIG). It maps `.insync.test` to the realm, does no DNS (no KDC or realm lookups, no canonicalisation,
no reverse lookups of 127.0.0.1) and speaks TCP first (udp_preference_limit = 1). Principals require
pre-authentication (as in Active Directory and most MIT realms).

Clock skew: MIT clients correct for a KDC whose clock differs from theirs (krb5.conf's kdc_timesync, 1 by
default, an integer: "false" is not understood and leaves it on), so a skewed client only fails against the
KDC with `kdc_timesync=False` here. `clock_offset` runs krb5kdc that many seconds ahead with libfaketime
(apt-get install faketime) to provoke it.

    with LocalKdc(tmp_path) as kdc:
        keytab = kdc.add_principal("kafka/kafka-1.insync.test")
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

__all__ = ["DEFAULT_REALM", "TEST_DOMAIN", "KdcError", "LocalKdc", "ensure_hosts", "install_kdc"]

DEFAULT_REALM = "INSYNC.TEST"
#: The DNS domain mapped to the realm: host-based principals of this domain (kafka/kafka-1.insync.test) belong to it.
TEST_DOMAIN = "insync.test"
#: Marks the lines ensure_hosts adds to /etc/hosts.
HOSTS_MARKER = "insync-proxy devcluster kerberos"
INSTALL_HINT = "apt-get install krb5-kdc krb5-admin-server"
#: Debian's libfaketime (apt-get install faketime), for a KDC whose clock is off (clock_offset).
FAKETIME_LIBRARY = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
#: Seconds a step (kdb5_util, kadmin.local) may take.
COMMAND_TIMEOUT = 60.0


class KdcError(RuntimeError):
    """The KDC is not installed, a step of setting it up failed (the message carries the command's stderr), or
    the test host names cannot be mapped."""


def _tool(name: str) -> str:
    """The path of an MIT Kerberos program (they live in /usr/sbin, which a user's PATH may lack)."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin:/sbin")
    if found is None:
        raise KdcError(f"{name} is not installed (MIT Kerberos KDC): {INSTALL_HINT}")
    return found


def install_kdc(say: Callable[[str], None] = print) -> None:
    """Install MIT Kerberos's KDC from Debian's packages when it is missing and this is root on a Debian-like
    machine (as `dev-cluster up --security gssapi` does on a bare machine); KdcError says what to run otherwise."""
    if shutil.which("krb5kdc", path="/usr/sbin:/usr/local/sbin:/sbin:" + os.environ.get("PATH", "")):
        return
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise KdcError(f"krb5kdc is not installed (MIT Kerberos KDC): {INSTALL_HINT}")
    say("installing MIT Kerberos's KDC (Debian packages krb5-kdc krb5-admin-server) ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in ([apt, "-o", "DPkg::Lock::Timeout=600", "update", "-qq"],
                 [apt, "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-qq", "--no-install-recommends",
                  "krb5-kdc", "krb5-admin-server"]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            raise KdcError(f"{' '.join(argv[:1] + argv[3:])} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout)[-500:]}; {INSTALL_HINT}")


def _port_in_use(port: int) -> bool:
    """Whether TCP or UDP port `port` of 127.0.0.1 is taken (krb5kdc sets SO_REUSEADDR, and may then share a
    port with another KDC instead of failing)."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                return True
    return False


def _free_tcp_and_udp_port() -> int:
    """A port free on 127.0.0.1 for both TCP and UDP (the KDC listens on both)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind(("127.0.0.1", 0))
            port = int(tcp.getsockname()[1])
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise KdcError("no port is free for both TCP and UDP on 127.0.0.1")


class LocalKdc:
    """An MIT Kerberos KDC (krb5kdc) for `realm` on 127.0.0.1:`port` (UDP and TCP), its files in `directory`.

    `port` None: a free one. start() creates the database and starts the KDC; add_principal() makes a
    principal with a random key and returns its keytab; stop() ends the KDC (the files stay, and start()
    again serves the same database). A context manager: start on enter, stop on exit.

    `clock_offset`: seconds krb5kdc's clock runs ahead of the machine's (libfaketime; 0: the real clock).
    `kdc_timesync`: written to krb5.conf; False makes MIT clients report clock skew instead of correcting it.
    Both can change between stop() and start().
    """

    def __init__(self, directory: Path, realm: str = DEFAULT_REALM, port: int | None = None, *,
                 clock_offset: int = 0, kdc_timesync: bool = True) -> None:
        self.directory = Path(directory)
        self.realm = realm
        self.port = port if port is not None else _free_tcp_and_udp_port()
        self.clock_offset = clock_offset
        self.kdc_timesync = kdc_timesync
        self.process: subprocess.Popen[bytes] | None = None
        #: Seconds the last start() took (database creation included), for the curious.
        self.start_seconds: float | None = None

    # ----------------------------------------------------------------- files
    @property
    def krb5_conf(self) -> Path:
        """The clients' krb5.conf: KRB5_CONFIG for MIT libraries, -Djava.security.krb5.conf for the JVM."""
        return self.directory / "krb5.conf"

    @property
    def kdc_conf(self) -> Path:
        """The KDC's profile (KRB5_KDC_PROFILE): where the database is, which address it listens on."""
        return self.directory / "kdc.conf"

    @property
    def log_file(self) -> Path:
        return self.directory / "kdc.log"

    @property
    def keytab_dir(self) -> Path:
        return self.directory / "keytabs"

    @property
    def ccache(self) -> Path:
        """The credential cache of this realm's krb5.conf (default_ccache_name): kinit never touches /tmp/krb5cc_*."""
        return self.directory / "ccache"

    @property
    def env(self) -> dict[str, str]:
        """The process environment with this KDC's configuration: for kinit, klist, kcat and the MIT tools."""
        return {
            **os.environ,
            "KRB5_CONFIG": str(self.krb5_conf),
            "KRB5_KDC_PROFILE": str(self.kdc_conf),
            "KRB5CCNAME": f"FILE:{self.ccache}",
        }

    def principal(self, name: str) -> str:
        """`name` with the realm: "client" -> "client@INSYNC.TEST"; a name with a realm is kept."""
        return name if "@" in name else f"{name}@{self.realm}"

    def keytab_path(self, name: str) -> Path:
        """Where add_principal(name) writes the keytab: keytabs/kafka_kafka-1.insync.test.keytab."""
        short = name.split("@", 1)[0].replace("/", "_")
        return self.keytab_dir / f"{short}.keytab"

    def _write_configuration(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keytab_dir.mkdir(exist_ok=True)
        address = f"127.0.0.1:{self.port}"
        self.kdc_conf.write_text(
            "[kdcdefaults]\n"
            f"    kdc_listen = {address}\n"
            f"    kdc_tcp_listen = {address}\n"
            "\n"
            "[realms]\n"
            f"    {self.realm} = {{\n"
            f"        database_name = {self.directory / 'principal'}\n"
            f"        key_stash_file = {self.directory / 'stash'}\n"
            f"        acl_file = {self.directory / 'kadm5.acl'}\n"
            f"        kdc_listen = {address}\n"
            f"        kdc_tcp_listen = {address}\n"
            "        max_life = 24h 0m 0s\n"
            "        max_renewable_life = 7d 0h 0m 0s\n"
            "        default_principal_flags = +preauth\n"
            # AES only: what Java 17 and librdkafka both speak by default.
            "        supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n"
            "    }\n"
            "\n"
            "[logging]\n"
            f"    kdc = FILE:{self.log_file}\n"
            f"    admin_server = FILE:{self.directory / 'kadmin.log'}\n"
            f"    default = FILE:{self.log_file}\n"
        )
        (self.directory / "kadm5.acl").write_text("")
        self.krb5_conf.write_text(
            "[libdefaults]\n"
            f"    default_realm = {self.realm}\n"
            "    dns_lookup_kdc = false\n"
            "    dns_lookup_realm = false\n"
            "    rdns = false\n"
            "    dns_canonicalize_hostname = false\n"
            "    udp_preference_limit = 1\n"
            "    ticket_lifetime = 24h\n"
            "    renew_lifetime = 7d\n"
            "    forwardable = true\n"
            # An integer to MIT's profile code ("false" would be ignored).
            f"    kdc_timesync = {1 if self.kdc_timesync else 0}\n"
            f"    default_ccache_name = FILE:{self.ccache}\n"
            "\n"
            "[realms]\n"
            f"    {self.realm} = {{\n"
            f"        kdc = {address}\n"
            "    }\n"
            "\n"
            "[domain_realm]\n"
            f"    .{TEST_DOMAIN} = {self.realm}\n"
            f"    {TEST_DOMAIN} = {self.realm}\n"
        )

    # ----------------------------------------------------------------- commands
    def _run(self, argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
        try:
            result = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT,
                                    stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise KdcError(f"{what}: `{' '.join(argv)}` did not finish in {COMMAND_TIMEOUT:.0f}s") from exc
        if result.returncode != 0:
            raise KdcError(f"{what}: `{' '.join(argv)}` failed (exit {result.returncode}):\n"
                           f"{(result.stderr or result.stdout).strip()}")
        return result

    def _kadmin(self, query: str, what: str) -> str:
        """One kadmin.local query. kadmin.local -q exits 0 even when the query failed: its stderr says so."""
        result = self._run([_tool("kadmin.local"), "-r", self.realm, "-q", query], what)
        # "No policy specified for X; defaulting to no policy" is kadmin's only chatter on stderr.
        errors = [line for line in result.stderr.splitlines()
                  if line.strip() and "defaulting to no policy" not in line]
        if errors:
            raise KdcError(f"{what}: kadmin.local -q {query!r} failed:\n" + "\n".join(errors))
        return result.stdout

    # ----------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 30.0) -> LocalKdc:
        """Write the configuration, create the database (once) and start krb5kdc; return once it answers."""
        if self.process is not None and self.process.poll() is None:
            return self
        started = time.monotonic()
        krb5kdc = _tool("krb5kdc")
        kdb5_util = _tool("kdb5_util")
        _tool("kadmin.local")
        if _port_in_use(self.port):
            raise KdcError(f"cannot start krb5kdc: port {self.port} of 127.0.0.1 is in use (TCP or UDP)")
        self._write_configuration()
        if not (self.directory / "principal").exists():
            # -s: a stash file, so krb5kdc starts without asking; -P: the master password on the command line
            # (nobody ever types it: a throw-away database).
            self._run([kdb5_util, "-r", self.realm, "create", "-s", "-P", secrets.token_urlsafe(24)],
                      "creating the KDC database")
        env = self.env
        if self.clock_offset:
            if not FAKETIME_LIBRARY.exists():
                raise KdcError(f"a KDC with a clock offset needs libfaketime ({FAKETIME_LIBRARY}): "
                               "apt-get install faketime")
            env.update(LD_PRELOAD=str(FAKETIME_LIBRARY), FAKETIME=f"{self.clock_offset:+d}")
        log = open(self.directory / "krb5kdc.out", "ab")  # noqa: SIM115 - the child keeps it
        try:
            self.process = subprocess.Popen(
                [krb5kdc, "-n", "-r", self.realm], env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        finally:
            log.close()
        try:
            self._wait_until_answering(timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def _wait_until_answering(self, timeout: float) -> None:
        """Until the KDC accepts a TCP connection and its log says it is serving (it listens only then)."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise KdcError(f"krb5kdc exited with {self.process.returncode} while starting:\n{self._log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    pass
                if "commencing operation" in self._log_tail():
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise KdcError(f"krb5kdc did not answer on 127.0.0.1:{self.port} within {timeout:.0f}s:\n"
                               f"{self._log_tail()}")
            time.sleep(0.05)

    def _log_tail(self, lines: int = 20) -> str:
        out = []
        for path in (self.directory / "krb5kdc.out", self.log_file):
            if path.exists():
                out.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(out)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """End krb5kdc (SIGTERM, then SIGKILL); the database and keytabs stay in the directory."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)

    def __enter__(self) -> LocalKdc:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    # ----------------------------------------------------------------- principals
    def add_principal(self, name: str) -> Path:
        """Create `name` (realm optional) with a random key, unless it exists, and write its keys to a keytab
        of its own (keytab_path(name)), which is returned. Works with or without the KDC running."""
        principal = self.principal(name)
        if not (self.directory / "principal").exists():
            raise KdcError("the KDC database does not exist yet: call start() first")
        listed = self._kadmin(f"getprincs {principal}", f"looking up {principal}")
        if principal not in listed.split():
            self._kadmin(f"addprinc -randkey {principal}", f"creating principal {principal}")
        keytab = self.keytab_path(name)
        keytab.unlink(missing_ok=True)
        # -norandkey: the keys the KDC has (kvno 1), so every keytab of a principal stays valid.
        self._kadmin(f"ktadd -k {keytab} -norandkey {principal}", f"writing the keytab of {principal}")
        if not keytab.exists():
            raise KdcError(f"kadmin.local wrote no keytab {keytab} for {principal}")
        return keytab


def _resolves_to_loopback(name: str) -> bool:
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET)
    except socket.gaierror:
        return False
    return {str(info[4][0]) for info in infos} == {"127.0.0.1"}


def ensure_hosts(names: list[str], hosts_file: Path = Path("/etc/hosts")) -> None:
    """Make each name resolve to 127.0.0.1: the names that do not yet are appended to /etc/hosts in a block
    marked with HOSTS_MARKER (root only). KdcError names the lines to add when the file is not writable, and
    when a name still resolves elsewhere afterwards (an earlier line maps it to another address).

    One line per name: glibc gives the first name of a line as the canonical name of every name on it, so
    a client that canonicalises host names (MIT's default dns_canonicalize_hostname) would otherwise ask for
    kafka/kafka-1... when connecting to kafka-2. (127.0.0.1 still reverse-resolves to the file's first name,
    e.g. localhost: clients need rdns = false, as the LocalKdc krb5.conf says.)"""
    missing = [name for name in dict.fromkeys(names) if not _resolves_to_loopback(name)]
    if not missing:
        return
    lines = "".join(f"127.0.0.1 {name}\n" for name in missing)
    block = f"# BEGIN {HOSTS_MARKER}\n{lines}# END {HOSTS_MARKER}\n"
    if os.geteuid() != 0:
        raise KdcError(f"{', '.join(missing)} must resolve to 127.0.0.1 and only root may edit {hosts_file}: "
                       f"add these lines to it:\n{lines}")
    try:
        existing = hosts_file.read_text()
        with open(hosts_file, "a") as hosts:
            hosts.write(("" if existing.endswith("\n") or not existing else "\n") + block)
    except OSError as exc:
        raise KdcError(f"cannot write {hosts_file} ({exc.strerror}): add these lines to it:\n{lines}") from exc
    wrong = [name for name in missing if not _resolves_to_loopback(name)]
    if wrong:
        raise KdcError(f"{', '.join(wrong)} still do not resolve to 127.0.0.1 only after adding them to "
                       f"{hosts_file}: an earlier line or another resolver maps them elsewhere")
