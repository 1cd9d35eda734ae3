"""The project's own test vectors and their generator (see README.md in this folder)."""
