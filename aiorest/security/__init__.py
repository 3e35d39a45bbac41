"""Identity and authorization policies, password hashing, login rate limits (public path: :mod:`aiorest.auth`)."""
