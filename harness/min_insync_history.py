"""What a KIP-637 tag may say while a topic's min.insync.replicas changes behind the proxy's back.

An observer that changes the setting at the brokers and reads the proxy's Metadata answers judges each answer by
the topic's history of values (when each took effect) and how long the proxy may lag a change (its TTL).
"""

from __future__ import annotations


def allowed_values(history: list[tuple[float, int]], asked: float, lag: float) -> set[int]:
    """The values a tag 637 may carry at `asked`, from the topic's (time it took effect, value) history: the value
    in effect, each earlier one until `lag` after the change that replaced it, and any that took effect after
    `asked` (the time a change took effect is when the runner saw it, possibly after the proxy did)."""
    allowed = set()
    for i, (at, value) in enumerate(history):
        replaced = history[i + 1][0] if i + 1 < len(history) else None
        if at > asked or replaced is None or replaced > asked - lag:
            allowed.add(value)
    return allowed
