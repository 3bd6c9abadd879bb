"""Dev tooling, never imported by the runtime: writes protocol/'s message classes and version tables from
Apache Kafka's JSON message specs (protocolgen/specs/, copied from a kafka-clients jar).

Run it with ``scripts/generate-protocol`` (``--check``: fail when the committed output differs;
``--specs JAR|DIR``: take the specs of another Kafka release). See docs/protocol.md.
"""
