"""TLS contexts of the proxy, made in one place: `run` (the client listeners and every upstream
connection) and `check-config --connect` (preflight) load certificates, keys and CA bundles the same way."""

from __future__ import annotations

import logging
import ssl

from insync_proxy.proxy.config import TlsConfig, UpstreamTlsConfig

log = logging.getLogger("insync_proxy")


def client_ssl_context(tls: UpstreamTlsConfig) -> ssl.SSLContext | None:
    """Upstream TLS: trust ca_file (else the system store), optional client cert, hostname checked."""
    if not tls.enabled:
        return None
    context = ssl.create_default_context(cafile=tls.ca_file)
    context.check_hostname = tls.check_hostname
    if not tls.check_hostname:
        log.warning("upstream TLS hostname verification is OFF (upstream_tls.check_hostname = false)")
    if tls.cert_file:
        context.load_cert_chain(tls.cert_file, tls.key_file, password=tls.key_password)
    return context


def server_ssl_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """Downstream TLS: the proxy's own certificate and key; with ca_file, clients must present a certificate."""
    if not tls.enabled:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    assert tls.cert_file
    context.load_cert_chain(tls.cert_file, tls.key_file, password=tls.key_password)
    if tls.ca_file:
        context.load_verify_locations(tls.ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context
