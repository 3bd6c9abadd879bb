"""The certificate rotation soak (issue #28): 10 minutes of the proxy's upstream client certificate replaced
every 60 s by a new one of the same CA, each valid 3 minutes, while Kafka's Java producer and librdkafka
produce through the proxy without pause; the suite runs the same for 60 s (tests/integration/test_reload.py).

    python3 benchmarks/rotation_soak.py [--minutes 10] [--period 60] [--validity 180]

Starts a local 3-broker Kafka with mTLS listeners of its own (JVMs; about a minute) and stops it at the end.
Prints one line per rotation and a summary: records sent/acknowledged/failed and reconnects per client, the
new upstream connections checked for the new certificate, established connections whose certificate expired
meanwhile, CPU seconds. Exit 0 when nothing failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.certificate_rotation import run_rotation  # noqa: E402
from harness.java_client import JavaClient  # noqa: E402
from harness.pki import Ca  # noqa: E402
from insync_proxy.devcluster.certificates import make_test_certificates  # noqa: E402
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster  # noqa: E402
from insync_proxy.devcluster.distribution import selected_version  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--period", type=float, default=60, help="seconds between rotations (60)")
    parser.add_argument("--validity", type=float, default=180, help="seconds each certificate is valid (180)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="insync-rotation-soak-"))
    certs = make_test_certificates(work / "pki", ("insync-proxy",))
    ca = Ca.from_files(certs.ca_cert, work / "pki" / "ca.key")
    java = JavaClient(selected_version())
    # The brokers close a connection idle for connections.max.idle.ms (10 minutes by default): the Java
    # producer's bootstrap connection is idle after its first Metadata, and its close would read as a
    # reconnect. An hour: every close in the run is then one the rotation caused.
    cluster = LocalKafkaCluster(ClusterSettings(tls_keystore_pem=certs.broker_keystore, tls_client_ca_pem=certs.ca_cert,
                                                extra_broker_config={"connections.max.idle.ms": "3600000"}))
    cluster.start()
    try:
        result = run_rotation(cluster, ca, certs.ca_cert, work, java, period=args.period, validity=args.validity,
                              duration=args.minutes * 60, say=lambda line: print(line, flush=True))
    finally:
        cluster.stop()
        cluster.cleanup()
    print(result.summary())
    records = result.java.acked + result.librdkafka.acked
    print(f"proxy event loop: {result.proxy_cpu_seconds / max(records, 1) * 1e6:.1f} CPU µs per record "
          f"({records} records acknowledged)")
    failed = (result.java.errors or result.librdkafka.errors or result.java.closes or result.librdkafka.closes
              or result.wrong_certificate or result.warm_connections_closed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
