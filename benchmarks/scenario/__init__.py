"""A year in an hour (issue 39): many faults at once, for a long time, against invariants checked by an oracle
that shares no code with the proxy.

    python3 -m benchmarks.scenario [--minutes 60] [--out DIR] [--json FILE] [--interpreted]

1. A 3-broker dev cluster on Kafka 3.9.2 with a SASL_SSL listener (SCRAM-SHA-512 for the proxy's control login
   and the clients, PLAIN for the runner's own Metadata sampler) that also asks for a client certificate (mTLS),
   started as `LocalKafkaCluster`; the SASL_SSL listener of broker 3 is advertised through a TCP relay of this
   process (the silent-network event).
2. The proxy as a user runs it: `python -m insync_proxy run --config FILE`, the compiled build (made first with
   ./scripts/compile when missing; `--interpreted` for the interpreted one), mTLS and SCRAM upstream, TLS
   downstream: clients speak SASL_SSL to it and trust its CAs.
3. Producers through the proxy: Kafka's VerifiableProducer (idempotent, acks=all), kafka-python with acks=-2,
   kafka-python with acks=-2 partitioned by the project's KIP-637 partitioner (insync_proxy.client.partitioner),
   librdkafka with acks=1 and with acks=0. For the added latency, Kafka's Java producer
   (benchmarks/java/LatencyProducer.java: acks=all, linger.ms=0, one request in flight) both through the proxy
   and directly at half its maximum rate: the rate it reaches one record at a time, measured directly for a
   few seconds before the events start (`--latency-rate` fixes it instead). A record's latency runs from when
   it was due to its acknowledgement; the producer prints a histogram (2% buckets) every second.
4. A schedule of overlapping events, spread over the run and repeated in a long one: SIGKILL and restart of a
   broker, a broker paused 30 s, a rolling restart (SIGTERM), topics created/altered/deleted at a steady rate,
   SIGHUP and POST /reload with changed settings, hostile clients and a connection storm, a broker's network
   silent for 60 s (the relay stops forwarding, sockets stay open), certificates rotated on both legs (brokers'
   dynamic keystores, the proxy's client and server certificates, SIGHUP), a CA change on both legs after which
   the brokers trust only the new CA (POST /reload), slow consumers holding large Fetch answers, a rolling
   upgrade to Kafka 4.3.1 with the metadata.version bump (FeatureCommand of the 4.3.1 jars), then a share group.
5. A monitor samples the proxy every few seconds (RSS, fds, threads from /proc; /metrics; /readyz with an
   ApiVersions through the proxy), the brokers' own ISRs (kafka-python, straight to the brokers) and the proxy's
   Metadata answers (a hand-written Metadata v12 client: tag 637, broker addresses).
6. At the end: every record VerifiableProducer and the partitioner's producer had acknowledged is read back at
   its offset straight from the brokers (kafka-python); the invariants print as a table and go to a summary JSON;
   the timeline (RSS, fds, the 10-second p99 latency of both paths, the event windows), drawn by matplotlib, goes
   beside them as timeline.svg and timeline.png.

Exit 0 when every invariant held.
"""

