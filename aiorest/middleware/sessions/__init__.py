"""Server-side sessions: the middleware, the session and its stores (public path: :mod:`aiorest.sessions`)."""
