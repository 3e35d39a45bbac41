"""Telling systemd (``Type=notify``) how the workers are doing."""

from __future__ import annotations

import logging
import os
import socket

logger = logging.getLogger("aiorest.server")

__all__ = ["Notifier"]


class Notifier:
    """sd_notify(3): tells systemd (``Type=notify``) when the workers serve, reload and stop.

    ``$NOTIFY_SOCKET`` is read once and removed from the environment, so that the
    workers (and what they start) do not speak for the service.
    """

    def __init__(self, address: str | None) -> None:
        self.address = address

    @classmethod
    def from_environment(cls) -> Notifier:
        address = os.environ.pop("NOTIFY_SOCKET", None)
        if address and address.startswith("@"):  # an abstract socket
            address = "\0" + address[1:]
        return cls(address or None)

    def __call__(self, state: str) -> None:
        if self.address is None:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto(state.encode(), self.address)
        except OSError as exc:  # systemd gone: the service goes on, it only cannot say so
            logger.warning("cannot notify systemd at %s: %s", self.address, exc)
