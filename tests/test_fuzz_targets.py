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
