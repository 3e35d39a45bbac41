"""``python -m load compare``: aiorest against the threaded baselines; the targets, the run, the figures."""
