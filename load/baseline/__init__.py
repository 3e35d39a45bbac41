"""Threaded baselines serving example_app's API: Flask on gunicorn (flask_app) and the stdlib (stdlib_app)."""
