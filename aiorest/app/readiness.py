"""The backing services an app depends on, by name, for ``/readyz`` (``aiorest.ops.health``) to check.

The app's database is checked apart (the server hands ``app.database`` to the
probes); everything else the app was configured with is here: a middleware that
keeps state in a store offers its checks (a ``readiness_checks()`` method, which
the app collects at startup), and the app adds those of the components it holds
itself (``app.readiness.add("limit store", store.ping)``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

__all__ = ["Readiness", "ReadinessCheck"]

#: ``async def check() -> None``: ready when it returns, not ready when it raises (or takes too long).
ReadinessCheck = Callable[[], Awaitable[object]]


class Readiness:
    """The app's readiness checks, by name (``"session store"``), in the order they were added."""

    def __init__(self) -> None:
        self.checks: dict[str, ReadinessCheck] = {}

    def add(self, name: str, check: ReadinessCheck) -> None:
        """Check ``check`` under ``name`` at every ``/readyz``.

        Adding the same check under the same name again does nothing (a middleware
        on many routes offers its checks for each); another check under a name
        taken gets the name numbered (``"session store 2"``).
        """
        if not name:
            raise ValueError("a readiness check needs a name, which /readyz shows")
        taken, number = name, 1
        while taken in self.checks:
            if self.checks[taken] == check:  # bound methods of one store are equal
                return
            number += 1
            taken = f"{name} {number}"
        self.checks[taken] = check

    def collect(self, middleware: Iterable[object]) -> None:
        """Add the checks the middleware offer (``readiness_checks()``: name → check)."""
        for one in middleware:
            offered = getattr(one, "readiness_checks", None)
            if offered is not None:
                for name, check in offered().items():
                    self.add(name, check)
