"""Several worker processes on one listening socket, and the parent that supervises them."""

from .supervisor import run_workers

__all__ = ["run_workers"]
