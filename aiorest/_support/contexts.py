"""The context of callbacks that read no context variable (``add_done_callback(..., context=NO_CONTEXT)``).

One for the process: a callback given none gets a copy of the current context, which the future keeps
with it until done, one copy per idle connection or stream.
"""

from __future__ import annotations

import contextvars

__all__ = ["NO_CONTEXT"]

NO_CONTEXT = contextvars.Context()
