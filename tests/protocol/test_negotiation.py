"""One version negotiation for every client of the project: the highest version both ranges hold."""

from __future__ import annotations

from insync_proxy.protocol import ApiVersionsResponse
from insync_proxy.protocol.kafka_messages import ApiVersion
from insync_proxy.protocol.negotiation import highest_common_version, version_ranges


def test_the_highest_version_both_sides_speak_is_chosen() -> None:
    assert highest_common_version((0, 13), (0, 9)) == 9
    assert highest_common_version((0, 9), (3, 13)) == 9
    assert highest_common_version((4, 4), (0, 13)) == 4


def test_ranges_that_do_not_meet_have_no_common_version() -> None:
    assert highest_common_version((10, 13), (0, 9)) is None
    assert highest_common_version((0, 2), (3, 13)) is None


def test_the_ranges_of_an_api_versions_response_by_api_key() -> None:
    response = ApiVersionsResponse(api_keys=(ApiVersion(api_key=3, min_version=0, max_version=13),
                                             ApiVersion(api_key=18, min_version=0, max_version=4)))
    assert version_ranges(response) == {3: (0, 13), 18: (0, 4)}
