"""Client-side helpers, not the proxy: a small blocking Kafka client (blocking_client.py), a
producer-side partitioner (partitioner.py) and `check-config --connect`'s preflight (preflight.py).
What a Python producer imports from here loads none of the proxy's runtime; the runtime (proxy/)
imports nothing from here."""
