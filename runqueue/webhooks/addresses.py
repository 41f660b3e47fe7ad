"""Where a webhook may go (the SSRF rule) and the connection that goes there.

A webhook URL names a host an API caller chose, and the server that posts
to it sits inside the network: without a rule, a caller could make runqueue
post to the metadata service, the database's admin port or anything else
only the server reaches. So a host must resolve to public addresses only
(no loopback, link-local, private, shared, reserved, multicast or
unspecified address, IPv4 inside IPv6 included) unless
``RUNQUEUE["WEBHOOK_ALLOW_HOSTS"]`` names it. The rule is checked at submit
(a clear error, nothing written) and again at each delivery, on the very
addresses the connection then uses (a name that resolves elsewhere by the
time of the delivery, DNS rebinding, is caught there). Redirects are never
followed: a 3xx is a failed try.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from runqueue.conf import get_settings
from runqueue.models.webhooks import URL_MAX_LENGTH

#: The most of a receiver's answer read (the status line and headers come
#: first; the body is kept only for the delivery's last error).
ANSWER_MAX_BYTES = 1024

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class UrlRefused(ValueError):
    """A webhook URL that runqueue will not post to, and why."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What a receiver answered: its status, ``Retry-After`` (seconds, if
    it sent one runqueue reads) and the first bytes of its body."""

    status: int
    retry_after: float | None
    text: str


def parse(url: object) -> SplitResult:
    """The URL's parts, or UrlRefused: http or https, a host, no user or
    password (a secret in a URL ends up in logs), at most 2048 characters."""
    if not isinstance(url, str) or not url:
        raise UrlRefused("must be an http or https URL")
    if len(url) > URL_MAX_LENGTH:
        raise UrlRefused(f"must be at most {URL_MAX_LENGTH} characters")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise UrlRefused("must not hold spaces or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise UrlRefused(f"is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UrlRefused("must be an http or https URL with a host")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused("must not hold a user or password")
    return parts


def allowed_host(host: str) -> bool:
    """The host is listed in ``WEBHOOK_ALLOW_HOSTS`` (any address then)."""
    listed = {h.lower().strip("[]") for h in get_settings().WEBHOOK_ALLOW_HOSTS}
    return host.lower().strip("[]") in listed


def public(address: Address) -> bool:
    """A public unicast address: what any host not allowed must resolve to."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def resolve(host: str, port: int) -> list[tuple[Address, tuple]]:
    """The host's addresses (and their socket addresses), each checked: a
    host not allowed with any non-public address is refused whole, since
    which address a client picks is not ours to know."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UrlRefused(f"host {host!r} does not resolve: {exc}") from None
    # An IPv6 scope ("fe80::1%eth0") is no part of the address.
    found = [(ipaddress.ip_address(str(info[4][0]).split("%")[0]), info[4]) for info in infos]
    if not allowed_host(host):
        for address, _ in found:
            if not public(address):
                raise UrlRefused(
                    f"host {host!r} resolves to {address}, which is not a public address; "
                    'list the host in RUNQUEUE["WEBHOOK_ALLOW_HOSTS"] to allow it'
                )
    return found


def check(url: object) -> SplitResult:
    """The URL's parts if runqueue may post to it now, else UrlRefused."""
    parts = parse(url)
    assert parts.hostname is not None  # parse refused a URL without one
    resolve(parts.hostname, parts.port or default_port(parts.scheme))
    return parts


def default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    """A socket connected to one of the host's checked addresses: the check
    and the connection use the same resolution."""
    error: OSError | None = None
    for address, sockaddr in resolve(host, port):
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error or OSError(f"no address for {host!r}")


class _CheckedHTTP(http.client.HTTPConnection):
    def connect(self) -> None:
        self.sock = _connect(self.host, self.port, self.timeout or 5)


class _CheckedHTTPS(http.client.HTTPSConnection):
    def connect(self) -> None:
        sock = _connect(self.host, self.port, self.timeout or 5)
        context = ssl.create_default_context()
        self.sock = context.wrap_socket(sock, server_hostname=self.host)


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> Answer:
    """POST ``body`` once to ``url``, following no redirect, each socket
    operation bounded by ``timeout``. Raises UrlRefused (the SSRF rule) or
    OSError (a connection that failed or timed out)."""
    parts = parse(url)
    assert parts.hostname is not None
    port = parts.port or default_port(parts.scheme)
    kind = _CheckedHTTPS if parts.scheme == "https" else _CheckedHTTP
    conn = kind(parts.hostname, port, timeout=timeout)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        text = response.read(ANSWER_MAX_BYTES).decode("utf-8", "replace")
        return Answer(response.status, _retry_after(response.getheader("Retry-After")), text)
    except http.client.HTTPException as exc:
        raise OSError(f"bad answer: {exc!r}") from exc
    finally:
        conn.close()


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds; an HTTP date or anything else is ignored
    (the backoff applies)."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value.strip())
