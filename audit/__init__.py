"""The audit stream's contract, shared by the proxy that writes it and the pipeline that reads it.

Event names, decisions and schema versions (`insync_proxy.audit.events`, with the builders of every
event the proxy emits), the fixed latency buckets (`insync_proxy.audit.buckets`) and the JSON
schemas (`schema-v1.json`, `schema-v2.json`; docs/audit-events.md). Standard library only: no proxy
runtime (configuration, metrics, prometheus_client) and no Spark, so both sides import it freely.
"""
