"""Frozen dataclasses that cost less to build: ``quick_init``.

A frozen dataclass's generated ``__init__`` sets each field through
``object.__setattr__`` (its own ``__setattr__`` refuses), a call that looks the name up
again on the class every time: on the ingest path about 130 such calls an element, some
50,000 instructions. The classes built once or more per element are decorated with
``quick_init``; the rest keep the generated ``__init__``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """``cls``, a frozen dataclass (applied above ``@dataclass``), with an ``__init__`` that
    sets its fields without ``object.__setattr__``: a slot through its member descriptor's
    ``__set__``, a field of a class without slots in the instance's ``__dict__``.

    Nothing else changes: the new ``__init__`` takes the parameters of the generated one
    in its order, with its very defaults (its ``__defaults__`` and ``__kwdefaults__``,
    default factories' marker included), runs the default factories and ``__post_init__``
    as it does, and the instance stays frozen (``tests/test_quick_init.py`` builds
    instances both ways); a field outside ``__init__`` is set from its default or its
    factory. Raises TypeError for what it does not handle: a class that is not a frozen
    dataclass, an ``InitVar`` or a ``ClassVar``."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass")
    declared = cls.__dataclass_fields__  # type: ignore[attr-defined]
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if len(fields) != len(declared):
        raise TypeError(f"{cls.__name__}: an InitVar or a ClassVar")
    generated: Any = cls.__init__
    positional = [f.name for f in fields if f.init and not f.kw_only]
    keyword = [f.name for f in fields if f.init and f.kw_only]
    defaults = generated.__defaults__ or ()
    kwdefaults = generated.__kwdefaults__ or {}
    default_of = dict(zip(positional[len(positional) - len(defaults) :], defaults, strict=True))
    default_of.update(kwdefaults)
    slotted = "__slots__" in cls.__dict__
    env: dict[str, Any] = {}
    body = [] if slotted else ["    __d = self.__dict__"]
    for i, f in enumerate(fields):
        if not f.init:  # set from its default, as the generated ``__init__`` does
            value = (
                f"__factory{i}()" if f.default_factory is not dataclasses.MISSING else f"__value{i}"
            )
            env[f"__factory{i}"], env[f"__value{i}"] = f.default_factory, f.default
            body.append(f"    {f.name} = {value}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"__factory{i}"], env[f"__marker{i}"] = f.default_factory, default_of[f.name]
            body.append(f"    if {f.name} is __marker{i}: {f.name} = __factory{i}()")
        if slotted:
            env[f"__set{i}"] = cls.__dict__[f.name].__set__
            body.append(f"    __set{i}(self, {f.name})")
        else:
            body.append(f"    __d[{f.name!r}] = {f.name}")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    exec(f"def __init__({signature}):\n" + "\n".join(body or ["    pass"]), env)
    init = env["__init__"]
    init.__defaults__, init.__kwdefaults__ = generated.__defaults__, generated.__kwdefaults__
    init.__qualname__, init.__module__ = generated.__qualname__, generated.__module__
    init.__annotations__ = generated.__annotations__
    init.__dataclass_init__ = generated  # what the tests build instances with, to compare
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
