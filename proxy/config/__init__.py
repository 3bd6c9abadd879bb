"""Configuration, the lowest wing of the proxy: what each setting is and its default (settings.py,
defaults.py), its checks (schema.py), where values come from (loader.py), the files and places a
configuration names (files.py, places.py, tls.py), the broker port plan (broker_ports.py) and the
reference page (reference.py). It imports no other wing of the proxy."""
