"""The App: routes, middleware chained once, lifespan, hooks and error mapping."""

from .application import App, EndpointLayer, ExceptionHandler, Hook, Lifespan, Middleware
from .readiness import Readiness, ReadinessCheck

__all__ = ["App", "Middleware", "Hook", "ExceptionHandler", "Lifespan", "EndpointLayer", "Readiness", "ReadinessCheck"]
