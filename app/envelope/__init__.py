"""Envelope handoffs (docs/envelopes.md): the versioned envelope in an A2A data part, its
acceptance or rejection, case events, and the ownership ledger derived from them.

``extract`` finds envelope items in any capture payload and ``references`` checks their
url parts; both are pure. ``ledger`` derives epochs, owner and flags from a case's items,
also pure and independent of ingest order. ``ingest`` is the one place that stores them.
"""
