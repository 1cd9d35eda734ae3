"""The text of one verdict in ``verify --json``'s array, written from the verdict itself.

``json.dumps([v.to_json() for v in verdicts], indent=2)`` is the contract (profile §11's
shape, ``Verdict.to_json``); building every verdict's dicts only to walk them again cost
``verify`` about as much as writing them. This writer reads the verdict's fields in
``to_json``'s order and writes their text directly; the parts that vary little are written
once and reused (a check is one of a few dozen texts, a chain without elements one of a
few), and the rarer nested parts (chain elements, refs, equivocation evidence) go through
their own ``to_json`` and the generic writer. ``tests/cli/test_json_text.py`` pins the
bytes against ``json.dumps`` on every vector's verdicts and on the simulator's capture.
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii

from handoff_context import ChainReport, CheckResult, Verdict, digest_text

from app.ingest.json_text import IndentedWriter, indented

_LEVEL = 1  # a verdict is an element of the top-level array


class VerdictWriter:
    """Writes verdicts as ``json.dumps(verdict.to_json(), indent=2)`` would, one array level
    in."""

    def __init__(self) -> None:
        self._writer = IndentedWriter()
        self._checks: dict[tuple[object, ...], str] = {}
        self._chains: dict[tuple[bool, int, bool], str] = {}
        inner = "\n" + "  " * (_LEVEL + 1)
        self._keys = {
            name: ("{" if name == "source" else ",") + inner + f'"{name}": '
            for name in (
                "source",
                "element",
                "form",
                "digest",
                "iss",
                "aud",
                "hop",
                "outcome",
                "reason",
                "detail",
                "checks",
                "chain",
                "refs",
                "offer",
                "equivocation",
            )
        }
        self._close = "\n" + "  " * _LEVEL + "}"

    def text(self, verdict: Verdict) -> str:
        keys = self._keys
        v = verdict
        parts = [
            keys["source"],
            _text(v.source),
            keys["element"],
            _text(v.element),
            keys["form"],
            _text(v.form),
            keys["digest"],
            "null" if v.digest is None else encode_basestring_ascii(digest_text(v.digest)),
            keys["iss"],
            _text(v.iss),
            keys["aud"],
            _text(v.aud),
            keys["hop"],
            _text(v.hop),
            keys["outcome"],
            encode_basestring_ascii(v.outcome.value),
            keys["reason"],
            "null" if v.reason is None else encode_basestring_ascii(v.reason.value),
            keys["detail"],
            _text(v.detail),
            keys["checks"],
            self._check_list(v.checks),
        ]
        if v.element != "status":
            parts += [keys["chain"], self._chain(v.chain), keys["refs"]]
            refs = [r.to_json() for r in v.refs]
            parts.append(indented(refs, self._writer, _LEVEL + 1) if refs else "[]")
        else:
            parts += [
                keys["offer"],
                "null" if v.offer is None else encode_basestring_ascii(digest_text(v.offer)),
            ]
        parts.append(keys["equivocation"])
        if v.equivocation is None:
            parts.append("null")
        else:
            parts.append(indented(v.equivocation.to_json(), self._writer, _LEVEL + 1))
        parts.append(self._close)
        return "".join(parts)

    def _check_list(self, checks: list[CheckResult]) -> str:
        if not checks:
            return "[]"
        inner = "\n" + "  " * (_LEVEL + 2)
        texts = []
        for check in checks:
            memo = (check.check, check.result, check.reason, check.detail)
            text = self._checks.get(memo)
            if text is None:
                text = indented(check.to_json(), self._writer, _LEVEL + 2)
                if len(self._checks) < 4096:  # details vary only with a few inputs
                    self._checks[memo] = text
            texts.append(text)
        return "[" + inner + ("," + inner).join(texts) + "\n" + "  " * (_LEVEL + 1) + "]"

    def _chain(self, chain: ChainReport | None) -> str:
        if chain is None:
            return "null"
        if chain.elements:
            return indented(chain.to_json(), self._writer, _LEVEL + 1)
        memo = (chain.carried, chain.length, chain.partial)
        text = self._chains.get(memo)
        if text is None:
            text = self._chains[memo] = indented(chain.to_json(), self._writer, _LEVEL + 1)
        return text


def _text(value: str | None) -> str:
    return "null" if value is None else encode_basestring_ascii(value)
