"""The servers compared by ``python -m load live``: one module each, the same four endpoints (see heartbeat.py)."""
