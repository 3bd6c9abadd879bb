"""AWS_MSK_IAM for the proxy's own login: Amazon MSK's IAM access control (the mechanism of Amazon's
aws-msk-iam-auth library), made with botocore.

The client's one SaslAuthenticate carries a JSON object: a SigV4 presigned request `GET https://<broker host>/?Action=
kafka-cluster:Connect` for the service `kafka-cluster` in the broker's region, valid 900 s, its query parameters as
lower-case keys (x-amz-algorithm, x-amz-credential, x-amz-date, x-amz-expires, x-amz-signedheaders, x-amz-signature,
x-amz-security-token with temporary credentials), plus `version` ("2020_10_22"), `host`, `user-agent` and `action`.
The signing is botocore's (SigV4QueryAuth); the credentials come from botocore's default chain (environment,
shared files and profiles, web identity as EKS's IRSA gives it, the container and instance metadata services).
tests/integration/test_aws_msk_iam.py compares each field with what aws-msk-iam-auth makes for the same
credentials, host and time.
"""

from __future__ import annotations

import json
import re
from typing import Any

VERSION = "2020_10_22"
SERVICE = "kafka-cluster"
ACTION = "kafka-cluster:Connect"
#: Seconds the presigned request is valid (the library's 15 minutes).
EXPIRES_SECONDS = 900
USER_AGENT = "insync-proxy"

#: An MSK broker's host names its region: b-1.cluster.abc123.c2.kafka.eu-west-1.amazonaws.com
_REGION = re.compile(r"\.kafka(?:-serverless)?\.([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com(?:\.cn)?$")


class AwsIamError(Exception):
    """No payload: no credentials, or no region; the text says what to set."""


def region_of(host: str) -> str | None:
    """The AWS region an MSK broker's host name carries, or None."""
    found = _REGION.search(host.lower())
    return found.group(1) if found else None


#: botocore's credentials by profile, found once: refreshable ones (roles, web identity, metadata) renew themselves, so
#: a login does not walk the provider chain again (at most a few: one per [control_sasl] aws_profile seen).
_FOUND: dict[str | None, Any] = {}


def credentials(profile: str | None) -> Any:
    """Frozen credentials from botocore's default chain (blocking: it may ask a metadata service or STS)."""
    import botocore.exceptions
    import botocore.session

    try:
        found = _FOUND.get(profile)
        if found is None:
            found = botocore.session.Session(profile=profile).get_credentials()
            if found is not None and len(_FOUND) < 4:
                _FOUND[profile] = found
    except botocore.exceptions.ProfileNotFound:
        raise AwsIamError(f"AWS profile {profile!r} is not in the shared configuration files: check "
                          "control_sasl.aws_profile, AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE") from None
    except botocore.exceptions.BotoCoreError as exc:
        raise AwsIamError(f"AWS credentials could not be loaded: {exc}") from None
    if found is None:
        raise AwsIamError("no AWS credentials found (environment, shared files, web identity, container or instance "
                          "metadata): give the proxy an IAM role (EKS: IRSA or Pod Identity) or AWS_ACCESS_KEY_ID and "
                          "AWS_SECRET_ACCESS_KEY")
    return found.get_frozen_credentials()


def signed_payload(host: str, region: str, frozen: Any, user_agent: str = USER_AGENT,
                   expires: int = EXPIRES_SECONDS) -> bytes:
    """The AWS_MSK_IAM authentication payload for `host`, signed now with `frozen` credentials, valid `expires` s."""
    from urllib.parse import parse_qsl, urlsplit

    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest

    request = AWSRequest(method="GET", url=f"https://{host}/", params={"Action": ACTION})
    SigV4QueryAuth(frozen, SERVICE, region, expires=expires).add_auth(request)
    prepared = request.prepare()
    payload = {key.lower(): value for key, value in parse_qsl(urlsplit(prepared.url).query, keep_blank_values=True)}
    payload.update({"version": VERSION, "host": host, "user-agent": user_agent})
    return json.dumps(payload, separators=(",", ":")).encode()
