"""Version negotiation, written once: every client of the project (the proxy's control connection, the
blocking client) learns the broker's version ranges from ApiVersions and sends each request at the
highest version both sides speak. What a caller says when there is none is its own."""

from __future__ import annotations

from insync_proxy.protocol.kafka_messages import ApiVersionsResponse

#: An API's versions as (min, max), both included.
VersionRange = tuple[int, int]


def version_ranges(response: ApiVersionsResponse) -> dict[int, VersionRange]:
    """The peer's (min, max) version per API key, from its ApiVersions response."""
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def highest_common_version(ours: VersionRange, theirs: VersionRange) -> int | None:
    """The highest version in both ranges, or None when they do not meet."""
    low, high = max(ours[0], theirs[0]), min(ours[1], theirs[1])
    return high if low <= high else None
