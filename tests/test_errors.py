"""One error hierarchy (app/errors.py): every exception class of the service derives from
``HandoffTraceError`` and names its machine ``reason``; every per-item problem is one record,
``ItemProblem``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest
from starlette.exceptions import HTTPException

import app
from app.capture.items import CarrierError
from app.errors import HandoffTraceError, ItemProblem
from app.ingest.envelope import EnvelopeError
from app.ingest.pipeline import ItemError
from app.web.errors import ApiError, PayloadTooLarge
from app.web.sessions import PageError

REASON = re.compile(r"[a-z]+(-[a-z]+)*")


def service_modules() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(app.__path__, "app.")]
    assert "app.store.db" in names and "app.cli.root" in names
    return names


def exception_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for name in service_modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == name:
                found.append(value)
    return found


def test_every_exception_of_the_service_is_a_handoff_trace_error() -> None:
    classes = exception_classes()
    assert len(classes) >= 15  # settings, CLI, store, web, demo
    assert [c for c in classes if not issubclass(c, HandoffTraceError)] == []


# Their reason is the code of the HTTP status they answer, per instance.
PER_STATUS = {"ApiError", "PayloadTooLarge", "PageError"}


def test_every_kind_names_its_reason() -> None:
    for kind in exception_classes():
        if kind is HandoffTraceError or kind.__qualname__ in PER_STATUS:
            continue
        assert "reason" in vars(kind) and REASON.fullmatch(kind.reason), kind


def test_web_errors_take_their_reason_from_the_status() -> None:
    assert (ApiError(404, "no such hop").reason, ApiError(404, "x").detail) == ("not-found", "x")
    assert ApiError(422, "bad", code="invalid-action").code == "invalid-action"
    assert PageError(403, "Only an admin may store uploads.").reason == "forbidden"
    too_large = PayloadTooLarge(10)
    # Still an HTTPException, so FastAPI's body reader lets it through as it is.
    assert isinstance(too_large, HTTPException) and too_large.status_code == 413
    assert (too_large.status, too_large.reason) == (413, "payload-too-large")
    assert too_large.detail == "the request body is larger than 10 octets"


def test_detail_is_what_str_shows_and_reason_may_be_refined() -> None:
    exc = HandoffTraceError("the trust file is missing", reason="no-trust")
    assert (str(exc), exc.detail, exc.reason) == (
        "the trust file is missing",
        exc.detail,
        "no-trust",
    )
    assert HandoffTraceError("x").reason == "error"


def test_one_record_for_a_per_item_problem() -> None:
    assert CarrierError is ItemProblem and ItemError is ItemProblem and EnvelopeError is ItemProblem
    problem = ItemProblem("cap.jsonl:3", "line 3 is not valid JSON")
    with pytest.raises(AttributeError):
        problem.detail = "changed"  # type: ignore[misc]
