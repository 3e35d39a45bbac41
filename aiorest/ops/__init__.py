"""What the server wraps around endpoints: access log, admission, health, metrics, loop lag."""
