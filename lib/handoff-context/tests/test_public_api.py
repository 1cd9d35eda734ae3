"""The public surface (README "Public API"): every name in ``__all__`` exists, and the only
public modules are the package itself and the few documented ones; the rest are private."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import textwrap

import handoff_context

PUBLIC_MODULES = {
    "agent",
    "a2a",
    "carry",
    "conformance",
    "errors",
    "mcp",
    "vectors",
    "reporter",
    "sources",
    "taps",
    "otel",
}


def test_every_exported_name_exists() -> None:
    missing = [n for n in handoff_context.__all__ if not hasattr(handoff_context, n)]
    assert missing == []
    assert len(set(handoff_context.__all__)) == len(handoff_context.__all__)


def test_only_the_documented_modules_are_public() -> None:
    names = {m.name for m in pkgutil.iter_modules(handoff_context.__path__)}
    public = {n for n in names if not n.startswith("_")}
    assert public <= PUBLIC_MODULES, public - PUBLIC_MODULES
    assert {"errors", "conformance", "vectors"} <= public


def test_exported_names_come_from_inside_the_library() -> None:
    """Nothing in ``__all__`` is a third-party object re-exported by accident."""
    for name in handoff_context.__all__:
        value = getattr(handoff_context, name)
        module = getattr(value, "__module__", None)
        if module is not None and isinstance(value, type):
            assert module.startswith("handoff_context"), (name, module)


def test_the_error_module_and_the_package_agree() -> None:
    errors = importlib.import_module("handoff_context.errors")
    for name in (
        "HandoffError",
        "MalformedError",
        "CheckFailed",
        "TrustConfigError",
        "Reason",
        "ChainWindowError",
        "ReplyError",
        "KeyFileError",
    ):
        assert getattr(handoff_context, name) is getattr(errors, name)


def test_the_agent_surface_of_issue_19() -> None:
    """The names the SDK integrations are built on (issue 19 items 3-6) are public."""
    for name in ("FileState", "AnswerMemory", "ChainWindowError", "ReplyError", "KeyFileError"):
        assert name in handoff_context.__all__
    errors = importlib.import_module("handoff_context.errors")
    assert issubclass(errors.ChainWindowError, errors.HandoffError)
    assert issubclass(errors.ReplyError, errors.HandoffError)
    for method in ("save", "load", "from_env", "from_key_file", "trust_entry"):
        assert callable(getattr(handoff_context.Signer, method))
    assert isinstance(handoff_context.Signer.public_jwk, property)
    for method in ("remember", "get_offer", "add_offer", "has_status", "add_status"):
        assert callable(getattr(handoff_context.FileState, method))
    for cls in (handoff_context.FileState, handoff_context.InMemoryState):
        assert callable(cls.record_answer) and callable(cls.last_answer)
    assert "state" in handoff_context.Verdict.__dataclass_fields__


def test_the_library_needs_only_its_three_dependencies() -> None:
    """Every module of the package but the SDK integrations and the OpenTelemetry helper
    (extras) imports nothing beyond the standard library, cryptography, cbor2 and joserfc
    (and what they import), and orjson when it is installed (the ``fast`` extra: strict
    JSON read faster, the same answers; ``test_the_library_works_without_orjson``)."""
    code = textwrap.dedent(
        """
        import sys, importlib, pkgutil
        before = set(sys.modules)
        import handoff_context
        # the [a2a], [mcp] and [otel] extras
        extras = {"handoff_context.a2a", "handoff_context.mcp", "handoff_context.otel"}
        for m in pkgutil.walk_packages(handoff_context.__path__, "handoff_context."):
            if m.name not in extras:
                importlib.import_module(m.name)
        tops = {name.split(".")[0] for name in set(sys.modules) - before}
        print(" ".join(sorted(tops - set(sys.stdlib_module_names))))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    extra = set(done.stdout.split()) - {
        "handoff_context",
        "cryptography",
        "cbor2",
        "joserfc",
        "orjson",
    }
    # What the three pull in themselves (cffi for cryptography's bindings).
    assert extra <= {"_cffi_backend", "cffi", "_openssl", "_cbor2"}, extra


def test_the_library_works_without_orjson() -> None:
    """orjson is optional: without it strict JSON is read by the standard library alone,
    with the same answers and errors (tests/test_json_fast.py compares the two paths)."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["orjson"] = None  # any import of it now fails
        from handoff_context import strict_json_loads
        from handoff_context import _encoding
        from handoff_context.errors import MalformedError
        assert _encoding.orjson is None
        print(strict_json_loads(b'{"a": [1, 2.5, "x:y"]}', what="x"))
        try:
            strict_json_loads(b'{"a": 1, "a": 2}', what="line 3")
        except MalformedError as exc:
            print(exc.detail)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.splitlines() == [
        "{'a': [1, 2.5, 'x:y']}",
        "line 3: duplicate member name 'a'",
    ]


def test_reading_json_messages_never_imports_protobuf() -> None:
    """Typed SDK messages are recognised by duck typing: an agent that hands the carry
    helpers and the verifier plain JSON never loads protobuf (the core does not need it)."""
    code = textwrap.dedent(
        """
        import sys
        from handoff_context import carry, parse_object
        carry.find({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}})
        carry.put_a2a({"messageId": "m"}, {"offer": "a.b.c"})
        try:
            parse_object({"offer": 1})
        except Exception:
            pass
        print("google.protobuf" in sys.modules, "pydantic" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == ["False", "False"]


def test_the_integrations_are_public_and_import_their_sdk_only_there() -> None:
    """``handoff_context.a2a`` and ``handoff_context.mcp`` (issue 19 items 1, 2) export the
    wrappers; ``Agent`` (no SDK) is in the package itself."""
    a2a = importlib.import_module("handoff_context.a2a")
    mcp = importlib.import_module("handoff_context.mcp")
    assert {"HandoffClient", "HandoffRequestHandler", "took_effect"} <= set(a2a.__all__)
    assert {"HandoffMcpClient", "HandoffMiddleware"} <= set(mcp.__all__)
    for module in (a2a, mcp):
        assert all(hasattr(module, name) for name in module.__all__)
    assert {"Agent", "Mode", "Delegation"} <= set(handoff_context.__all__)
