"""The evidence log (issue 24, docs/evidence-log.md): every stored element as a leaf of an
RFC 9162 Merkle tree, served as C2SP tlog-tiles with signed checkpoints, proved per element
as tlog-proof files and RFC 9942 receipts, and checked against the store."""
