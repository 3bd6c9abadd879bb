"""Observability: the metrics (metrics.py and its reference page), the rate-limited logs (logs.py,
logsetup.py), the admin HTTP server (admin.py) and whether the data path runs compiled (compiled.py).
It imports only the configuration wing below it."""
