"""The data path: every client byte passes here. The sans-IO connection core (core.py) and its exchange
model (exchange.py), the asyncio connection around it (connection.py), the listeners (listeners.py), the
memory budget (budget.py), the exchange observer and frame capture (observer.py, capture.py), and the
cluster as the data path reads it (cluster_view.py). It imports configuration and observability only."""
