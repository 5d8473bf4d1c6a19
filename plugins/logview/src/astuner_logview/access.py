"""Who may read the viewer: a Host check against DNS rebinding, and an optional access token.

The viewer serves experiment records (prompts, model output, configs with
paths) with no login, which is safe only while nothing but this machine's
own user can reach it. Two attacks get around "it only listens on
127.0.0.1", and this module stops both:

- DNS rebinding: a web page the user visits resolves its own name to
  127.0.0.1 and then reads the viewer from script, as a same-origin request.
  The browser still sends the attacker's name in `Host`, so a viewer bound
  to loopback answers only `Host: 127.0.0.1`, `localhost` or `[::1]` (any
  port, or none: an SSH tunnel may change the port the browser sees) and
  refuses everything else with 403. The list is exact (plus the bound
  address itself, say 127.0.0.2): no subdomains of localhost, no other
  spellings of loopback, no missing Host header. Jupyter's local host check
  and `kubectl proxy --accept-hosts` work the same way; a name that is not
  on the list is cheaper to refuse than to reason about.
- A bind to another address (`--host 0.0.0.0`, a LAN address) is reachable
  by other machines and by the names they use, so `Host` is not checked
  there; instead every request needs the access token. Without one given,
  `start_logview` makes one (`secrets.token_urlsafe(32)`, 256 bits) and
  `.url` carries it, as Jupyter does. Loopback stays as easy as before: no
  token unless one is given (then it is required there too, for shared
  machines where other users can reach 127.0.0.1).

The token is accepted as `Authorization: Bearer <token>` (scripts), as a
cookie (browsers), or as `?token=<token>` once: a request carrying a valid
query token gets the cookie (HttpOnly, SameSite=Strict, named after the
port, so that two viewers on one host do not overwrite each other's), and a
page request is redirected to the same address without the token so that it
leaves the address bar and the history. Tokens are compared in constant
time. A wrong or missing token gets 401 and a short plain message; neither
refusal says anything about the records.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response

_ALLOWED_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_PORT = re.compile(r"[0-9]{1,5}")
_COOKIE = "astuner-logview-token"


def is_loopback(bind: str) -> bool:
    """True when binding to `bind` listens on this machine's loopback interface only."""
    name = bind.strip().lower().removeprefix("[").removesuffix("]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(bind: str) -> str:
    """How `bind` is written in a Host header: IPv6 addresses in brackets."""
    name = bind.strip().lower().removeprefix("[").removesuffix("]")
    return f"[{name}]" if ":" in name else name


def loopback_host_allowed(host: str | None, bind: str = "127.0.0.1") -> bool:
    """True for Host `127.0.0.1`, `localhost`, `[::1]` or the bound address, each optionally with `:port`."""
    if not host:
        return False
    host = host.lower()
    for name in {*_ALLOWED_LOOPBACK_HOSTS, _host_name(bind)}:
        if host == name:
            return True
        if host.startswith(name + ":") and _PORT.fullmatch(host[len(name) + 1 :]):
            return True
    return False


def _same(given: str | None, token: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


class AccessGuard:
    """Checks each request's `Host` (loopback binds) and token (when there is one).

    `bind` is the address the server listens on; `token` None means no token
    is asked for (loopback only: `start_logview` always sets one otherwise).
    """

    def __init__(self, bind: str, token: str | None) -> None:
        self.bind = bind
        self.check_host = is_loopback(bind)
        self.token = token or None

    def cookie_name(self, request: Request) -> str:
        server = request.scope.get("server")
        return f"{_COOKIE}-{server[1]}" if server else _COOKIE

    def refuse(self, request: Request) -> Response | None:
        """The response refusing `request`, or None when it may go on."""
        if self.check_host and not loopback_host_allowed(request.headers.get("host"), self.bind):
            return PlainTextResponse(
                "403 Forbidden: this viewer only answers requests for Host 127.0.0.1, localhost or [::1].\n",
                status_code=403,
            )
        if self.token is None:
            return None
        if _same(request.cookies.get(self.cookie_name(request)), self.token):
            return None
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and _same(credentials.strip(), self.token):
            return None
        if _same(request.query_params.get("token"), self.token):
            return None
        return PlainTextResponse(
            "401 Unauthorized: this viewer needs its access token. Open the link `astuner logview` printed "
            "(it ends in ?token=...), or send the header `Authorization: Bearer <token>`.\n",
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    def redirect_without_token(self, request: Request) -> Response | None:
        """For a page request authorised by `?token=`, a redirect to the same address without it."""
        if self.token is None or request.method != "GET" or request.url.path != "/":
            return None
        if not _same(request.query_params.get("token"), self.token):
            return None
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        return RedirectResponse("/" + (f"?{urlencode(rest)}" if rest else ""), status_code=303)

    def remember(self, request: Request, response: Response) -> None:
        """Set the token cookie on a response to a request that brought the token in its query."""
        if self.token is not None and _same(request.query_params.get("token"), self.token):
            response.set_cookie(
                self.cookie_name(request), self.token, httponly=True, samesite="strict", path="/"
            )

    async def __call__(self, request: Request, call_next: Any) -> Response:
        refused = self.refuse(request)
        if refused is not None:
            return refused
        response = self.redirect_without_token(request) or await call_next(request)
        self.remember(request, response)
        return response
