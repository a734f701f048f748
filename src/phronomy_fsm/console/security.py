"""The console's security model: where it may listen, who may write, and forms that
cannot be forged (``docs/console.md``, "Security").

- **Binding**: :func:`check_binding` refuses a non-loopback address unless the
  operator asked for it (``--allow-remote``) *and* gave a token; a remote console also
  asks for the token before it shows anything (:attr:`ConsoleSecurity.token_for_reads`).
- **Token**: writes (signal, approve, resolve, cancel) need a signed-in session; signing in
  takes the write token, compared in constant time. The token comes from
  ``--token``, else the environment variable :data:`TOKEN_ENV`, else a random one
  printed at start (:func:`choose_token`). ``--read-only`` has no token: it writes
  nothing at all.
- **Sessions**: a cookie holding a random session id and whether it signed in, signed
  with HMAC-SHA256 under a key made fresh by every process (so a restart signs
  everyone out). ``HttpOnly``, ``SameSite=Strict``.
- **CSRF**: every POST form carries a token derived from the session id (HMAC under
  the same key, a *synchronizer* token that needs no server-side storage); a POST whose
  field does not match its session's cookie is refused before anything is parsed
  further. A cross-site ``Origin`` header is refused as well.
- **Host header**: a loopback console answers only requests addressed to a loopback
  name (``127.0.0.1``, ``localhost``, ``[::1]``), so a web page cannot reach it
  through DNS rebinding.

Must not: read or write the store, render pages.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import secrets

import attrs
import orjson

from phronomy_fsm.errors import ConfigurationError

#: The environment variable the write token is read from when ``--token`` is absent.
TOKEN_ENV = "PHRONOMY_CONSOLE_TOKEN"
#: Shortest token accepted from the operator, in characters.
MIN_TOKEN_LENGTH = 16
#: The session cookie's name.
SESSION_COOKIE = "phronomy_console_session"
#: Names a client may address a loopback console by.
LOOPBACK_NAMES: tuple[str, ...] = ("127.0.0.1", "::1", "[::1]", "localhost")


def is_loopback_host(host: str) -> bool:
    """True when ``host`` (a name or an address, IPv6 with or without brackets) is a
    loopback address or ``localhost``; ``""`` and ``0.0.0.0`` are not."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def choose_token(given: str | None, *, environ: dict[str, str] | None = None) -> tuple[str, str]:
    """The write token and where it came from (``"--token"``, :data:`TOKEN_ENV` or
    ``"generated"``).

    Raises:
        ConfigurationError: a given token shorter than :data:`MIN_TOKEN_LENGTH`.
    """
    env = os.environ if environ is None else environ
    for source, value in (("--token", given), (TOKEN_ENV, env.get(TOKEN_ENV))):
        if value:
            if len(value) < MIN_TOKEN_LENGTH:
                raise ConfigurationError(
                    f"the console token from {source} is too short: use at least "
                    f"{MIN_TOKEN_LENGTH} characters (for example: python -c "
                    "'import secrets; print(secrets.token_urlsafe(24))')"
                )
            return value, source
    return secrets.token_urlsafe(24), "generated"


def has_explicit_token(given: str | None, *, environ: dict[str, str] | None = None) -> bool:
    """True when the operator named a token (``--token`` or :data:`TOKEN_ENV`)."""
    env = os.environ if environ is None else environ
    return bool(given or env.get(TOKEN_ENV))


def check_binding(host: str, *, allow_remote: bool, explicit_token: bool, read_only: bool) -> None:
    """Refuse an unsafe address to listen on (module docstring, "Binding").

    Args:
        host: the address the console would bind.
        allow_remote: the operator passed ``--allow-remote``.
        explicit_token: a token was given (``--token`` or the environment).
        read_only: ``--read-only`` (a remote read-only console still needs a token:
            its pages show every execution's data).

    Raises:
        ConfigurationError: a non-loopback ``host`` without ``--allow-remote`` or
            without a token (the message says what to add).
    """
    if is_loopback_host(host):
        return
    if not allow_remote:
        raise ConfigurationError(
            f"refusing to listen on {host}: it is not a loopback address, so anyone who can "
            "reach it could read every execution; bind 127.0.0.1 (the default), or pass "
            "--allow-remote with --token (or $" + TOKEN_ENV + ") if you really mean it"
        )
    if not explicit_token:
        raise ConfigurationError(
            f"refusing to listen on {host} without a token: pass --token TOKEN (or set $"
            f"{TOKEN_ENV}); a remote console asks for it before it shows anything"
            + (" (even with --read-only)" if read_only else "")
        )


@attrs.frozen
class Session:
    """One browser's session: a random ``session_id`` and whether it signed in with
    the write token (``authenticated``)."""

    session_id: str
    authenticated: bool = False


@attrs.frozen
class ConsoleSecurity:
    """The security settings of one console process (module docstring).

    Args:
        token: the token that signs a session in (``None``: nobody signs in — a
            read-only console on loopback).
        read_only: nothing may be written, signed in or not.
        token_for_reads: pages too need a signed-in session (a remote console).
        allowed_hosts: the host names requests may be addressed to (``None``: any;
            a loopback console allows :data:`LOOPBACK_NAMES`).
        key: the HMAC key of sessions and CSRF tokens (fresh per process).
    """

    token: str | None
    read_only: bool = False
    token_for_reads: bool = False
    allowed_hosts: tuple[str, ...] | None = LOOPBACK_NAMES
    key: bytes = attrs.field(factory=lambda: secrets.token_bytes(32), repr=False)

    def is_valid_token(self, given: str) -> bool:
        """Compare ``given`` with the token in constant time (False when there is
        none)."""
        if self.token is None:
            return False
        return hmac.compare_digest(given.encode("utf-8"), self.token.encode("utf-8"))

    def is_allowed_host(self, host_header: str | None) -> bool:
        """True when a request's ``Host`` header names an allowed host (its port is
        not checked)."""
        if self.allowed_hosts is None:
            return True
        if not host_header:
            return False
        host = host_header.strip().lower()
        if host.startswith("["):  # [::1]:8765
            name = host[: host.find("]") + 1] if "]" in host else host
        else:
            name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        return name in self.allowed_hosts

    # ------------------------------------------------------------------ sessions

    def new_session(self, *, authenticated: bool = False) -> Session:
        """A fresh session with a random id (signing in always makes a new one)."""
        return Session(secrets.token_urlsafe(18), authenticated)

    def _mac(self, purpose: str, data: bytes) -> str:
        digest = hmac.new(self.key, purpose.encode() + b"\0" + data, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def encode_session(self, session: Session) -> str:
        """The cookie value of ``session``: its JSON, base64url, and its HMAC."""
        body = orjson.dumps({"sid": session.session_id, "auth": session.authenticated})
        text = base64.urlsafe_b64encode(body).decode().rstrip("=")
        return f"{text}.{self._mac('session', text.encode())}"

    def decode_session(self, cookie: str | None) -> Session | None:
        """The session a cookie holds, or ``None`` when it is missing, malformed or
        not signed by this process's key."""
        if not cookie or "." not in cookie:
            return None
        text, _, mac = cookie.rpartition(".")
        if not hmac.compare_digest(mac, self._mac("session", text.encode())):
            return None
        try:
            data = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("sid"), str):
            return None
        return Session(data["sid"], data.get("auth") is True)

    def csrf_token(self, session: Session) -> str:
        """The CSRF token every form of ``session`` carries (derived from its id)."""
        return self._mac("csrf", session.session_id.encode())

    def is_valid_csrf(self, session: Session | None, given: str | None) -> bool:
        """True when ``given`` is ``session``'s CSRF token (constant-time)."""
        if session is None or not given:
            return False
        return hmac.compare_digest(given, self.csrf_token(session))


__all__ = [
    "LOOPBACK_NAMES",
    "MIN_TOKEN_LENGTH",
    "SESSION_COOKIE",
    "TOKEN_ENV",
    "ConsoleSecurity",
    "Session",
    "check_binding",
    "choose_token",
    "has_explicit_token",
    "is_loopback_host",
]
