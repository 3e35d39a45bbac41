"""The load suite: `python -m load compare` (see load/README.md)."""
