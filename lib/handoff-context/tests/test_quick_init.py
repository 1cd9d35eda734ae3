"""``quick_init`` against the ``__init__`` dataclasses generates: the same signature, the
same instances (every field, defaults, default factories, fields outside ``__init__``,
``__post_init__``, keyword-only fields, with and without slots), the same errors, and the
instance still frozen. The classes the library decorates are checked the same way."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest
from handoff_context import _handoff, _lifecycle, _model, _verdict, _verify, carry
from handoff_context._frozen import quick_init


def _classes(slots: bool) -> list[type[Any]]:
    """One class of each shape, made fresh (the test decorates its own copy)."""

    @dataclass(frozen=True, slots=slots)
    class Plain:
        a: int
        b: str

    @dataclass(frozen=True, slots=slots)
    class Defaults:
        a: int
        b: str | None = None
        c: list[int] = field(default_factory=list)
        d: tuple[int, ...] = ()
        e: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @dataclass(frozen=True, slots=slots)
    class Outside:
        a: int
        kind: str = field(default="offer", init=False)
        seen: list[int] = field(default_factory=list, init=False)

    @dataclass(frozen=True, slots=slots)
    class Checked:
        lo: int
        hi: int = 10

        def __post_init__(self) -> None:
            if not self.lo < self.hi:
                raise ValueError("lo must be below hi")

    @dataclass(frozen=True, slots=slots, kw_only=True)
    class KeywordOnly:
        a: int
        b: int = 2

    @dataclass(frozen=True, slots=slots)
    class Mixed:
        a: int
        b: int = field(default=3, kw_only=True)
        c: int = 4

    return [Plain, Defaults, Outside, Checked, KeywordOnly, Mixed]


_CALLS: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {
    "Plain": [((1, "x"), {}), ((), {"b": "y", "a": 2})],
    "Defaults": [((1,), {}), ((1, "b", [5], (6,), {"k": 7}), {}), ((1,), {"e": {"x": 1}})],
    "Outside": [((1,), {}), ((), {"a": 2})],
    "Checked": [((1,), {}), ((1, 2), {}), ((), {"hi": 5, "lo": 4})],
    "KeywordOnly": [((), {"a": 1}), ((), {"a": 1, "b": 5})],
    "Mixed": [((1,), {}), ((1, 9), {"b": 8})],
}
_BAD_CALLS: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {
    "Plain": [((1,), {}), ((1, "x", 3), {}), ((1,), {"c": 2})],
    "Defaults": [((), {})],
    "Outside": [((1,), {"kind": "x"})],
    "Checked": [((15,), {}), ((3, 3), {})],
    "KeywordOnly": [((1,), {})],
    "Mixed": [((1, 2, 3), {})],
}


def _fields(obj: object) -> list[tuple[str, Any]]:
    return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]  # type: ignore[arg-type]


def _both(cls: type[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """An instance by the quick ``__init__`` and one by the generated ``__init__``."""
    stock = object.__new__(cls)
    cls.__init__.__dataclass_init__(stock, *args, **kwargs)
    return cls(*args, **kwargs), stock


def _outcome(call: Any, *args: Any, **kwargs: Any) -> tuple[str, str]:
    try:
        call(*args, **kwargs)
    except Exception as exc:  # the error itself is what is compared
        return type(exc).__name__, str(exc).replace("__init__", "")
    return "", ""


@pytest.mark.parametrize("slots", [True, False])
def test_same_instances_and_errors_as_the_generated_init(slots: bool) -> None:
    for cls in _classes(slots):
        generated = cls.__init__
        quick_init(cls)
        assert inspect.signature(cls.__init__) == inspect.signature(generated)
        for args, kwargs in _CALLS[cls.__name__]:
            quick, stock = _both(cls, args, kwargs)
            assert _fields(quick) == _fields(stock)
            assert repr(quick) == repr(stock) and quick == stock
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(quick, dataclasses.fields(cls)[0].name, 0)
        for args, kwargs in _BAD_CALLS[cls.__name__]:
            stock_error = _outcome(generated, object.__new__(cls), *args, **kwargs)
            assert stock_error[0], (cls.__name__, args, kwargs)
            assert _outcome(cls, *args, **kwargs) == stock_error


def test_a_default_factory_runs_for_each_instance() -> None:
    for cls in _classes(slots=True)[1:3]:
        quick_init(cls)
        one, two = cls(1), cls(1)
        mutable = "c" if cls.__name__ == "Defaults" else "seen"
        assert getattr(one, mutable) == [] and getattr(one, mutable) is not getattr(two, mutable)


def test_refuses_what_it_does_not_handle() -> None:
    @dataclass(slots=True)
    class Mutable:
        a: int

    @dataclass(frozen=True)
    class WithInitVar:
        a: int
        b: dataclasses.InitVar[int] = 0

    for cls in (Mutable, WithInitVar, int):
        with pytest.raises(TypeError):
            quick_init(cls)


_DECORATED = [
    _handoff.HandoffObject,
    _handoff.StatusObject,
    _lifecycle.OfferFact,
    _lifecycle.StatusFact,
    _lifecycle.HopView,
    _lifecycle._Hop,
    _model.Offer,
    _model.Status,
    _model.Element,
    _verdict.ChainElementReport,
    _verify.Context,
    _verify.Judged,
    carry.Found,
]


@pytest.mark.parametrize("cls", _DECORATED, ids=lambda c: c.__name__)
def test_the_library_classes_keep_their_signature(cls: type[Any]) -> None:
    generated = cls.__init__.__dataclass_init__
    assert inspect.signature(cls.__init__) == inspect.signature(generated)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(object.__new__(cls), dataclasses.fields(cls)[0].name, None)
