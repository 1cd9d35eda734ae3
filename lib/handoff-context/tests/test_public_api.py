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
    "carry",
    "conformance",
    "errors",
    "vectors",
    "reporter",
    "sources",
    "taps",
    "otel",
}
# Modules of an optional extra: they import their extra's packages (``[otel]``).
EXTRA_MODULES = {"handoff_context.otel"}


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
    for name in ("HandoffError", "MalformedError", "CheckFailed", "TrustConfigError", "Reason"):
        assert getattr(handoff_context, name) is getattr(errors, name)


def test_the_library_needs_only_its_three_dependencies() -> None:
    """Every module of the package imports nothing beyond the standard library,
    cryptography, cbor2 and joserfc (and what they import), but those of an extra."""
    code = textwrap.dedent(
        """
        import sys, importlib, pkgutil
        before = set(sys.modules)
        import handoff_context
        for m in pkgutil.walk_packages(handoff_context.__path__, "handoff_context."):
            if m.name not in __EXTRA__:
                importlib.import_module(m.name)
        tops = {name.split(".")[0] for name in set(sys.modules) - before}
        print(" ".join(sorted(tops - set(sys.stdlib_module_names))))
        """
    ).replace("__EXTRA__", repr(sorted(EXTRA_MODULES)))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    extra = set(done.stdout.split()) - {"handoff_context", "cryptography", "cbor2", "joserfc"}
    # What the three pull in themselves (cffi for cryptography's bindings).
    assert extra <= {"_cffi_backend", "cffi", "_openssl", "_cbor2"}, extra
