"""The secured cluster: one 4.x cluster whose brokers have a SASL_PLAINTEXT listener (PLAIN and
SCRAM-SHA-512) and a mutual-TLS listener beside PLAINTEXT, shared through the own-cluster pool by the
SASL and upstream-TLS tests (one cluster start for all of them, not one each).

A test that needs a secured broker marks itself `@pytest.mark.own_cluster(SECURED)` and takes the
`secured_cluster` fixture; it leaves the cluster as it found it (it makes topics of its own names).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster
from tests.cluster_fixtures import *  # noqa: F403  the fixtures that start clusters, proxies, the Java client

if TYPE_CHECKING:
    from tests.cluster_fixtures import OwnClusterPool

SECURED = "secured"
#: SASL/PLAIN users (the brokers' JAAS config) and SCRAM-SHA-512 users (credentials made at format time):
#: the same names with other passwords, so a test shows which mechanism checked it.
PLAIN_USERS = {"alice": "alice-secret", "insync-proxy": "proxy-secret"}
SCRAM_USERS = {"alice": "alice-scram-secret", "insync-proxy": "proxy-scram-secret"}


def self_signed(openssl: str, directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


@dataclass
class Certificates:
    broker_cert: Path
    proxy_cert: Path
    proxy_key: Path
    #: Kafka's PEM keystore: the broker's private key, then its certificate chain.
    broker_keystore: Path


@dataclass
class SecuredCluster:
    cluster: LocalKafkaCluster
    #: None when openssl is missing: the cluster then has no TLS listener (the TLS test skips, saying so).
    certs: Certificates | None


@pytest.fixture(scope="session")
def secured_certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates | None:
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    directory = tmp_path_factory.mktemp("secured-certs")
    broker_cert, broker_key = self_signed(openssl, directory, "broker")
    proxy_cert, proxy_key = self_signed(openssl, directory, "insync-proxy")
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(broker_key.read_text() + broker_cert.read_text())
    return Certificates(broker_cert, proxy_cert, proxy_key, keystore)


@pytest.fixture
def secured_cluster(own_clusters: OwnClusterPool, secured_certificates: Certificates | None) -> SecuredCluster:
    """The running secured cluster (started by the first test that asks, in this run)."""
    certs = secured_certificates
    settings = ClusterSettings(
        sasl_plain_users=PLAIN_USERS, sasl_scram_users=SCRAM_USERS,
        tls_keystore_pem=certs.broker_keystore if certs else None,
        tls_client_ca_pem=certs.proxy_cert if certs else None,
    )
    return SecuredCluster(own_clusters.get(SECURED, settings), certs)
