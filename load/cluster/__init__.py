"""``python -m load cluster``: aiorest as a cluster of hosts on one machine, under load and faults (root only)."""
