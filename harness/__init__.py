"""The harness: real processes for the tests, ``load/`` and ``bench/`` alike.

One place starts what a test or a measurement runs against, and stops it again:

``ports``       a free TCP port on loopback
``processes``   ``aiorest run`` and any other server as a subprocess: started,
                awaited until it serves, signalled, stopped (``AiorestProcess``,
                ``ServerProcess``, ``stop_process``)
``postgres``    a throwaway database (on ``$DATABASE_URL``'s server or a private
                pgserver), and PostgreSQL pinned off the server's core
``nginx``       the shipped ``deploy/`` configuration, run in a private prefix
``pgbouncer``   a PgBouncer in front of a PostgreSQL
``redis``       a ``redis-server`` of one's own
``netns``       hosts out of network namespaces joined by a bridge (root only)
``fixtures``    the pytest side: fixtures over these, skipping when a tool is missing

It is not part of the aiorest package: what a user needs to test an app of their
own is ``aiorest.testing``. The repository's root must be on ``sys.path`` (it is,
for ``python -m pytest`` and ``python -m load`` run from the root).
"""
