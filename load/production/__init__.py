"""``python -m load production``: the production bar (failover, drains, admission, the pool, costs, PgBouncer)."""
