"""Configuration, the schema's first room: what each setting is.

Each setting is a dataclass field declared with `setting(...)`: its type comes from the annotation, its
default, bounds, choices, secrecy, whether it reloads without a restart and its one-line meaning from the
field's metadata. From that one definition come the TOML keys, the environment variable names
(INSYNC_PROXY_ + [table_] + field), the flags of `insync-proxy run`, the validation of every source
(schema.py), the loading (loader.py) and docs/configuration.md (reference.py:
`python -m insync_proxy.proxy.config.reference --write`). A new field declared with `setting(...)` is all a
new setting needs. Priority, lowest first: defaults, the TOML file, the environment, the flags.
"""

from __future__ import annotations

import re
import socket
from dataclasses import MISSING, dataclass, field
from typing import Any

from insync_proxy.proxy.config.defaults import (
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_NODE_ID_RANGES,
    DEFAULT_PER_CONNECTION_BYTES,
    SUMMARY_INTERVAL_SECONDS,
)

ENV_PREFIX = "INSYNC_PROXY_"
#: Where every setting is described (generated from this module).
DOCS = "docs/configuration.md"

#: INSYNC_PROXY_* variables that are not settings of the proxy: the dev cluster, the tests and the build read
#: them. Any other INSYNC_PROXY_* variable that names no setting is an error (a misspelt setting).
OTHER_ENV_VARS: dict[str, str] = {
    "INSYNC_PROXY_KAFKA_VERSION": "Kafka version of `demo`, `dev-cluster` and the tests",
    "INSYNC_PROXY_KAFKA_LIBS": "an unpacked Kafka's libs/ directory, used instead of jars from Maven",
    "INSYNC_PROXY_KAFKA_BACKEND": "`local` (Kafka's jars as JVMs) or `testcontainers`, for the tests",
    "INSYNC_PROXY_CACHE": "where Kafka jars and the dev cluster's state live (default ~/.cache/insync-proxy)",
    "INSYNC_PROXY_DEV_CLUSTER_DIR": "the directory of `dev-cluster`'s cluster (default: the cache's dev-cluster/)",
    "INSYNC_PROXY_TEST_LOGS": "where the tests keep logs of failed runs",
    "INSYNC_PROXY_COMPILE": "`1` builds the compiled data path at install time (mypyc, and the C core `protocol/_wire.c`)",
}

METADATA_SCHEMAS = ("tagged", "kip637")
VALID_FLOORS = (-1, -2)
AUDIT_DETAILS = ("summary", "every_request")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI", "AWS_MSK_IAM")
#: Mechanisms that log in with control_sasl.username and a password (the others: OAUTHBEARER with a token,
#: GSSAPI with a Kerberos principal, AWS_MSK_IAM with AWS credentials).
PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")


class ConfigError(ValueError):
    """Invalid configuration; the message names the setting and what is allowed."""


@dataclass(frozen=True)
class Meta:
    """What the schema knows of one setting besides its type."""

    meaning: str = ""
    #: Bounds of a number, or of the number of items of a list / array of tables.
    min: float | None = None
    max: float | None = None
    #: The minimum itself is not allowed (durations that must be above 0).
    min_exclusive: bool = False
    choices: tuple[Any, ...] = ()
    #: Choices compared without case; the value becomes the choice's spelling.
    ignore_case: bool = False
    #: Never printed or logged; no flag (a flag's value shows in `ps`).
    secret: bool = False
    #: "host:port" or "regex": what each string must be besides a string.
    format: str | None = None
    #: Must be set (no usable default).
    required: bool = False
    #: This setting names a file holding the secret setting of this name (read at start, newline stripped).
    file_for: str | None = None
    #: TOML key when it is not the field name (e.g. `listener` for `listeners`).
    toml: str | None = None
    #: Flag spelling instead of the generated one; "" for none. Booleans get --x and --no-x.
    flag: str | None = None
    #: False: no environment variable.
    env: bool = True
    #: Arrays of tables: the first item's scalar settings get flags (the first listener's ports).
    first_item_flags: bool = False
    #: The default as the docs show it, when the value itself says nothing (a computed default).
    default_text: str | None = None
    #: A changed value takes effect on a live reload (SIGHUP, POST /reload); False: it needs a restart.
    reloads: bool = False


def setting(default: Any = MISSING, *, meaning: str, default_factory: Any = MISSING, **meta: Any) -> Any:
    """A dataclass field that is a setting: `meaning` is its one-line description; see `Meta` for the rest."""
    info = Meta(meaning=meaning, **meta)
    metadata = {"setting": info}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=metadata, repr=not info.secret)
    return field(default=default, metadata=metadata, repr=not info.secret)


# ---------------------------------------------------------------------------------------------- the settings


@dataclass(frozen=True)
class TlsConfig:
    """TLS for one side. Upstream: ca_file to trust, optional client cert (mTLS). Downstream: cert+key."""

    enabled: bool = setting(False, meaning="use TLS on this side")
    ca_file: str | None = setting(
        None, meaning="PEM file of the CA certificates to trust (upstream: default the system store; "
                      "downstream: when set, clients must present a certificate it signed)", reloads=True)
    cert_file: str | None = setting(
        None, meaning="PEM certificate the proxy presents (upstream: the mTLS client certificate)", reloads=True)
    key_file: str | None = setting(None, meaning="PEM private key of cert_file", reloads=True)
    key_password: str | None = setting(None, secret=True, meaning="password of an encrypted key_file", reloads=True)
    key_password_file: str | None = setting(None, file_for="key_password",
                                            meaning="file holding key_password (instead of the value)", reloads=True)


@dataclass(frozen=True)
class UpstreamTlsConfig(TlsConfig):
    """TLS towards the brokers: TlsConfig's settings and the host name check (the proxy as a TLS server has no
    host name to check, so [downstream_tls] has no such setting)."""

    check_hostname: bool = setting(True, meaning="verify the broker's certificate names the host connected to",
                                   reloads=True)


@dataclass(frozen=True)
class SaslConfig:
    """SASL credentials of the proxy's own control connection (client connections pass theirs through)."""

    mechanism: str | None = setting(None, choices=SASL_MECHANISMS, ignore_case=True,
                                    meaning="SASL mechanism of the proxy's own connections; unset: no SASL", reloads=True)
    username: str | None = setting(None, meaning="SASL user of the proxy's own connections", reloads=True)
    password: str | None = setting(None, secret=True, meaning="password of username", reloads=True)
    password_file: str | None = setting(None, file_for="password",
                                        meaning="file holding the password (instead of the value)", reloads=True)
    oauthbearer_token_endpoint_url: str | None = setting(
        None, reloads=True,
        meaning="OAUTHBEARER: the OAuth 2.0 token endpoint the proxy gets its tokens from (client-credentials "
                "grant), e.g. https://idp.example.com/realms/kafka/protocol/openid-connect/token")
    oauthbearer_client_id: str | None = setting(None, reloads=True,
                                                meaning="OAUTHBEARER: the proxy's client id at the token endpoint")
    oauthbearer_client_secret: str | None = setting(None, secret=True, reloads=True,
                                                    meaning="OAUTHBEARER: the client's secret")
    oauthbearer_client_secret_file: str | None = setting(
        None, file_for="oauthbearer_client_secret", reloads=True,
        meaning="OAUTHBEARER: file holding the client's secret (instead of the value)")
    oauthbearer_scope: str | None = setting(None, reloads=True,
                                            meaning="OAUTHBEARER: the scope asked for (space-separated), if the "
                                                    "provider or the brokers want one")
    oauthbearer_audience: str | None = setting(
        None, reloads=True,
        meaning="OAUTHBEARER: an `audience` parameter for providers that take one in the token request (Auth0, "
                "Okta custom servers); most put the brokers' expected audience in the token by client")
    oauthbearer_extensions: tuple[str, ...] = setting(
        (), reloads=True,
        meaning="OAUTHBEARER: SASL extensions (KIP-342) sent with the token, each key=value (Confluent Cloud: "
                "logicalCluster=lkc-..., identityPoolId=pool-...)")
    kerberos_principal: str | None = setting(
        None, reloads=True, meaning="GSSAPI: the proxy's Kerberos principal, e.g. insync-proxy@EXAMPLE.COM")
    kerberos_keytab: str | None = setting(
        None, reloads=True,
        meaning="GSSAPI: keytab holding kerberos_principal's key (unset: the default credential cache, from kinit)")
    kerberos_service_name: str = setting(
        "kafka", reloads=True,
        meaning="GSSAPI: the primary of the brokers' service principals (Kafka's sasl.kerberos.service.name)")
    kerberos_krb5_conf: str | None = setting(
        None, reloads=False,
        meaning="GSSAPI: the krb5.conf to use (unset: KRB5_CONFIG or /etc/krb5.conf); one per process")
    kerberos_service_host: str | None = setting(
        None, reloads=True,
        meaning="GSSAPI: the host part of the brokers' service principals when it is not the host connected to "
                "(unset: that host, as Kafka's clients do): one name for brokers sharing a principal, or with "
                "{label}, the first label of the host connected to: \"{label}.example.com\" logs in to "
                "kafka-1.internal as kafka/kafka-1.example.com")
    aws_region: str | None = setting(
        None, reloads=True,
        meaning="AWS_MSK_IAM: the brokers' AWS region (unset: read from the broker's host name, "
                "b-1.<cluster>.kafka.<region>.amazonaws.com)")
    aws_profile: str | None = setting(
        None, reloads=True,
        meaning="AWS_MSK_IAM: the profile of the shared AWS configuration files to take credentials from (unset: "
                "botocore's default chain: environment, web identity, container and instance metadata)")
    oauthbearer_ca_file: str | None = setting(
        None, reloads=True,
        meaning="OAUTHBEARER: PEM file of the CA certificates the token endpoint's TLS is checked against "
                "(default: the system store)")


@dataclass(frozen=True)
class ListenerConfig:
    """A group of ports clients use: one bootstrap port, and one port per broker from broker_port_base."""

    name: str = setting("default", flag="--listener-name", meaning="names the listener in logs and metrics")
    bootstrap_port: int = setting(9092, min=0, max=65535,
                                  meaning="port clients bootstrap from (0: any free port)")
    broker_port_base: int = setting(9100, min=0, max=65535,
                                    meaning="first broker port: the node ids of node_id_ranges take consecutive ports from here")
    node_id_ranges: tuple[str, ...] = setting(
        DEFAULT_NODE_ID_RANGES, flag="--node-id-ranges",
        meaning="node ids given broker ports, as \"first-last\" ranges or single ids: each id takes the next port "
                "from broker_port_base, in the order written")
    metadata_schema: str = setting(
        "tagged", choices=METADATA_SCHEMAS,
        meaning="tagged: min.insync.replicas as tagged field 637 (every client); kip637: KIP-637's literal "
                "Metadata v10 (never for real Metadata v10+ clients)")
    hide_unready_partitions: bool = setting(
        False, meaning="present partitions below min ISR as leaderless (producer-only listeners)")
    max_connections: int = setting(
        10_000, min=1, meaning="client connections open at once on this listener (its bootstrap and broker ports); "
                               "more are closed at once, counted and logged (refused_connection)")


@dataclass(frozen=True)
class AcksPolicyConfig:
    """A per-topic-pattern policy: fast_fail precheck for acks=-1, and an acks floor for acks=1."""

    topics: str = setting(".*", format="regex", meaning="regular expression over the whole topic name", reloads=True)
    fast_fail: bool = setting(False, meaning="the acks=-2 precheck (ISR below min: NOT_ENOUGH_REPLICAS) for acks=-1 too", reloads=True)
    acks_floor: int | None = setting(None, choices=VALID_FLOORS,
                                     meaning="raise acks=1 to this: -1 (all) or -2 (min.insync.replicas)", reloads=True)

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.topics, topic) is not None


@dataclass(frozen=True)
class AuditConfig:
    enabled: bool = setting(True, flag="--audit", meaning="write audit events")
    # Not "audit": run from a checkout's root, that is the source package's folder.
    directory: str = setting("insync-proxy-audit", meaning="where audit JSON Lines files go (relative: to the "
                                                           "working directory)")
    max_file_bytes: int = setting(64 * 1024 * 1024, min=1024, meaning="an audit file is rotated at this size", reloads=True)
    max_total_bytes: int = setting(1024 * 1024 * 1024, min=1024,
                                   meaning="the oldest audit files are deleted above this total", reloads=True)
    queue_size: int = setting(100_000, min=1, meaning="events waiting for the writer; a full queue drops and counts")
    kafka_topic: str | None = setting(None, meaning="also write the events to this (existing) topic")
    interval_seconds: float = setting(10.0, min=0.1, meaning="seconds each produce_summary event covers", reloads=True)
    detail: str = setting(
        "summary", choices=AUDIT_DETAILS,
        meaning="every_request: also one produce_decision event per partition per request (debugging)", reloads=True)


@dataclass(frozen=True)
class ProxyConfig:
    bootstrap_servers: tuple[str, ...] = setting(
        (), required=True, format="host:port",
        meaning="the real brokers to bootstrap from: host:port, a list or one comma-separated string")
    bind_host: str = setting("127.0.0.1", meaning="address the client listeners bind")
    advertised_host: str = setting(
        "127.0.0.1",
        meaning="host clients are told to connect to; {node_id} in it names each broker's port by its own host, "
                "e.g. kafka-{node_id}.example.com (Kerberos clients: the host of each broker's service principal, "
                "resolving to the proxy)")
    listeners: tuple[ListenerConfig, ...] = setting(
        (ListenerConfig(),), toml="listener", min=1, first_item_flags=True,
        meaning="groups of client ports: a bootstrap port, and one port per broker (node_id_ranges)")
    admin_host: str = setting("127.0.0.1", meaning="address of the admin HTTP port")
    admin_port: int = setting(9190, min=0, max=65535, meaning="admin HTTP port: /metrics /healthz /readyz")
    proxy_id: str = setting(default_factory=socket.gethostname, default_text="the host name",
                            meaning="name of this proxy in audit events")
    max_frame_bytes: int = setting(104_857_600, min=1024, max=2**31 - 1,
                                   meaning="largest Kafka frame accepted, like the broker's socket.request.max.bytes")
    max_buffered_bytes: int = setting(
        DEFAULT_MAX_BUFFERED_BYTES, min=64 * 1024,
        meaning="memory budget: bytes the whole process may hold for slow clients and brokers; beyond it the "
                "connections that hold bytes stop reading their source until their reader catches up")
    max_buffered_bytes_per_connection: int = setting(
        DEFAULT_PER_CONNECTION_BYTES, min=16 * 1024,
        meaning="ceiling of one connection's write buffer (each direction): beyond it that connection stops "
                "reading its source")
    drain_timeout_seconds: float = setting(30.0, min=0, meaning="on SIGTERM, wait this long for in-flight requests", reloads=True)
    connect_timeout_seconds: float = setting(10.0, min=0, min_exclusive=True,
                                             meaning="connecting to a broker gives up after this long", reloads=True)
    control_request_timeout_seconds: float = setting(
        2.0, min=0, min_exclusive=True,
        meaning="each read of the control connection waits this long on one broker, then tries the next", reloads=True)
    upstream_tls: UpstreamTlsConfig = setting(UpstreamTlsConfig(), meaning="TLS towards the brokers")
    downstream_tls: TlsConfig = setting(TlsConfig(), meaning="TLS towards the clients")
    control_sasl: SaslConfig = setting(SaslConfig(), meaning="SASL of the proxy's own connections")
    tls_reload_seconds: float = setting(
        30.0, min=0, reloads=True,
        meaning="re-read every TLS file (both sides, and control_sasl.password_file) this often; changed content "
                "replaces the material once it loads; a changed TOML file reloads the configuration "
                "(0: only on SIGHUP or POST /reload)")
    min_insync_ttl_seconds: float = setting(30.0, min=1, meaning="min.insync.replicas cache TTL (refreshed ahead)", reloads=True)
    # 3600: min.insync.replicas changes rarely, and a change through the proxy (AlterConfigs, CreateTopics...) is
    # re-read at once; a value served stale is re-read at that very answer, so what this bounds is how long a value
    # is vouched for while its re-reads keep failing, and how long the entry of a topic not in use is kept. An hour
    # covers clients that ask for all topics every 5 minutes (the Java client's, librdkafka's and kafka-python's
    # metadata max age) or even hourly (dashboards, inventories) with the tag on every answer.
    min_insync_max_stale_seconds: float = setting(
        3600.0, min=0, reloads=True,
        meaning="a min.insync.replicas value older than min_insync_ttl_seconds is still served in Metadata answers "
                "(and re-read in the background) for this many seconds more; then it is dropped until read again "
                "(0: never serve a value past the TTL)")
    # 50,000: about 190 bytes an entry, ~10 MB at the bound, which covers any one cluster we know of; an entry is
    # made only for a topic the brokers answered for (made-up names make none).
    min_insync_max_entries: int = setting(
        50_000, min=1, max=10_000_000, reloads=True,
        meaning="at most this many topics' min.insync.replicas are cached; beyond it those read longest ago are "
                "dropped (counted in insync_proxy_metadata_cache_evicted_total)")
    # 1000 ms: far below any client's request timeout (30 s in the Java client), above what DescribeConfigs takes
    # on a busy machine (50 ms was not: topics created after the start went out without the tag).
    min_insync_miss_wait_ms: float = setting(
        1000.0, min=0, reloads=True,
        meaning="a Metadata answer naming a topic whose min.insync.replicas the proxy has none of (new, or not "
                "served past min_insync_max_stale_seconds) waits at most this long for its DescribeConfigs, that "
                "answer only; hitting it counts in insync_proxy_min_insync_miss_wait_exceeded_total (0: no wait)")
    metadata_refresh_seconds: float = setting(10.0, min=1,
                                              meaning="the proxy's own Metadata refresh (brokers, ISR of the "
                                                      "topics in use)", reloads=True)
    topic_idle_seconds: float = setting(
        600.0, min=1,
        meaning="a topic no client named (Metadata of some topics, Produce) for this long leaves the topics in "
                "use: its ISR and min.insync.replicas are no longer refreshed ahead")
    min_insync_warm_up: bool = setting(
        True,
        meaning="at start, read every topic's min.insync.replicas once (batched) before /readyz turns ready, so the "
                "first all-topics Metadata answer carries it for every topic; afterwards only the topics in use are "
                "refreshed (false: start ready sooner, all-topics answers fill in as they are asked)")
    # 1000: a sidecar serves one application, which uses a handful to tens of topics; 1000 leaves two orders
    # of magnitude of room and still bounds what one proxy asks the brokers at the cap (6 Metadata of 1000
    # topics and ~3,000 topic configs a minute: docs/performance.md, Fleet) and what it holds (a few KB a topic).
    max_topics_in_use: int = setting(
        1000, min=1, max=1_000_000, reloads=True,
        meaning="at most this many topics in use are followed (ISR and min.insync.replicas refreshed ahead, "
                "readiness events); a topic named beyond it is served but not followed until idle ones leave, "
                "counted in insync_proxy_topics_not_followed_total")
    describe_configs_batch_topics: int = setting(
        500, min=1, max=10_000,
        meaning="topics per DescribeConfigs of the control connection (each waits "
                "control_request_timeout_seconds plus 2 ms per topic)")
    acks_policies: tuple[AcksPolicyConfig, ...] = setting(
        (), toml="acks_policy", meaning="per-topic acks policies; the first whose topics match wins")
    audit: AuditConfig = setting(AuditConfig(), meaning="the audit stream of acks decisions")
    topic_label_limit: int = setting(200, min=0, meaning="topics with their own metric labels; the rest share the label "
                                                             "topic=\"__overflow__\"", reloads=True)
    log_level: str = setting("INFO", choices=LOG_LEVELS, ignore_case=True, meaning="log level", reloads=True)
    log_format: str = setting("text", choices=LOG_FORMATS,
                              meaning="text, or json: one object a line (time, level, logger, message)", reloads=True)
    log_summary_interval_seconds: float = setting(
        SUMMARY_INTERVAL_SECONDS, min=0, min_exclusive=True, reloads=True,
        meaning="a line a client or the cluster can repeat (bad input, a broker unreachable, a failed background "
                "task, ...) is written once, then its repeats within this many seconds are one summary line")
    use_uvloop: bool = setting(True, flag="--uvloop", meaning="use uvloop's event loop (about twice the throughput)")
    debug_address_leak_check: bool = setting(
        False, meaning="tests: scan every response to clients for a real broker address; count and log each")
    debug_capture_dir: str | None = setting(
        None, meaning="protocol debugging: write raw frames of the decoded APIs here (never in production: "
                      "frames hold record data)")

    def upstream_addresses(self) -> list[tuple[str, int]]:
        return [parse_host_port(s, "bootstrap_servers") for s in self.bootstrap_servers]



_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9_+.-]*)://")


def host_port_problem(value: str) -> str | None:
    """Why `value` is not a broker address as Kafka's bootstrap.servers takes it (host:port), or None."""
    text = value.strip()
    prefix = _PREFIX.match(text)
    if prefix:
        return (f"{value!r} has a {prefix.group(1)}:// prefix: drop it, write host:port (the protocol comes from "
                "upstream_tls and control_sasl)")
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # an IPv6 address, as Kafka writes it: [::1]:9092
    elif ":" in host:
        return (f"{value!r} is not host:port: one colon only (e.g. kafka-1:9092; an IPv6 address goes in brackets, "
                "[::1]:9092)")
    if not sep or not host or not port.isdigit():
        return f"{value!r} is not host:port (e.g. kafka-1:9092)"
    if not 0 < int(port) <= 65535:
        return f"{value!r} has port {int(port)}, outside 1-65535"
    return None


def parse_host_port(value: str, what: str) -> tuple[str, int]:
    """(host, port) of a broker address; ConfigError naming `what` when it is not host:port."""
    problem = host_port_problem(value)
    if problem is not None:
        raise ConfigError(f"{what}: {problem}")
    host, _, port = value.strip().rpartition(":")
    return host.strip("[]"), int(port)
