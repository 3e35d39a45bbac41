"""The connection's two sides as states, and their transitions as a table (as h11 keeps them).

The receiving side reads requests; the sending side answers them, one at a
time, in arrival order. Each side moves only along an edge of its table:
``RECV[(state, event)]`` and ``SEND[(state, event)]`` give the next state, and a
pair that is not in the table is a bug of ours (a KeyError), never a silent move.

    recv  HEAD   --body-->      BODY     a head with Content-Length or chunked framing
          HEAD   --no_body-->   HEAD     the common request, complete with its head
          BODY   --complete-->  HEAD     the body's last byte: the next head may come
          HEAD|BODY --stop-->   STOPPED  broken bytes, a limit, an upgrade, a body timeout,
                                         the client's EOF: read nothing more
          HEAD   --upgrade-->   UPGRADED a head asking for a WebSocket: the bytes after it are
                                         kept for the new protocol, the HTTP/1.1 parser reads no more
          UPGRADED --stop-->    STOPPED  the upgrade is refused (the handler answered HTTP)
          any    --lost-->      CLOSED   the transport is gone

    send  IDLE      --request-->   ANSWERING  a request is queued: the queue's head is to be answered
          ANSWERING --request-->   ANSWERING  pipelined: answered after those before it
          ANSWERING --kept-->      IDLE       the last queued request answered; the connection stays open
                                              (with more queued, ANSWERING goes on: see H1Connection.finish)
          ANSWERING --closed-->    CLOSED     answered with Connection: close
          IDLE|ANSWERING --closing--> CLOSING  close once the queue is answered (EOF, shutdown, recv STOPPED)
          CLOSING   --request|kept--> CLOSING  ... what is queued is still answered in order
          CLOSING   --closed-->    CLOSED     the last answer said Connection: close
          any       --lost-->      CLOSED
          any       --abandon-->   CLOSED     an answer failed half-way: nothing more is answered
          ANSWERING|CLOSING --upgrade--> UPGRADED  the handler accepted the WebSocket: 101 is sent,
                                              the transport is the WebSocket's (server/websocket.py)
          UPGRADED  --closed|lost|abandon|closing--> CLOSED  the WebSocket's handler returned

As in h11, the server's side moves when the client's request arrives, not when
a handler picks it up: receiving a head is the send side's event.

A change of protocol is a state on each side: the receive side's UPGRADED when a
WebSocket's head arrives (H1Connection.upgrade_asked; any other upgrade stops it),
the send side's UPGRADED once its handler accepts (H1Connection.upgrade).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from ...http.exceptions import HTTPError

__all__ = [
    "HEAD",
    "BODY",
    "STOPPED",
    "CLOSED",
    "IDLE",
    "ANSWERING",
    "CLOSING",
    "UPGRADED",
    "RECV",
    "SEND",
    "Timeout",
    "Clock",
    "nothing",
]

# States are strings: they read well in a test's failure and compare by identity.
HEAD = "HEAD"
BODY = "BODY"
STOPPED = "STOPPED"
CLOSED = "CLOSED"
IDLE = "IDLE"
ANSWERING = "ANSWERING"
CLOSING = "CLOSING"
UPGRADED = "UPGRADED"

RECV: dict[tuple[str, str], str] = {
    (HEAD, "no_body"): HEAD,
    (HEAD, "body"): BODY,
    (BODY, "complete"): HEAD,
    (HEAD, "stop"): STOPPED,
    (BODY, "stop"): STOPPED,
    (STOPPED, "stop"): STOPPED,
    (HEAD, "lost"): CLOSED,
    (BODY, "lost"): CLOSED,
    (STOPPED, "lost"): CLOSED,
    (CLOSED, "lost"): CLOSED,
    (HEAD, "upgrade"): UPGRADED,
    (UPGRADED, "stop"): STOPPED,
    (UPGRADED, "lost"): CLOSED,
}

SEND: dict[tuple[str, str], str] = {
    (IDLE, "request"): ANSWERING,
    (ANSWERING, "request"): ANSWERING,
    (CLOSING, "request"): CLOSING,
    (CLOSED, "request"): CLOSED,
    (ANSWERING, "kept"): IDLE,
    (ANSWERING, "closed"): CLOSED,
    (IDLE, "closing"): CLOSING,
    (ANSWERING, "closing"): CLOSING,
    (CLOSING, "closing"): CLOSING,
    (CLOSING, "kept"): CLOSING,
    (CLOSING, "closed"): CLOSED,
    (IDLE, "lost"): CLOSED,
    (ANSWERING, "lost"): CLOSED,
    (CLOSING, "lost"): CLOSED,
    (CLOSED, "lost"): CLOSED,
    (CLOSED, "closing"): CLOSED,
    (IDLE, "abandon"): CLOSED,
    (ANSWERING, "abandon"): CLOSED,
    (CLOSING, "abandon"): CLOSED,
    (CLOSED, "abandon"): CLOSED,
    (ANSWERING, "upgrade"): UPGRADED,
    (CLOSING, "upgrade"): UPGRADED,
    (UPGRADED, "closed"): CLOSED,
    (UPGRADED, "lost"): CLOSED,
    (UPGRADED, "abandon"): CLOSED,
    (UPGRADED, "closing"): CLOSED,
}


class Timeout(NamedTuple):
    """check_deadline's answer when a head did not arrive in time: write ``error``, then close."""

    error: HTTPError
    head_request: bool  # the head under way is a HEAD's: the answer has no body


class Clock(Protocol):
    """The time the connection's deadlines are counted in (ServerState's, refreshed once a second)."""

    now: float


def nothing() -> None:
    """The default ``ready`` cue: a connection fed by a test has nobody to tell."""
