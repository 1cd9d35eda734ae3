"""Reference checks of url parts: content against the objects the receiver holds, and the
expiry of signed URLs against the receive time."""

from __future__ import annotations

import hashlib

import pytest
from handoff_context import AvailableObject, ObjectIndex

from app.envelope.references import UrlPart, check_reference, url_expiry
from tests.conftest import T0

HELD = ObjectIndex.of([AvailableObject("transcript.txt", b"held octets")])
SHA = hashlib.sha256(b"held octets").hexdigest()


def check(
    url: str = "https://s.example/e/transcript.txt",
    sha256: object = SHA,
    size: object = None,
    at: int = T0,
) -> dict[str, object]:
    return check_reference(
        UrlPart(url, "text/plain", None, sha256, size), objects=HELD, received_at=at
    )


@pytest.mark.parametrize(
    ("url", "expires"),
    [
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Date=20261130T120000Z&X-Amz-Expires=3600&X-Amz-Signature=x",
            1796043600,
        ),
        (
            "https://storage.googleapis.com/b/k?X-Goog-Date=20261130T120000Z&X-Goog-Expires=60",
            1796040060,
        ),
        ("https://d.cloudfront.net/k?Expires=1796040000&Signature=x", 1796040000),
        (
            "https://a.blob.core.windows.net/c/k?sv=2022-11-02&se=2026-11-30T12:00:00Z&sig=x",
            1796040000,
        ),
        ("https://a.blob.core.windows.net/c/k?se=2026-11-30", 1795996800),
        ("https://s.example/k", None),
        ("https://s.example/k?X-Amz-Date=yesterday&X-Amz-Expires=60", None),
        ("https://s.example/k?Expires=-5", None),
    ],
)
def test_signed_url_expiry_from_its_query(url: str, expires: int | None) -> None:
    assert url_expiry(url) == expires


def test_held_content_verifies() -> None:
    result = check(size=len(b"held octets"))
    assert (result["outcome"], result["hash"], result["expired"]) == ("verified", "verified", False)


def test_a_size_that_differs_is_a_mismatch() -> None:
    assert check(size=3)["outcome"] == "mismatch"


def test_a_named_object_with_another_digest_is_a_mismatch() -> None:
    result = check(sha256="00" * 32)
    assert result["outcome"] == "mismatch" and "transcript.txt" in str(result["detail"])


def test_an_object_not_held_is_unverifiable() -> None:
    assert check(url="https://s.example/e/other.txt", sha256="00" * 32)["outcome"] == "unverifiable"


@pytest.mark.parametrize("sha256", [None, "not-hex", 42])
def test_a_missing_or_unusable_hash(sha256: object) -> None:
    assert check(sha256=sha256)["outcome"] == "missing-hash"


def test_a_link_dead_on_arrival_is_expired_but_keeps_its_hash_outcome() -> None:
    url = f"https://s.example/e/transcript.txt?Expires={T0 - 1}"
    result = check(url=url, at=T0)
    assert (result["outcome"], result["hash"], result["expires"]) == ("expired", "verified", T0 - 1)
    assert check(url=f"https://s.example/e/transcript.txt?Expires={T0}", at=T0)["expired"] is False


def test_a_mismatch_outranks_an_expired_link() -> None:
    url = f"https://s.example/e/transcript.txt?Expires={T0 - 1}"
    result = check(url=url, sha256="00" * 32)
    assert (result["outcome"], result["expired"]) == ("mismatch", True)
