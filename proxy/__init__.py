"""insync-proxy: a Kafka wire-protocol sidecar that makes producers durability-aware."""

__version__ = "0.1.0"
