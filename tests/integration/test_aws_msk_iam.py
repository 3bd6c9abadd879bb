"""AWS_MSK_IAM: the proxy's signed payload (botocore) against Amazon's own aws-msk-iam-auth library (Maven
Central), for the same credentials, broker host and time, field by field.

There is no MSK here: what the brokers do with the payload is not tested, only that the proxy sends what Amazon's
library sends (docs/security.md says so). The library's JSON object has no fixed key order (a Java HashMap), so the
objects are compared key by key, each value byte for byte.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import shutil
import subprocess
from pathlib import Path
from unittest import mock

import pytest

from insync_proxy.devcluster.distribution import cache_dir, java_executable
from insync_proxy.proxy.config.settings import SaslConfig
from insync_proxy.proxy.controlplane.sasl import SaslError, authenticate

botocore = pytest.importorskip("botocore", reason="botocore is not installed: pip install 'insync-proxy[aws]'")

from botocore.credentials import ReadOnlyCredentials  # noqa: E402 - after the skip for a missing botocore

from insync_proxy.proxy.controlplane.aws_msk_iam import EXPIRES_SECONDS, region_of, signed_payload  # noqa: E402

pytestmark = pytest.mark.needs_kafka  # a JVM (the reference library), no cluster

POM = Path(__file__).parents[1] / "java" / "msk-iam" / "pom.xml"
SOURCE = Path(__file__).parents[1] / "java" / "MskIamPayload.java"
HOST = "b-2.orders.x1y2z3.c4.kafka.eu-central-1.amazonaws.com"
KEY_ID, SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command that prints aws-msk-iam-auth's payload (jars fetched once into the cache)."""
    mvn, javac = shutil.which("mvn"), shutil.which("javac")
    if mvn is None or javac is None:
        pytest.skip("Maven and a JDK are needed to run Amazon's aws-msk-iam-auth library")
    jars = cache_dir() / "aws-msk-iam-auth-2.3.6"
    if not (jars / "aws-msk-iam-auth-2.3.6.jar").exists():
        fetched = subprocess.run([mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
                                  f"-DoutputDirectory={jars}"], capture_output=True, text=True, timeout=600)
        assert fetched.returncode == 0, fetched.stdout[-2000:] + fetched.stderr[-2000:]
    out = tmp_path_factory.mktemp("msk-iam")
    compiled = subprocess.run([javac, "-cp", f"{jars}/*", "-d", str(out), str(SOURCE)], capture_output=True,
                              text=True, timeout=300)
    assert compiled.returncode == 0, compiled.stderr
    return [java_executable(), "-cp", f"{out}:{jars}/*", SOURCE.stem]


def _ours_at_the_same_time(java: dict[str, str], credentials: ReadOnlyCredentials) -> dict[str, str]:
    """The proxy's payload for the library's host, signed at the library's x-amz-date for as long.

    The library sets an expiry instant (its now + 15 min) and its signer subtracts its own, later, now: when a second
    boundary falls between the two readings (a busy machine), the library sends x-amz-expires 899, not 900.
    """
    when = datetime.datetime.strptime(java["x-amz-date"], "%Y%m%dT%H%M%SZ")
    region = region_of(java["host"])
    assert region is not None
    expires = int(java["x-amz-expires"])
    assert EXPIRES_SECONDS - 2 <= expires <= EXPIRES_SECONDS
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        payload: dict[str, str] = json.loads(signed_payload(java["host"], region, credentials, java["user-agent"],
                                                            expires))
    return payload


@pytest.mark.parametrize("token", [None, "IQoJb3JpZ2luX2VjEJr//////////wEaCWV1LXdlc3QtMSJHMEUCIQ+/="])
def test_the_payload_is_the_one_amazons_library_signs_for_the_same_credentials_host_and_time(
        reference: list[str], token: str | None) -> None:
    # Given Amazon's library's payload for a broker host and keys (a session token: temporary credentials)
    run = subprocess.run([*reference, HOST, KEY_ID, SECRET, *([token] if token else [])], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    java: dict[str, str] = json.loads(run.stdout)
    # When the proxy signs for the same host, credentials and second
    ours = _ours_at_the_same_time(java, ReadOnlyCredentials(KEY_ID, SECRET, token))
    # Then every field is the same, byte for byte, the signature included
    assert set(ours) == set(java)
    for key in sorted(java, key=lambda key: key == "x-amz-signature"):  # the signature last: it follows the others
        assert ours[key].encode() == java[key].encode(), key
    assert java["x-amz-credential"] == f"{KEY_ID}/{java['x-amz-date'][:8]}/eu-central-1/kafka-cluster/aws4_request"
    assert ("x-amz-security-token" in java) is (token is not None)


def test_the_region_comes_from_an_msk_host_or_must_be_set() -> None:
    assert region_of(HOST) == "eu-central-1"
    assert region_of("boot-abc.c1.kafka-serverless.us-east-2.amazonaws.com") == "us-east-2"
    assert region_of("kafka-1.example.com") is None

    async def refuse(api_key: int, version: int, body: bytes) -> bytes:
        from insync_proxy.protocol import SaslHandshakeResponse, encode_response

        return encode_response(SaslHandshakeResponse(error_code=0, mechanisms=("AWS_MSK_IAM",)), version)

    with pytest.raises(SaslError, match="set control_sasl.aws_region"):
        asyncio.run(authenticate(refuse, SaslConfig(mechanism="AWS_MSK_IAM"), "kafka-1.example.com"))
