"""The dev tooling: local Kafka clusters (JVMs or testcontainers), chaos, certificates and probes, for
`insync-proxy demo`, `dev-cluster` and `chaos`, the tests and the benchmarks. The proxy's runtime
imports none of it (tests/unit/test_architecture.py)."""
