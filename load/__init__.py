"""The load suite, by concern: ``python -m load compare|production|cluster|steady …`` (see load/README.md).

``compare/``     aiorest against the threaded baselines, round after round
``production/``  the production bar: failover, drains, admission, the pool, costs, PgBouncer
``cluster/``     aiorest as a cluster of hosts out of network namespaces, faulted
``baseline/``    the threaded servers the comparison runs against (Flask/gunicorn, the stdlib)
``clients/``     the load generators the scenarios share: locust's user flows, wrk, their figures

The processes they start (aiorest, nginx, PgBouncer, PostgreSQL, Redis, namespace
hosts) come from the harness (``harness/``), which the tests and ``bench/`` use too.
"""
