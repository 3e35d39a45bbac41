"""Trusted proxies: forwarding headers believed from a listed peer only, over real sockets."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from aiorest import App, Request, Server
from aiorest.http.forwarded import MAX_HOPS, TrustedProxies, parse_forwarded, resolve_forwarded, valid_host
from bench.inprocess import FORWARDED_CASES, FORWARDED_PROXIES
from harness.ports import free_port
from tests.cli.test_cli import python, running, stop, wait_until_accepting
from tests.rawclient import fetch, get, read_response


def echo_app() -> App:
    app = App()

    @app.get("/who")
    async def who(request: Request) -> dict[str, Any]:
        return {
            "client": request.client,
            "scheme": request.scheme,
            "host": request.host,
            "url": request.url,
            "note": request.url_for("note", note_id=7, _external=True),
            "path": request.url_for("note", note_id=7),
        }

    @app.get("/notes/{note_id:int}", name="note")
    async def note(request: Request) -> dict[str, int]:
        return {"id": request.path_params["note_id"]}

    return app


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[Server]:
    server = Server(echo_app(), port=0, **options)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def who(port: int, *headers: str) -> dict[str, Any]:
    (response,) = await fetch(port, get("/who", *headers))
    assert response.status == 200, response.body
    return json.loads(response.body)


SPOOF = (
    "X-Forwarded-For: 6.6.6.6",
    "X-Forwarded-Proto: https",
    "X-Forwarded-Host: evil.example",
)


@pytest.mark.parametrize("allow", [None, "10.0.0.0/8,192.168.1.1", "unix"])
async def test_an_untrusted_peer_cannot_spoof_client_scheme_or_host(allow):
    async with serving(forwarded_allow_ips=allow) as server:
        seen = await who(server.port, *SPOOF)
        assert seen["client"][0] == "127.0.0.1" and seen["client"][1] != 0  # the socket's peer
        assert seen["scheme"] == "http"
        assert seen["host"] == "t"
        assert seen["url"] == "http://t/who"
        seen = await who(server.port, 'Forwarded: for=6.6.6.6;proto=https;host="evil.example"')
        assert (seen["client"][0], seen["scheme"], seen["host"]) == ("127.0.0.1", "http", "t")


async def test_a_trusted_peer_gives_client_scheme_and_host_and_absolute_urls():
    async with serving(forwarded_allow_ips="127.0.0.1") as server:
        seen = await who(server.port, "X-Forwarded-For: 203.0.113.9", *SPOOF[1:])
        assert seen["client"] == ["203.0.113.9", 0]
        assert seen["scheme"] == "https"
        assert seen["host"] == "evil.example"
        assert seen["url"] == "https://evil.example/who"
        assert seen["note"] == "https://evil.example/notes/7"
        assert seen["path"] == "/notes/7"  # url_for without _external stays a path


async def test_chained_proxies_the_client_is_the_rightmost_untrusted_hop():
    async with serving(forwarded_allow_ips=["127.0.0.1", "10.0.0.0/8"]) as server:
        # the client's own claim (1.1.1.1), the client, then two trusted proxies
        seen = await who(server.port, "X-Forwarded-For: 1.1.1.1, 198.51.100.7", "X-Forwarded-For: 10.1.2.3")
        assert seen["client"] == ["198.51.100.7", 0]
        # all trusted: the leftmost
        seen = await who(server.port, "X-Forwarded-For: 10.0.0.1, 10.0.0.2")
        assert seen["client"] == ["10.0.0.1", 0]


async def test_forwarded_with_ipv6_and_quoted_values():
    async with serving(forwarded_allow_ips="127.0.0.1") as server:
        seen = await who(
            server.port,
            'Forwarded: for="[2001:db8:cafe::17]:4711";proto=https;host="api.example.com:8443", for=127.0.0.1',
        )
        assert seen["client"] == ["2001:db8:cafe::17", 4711]
        assert seen["scheme"] == "https"
        assert seen["url"] == "https://api.example.com:8443/who"


@pytest.mark.parametrize(
    "headers",
    [
        ("X-Forwarded-For: not-an-ip", "X-Forwarded-Proto: gopher", "X-Forwarded-Host: a b/c"),
        ("X-Forwarded-For: 1.2.3.4é", "X-Forwarded-Host: evil.example/path?x"),
        ("X-Forwarded-For: ,,,", "X-Forwarded-Host: [not:ipv6]"),
        ("Forwarded: for=unknown;proto=ftp",),
        ('Forwarded: for="[::1"; host=\\"', "Forwarded: ;;,,=="),
        ("Forwarded: for=_hidden;host=-bad-.",),
        ("X-Forwarded-For: " + ",".join(["10.0.0.1"] * 500),),  # longer than MAX_HOPS, all trusted
    ],
)
async def test_garbage_from_a_trusted_peer_is_ignored(headers):
    async with serving(forwarded_allow_ips="127.0.0.1,10.0.0.0/8") as server:
        seen = await who(server.port, *headers)
        assert seen["client"][0] == "127.0.0.1"
        assert seen["scheme"] == "http"
        assert seen["host"] == "t"


async def test_a_unix_peer_is_trusted_only_with_the_unix_entry(tmp_path):
    for allow, expected in (("127.0.0.1", None), ("unix", ["192.0.2.5", 0])):
        path = str(tmp_path / "s.sock")
        server = Server(echo_app(), unix=path, forwarded_allow_ips=allow)
        await server.start()
        try:
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(get("/who", "X-Forwarded-For: 192.0.2.5"))
            response = await read_response(reader)
            writer.close()
        finally:
            await server.stop()
        assert json.loads(response.body)["client"] == expected


def test_resolving_is_linear_and_bounded():
    proxies = TrustedProxies("10.0.0.0/8")
    # a huge header of trusted hops: at most MAX_HOPS are looked at, none is the client
    huge = [(b"X-Forwarded-For", b", ".join([b"10.0.0.1"] * 20_000))]
    assert resolve_forwarded(huge, proxies).client is None
    assert len(parse_forwarded(['for=1.2.3.4;proto=http, "x' + ";" * 50_000])) <= MAX_HOPS
    # RFC 7239's examples
    (element,) = parse_forwarded(['for="_gazonk"'])
    assert element == {"for": "_gazonk"}
    elements = parse_forwarded(['For="[2001:db8:cafe::17]:4711"', "for=192.0.2.60;proto=http;by=203.0.113.43"])
    assert elements == [
        {"for": "[2001:db8:cafe::17]:4711"},
        {"for": "192.0.2.60", "proto": "http", "by": "203.0.113.43"},
    ]
    assert valid_host("example.com:8080") and valid_host("[::1]:80") and valid_host("10.0.0.1")
    assert not any(valid_host(h) for h in ("", "a b", "x:99999", "[zz::1]", "a/b", "a@b", "." * 300))


def test_work_on_huge_or_many_forwarded_lines_is_bounded():
    # What it costs is a figure: python -m bench.inprocess --forwarded (a few ms each).
    proxies = TrustedProxies(FORWARDED_PROXIES)
    for headers, client in FORWARDED_CASES:
        found = resolve_forwarded(headers, proxies)
        assert (found.client and found.client[0]) == client
    # the elements left of the last MAX_HOPS are not examined: they stand as one empty element
    elements = parse_forwarded(["for=10.0.0.9, " * 40 + "for=10.0.0.1"])
    assert len(elements) == MAX_HOPS and elements[-1] == {"for": "10.0.0.1"}
    assert resolve_forwarded([(b"Forwarded", b"for=10.0.0.9, " * 40 + b"for=10.0.0.1")], proxies).client is None
    assert resolve_forwarded([(b"Forwarded", b"for=10.0.0.9, " * 30 + b"for=10.0.0.1")], proxies).client == (
        "10.0.0.9",
        0,
    )  # all trusted and all examined: the leftmost


async def test_an_ipv6_zone_is_not_a_client_address():
    # Python's ipaddress takes any text after "%": it would reach request.client and the access log
    async with serving(forwarded_allow_ips="*") as server:
        for header in ('X-Forwarded-For: fe80::1%x" 200 0 "-" "forged', 'Forwarded: for="[fe80::1%x y]:80"'):
            seen = await who(server.port, header)
            assert seen["client"][0] == "127.0.0.1", header
    assert TrustedProxies("fe80::/10").trusts_peer(("fe80::1%eth0", 1, 0, 2))  # a link-local peer still matches


def test_bad_settings_are_refused_with_the_entry_named():
    with pytest.raises(ValueError, match="'10.0.0.300'"):
        TrustedProxies("127.0.0.1, 10.0.0.300")
    assert not TrustedProxies("")
    assert TrustedProxies("::ffff:0:0/96, unix").trusts_peer("")


@pytest.mark.parametrize("how", ["flag", "env"])
async def test_the_cli_flag_and_the_environment_variable(how):
    port = free_port()
    args = ["run", "tests.http.test_proxies:cli_app", "--port", str(port), "--log-level", "warning"]
    env = dict(os.environ)
    if how == "flag":
        args += ["--forwarded-allow-ips", "10.0.0.0/8, 127.0.0.1"]
        env["AIOREST_FORWARDED_ALLOW_IPS"] = "10.9.9.9"  # the flag wins
    else:
        env["AIOREST_FORWARDED_ALLOW_IPS"] = "127.0.0.0/8"
    process = await python("-m", "aiorest", *args, env=env)
    async with running(process):
        await wait_until_accepting(process, port)
        seen = await who(port, "X-Forwarded-For: 203.0.113.1", "X-Forwarded-Proto: https")
        assert seen["client"] == ["203.0.113.1", 0]
        assert seen["note"].startswith("https://t/")
        await stop(process, signal.SIGTERM, timeout=5)


cli_app = echo_app()


def test_an_ipv4_mapped_peer_is_matched_as_ipv4():
    proxies = TrustedProxies("127.0.0.1")
    assert proxies.trusts_peer(("::ffff:127.0.0.1", 1, 0, 0))
    assert not proxies.trusts_peer(("::1", 1, 0, 0))
    if socket.has_ipv6:
        assert TrustedProxies("::1").trusts_peer(("::1", 1, 0, 0))
