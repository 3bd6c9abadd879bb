"""The proxy's behaviours, one small object each, registered for the API keys they touch."""
