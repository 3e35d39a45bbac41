"""Listening sockets: bound here (TCP or unix), or inherited (``--fd N``, systemd's ``LISTEN_FDS``)."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat

__all__ = ["bind_tcp", "bind_unix", "remove_unix_socket", "inherited_socket", "systemd_socket"]

SD_LISTEN_FDS_START = 3  # systemd passes its sockets from fd 3 on


def bind_tcp(host: str, port: int, backlog: int) -> socket.socket:
    """A listening TCP socket on ``host``'s first address (SO_REUSEADDR, no SO_REUSEPORT)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    return socket.create_server((host, port), family=family, backlog=backlog)


def bind_unix(path: str, mode: int, backlog: int) -> socket.socket:
    """A listening unix socket at ``path``, made ``mode``.

    A stale socket file there (left by a crash: nothing listens on it) is
    removed first; one a server still listens on is an error (EADDRINUSE), as
    is any other file.
    """
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.stat(path).st_mode):
            if _listened_on(path):
                raise OSError(errno.EADDRINUSE, f"a server listens on {path} already")
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, mode)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        if exc.filename is None:  # bind names no file: "No such file or directory", but which?
            raise type(exc)(exc.errno, exc.strerror, path) from None
        raise
    except BaseException:
        sock.close()
        raise
    return sock


def _listened_on(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        return probe.connect_ex(path) in (0, errno.EAGAIN)  # EAGAIN: it listens, its queue is full


def remove_unix_socket(path: str, bound: os.stat_result) -> None:
    """Remove the socket file at ``path`` if it is the one bound (``bound``: its ``os.stat`` then).

    Not one another server bound at that path since (a restart that overlaps the drain).
    """
    with contextlib.suppress(FileNotFoundError):
        now = os.stat(path)
        if (now.st_dev, now.st_ino) == (bound.st_dev, bound.st_ino):
            os.unlink(path)


def inherited_socket(fd: int) -> socket.socket:
    """The listening stream socket (TCP or unix) open as ``fd``; not passed on to programs this one runs.

    Raises ValueError, saying why, if ``fd`` is not one.
    """
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ValueError(f"fd {fd} is not a socket: {exc.strerror}") from None
    if sock.type != socket.SOCK_STREAM or not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        sock.detach()
        raise ValueError(f"fd {fd} is not a listening stream socket")
    sock.set_inheritable(False)
    return sock


def systemd_socket() -> socket.socket | None:
    """The socket systemd passed (socket activation), or None.

    As ``sd_listen_fds`` does: used only when ``LISTEN_PID`` is this process;
    ``LISTEN_FDS``, ``LISTEN_PID`` and ``LISTEN_FDNAMES`` are removed from the
    environment either way, so that processes started from here do not take
    them for theirs. Raises ValueError for more than one socket.
    """
    count = os.environ.pop("LISTEN_FDS", None)
    pid = os.environ.pop("LISTEN_PID", None)
    os.environ.pop("LISTEN_FDNAMES", None)
    if count is None or pid != str(os.getpid()):
        return None
    if not count.isdigit() or int(count) < 1:
        raise ValueError(f"LISTEN_FDS={count!r} is not a count of sockets")
    if int(count) > 1:
        raise ValueError(f"systemd passed {count} sockets (LISTEN_FDS); aiorest serves one")
    return inherited_socket(SD_LISTEN_FDS_START)
