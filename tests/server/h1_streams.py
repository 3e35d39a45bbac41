"""HTTP/1.1 request streams for H1Connection's differential test against h11, and the fuzz harness.

Strategies make valid request streams (``valid_streams``; broken ones are
h1_mutations.py's) and the reads they arrive in (``splits``); ``parse_aiorest``
and ``parse_h11`` feed the reads to each parser and say what it served as an
``Outcome``; ``difference`` is the property both the test and the fuzz harness
check. The grammar is RFC 9110's and RFC 9112's, quoted where it is used.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from types import SimpleNamespace

import h11
from hypothesis import strategies as st

from aiorest import App, Limits
from aiorest.server._h1 import H1Connection

APP = App()

# RFC 9110, 5.6.2:  token = 1*tchar
#   tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA
TCHAR = "!#$%&'*+-.^_`|~" + string.digits + string.ascii_letters
# RFC 9110, 5.5:  field-value = *field-content
#   field-content = field-vchar [ 1*( SP / HTAB / field-vchar ) field-vchar ]
#   field-vchar = VCHAR / obs-text
FIELD_VCHAR = bytes(range(0x21, 0x7F)) + bytes(range(0x80, 0x100))
# RFC 3986, 3.3:  pchar = unreserved / pct-encoded / sub-delims / ":" / "@"
PCHAR = string.ascii_letters + string.digits + "-._~" + "!$&'()*+,;=" + ":@"
METHODS = ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH")
# Headers whose meaning changes the framing or the connection: the valid streams set them on purpose only.
FRAMING_NAMES = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "expect", "upgrade", "proxy-connection", "keep-alive"}
)
MAX_HEAD = 16384  # both sides' head limit (h11's max_incomplete_event_size, aiorest's max_header_size)


# -- what a parser served --------------------------------------------------------------------------------


# A parsed request: method, target, headers (names lowercased, values without surrounding OWS), body.
Parsed = tuple[bytes, bytes, tuple[tuple[bytes, bytes], ...], bytes]

# How a parse ended: every byte used and nothing pending; waiting for more bytes; a request said
# Connection: close (what follows is never read); rejected (a 4xx/5xx answered, or parsing stopped).
DONE, PENDING, CLOSED, REJECTED = "done", "pending", "closed", "rejected"


@dataclass
class Outcome:
    requests: list[Parsed] = field(default_factory=list)
    end: str = DONE
    status: int = 0  # aiorest's answer when REJECTED (0: parsing stopped without an error to answer)
    reason: str = ""

    def summary(self) -> tuple[list[Parsed], str, int]:
        return self.requests, self.end, self.status


def _normalized(headers: list[tuple[bytes, bytes]]) -> tuple[tuple[bytes, bytes], ...]:
    # llhttp leaves a value's trailing OWS in place and h11 strips it; RFC 9110, 5.5: OWS is not part of the value.
    return tuple((name.lower(), value.strip(b" \t")) for name, value in headers)


def _target(target: bytes) -> bytes:
    # aiorest keeps a target as raw_path and query_string: "/a?" and "/a" read the same (RFC 3986, 6.2.3);
    # an absolute-form target is kept in origin-form (RFC 9112, 3.2.2).
    target = _ABSOLUTE.sub(b"", target, count=1) or b"/" if _ABSOLUTE.match(target) else target
    path, _, query = target.partition(b"?")
    return path + b"?" + query if query else path


_ABSOLUTE = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")


def parse_aiorest(reads: list[bytes]) -> Outcome:
    """Feed ``reads`` to an H1Connection; what it serves, in order, up to the first error or close."""
    conn = H1Connection(APP, Limits(max_pipeline=1 << 20, body_buffer=1 << 30), SimpleNamespace(now=100.0))
    for data in reads:
        conn.receive_data(data)
        while conn.has_unparsed():
            conn.receive_unparsed()
        if conn.stopped:
            break
    outcome = Outcome()
    for request in conn.queue:
        error = conn.head_errors.get(request)
        if error is not None:
            return Outcome(outcome.requests, REJECTED, error.status, str(error))
        incoming = request._incoming  # None: no body
        if incoming is not None and not incoming.done:  # its body is still arriving
            outcome.end = PENDING
            return outcome
        failure = None if incoming is None else incoming.error
        if failure is not None:
            return Outcome(outcome.requests, REJECTED, getattr(failure, "status", 0), str(failure))
        query = request.query_string.encode("latin-1")
        target = _target(request.raw_path + b"?" + query)
        body = b"".join((incoming and incoming.chunks) or ())
        outcome.requests.append((request.method.encode(), target, _normalized(request.raw_headers), body))
        if not request.keep_alive:
            outcome.end = CLOSED
            return outcome
    if conn.stopped:
        outcome.end = REJECTED
        outcome.reason = "parsing stopped"
    elif conn.head_begun:
        outcome.end = PENDING
    return outcome


def parse_h11(reads: list[bytes]) -> Outcome:
    """Feed ``reads`` to h11 as a server that answers each request at once with an empty 404."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    outcome = Outcome()
    method = target = b""
    headers: tuple[tuple[bytes, bytes], ...] = ()
    body: list[bytes] = []
    for data in reads:
        conn.receive_data(data)
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                return Outcome(outcome.requests, REJECTED, exc.error_status_hint, str(exc))
            if event is h11.NEED_DATA:
                break
            if isinstance(event, h11.Request):
                method, target, headers, body = event.method, _target(event.target), (), []
                headers = _normalized(list(event.headers.raw_items()))
            elif isinstance(event, h11.Data):
                body.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                outcome.requests.append((method, target, headers, b"".join(body)))
                conn.send(
                    h11.Response(status_code=404, headers=[("Content-Length", "0")])
                )  # not 2xx: a CONNECT stays HTTP
                conn.send(h11.EndOfMessage())
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    outcome.end = CLOSED  # HTTP/1.0, or Connection: close
                    return outcome
                conn.start_next_cycle()
    if conn.their_state is not h11.IDLE or conn.trailing_data[0]:
        outcome.end = PENDING
    return outcome


# -- valid streams -----------------------------------------------------------------------------------------


@dataclass
class Head:
    """One request as parts, so that a mutation can break one of them: rendered by ``render``."""

    method: bytes
    target: bytes
    version: bytes
    headers: list[bytes]  # field lines, without their CRLF
    body: list[bytes]  # the framed body's pieces (a chunk's size line is one piece, its data another)


def render(heads: list[Head]) -> bytes:
    out = []
    for head in heads:
        out.append(b"%s %s %s\r\n" % (head.method, head.target, head.version))
        out.extend(line + b"\r\n" for line in head.headers)
        out.append(b"\r\n")
        out.extend(head.body)
    return b"".join(out)


def _pct(data: bytes, draw: st.DrawFn) -> str:
    escaped = "".join(f"%{byte:02X}" for byte in data)
    return escaped.lower() if draw(st.booleans()) else escaped


@st.composite
def _segment(draw: st.DrawFn) -> str:
    # Percent-escapes of UTF-8 only: aiorest answers 400 to a path that is not UTF-8 once decoded.
    pieces = st.one_of(
        st.sampled_from(PCHAR), st.characters(codec="utf-8").map(lambda c: c.encode()).map(lambda b: ("pct", b))
    )
    out = []
    for piece in draw(st.lists(pieces, max_size=5)):
        out.append(_pct(piece[1], draw) if isinstance(piece, tuple) else piece)
    return "".join(out)


@st.composite
def targets(draw: st.DrawFn) -> bytes:
    """RFC 9112, 3.2.1:  origin-form = absolute-path [ "?" query ]"""
    path = "/" + "/".join(draw(st.lists(_segment(), max_size=3)))
    if draw(st.booleans()):
        # RFC 3986, 3.4:  query = *( pchar / "/" / "?" ); any byte escaped
        query = draw(
            st.lists(
                st.one_of(st.sampled_from(PCHAR + "/?"), st.binary(min_size=1, max_size=2)), min_size=1, max_size=6
            )
        )
        path += "?" + "".join(p if isinstance(p, str) else _pct(p, draw) for p in query)
    return path.encode("ascii")


hosts = st.builds(
    lambda labels, port: ".".join(labels).encode() + port,
    st.lists(st.text(string.ascii_letters + string.digits + "-", min_size=1, max_size=10), min_size=1, max_size=3),
    st.one_of(st.just(b""), st.integers(0, 65535).map(lambda p: b":%d" % p)),
)
tokens = st.text(TCHAR, min_size=1, max_size=12)
header_names = tokens.filter(lambda name: name.lower() not in FRAMING_NAMES).map(str.encode)
field_values = st.text(FIELD_VCHAR.decode("latin-1") + " \t", max_size=16).map(
    lambda value: value.strip(" \t").encode("latin-1")
)
ows = st.sampled_from([b"", b" ", b"\t", b"  ", b" \t"])


def _case(name: bytes, draw: st.DrawFn) -> bytes:
    """RFC 9110, 5.1: field names are case-insensitive."""
    spelling = draw(st.sampled_from(["as is", "lower", "upper", "alternate"]))
    if spelling == "as is":
        return name
    if spelling == "alternate":
        return bytes(c ^ 0x20 if i % 2 and chr(c).isalpha() else c for i, c in enumerate(name))
    return name.lower() if spelling == "lower" else name.upper()


def field_line(name: bytes, value: bytes, draw: st.DrawFn) -> bytes:
    """RFC 9112, 5:  field-line = field-name ":" OWS field-value OWS"""
    return _case(name, draw) + b":" + draw(ows) + value + (draw(ows) if value else b"")


@st.composite
def chunked_body(draw: st.DrawFn) -> list[bytes]:
    """RFC 9112, 7.1:  chunked-body = *chunk last-chunk trailer-section CRLF
    chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF;  last-chunk = 1*("0") [ chunk-ext ] CRLF
    chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] );  chunk-ext-val = token / quoted-string
    """
    pieces = []
    for data in draw(st.lists(st.binary(min_size=1, max_size=24), max_size=3)):
        pieces += [_chunk_size(len(data), draw) + _extensions(draw) + b"\r\n", data, b"\r\n"]
    return pieces + [b"0" * draw(st.integers(1, 3)) + _extensions(draw) + b"\r\n", b"\r\n"]


def _chunk_size(size: int, draw: st.DrawFn) -> bytes:
    text = b"%x" % size
    if draw(st.booleans()):
        text = text.upper()
    return b"0" * draw(st.integers(0, 2)) + text


def _extensions(draw: st.DrawFn) -> bytes:
    out = b""
    for name in draw(st.lists(tokens, max_size=2)):
        value = draw(st.one_of(st.just(""), tokens.map(lambda t: "=" + t), st.just('="a b"')))
        out += b";" + (name + value).encode()
    return out


@st.composite
def requests(draw: st.DrawFn, version: bytes = b"HTTP/1.1") -> Head:
    method = draw(st.sampled_from(METHODS)).encode()
    fields = [
        field_line(name, value, draw)
        for name, value in draw(st.lists(st.tuples(header_names, field_values), max_size=4))
    ]
    fields.append(field_line(b"Host", draw(hosts), draw))
    framing = draw(st.sampled_from(["none", "length", "chunked"]))
    body: list[bytes] = []
    if framing == "length":
        data = draw(st.binary(max_size=64))
        fields.append(field_line(b"Content-Length", b"%d" % len(data), draw))
        body = [data]
    elif framing == "chunked":
        fields.append(field_line(b"Transfer-Encoding", b"chunked", draw))
        body = draw(chunked_body())
    return Head(method, draw(targets()), version, draw(st.permutations(fields)), body)


request_lists = st.lists(requests(), min_size=1, max_size=3)
valid_streams = request_lists.map(render)


# -- the property ---------------------------------------------------------------------------------------------

# Where aiorest deliberately (or through llhttp) rejects what h11 accepts: its answer's reason, matched as a
# regular expression, and why that is allowed. Anything else aiorest rejects that h11 serves is a failure.
STRICTER = {
    r"Transfer-Encoding": "llhttp rejects a Transfer-Encoding value ending in HTAB (`chunked\\t`): RFC 9110, 5.5 "
    "allows the OWS, but a framing header that parsers read differently is how requests are smuggled (RFC 9112, 11.2)",
    r"Missing expected (CR|LF)|Expected CRLF|Expected LF": "a bare LF as a line end: RFC 9112, 2.2 lets a recipient "
    "accept it (h11 does); llhttp does not",
    r"Invalid header (value|field) char|Invalid header token|Unexpected whitespace|Invalid character in chunk"
    r" ext": (
        "CTL bytes, a bare LF or an obs-fold (RFC 9112, 5.2: reject or replace) in a field or a chunk extension: "
        "RFC 9110, 5.5 and 5.6.2; "
        "h11 accepts any byte but NUL and whitespace in a value and anything in a chunk extension"
    ),
    r"Invalid method": "llhttp knows the registered methods only (h11 any token); RFC 9110, 9.1 lets a server refuse "
    "a method it does not implement",
    r"Invalid HTTP version|is not supported": "HTTP/1.2 (RFC 9112, 2.3 says process it as 1.1; llhttp refuses it), "
    "HTTP/0.9 and HTTP/2.0 in an HTTP/1.1 request line (505, RFC 9110, 15.6.6)",
    r"url|Unexpected start char|Invalid char in url|target": "a request-target in none of RFC 9112, 3.2's forms",
    r"request path is not valid UTF-8": "aiorest's paths are text: a percent-decoded path that is not UTF-8 is a 400",
    r"the Host header|more than one Host": "RFC 9112, 3.2: Host must be a valid host[:port] (RFC 3986, 3.2.2), once",
    r"Content-Length": "RFC 9110, 8.6: `5,5` or a repeated Content-Length may be rejected rather than merged",
    r"Chunk size overflow": "a chunk size past 2**64: h11 waits for its bytes, llhttp refuses it",
    r"asking to upgrade": "RFC 9110, 7.8: a server may ignore Upgrade, but llhttp hands the bytes after the head "
    "to the new protocol, so a body there would be lost (test_h1.py's upgrade test; h1_mutations.KNOWN_BUGS)",
    r"too large|too many|longer than": "aiorest's Limits (431, 414): a server's own limits (RFC 9110, 5.4; 15.5.15)",
}

# Where aiorest accepts what h11 rejects: h11's reason, matched as a regular expression, and the RFC's leave.
LENIENT = {
    r"illegal request line": "RFC 9112, 3: a recipient MAY split the request-line on whitespace runs (llhttp "
    "accepts `GET /a  HTTP/1.1`); h11 wants single SPs",
}

# A CONNECT's bytes after its head are a tunnel's (RFC 9110, 9.3.6: the request has no content), as llhttp reads
# them; h11 reads a Content-Length body. aiorest answers the CONNECT (no route has it) and closes.
TUNNEL = b"CONNECT"


def difference(valid: bool, ours: Outcome, theirs: Outcome) -> str | None:
    """What is wrong with aiorest's ``ours`` next to h11's ``theirs`` for the same bytes, or None.

    Valid bytes: the same requests, in the same order, and the same ending. Any bytes: aiorest never serves
    a request h11 would not have parsed, nor one that h11 reads differently; where h11 rejects, aiorest
    rejects too (or is still at an earlier request h11 also served).
    """
    served = len(ours.requests)
    if served and ours.requests[-1][0] == TUNNEL and ours.end == CLOSED:
        theirs = Outcome([*theirs.requests[: served - 1], ours.requests[-1]], CLOSED)
    if ours.requests != theirs.requests[:served]:
        return "aiorest served requests h11 reads differently"
    if ours.end == REJECTED:
        if valid or served < len(theirs.requests) or theirs.end != REJECTED:
            if not any(re.search(pattern, ours.reason) for pattern in STRICTER):
                return f"aiorest rejected ({ours.status} {ours.reason}) what h11 accepts"
        return None
    if theirs.end == REJECTED and any(re.search(pattern, theirs.reason) for pattern in LENIENT):
        return None
    if served > len(theirs.requests) or (ours.end != theirs.end and theirs.end == REJECTED):
        return f"h11 rejects ({theirs.reason}); aiorest's end is {ours.end}"
    if ours.end != theirs.end or served != len(theirs.requests):
        return f"aiorest's end is {ours.end} after {served} requests; h11's {theirs.end} after {len(theirs.requests)}"
    return None


@st.composite
def splits(draw: st.DrawFn, stream: bytes) -> list[bytes]:
    """``stream`` as the reads a server might see: whole, a byte at a time, or cut at random places."""
    how = draw(st.sampled_from(["whole", "bytes", "random"]))
    if how == "whole" or len(stream) < 2:
        return [stream]
    if how == "bytes" and len(stream) <= 4096:
        return [stream[at : at + 1] for at in range(len(stream))]
    cuts = sorted(set(draw(st.lists(st.integers(1, len(stream) - 1), max_size=12))))
    return [stream[start:end] for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
