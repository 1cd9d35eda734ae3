"""The traffic simulator behind ``handoff-trace demo``: multi-agent dialogs with known faults.

What a run writes, for ``--out X.jsonl``:

- ``X.jsonl``: profile §10 capture records ``{"received_at", "received_by", "dialog"?,
  "payload"}`` in receive-time order, for the dialogs signed in the JSON form (JWS). The
  payload is an A2A 1.0 or 0.3 JSON-RPC request or response, an MCP ``tools/call``,
  ``CallToolResult`` or ``notifications/cancelled``, or a raw handoff or status object.
- ``X.cbor``: an RFC 8742 CBOR sequence of capture records for the dialogs whose agents sign
  COSE_Sign1 (about 15 %). JSON cannot hold CBOR elements, and a chain has one form, so
  such a dialog lives in this file whole; its payloads are raw CBOR handoff and status
  objects. Verify or ingest both files together.
- ``X.objects/``: the objects that offers' refs name (``NAME`` and, for salted digests,
  ``NAME.salt``), for ``--ref-policy check-available --objects X.objects``.
- the trust file (``--trust-out``, default ``X.trust.json``): every agent except the rogue.
- the answer key (``--answer-key``): one JSON line per injected fault,
  ``{"fault", "variant", "iss", "hop", "offer", "dialog", "case", "detail"}``:
  ``fault`` is a profile §1.2 reason for an element a receiver must reject, or an issue-3 flag
  kind; ``iss``/``hop`` name the hop; ``offer`` is the digest of the rejected offer for a
  rejection, and of the hop's (first) offer for a flag, which for ``equivocation`` is also
  the verdict's ``equivocation.first``; ``variant`` says how the fault was made (for
  ``equivocation`` and ``status-conflict`` it is the flag's own variant); ``detail`` is for
  people. ``case`` is null, except for envelope faults (below).

Envelope cases (``app/demo/cases.py``, docs/envelopes.md): ``--cases`` business objects (by
default one per two dialogs) handed from agent to agent by accept-then-release in A2A 1.0
and 0.3 messages with an envelope data part and signed-URL references, answered by
acceptance or rejection Tasks, with ``case_event`` records of writes, handed-off marks and
acts; the epoch goes up at every acceptance. Each handoff draws an envelope fault with
probability ``--fault-rate`` from a deck of its own (every one of the 13 kinds once there
are 13 faults); its answer-key line has ``offer`` null, the handoff id as ``hop``, the
case id as ``case`` (and as ``dialog``, except for ``context-id-reuse``: the reused
context id), and ``fault`` the flag kind the service raises.

Agents: ``--agents`` trusted agents (ES256 and Ed25519, keys derived from the seed) plus one
rogue (``spiffe://rogue.example/agent/shadow-1``) that is not in the trust file.

Dialogs are trees: an assistant hands to a planner, which fans out to coders, testers,
reviewers and researchers, who may delegate further (at most five hops deep, never back to
an agent already on the path). Clean traffic holds accepted, completed, failed (nothing took
effect), rejected (``policy``) and unanswered (expiring) hops, cancels that propagate down in
time, retransmitted offers and statuses (identical octets), chains carried or left out
(``prev`` only), refs that verify, are unverifiable or are not checked; it produces no
rejection and no flag. Each hop draws a fault with probability ``--fault-rate``; kinds are
dealt from a shuffled deck so that every kind appears once there are 15 faults or more:
bad-signature, untrusted-key, wrong-audience, stale, broken-chain, cycle, too-deep,
policy (dialog), ref-mismatch, equivocation (content, signature-only), lost-outcome,
status-conflict, cancel-not-propagated, cancel-race, and partial-failure (a ``failed`` with
refs of work that took effect: a flag the service raises, so it is in the key too).

Faults assume the default receiver parameters (skew 60 s, max lifetime 300 s, max chain 16,
lost-outcome after 1 h, cancel grace 60 s); time-based flags need a clock past the end of
the capture, which ``Summary.suggested_now`` gives.

Determinism: the same seed gives the same trust file, dialogs, hop identifiers, records and
answer key, except for ECDSA signatures, which draw fresh randomness: the octets and digests
of ES256-signed elements differ between runs, and so do digests that name them (``prev``).
"""

from app.demo.output import DEFAULT_START, DemoConfig, DemoPaths, Summary, generate, write_demo

__all__ = ["DEFAULT_START", "DemoConfig", "DemoPaths", "Summary", "generate", "write_demo"]
