"""The App: routes, middleware chained once, lifespan, hooks and error mapping."""

from .application import App, EndpointLayer, ExceptionHandler, Hook, Lifespan, Middleware

__all__ = ["App", "Middleware", "Hook", "ExceptionHandler", "Lifespan", "EndpointLayer"]
