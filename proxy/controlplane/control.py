"""The proxy's own control connection: Metadata and DescribeConfigs it needs for itself.

Separate from every client connection (clients' sessions and quotas stay theirs), with its own
TLS settings and credentials.

- Versions: each new connection asks ApiVersions first and sends every request at the newest version
  both the broker and the proxy know (Kafka 2.8 has Metadata v11, 3.1+ v12), so old brokers work.
- One request at a time per connection (a broker works through one connection's requests in turn anyway):
  a request's timeout runs from when it is sent, i.e. when the broker can start it, never while it waits
  behind the requests before it. A timeout therefore fails only that request, the one in flight.
- Faults: reads (Metadata, DescribeConfigs) are bounded by `request_timeout` (2 s by default; a
  DescribeConfigs of n topics adds PER_TOPIC_TIMEOUT_SECONDS per topic); on a timeout or a broken
  connection the request moves to the next broker (bootstrap servers, then the brokers learned from
  Metadata), the one that failed going last for a while. A paused broker (its kernel still accepts
  connections) therefore costs one request timeout, not the whole refresh. Requests that were waiting
  for their turn on a connection that broke are sent on the next one, not counted as failovers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from insync_proxy.protocol import (
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ErrorCode,
    FrameSplitter,
    MetadataRequest,
    MetadataResponse,
    ProtocolError,
    RequestHeader,
    decode_response,
    encode_request,
    encode_request_header,
    response_header_version,
)
from insync_proxy.protocol.headers import decode_response_header
from insync_proxy.protocol.messages import DescribeConfigsResource, MetadataRequestTopic
from insync_proxy.protocol.negotiation import highest_common_version, version_ranges
from insync_proxy.protocol.schema import Message
from insync_proxy.proxy import __version__
from insync_proxy.proxy.config.settings import PASSWORD_MECHANISMS
from insync_proxy.proxy.config.tls import PLAINTEXT_LISTENER_HINT, closed_during_handshake
from insync_proxy.proxy.controlplane.sasl import (
    SaslError,
    authenticate,
    credentials_hint,
    login_name,
    mechanisms_hint,
)
from insync_proxy.proxy.observability.logs import RateLimitedLog, error_text

if TYPE_CHECKING:
    from insync_proxy.proxy.observability.metrics import ProxyMetrics

log = logging.getLogger("insync_proxy.control")
#: Failovers repeat with every control request while a broker is down or slow: rate-limited.
_repeated = RateLimitedLog(log)

#: The newest versions the control connection asks for; lower ones are used when the broker is older.
METADATA_VERSION = 12  # Kafka 3.1+; 2.8 serves v11, 2.7 v9 (the proxy reads names, ISR and brokers only)
DESCRIBE_CONFIGS_VERSION = 4  # Kafka 2.6+
API_VERSIONS_VERSION = 3
#: Read requests of the control connection give up on a broker after this long and try the next one.
DEFAULT_REQUEST_TIMEOUT = 2.0
#: A broker that timed out or broke the connection is tried last for this long.
SUSPECT_SECONDS = 30.0
TOPIC_RESOURCE = 2
CLIENT_ID = "insync-proxy-control"
OFFLOAD_DECODE_BYTES = 64 * 1024
#: A DescribeConfigs of n topics waits the request timeout plus this per topic (a loaded broker answered
#: 3,000 topics in ~0.6 s, 0.2 ms a topic: ten times that leaves room for a slow one).
PER_TOPIC_TIMEOUT_SECONDS = 0.002


#: A SASL session (KIP-368) is renewed once this fraction of its lifetime is left (or the request timeout and a
#: second, if more); a link whose session is that close to its end is replaced instead.
REAUTHENTICATE_FRACTION = 0.15
SESSION_END_MARGIN_SECONDS = 1.0


#: What a first answer starting with "HTTP" (as a frame size, 1213486160 bytes) means.
HTTP_ANSWER = "this port answers HTTP, not the Kafka protocol: is it the broker's listener port?"


class ControlError(Exception):
    """The control connection could not get an answer."""


class _NotSent(ControlError):
    """The connection broke while the request waited for its turn: nothing was sent, nobody failed it."""


class _BrokerClosed(ControlError):
    """The broker closed the connection (end of stream)."""


class _SessionEnded(_NotSent):
    """The broker closed the connection once its SASL session had ended (KIP-368) while a request waited on it: a
    request the broker reads after the session's end is not served, the connection is closed instead. A broker that
    stood still across the end (paused, stalled) does this to a request sent in time; a new connection logs in and
    the request goes there, quietly (no failover: nothing failed)."""


class AuthenticationFailed(ControlError):
    """The broker refused the proxy's own credentials: no other broker will accept them either.

    Said once as a WARNING where it happened (until a login with the same credentials succeeds) and counted
    in insync_proxy_control_authentication_failures_total; whoever catches it later only counts it.
    """

    already_logged = True


#: (mechanism, username) whose refusal was logged: one WARNING per credentials, however often they are retried
#: (the control connection at every refresh, the audit sink's leader connections), until a login succeeds.
_REFUSED_LOGINS: set[tuple[str, str]] = set()
#: Whether the first renewal of a SASL session was said (once a process: every renewal after it is DEBUG).
_RENEWALS_SAID: list[bool] = []


class LoginRequired(AuthenticationFailed):
    """No [control_sasl] and the brokers close the connection at the first request after ApiVersions: a SASL
    listener (it logs "Unexpected Kafka request of type METADATA during SASL handshake"). Said once."""


#: A SASL listener without a login is said once a process (then DEBUG).
_LOGIN_REQUIRED_SAID: list[bool] = []
LOGIN_REQUIRED = ("the brokers closed the control connection at its first request after ApiVersions, on {count} "
                  "broker(s): the listener in bootstrap_servers wants a SASL login (SASL_PLAINTEXT or SASL_SSL) and "
                  "[control_sasl] is not set: set control_sasl.mechanism and its credentials (docs/security.md), or "
                  "point bootstrap_servers at a listener without SASL")


class _Timeout(ControlError):
    """One broker did not answer in time."""


@dataclass
class _Link:
    """One open connection to one broker, with what it told us about its versions."""

    address: tuple[str, int]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    pending: dict[int, asyncio.Future[bytes]] = field(default_factory=dict)
    read_task: asyncio.Task[None] | None = None
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    closed: bool = False
    #: One request at a time: its timeout runs from when the broker can start it.
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: KIP-368: time.monotonic() when the broker's SASL session ends (None: it does not), and from when the
    #: session is renewed in place, between two requests.
    session_ends_at: float | None = None
    reauthenticate_at: float | None = None
    #: Answers read so far (the first is ApiVersions'): a broker that closes after only that one and no login
    #: was made is a SASL listener waiting for a handshake.
    answers: int = 0

    def start_session(self, lifetime_ms: int, request_timeout: float) -> None:
        """Note a login's session lifetime: renewed once most of it has passed, leaving room for a slow broker."""
        if lifetime_ms <= 0:
            self.session_ends_at = self.reauthenticate_at = None
            return
        now, lifetime = time.monotonic(), lifetime_ms / 1000
        self.session_ends_at = now + lifetime
        margin = max(REAUTHENTICATE_FRACTION * lifetime, request_timeout + 1.0)
        self.reauthenticate_at = now + max(lifetime / 2, lifetime - margin)

    def close(self, exc: BaseException) -> None:
        if self.closed:
            return
        self.closed = True
        text = f"control connection to {_name(self.address)} lost: {_failure_text(exc)}"
        ended = isinstance(exc, _BrokerClosed) and self.session_ends_at is not None \
            and time.monotonic() >= self.session_ends_at - SESSION_END_MARGIN_SECONDS
        for future in self.pending.values():
            if not future.done():
                future.set_exception(_SessionEnded(f"{text}, its SASL session had ended") if ended else ControlError(text))
        self.pending.clear()
        self.writer.close()
        if self.read_task is not None and self.read_task is not asyncio.current_task():
            self.read_task.cancel()


def _name(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


def _failure_text(exc: BaseException) -> str:
    """Why one broker could not be reached, in the system's words: asyncio says "Connect call failed (address)"
    (the address again, not why) and an empty ConnectionResetError(); uvloop says "Connection refused"."""
    if isinstance(exc, ConnectionResetError) and not exc.errno:
        return "connection reset by the broker"
    return error_text(exc)


@dataclass(eq=False)
class ControlConnection:
    """Request/response client over one connection to any broker; pipelined by correlation id.

    `timeout` bounds writes (Produce) and connecting; `request_timeout` bounds each read on one broker."""

    addresses: list[tuple[str, int]]
    ssl_context: ssl.SSLContext | None = None
    sasl: Any = None
    timeout: float = 10.0
    max_frame_bytes: int = 104_857_600
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    metrics: ProxyMetrics | None = None
    _link: _Link | None = field(default=None, init=False)
    _correlation: itertools.count[int] = field(default_factory=lambda: itertools.count(1), init=False)
    _connect_lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    _learned: list[tuple[str, int]] = field(default_factory=list, init=False)
    _suspect_until: dict[tuple[str, int], float] = field(default_factory=dict, init=False)
    #: Failovers so far: a request that gave up on one broker and went on to the next.
    failovers: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.addresses = list(self.addresses)  # the caller's list stays the caller's

    # ------------------------------------------------------------------ connection
    @property
    def connected_to(self) -> tuple[str, int] | None:
        link = self._link
        return link.address if link is not None and not link.closed else None

    @property
    def connected(self) -> bool:
        return self.connected_to is not None

    def candidates(self) -> list[tuple[str, int]]:
        """Brokers to try, in order: bootstrap servers then learned brokers; recent failures last."""
        now = time.monotonic()
        ordered = list(dict.fromkeys([*self.addresses, *self._learned]))
        return sorted(ordered, key=lambda a: self._suspect_until.get(a, 0.0) > now)

    def _suspect(self, address: tuple[str, int]) -> None:
        self._suspect_until[address] = time.monotonic() + SUSPECT_SECONDS

    async def _connect(self, exclude: set[tuple[str, int]] | None = None) -> _Link:
        async with self._connect_lock:
            link = self._link
            if link is not None and not link.closed and link.address not in (exclude or ()):
                return link
            errors = []
            # Brokers this request has not tried yet first; a lone bootstrap server is retried once.
            candidates = self.candidates()
            order = [a for a in candidates if a not in (exclude or ())] or candidates
            for address in order:
                try:
                    link = await asyncio.wait_for(self._open(address), max(self.request_timeout, 0.1))
                except TimeoutError:
                    self._suspect(address)
                    errors.append(f"{_name(address)}: no answer within {self.request_timeout}s")
                    continue
                except (OSError, ControlError, ProtocolError) as exc:
                    self._suspect(address)
                    errors.append(f"{_name(address)}: {_failure_text(exc)}")
                    if isinstance(exc, AuthenticationFailed):
                        raise
                    continue
                self._link = link
                return link
            raise ControlError("no broker reachable: " + "; ".join(errors))

    async def _open(self, address: tuple[str, int]) -> _Link:
        host, port = address
        try:
            reader, writer = await asyncio.open_connection(
                host, port, ssl=self.ssl_context, server_hostname=host if self.ssl_context else None
            )
        except OSError as exc:
            if self.ssl_context is not None and closed_during_handshake(exc):
                raise ControlError(f"{_failure_text(exc)} during the TLS handshake: {PLAINTEXT_LISTENER_HINT}") \
                    from exc
            raise
        link = _Link(address, reader, writer)
        link.read_task = asyncio.get_running_loop().create_task(self._read_loop(link))
        try:
            link.versions = await self._api_versions(link)
            if self.sasl is not None and self.sasl.mechanism:
                try:
                    lifetime_ms = await authenticate(
                        lambda k, v, b: self._send(link, k, v, b, self.request_timeout), self.sasl, host)
                except _Timeout:
                    raise
                except Exception as exc:
                    raise self._login_refused(address, exc) from None
                link.start_session(lifetime_ms, self.request_timeout)
                self._login_succeeded()
        except BaseException as exc:
            link.close(exc)
            raise
        return link

    def _login_refused(self, address: tuple[str, int], exc: Exception) -> AuthenticationFailed:
        """Count a refused SASL login; say it once per credentials (never a secret)."""
        mechanism, username = login_name(self.sasl)
        if self.metrics is not None:
            self.metrics.control_authentication_failures_total.labels(mechanism).inc()
        why = f"{exc}"
        if isinstance(exc, SaslError) and exc.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED \
                and mechanism in PASSWORD_MECHANISMS:
            why = f"wrong password or unknown user ({exc})"
        elif isinstance(exc, SaslError) and exc.enabled is not None:  # the handshake was refused
            why = f"{exc}: {mechanisms_hint(exc, mechanism)}"
        if (mechanism, username) not in _REFUSED_LOGINS:
            _REFUSED_LOGINS.add((mechanism, username))
            log.warning(
                "control connection: SASL %s login as %r to %s failed: %s. Check %s; retried at every refresh, "
                "counted in insync_proxy_control_authentication_failures_total, not logged again until a login "
                "succeeds", mechanism, username, _name(address), why, credentials_hint(self.sasl),
            )
        else:
            log.debug("control connection: SASL %s login as %r to %s refused again: %s", mechanism, username,
                      _name(address), why)
        return AuthenticationFailed(f"SASL {mechanism} authentication as {username!r} failed at {_name(address)}: {why}")

    def _login_required(self, count: int) -> LoginRequired:
        """A SASL listener and no [control_sasl]: one WARNING a process, counted like a refused login."""
        text = LOGIN_REQUIRED.format(count=count)
        if self.metrics is not None:
            self.metrics.control_authentication_failures_total.labels("none").inc()
        if not _LOGIN_REQUIRED_SAID:
            _LOGIN_REQUIRED_SAID.append(True)
            log.warning("control connection: %s; counted in insync_proxy_control_authentication_failures_total"
                        "{mechanism=\"none\"}, not logged again", text)
        return LoginRequired(text)

    def _login_succeeded(self) -> None:
        key = login_name(self.sasl)
        if key in _REFUSED_LOGINS:
            _REFUSED_LOGINS.discard(key)
            log.info("control connection: SASL %s login as %r succeeds again", *key)

    async def _keep_session(self, link: _Link) -> bool:
        """KIP-368: renew the link's SASL session in place once most of it has passed (between two requests, the
        turn held); False when the link must be replaced (its session is about to end, or the renewal failed)."""
        if link.reauthenticate_at is None or time.monotonic() < link.reauthenticate_at:
            return True
        async with link.turn:
            if link.closed:
                return False
            assert link.session_ends_at is not None
            if time.monotonic() >= link.session_ends_at - SESSION_END_MARGIN_SECONDS:
                log.debug("control connection: the SASL session with %s ends now: a new connection logs in",
                          _name(link.address))
                return False
            if link.reauthenticate_at is None or time.monotonic() < link.reauthenticate_at:
                return True  # another request renewed it while this one waited
            try:
                lifetime_ms = await authenticate(
                    lambda k, v, b: self._send_now(link, k, v, b, self.request_timeout), self.sasl, link.address[0])
            except Exception as exc:  # the next connection logs in afresh, and says why if that fails too
                log.debug("control connection: renewing the SASL session with %s failed (%s): a new connection "
                          "logs in", _name(link.address), _failure_text(exc))
                return False
            link.start_session(lifetime_ms, self.request_timeout)
            if not _RENEWALS_SAID:
                _RENEWALS_SAID.append(True)
                log.info("control connection: the brokers end SASL sessions (connections.max.reauth.ms, KIP-368; "
                         "this one after %d ms): the proxy renews its sessions in place before they end", lifetime_ms)
            log.debug("control connection: SASL session with %s renewed for %d ms", _name(link.address), lifetime_ms)
            return True

    def _retire(self, link: _Link) -> None:
        """Close a link whose session ended, quietly: nothing failed, the next request connects afresh."""
        link.close(_NotSent("its SASL session ended"))
        if self._link is link:
            self._link = None

    async def _api_versions(self, link: _Link) -> dict[int, tuple[int, int]]:
        """The broker's version ranges (ApiVersions v3, or v0 for a broker older than 2.4)."""
        for version in (API_VERSIONS_VERSION, 0):
            request = ApiVersionsRequest(client_software_name="insync-proxy", client_software_version=__version__)
            body = await self._send(link, ApiKey.API_VERSIONS, version, encode_request(request, version),
                                    self.request_timeout)
            (error_code,) = struct.unpack_from(">h", body, 0)
            if error_code == ErrorCode.UNSUPPORTED_VERSION and version != 0:
                continue  # the broker answered in v0 and will understand v0
            response = decode_response(ApiKey.API_VERSIONS, version, body)
            assert isinstance(response, ApiVersionsResponse)
            if response.error_code != 0:
                raise ControlError(f"ApiVersions failed at {_name(link.address)} with error {response.error_code}")
            return version_ranges(response)
        raise ControlError(f"{_name(link.address)} refused ApiVersions v0")

    async def _read_loop(self, link: _Link) -> None:
        splitter = FrameSplitter(self.max_frame_bytes)
        first = True
        try:
            while True:
                data = await link.reader.read(1 << 16)
                if not data:
                    raise _BrokerClosed("the broker closed the control connection")
                if first and data.startswith(b"HTTP"):
                    raise ControlError(HTTP_ANSWER)  # not "raise max_frame_bytes": a wrong port, not a big frame
                first = False
                for frame in splitter.feed(data):
                    link.answers += 1
                    (correlation_id,) = struct.unpack_from(">i", frame, 0)
                    future = link.pending.pop(correlation_id, None)
                    if future is None:
                        raise ControlError(f"unexpected correlation id {correlation_id}")
                    if not future.done():
                        future.set_result(bytes(frame))
        except asyncio.CancelledError:
            raise
        except (OSError, ControlError, ProtocolError) as exc:
            link.close(exc)

    async def _send(self, link: _Link, api_key: int, version: int, body: bytes, wait_seconds: float) -> bytes:
        """Send one request on `link` once the request before it is answered (header built here); return the
        response body bytes. `wait_seconds` runs from the send."""
        async with link.turn:
            if link.closed or link.writer.is_closing():
                raise _NotSent("not connected")
            return await self._send_now(link, api_key, version, body, wait_seconds)

    async def _send_now(self, link: _Link, api_key: int, version: int, body: bytes, wait_seconds: float) -> bytes:
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        header = encode_request_header(
            RequestHeader(
                request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
                client_id=CLIENT_ID,
            )
        )
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        link.pending[correlation_id] = future
        payload = header + body
        link.writer.write(struct.pack(">i", len(payload)) + payload)
        try:
            frame = await asyncio.wait_for(future, wait_seconds)
        except TimeoutError:
            link.pending.pop(correlation_id, None)
            raise _Timeout(
                f"{ApiKey(api_key).name} to {_name(link.address)} timed out after {wait_seconds}s"
            ) from None
        _, offset = decode_response_header(frame, response_header_version(api_key, version))
        return frame[offset:]

    # ------------------------------------------------------------------ requests
    def version_for(self, link: _Link, api_key: int, newest: int) -> int:
        """The newest version of `api_key` both sides speak, at most `newest`."""
        broker = link.versions.get(api_key)
        if broker is None:
            raise ControlError(f"broker {_name(link.address)} does not support {ApiKey(api_key).name}")
        version = highest_common_version((0, newest), broker)
        if version is None:
            raise ControlError(
                f"broker {_name(link.address)} supports {ApiKey(api_key).name} v{broker[0]}-v{broker[1]}, "
                f"the control connection at most v{newest}"
            )
        return version

    async def request(self, message: Message, version: int, wait_seconds: float | None = None) -> Message:
        """Send a request at the newest version <= `version` the broker speaks; return the decoded response.

        `wait_seconds` (default: the connect timeout) bounds the wait on one broker. On a timeout or a broken
        connection the request is tried on the next broker, each broker once.
        """
        api_key = int(message.API_KEY)
        wait = self.timeout if wait_seconds is None else wait_seconds
        tried: set[tuple[str, int]] = set()
        errors: list[str] = []
        attempts = max(2, len(self.candidates()))
        # A request whose connection broke while it waited its turn goes on the next one without using up
        # an attempt; bounded all the same.
        not_sent = 0
        closed_before_login = 0
        while attempts > 0:
            try:
                link = await self._connect(exclude=tried)
            except AuthenticationFailed:
                raise  # every broker would refuse the same credentials
            except ControlError as exc:
                errors.append(str(exc))
                break
            if not await self._keep_session(link):
                self._retire(link)
                not_sent += 1
                if not_sent > 3:
                    errors.append(f"{_name(link.address)}: its SASL session could not be renewed")
                    break
                continue
            try:
                used = self.version_for(link, api_key, version)
                if self.metrics is not None:
                    self.metrics.control_requests_total.labels(ApiKey(api_key).name).inc()
                response_body = await self._send(link, api_key, used, encode_request(message, used), wait)
            except _NotSent as exc:
                if self._link is link:
                    self._link = None
                if isinstance(exc, _SessionEnded):
                    log.debug("control connection: %s: a new connection logs in", exc)
                not_sent += 1
                if not_sent > 3:
                    errors.append(str(exc))
                    break
                continue
            except (ControlError, OSError) as exc:
                attempts -= 1
                tried.add(link.address)
                if self.sasl is None and link.answers <= 1 and link.closed:
                    closed_before_login += 1
                    if closed_before_login >= min(2, len(self.candidates())):
                        link.close(exc)
                        if self._link is link:
                            self._link = None
                        raise self._login_required(closed_before_login) from None
                # Timed out or broken: this broker goes last for a while; the next one gets the request.
                self._suspect(link.address)
                link.close(exc)
                if self._link is link:
                    self._link = None
                errors.append(_failure_text(exc))
                self.failovers += 1
                _repeated.warning("control_failover", "control connection: %s; trying another broker",
                                  _failure_text(exc))
                continue
            if len(response_body) > OFFLOAD_DECODE_BYTES:
                # A large cluster's full Metadata takes tens of ms to decode: let the loop breathe.
                return await asyncio.get_running_loop().run_in_executor(
                    None, decode_response, api_key, used, response_body
                )
            return decode_response(api_key, used, response_body)
        raise ControlError("; ".join(errors) or "no broker to ask")

    async def metadata(self, topics: list[str] | None = None) -> MetadataResponse:
        request = MetadataRequest(
            topics=None if topics is None else tuple(MetadataRequestTopic(name=t) for t in topics),
            allow_auto_topic_creation=False,
        )
        response = await self.request(request, METADATA_VERSION, self.request_timeout)
        assert isinstance(response, MetadataResponse)
        if response.brokers:
            # Fail over to any broker of the cluster, not only to the configured bootstrap servers.
            self._learned = [(b.host, b.port) for b in response.brokers]
        return response

    async def metadata_by_ids(self, topic_ids: list[uuid.UUID]) -> MetadataResponse:
        """Metadata of topics named by id only (Produce v13 clients): Metadata v12+, brokers of Kafka 3.1+."""
        request = MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=i, name=None) for i in topic_ids),
            allow_auto_topic_creation=False,
        )
        response = await self.request(request, METADATA_VERSION, self.request_timeout)
        assert isinstance(response, MetadataResponse)
        return response

    async def describe_topic_configs(self, topics: list[str], keys: list[str]) -> DescribeConfigsResponse:
        request = DescribeConfigsRequest(
            resources=tuple(
                DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=t, configuration_keys=tuple(keys))
                for t in topics
            )
        )
        # The timeout scales with the batch: a broker takes longer to describe more topics.
        wait = self.request_timeout + PER_TOPIC_TIMEOUT_SECONDS * len(topics)
        response = await self.request(request, DESCRIBE_CONFIGS_VERSION, wait)
        assert isinstance(response, DescribeConfigsResponse)
        return response

    async def close(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.close(ControlError("closed"))
