"""insync-proxy: a Kafka wire-protocol sidecar (KIP-637, KIP-926, KIP-1).

One distinctive top-level name for everything the distribution installs:
``insync_proxy.protocol`` (the sans-IO codec), ``insync_proxy.proxy`` (the proxy process) and
``insync_proxy.pipeline`` (the PySpark jobs). In the source tree they live in the top-level folders
``protocol/``, ``proxy/`` and ``pipeline/``; this package reaches them through symbolic links.
"""
