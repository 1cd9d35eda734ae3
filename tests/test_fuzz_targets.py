"""The fuzz targets of ``fuzz/targets.py`` (the ones ``make fuzz`` runs), seeded from every
published vector and edited byte by byte: each keeps its declared-errors property under
hypothesis too, so a regression shows up in ``make test`` before anyone fuzzes."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import mutated

from fuzz import seeds, targets

FEW = settings(
    deadline=None, derandomize=True, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
VECTOR_JWS = seeds.seeds("jws")
VECTOR_COSE = seeds.seeds("cose")


@FEW
@given(st.sampled_from(VECTOR_JWS).flatmap(mutated))
def test_jws_vectors_mutated_then_verified(data: bytes) -> None:
    """Every vector's element with byte edits: parse and signature check raise only their
    declared errors (the signature check against the vectors' own keys, so edits that
    survive parsing reach the signature code)."""
    targets.jws_element(data)


@FEW
@given(st.sampled_from(VECTOR_COSE).flatmap(mutated))
def test_cose_vectors_mutated_then_verified(data: bytes) -> None:
    targets.cose_element(data)


VECTOR_OTLP = seeds.seeds("otlp")


def test_the_otlp_seeds_carry_the_vectors() -> None:
    """The OTLP seeds are requests the receiver reads, their spans carrying the vectors'
    elements (so the fuzzing below starts past the protobuf and JSON decoding)."""
    from app.otlp.receive import decode_body, found_in, parse_request

    carried = 0
    for data in VECTOR_OTLP:
        (media, coding, _), rest = targets.pick(data, targets.OTLP_SHAPES)
        if coding is None and media != "text/plain":
            received = found_in(
                parse_request(
                    decode_body(rest, media=media, encoding=None, limit=1 << 20), media=media
                )
            )
            carried += len(received.found)
    assert carried >= 100


@FEW
@given(st.sampled_from(VECTOR_OTLP).flatmap(mutated))
def test_otlp_requests_mutated(data: bytes) -> None:
    """Requests carrying the vectors' elements, edited byte by byte, in every content type
    and coding: only the receiver's documented 4xx refusal, never another exception."""
    shape, rest = targets.pick(data, targets.OTLP_SHAPES)
    targets.otlp_body(rest, shape)


@FEW
@given(st.binary(max_size=2000), st.sampled_from(targets.OTLP_SHAPES))
def test_otlp_random_bodies(data: bytes, shape: tuple[str, str | None, bool]) -> None:
    targets.otlp_body(data, shape)
