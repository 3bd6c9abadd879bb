"""The control plane: the proxy's own connections to the brokers (control.py, sasl.py), what it learns
from them (min_insync.py, metadata_refresh.py, readiness.py), the context behaviours see (context.py)
and its background tasks' failures (background.py). It drives the data path below it."""
