"""The audit stream's side of the process: writer.py (`AuditLog`: the JSON Lines files, a bounded queue and a writer
thread), summary.py (the per-interval `produce_summary` accumulators) and kafka_sink.py (the audit topic)."""
