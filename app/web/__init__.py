"""The HTTP service: the JSON API (``api.py``) and its plumbing."""
