"""Certificates rotated on both legs and the CA changed, while the clients produce: the brokers' keystores and
truststores moved by dynamic configs, the proxy's files replaced whole and picked up on SIGHUP or POST /reload,
and what must hold after each (the proxy served on, new connections see the new certificates, the old CA's client
certificate locked out)."""

from __future__ import annotations

import ssl
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.scenario.clock import Clock
from benchmarks.scenario.cluster import ScenarioCluster
from benchmarks.scenario.credentials import (
    KEYSTORE,
    PROXY_USER,
    TRUSTSTORE,
    RunCertificates,
    certificate_serial,
    tls_probe,
)
from benchmarks.scenario.findings import Findings, Window
from benchmarks.scenario.proxy import ScenarioProxy
from benchmarks.scenario.topics import LATENCY_TOPIC

#: After a rotation, /readyz and the producers must be back within this long.
ROTATION_BOUND_SECONDS = 30.0


class Rotations:
    """The two TLS events; one at a time (a rotation and a CA change never interleave their files)."""

    def __init__(self, cluster: ScenarioCluster, proxy: ScenarioProxy, pki: RunCertificates, clock: Clock,
                 found: Findings) -> None:
        self.cluster, self.proxy, self.pki, self.clock, self.found = cluster, proxy, pki, clock, found
        self.lock = threading.Lock()

    def rotate_certificates(self, window: Window) -> None:
        """Same CAs, new certificates on both legs: the brokers' (dynamic keystore), the proxy's client certificate
        towards them and its server certificate towards the clients; the proxy picks its files up on SIGHUP."""
        pki = self.pki
        with self.lock:
            keystore, broker_serial = pki.new_broker_keystore(f"rotation-{len(self.found.rotations) + 1}")
            self.cluster.alter_brokers({KEYSTORE: str(keystore)})
            self.cluster.wait_brokers(
                "the new broker certificate",
                lambda port: tls_probe(port, pki.upstream_ca, (pki.proxy_cert, pki.proxy_key)) == broker_serial)
            client_serial = pki.issue_client(pki.proxy_cert, pki.proxy_key, PROXY_USER)
            server_serial = pki.issue_server()
            self.proxy.reload_tls("SIGHUP")
            window.detail = (f"brokers' certificate {broker_serial:x}, proxy client {client_serial:x}, "
                             f"proxy server {server_serial:x} (SIGHUP)")
            self.check_after_rotation(window, "rotation", client_serial, server_serial)

    def change_ca(self, window: Window) -> None:
        """Upstream: a new CA for the brokers and the proxy (the brokers trust both, then every certificate moves to
        the new CA, then the brokers trust only the new one); downstream: the proxy's server certificate moves to
        its other CA. The proxy picks everything up on POST /reload."""
        pki, cluster, proxy = self.pki, self.cluster, self.proxy
        with self.lock:
            new_ca = pki.new_ca()
            g = pki.generation
            old_client = pki.keep(pki.proxy_cert, pki.proxy_key, f"proxy-client-before-ca-{g}")
            staged = (pki.dir / f"proxy-client-ca-{g}.crt", pki.dir / f"proxy-client-ca-{g}.key")
            pki.issue_client(*staged, PROXY_USER, ca=new_ca)
            # 1. the brokers and the proxy trust both CAs
            both = pki.bundle(f"broker-trust-{g}-both.pem", pki.ca_cert, new_ca[0])
            cluster.alter_brokers({TRUSTSTORE: str(both)})
            pki.trust_upstream(both)
            cluster.wait_brokers("the brokers to trust the new CA", lambda port: tls_probe(port, both, staged) > 0)
            proxy.reload_tls("POST", ("upstream_tls",))
            # 2. every certificate from the new CA: the brokers', the proxy's client one, the proxy's server one
            pki.ca_cert, pki.ca_key = new_ca
            pki.broker_keystore, broker_serial = pki.new_broker_keystore(f"ca-{g}-brokers")
            cluster.alter_brokers({KEYSTORE: str(pki.broker_keystore)})
            cluster.wait_brokers("the new CA's broker certificate",
                                 lambda port: tls_probe(port, both, staged) == broker_serial)
            pki.install_proxy_client(staged)
            client_serial = certificate_serial(staged[0])
            pki.downstream_index = (pki.downstream_index + 1) % len(pki.downstream)
            server_serial = pki.issue_server()
            proxy.reload_tls("POST")
            pki.reissue_direct()
            # 3. the brokers and the proxy trust only the new CA: the old client certificate is locked out
            only_new = pki.bundle(f"broker-trust-{g}.pem", new_ca[0])
            cluster.alter_brokers({TRUSTSTORE: str(only_new)})
            pki.trust_upstream(only_new)

            def locked_out(port: int) -> bool:
                try:
                    tls_probe(port, only_new, old_client)
                except (ssl.SSLError, ConnectionError):
                    return tls_probe(port, only_new, staged) == broker_serial
                return False

            cluster.wait_brokers("the brokers to refuse the old CA's client certificate", locked_out)
            proxy.reload_tls("POST", ("upstream_tls",))
            window.detail = (f"upstream CA {g - 1} -> {g} (brokers' certificate {broker_serial:x}, proxy client "
                             f"{client_serial:x}); downstream CA -> {pki.downstream_index + 1} (proxy server "
                             f"{server_serial:x}); POST /reload")
            self.check_after_rotation(window, "CA change", client_serial, server_serial, refused=old_client)

    def check_after_rotation(self, window: Window, kind: str, client_serial: int, server_serial: int,
                             refused: tuple[Path, Path] | None = None) -> None:
        """What must hold after a rotation: /readyz true and the idempotent producer acknowledging again within
        ROTATION_BOUND_SECONDS, a new client connection served the new server certificate, a new producer
        acknowledged through the proxy (its new upstream connections carry the new client certificate: after a
        CA change no other gets in), the proxy's log naming the new client certificate's serial; after a CA change,
        the old client certificate refused by every broker."""
        now = self.clock.now
        done = now()
        record: dict[str, Any] = {"kind": kind, "at": round(done, 1), "client_serial": f"{client_serial:x}",
                                  "server_serial": f"{server_serial:x}"}
        acked = len(self.found.acked)
        deadline = time.monotonic() + ROTATION_BOUND_SECONDS
        ready_at = progress_at = None
        while time.monotonic() < deadline and (ready_at is None or progress_at is None):
            if ready_at is None and self.proxy.readyz()[0]:
                ready_at = now() - done
            if progress_at is None and len(self.found.acked) > acked:
                progress_at = now() - done
            time.sleep(0.2)
        record["ready_after_s"] = None if ready_at is None else round(ready_at, 1)
        record["producer_progress_after_s"] = None if progress_at is None else round(progress_at, 1)
        try:
            record["server_serial_seen"] = tls_probe(self.proxy.bootstrap_port, self.pki.client_trust) == server_serial
        except (OSError, ssl.SSLError) as exc:
            record["server_serial_seen"] = False
            record["server_error"] = str(exc)
        from confluent_kafka import Producer

        fresh = Producer({**self.proxy.librdkafka_settings(), "acks": "all", "client.id": f"year-after-{kind}",
                          "message.timeout.ms": 60000, "log_level": 2})
        fresh.produce(LATENCY_TOPIC, f"after {kind}".encode(), partition=0)
        record["new_client_acknowledged"] = fresh.flush(60) == 0
        record["proxy_logged_new_client_serial"] = f"serial {client_serial:x}" in self.proxy.log_text()
        brokers = self.cluster.cluster.sasl_ports
        if refused is not None:
            kept_out = 0
            for port in brokers.values():
                try:
                    tls_probe(port, self.pki.upstream_ca, refused)
                except (ssl.SSLError, ConnectionError):
                    kept_out += 1
            record["old_client_refused_by_brokers"] = f"{kept_out}/{len(brokers)}"
        ok = (ready_at is not None and progress_at is not None and record["server_serial_seen"]
              and record["new_client_acknowledged"] and record["proxy_logged_new_client_serial"]
              and (refused is None or kept_out == len(brokers)))
        record["ok"] = bool(ok)
        with self.found.lock:
            self.found.rotations.append(record)
        window.detail += f"; ready after {record['ready_after_s']} s, producer on after {record['producer_progress_after_s']} s"
        if not ok:
            raise RuntimeError(f"after the {kind}: {record}")
