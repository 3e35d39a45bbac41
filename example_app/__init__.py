"""A notes service and the TechEmpower endpoints on aiorest and PostgreSQL.

``aiorest run example_app:app`` serves it with ``DATABASE_URL``;
``python -m example_app`` also starts a private PostgreSQL when none is configured.
"""

from .app import app, create_app, db

__all__ = ["app", "create_app", "db"]
