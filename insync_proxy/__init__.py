"""insync-proxy: a Kafka wire-protocol sidecar (KIP-637, KIP-926, KIP-1).

One distinctive top-level name for everything the distribution installs:
``insync_proxy.protocol`` (the sans-IO codec), ``insync_proxy.audit`` (the audit stream's contract),
``insync_proxy.proxy`` (the proxy process), ``insync_proxy.client`` (client-side helpers: a blocking
client, a producer-side partitioner, check-config's preflight; the proxy's runtime imports none of it),
``insync_proxy.pipeline`` (the PySpark jobs) and
``insync_proxy.devcluster`` (the local Kafka, chaos, certificates and probes of development and tests;
the proxy's runtime imports none of it).

In the source tree they are the top-level folders ``protocol/``, ``audit/``, ``proxy/``, ``client/``,
``pipeline/`` and ``devcluster/``; this folder holds a relative link to each (``insync_proxy/proxy ->
../proxy``), and those six links are the one list of them. A checkout is therefore an ordinary package tree:
Python's own import system, an editable install's plain path entry, mypy, mypyc and an IDE's analyser
(pyright) all find ``insync_proxy.proxy.server`` at ``insync_proxy/proxy/server.py``, with no import hook.
A wheel holds real folders under ``insync_proxy/`` (setuptools copies through the links).
"""
