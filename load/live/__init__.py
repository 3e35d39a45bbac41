"""``python -m load live``: 10,000 WebSockets and 10,000 event streams held open on one process (run.py)."""
