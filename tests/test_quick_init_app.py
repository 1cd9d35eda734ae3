"""The service's classes built for every element take ``quick_init``'s ``__init__``
(``handoff_context._frozen``, tested there): the same signature as the one dataclasses
generates, and still frozen."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from app.capture.carriers import Carried
from app.capture.items import CaptureItem
from app.envelope.extract import EnvelopeItem
from app.envelope.ledger import Item
from app.ingest.judge import Parsed


@pytest.mark.parametrize("cls", [CaptureItem, Carried, EnvelopeItem, Item, Parsed])
def test_keeps_the_generated_signature(cls: type[Any]) -> None:
    generated = cls.__init__.__dataclass_init__
    assert inspect.signature(cls.__init__) == inspect.signature(generated)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(object.__new__(cls), dataclasses.fields(cls)[0].name, None)


def test_builds_what_the_generated_init_builds() -> None:
    args = {"source": "c.jsonl:1", "value": {"a": 1}, "received_at": 1.5, "raw": b"{}"}
    stock = object.__new__(CaptureItem)
    CaptureItem.__init__.__dataclass_init__(stock, **args)  # type: ignore[attr-defined]
    quick = CaptureItem(**args)  # type: ignore[arg-type]
    assert quick == stock
    assert [getattr(quick, f.name) for f in dataclasses.fields(CaptureItem)] == [
        getattr(stock, f.name) for f in dataclasses.fields(CaptureItem)
    ]
