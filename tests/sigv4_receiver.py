"""AWS SigV4 checked as X-Ray would, for the OTLP receiver of the CloudWatch tests.

:class:`SigV4Verifier` recomputes the signature with botocore from what was
received (method, path, the headers named in ``SignedHeaders``, the exact body)
and the known test credentials, and compares it with the one sent. It is the
``verifier`` of ``tests/otlp_receiver.py``'s one receiver
(``OtlpReceiver(verifier=SigV4Verifier(...))``), which keeps each verdict on the
request and answers 403 to a request that fails it.
"""

from __future__ import annotations

import calendar
import hmac
import re
import time
from dataclasses import dataclass

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, ?SignedHeaders=(?P<signed>[a-z0-9;-]+), ?"
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)
_TIMESTAMP = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str
    service: str = ""
    region: str = ""
    signed_headers: tuple[str, ...] = ()


class SigV4Verifier:
    """Checks a request's SigV4 signature against known credentials, as AWS does."""

    def __init__(
        self,
        access_key: str,
        secret_key: str,
        token: str | None = None,
        *,
        max_skew_s: float | None = 300.0,
    ) -> None:
        self.credentials = Credentials(access_key, secret_key, token)
        self.max_skew_s = max_skew_s

    def verify(
        self, method: str, path: str, headers: dict[str, str], body: bytes, scheme: str = "http"
    ) -> Verdict:
        """``headers`` are the received ones (any case); ``path`` includes the query."""
        lower = {k.lower(): v for k, v in headers.items()}
        match = _AUTH.match(lower.get("authorization", ""))
        if match is None:
            return Verdict(False, "missing or malformed Authorization header")
        signed = tuple(match["signed"].split(";"))
        service, region = match["service"], match["region"]

        def fail(reason: str) -> Verdict:
            return Verdict(False, reason, service, region, signed)

        if match["key"] != self.credentials.access_key:
            return fail("unknown access key")
        if "host" not in signed or "x-amz-date" not in signed:
            return fail("host and x-amz-date must be signed")
        if list(signed) != sorted(signed):
            return fail("SignedHeaders not sorted")
        missing = [name for name in signed if name not in lower]
        if missing:
            return fail(f"signed headers not received: {missing}")
        amz_date = lower["x-amz-date"]
        if amz_date[:8] != match["date"]:
            return fail("credential scope date differs from X-Amz-Date")
        if self.max_skew_s is not None:
            sent = calendar.timegm(time.strptime(amz_date, _TIMESTAMP))
            if abs(time.time() - sent) > self.max_skew_s:
                return fail("request time too skewed")
        if self.credentials.token and lower.get("x-amz-security-token") != self.credentials.token:
            return fail("security token missing or wrong")
        request = AWSRequest(
            method=method,
            url=f"{scheme}://{lower['host']}{path}",
            data=body,
            headers={name: lower[name] for name in signed},
        )
        request.context["timestamp"] = amz_date
        signer = SigV4Auth(self.credentials, service, region)
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        if not hmac.compare_digest(expected, match["signature"]):
            return fail("signature mismatch")
        return Verdict(True, "ok", service, region, signed)
