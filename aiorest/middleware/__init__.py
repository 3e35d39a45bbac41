"""Middleware that ships with aiorest: CORS, compression and sessions."""
