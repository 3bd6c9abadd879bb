"""The harness: code that both the tests (tests/) and the benchmarks (benchmarks/) use to drive the proxy.

The real proxy as its own process, raw and hostile Kafka clients, Kafka's Java client, a scripted broker (a loopback
server answering from a script), short-lived certificates, the sans-IO cores with recording adapters, the frames they
are fed, waiting on conditions and scratch directories.
It imports neither tests/ nor benchmarks/, and neither of those imports the other (tests/unit/test_architecture.py);
it is not part of the installed package.
"""
