"""The load generators the scenarios share: locust's user flows (locustfile.py) and running locust or wrk."""
