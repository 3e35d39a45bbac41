"""Which sans-IO WebSocket library frames faster: ``websockets`` (with its C speed-ups) or ``wsproto``.

For small text and 64 KiB binary messages, a server side of each library parses frames a client
masked (bytes in -> message events) and writes frames (message -> bytes out). Both sides run in
this process, with no sockets: only the libraries' framing is measured. Rounds interleave the
libraries; the table shows each rate's mean and 95% confidence interval, and websockets/wsproto.

    python -m bench.websocket_libs [--rounds 30]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from websockets.protocol import Protocol, Side
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage, TextMessage
from wsproto.frame_protocol import FrameProtocol

from .stats import paired_ratio, summarise

_MESSAGES = {"text 20 B": "hello, websocket!!!!", "binary 64 KiB": b"\x01" * 65536}
_COUNT = {"text 20 B": 20_000, "binary 64 KiB": 2_000}


def _client_frames(payload: str | bytes, count: int) -> bytes:
    """``count`` masked frames, as a client sends them (wsproto's client writes them)."""
    client = FrameProtocol(client=True, extensions=[])
    return b"".join(client.send_data(payload, fin=True) for _ in range(count))


def _websockets_parse(wire: bytes, count: int) -> Callable[[], int]:
    def run() -> int:
        server = Protocol(Side.SERVER, max_size=None)  # past the handshake: frames only
        server.receive_data(wire)
        return len(server.events_received())

    return run


def _wsproto_parse(wire: bytes, count: int) -> Callable[[], int]:
    def run() -> int:
        server = Connection(ConnectionType.SERVER)
        server.receive_data(wire)
        return sum(1 for event in server.events() if isinstance(event, (TextMessage, BytesMessage)))

    return run


def _websockets_write(payload: str | bytes, count: int) -> Callable[[], int]:
    def run() -> int:
        server = Protocol(Side.SERVER)
        send = server.send_text if isinstance(payload, str) else server.send_binary
        data = payload.encode() if isinstance(payload, str) else payload
        size = 0
        for _ in range(count):
            send(data)
            size += sum(len(chunk) for chunk in server.data_to_send())
        return size

    return run


def _wsproto_write(payload: str | bytes, count: int) -> Callable[[], int]:
    def run() -> int:
        server = Connection(ConnectionType.SERVER)
        message = TextMessage(payload) if isinstance(payload, str) else BytesMessage(payload)
        return sum(len(server.send(message)) for _ in range(count))

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    cases: dict[tuple[str, str], dict[str, Callable[[], int]]] = {}
    for name, payload in _MESSAGES.items():
        count = _COUNT[name]
        wire = _client_frames(payload, count)
        cases[name, "parse"] = {"websockets": _websockets_parse(wire, count), "wsproto": _wsproto_parse(wire, count)}
        cases[name, "write"] = {
            "websockets": _websockets_write(payload, count),
            "wsproto": _wsproto_write(payload, count),
        }
    print(f"{'message':<15} {'side':<6} {'websockets /s':>22} {'wsproto /s':>22} {'ratio':>6}")
    for (name, side), runners in cases.items():
        rates: dict[str, list[float]] = {lib: [] for lib in runners}
        for _ in range(args.rounds):
            for lib, run in runners.items():  # interleaved: a slow moment hits both
                start = time.perf_counter()
                run()
                rates[lib].append(_COUNT[name] / (time.perf_counter() - start))
        shown = [summarise(values) for values in rates.values()]
        ratio = paired_ratio(rates["websockets"], rates["wsproto"]).mean
        cells = [f"{s.mean:>12,.0f} ±{s.half_width:>8,.0f}" for s in shown]
        print(f"{name:<15} {side:<6} {cells[0]:>22} {cells[1]:>22} {ratio:>6.2f}")


if __name__ == "__main__":
    main()
