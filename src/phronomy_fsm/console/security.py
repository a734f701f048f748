"""The console's security model: where it may listen, who may write, and forms that
cannot be forged (``docs/console.md``, "Security").

- **Binding**: :func:`check_binding` refuses a non-loopback address unless the
  operator asked for it (``--allow-remote``) *and* gave a token; a remote console also
  asks for the token before it shows anything (:attr:`ConsoleSecurity.token_for_reads`).
- **Token**: writes (signal, approve, resolve, cancel) need a signed-in session; signing in
  takes the write token, compared in constant time. The token comes from
  ``--token``, ``--token-file`` (a file only its owner may read:
  :func:`read_token_file`) or the environment variable :data:`TOKEN_ENV`, else a random
  one printed at start (:func:`choose_token`). ``--read-only`` has no token: it writes
  nothing at all.
- **Sessions**: a cookie holding a random session id, signed with HMAC-SHA256 under a
  key made fresh by every process; ``HttpOnly``, ``SameSite=Strict``. Whether a session
  is signed in is the server's to say, not the cookie's: the process keeps the signed-in
  ids in memory (:class:`SessionRegistry`), and one stops being signed in when it signs
  out, after :data:`SESSION_IDLE_SECONDS` without a page, after
  :data:`SESSION_LIFETIME_SECONDS` in all, or when the process stops — a cookie kept
  from before then is an ordinary signed-out session. The registry is the process's
  own: it is not shared with any other console process.
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
import stat
import threading
from collections import OrderedDict

import attrs
import orjson

from phronomy_fsm.errors import ConfigurationError
from phronomy_fsm.runtime.clock import SYSTEM_CLOCK, Clock

#: The environment variable the write token is read from when neither ``--token`` nor
#: ``--token-file`` is given.
TOKEN_ENV = "PHRONOMY_CONSOLE_TOKEN"
#: Shortest token accepted from the operator, in characters.
MIN_TOKEN_LENGTH = 16
#: Largest token file read, in bytes (a bigger one is surely the wrong file).
MAX_TOKEN_FILE_BYTES = 4096
#: A signed-in session ends after this long without a page (``/live`` polls do not
#: count), in seconds.
SESSION_IDLE_SECONDS = 30 * 60
#: A signed-in session ends this long after signing in, however busy, in seconds.
SESSION_LIFETIME_SECONDS = 8 * 60 * 60
#: At most this many signed-in sessions are kept; signing in beyond it ends the least
#: recently used one.
MAX_SESSIONS = 1000
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


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The write token held in the file at ``path``: its one line, line ending removed.

    The file must be private to its owner: one that group or others may read, write or
    execute (any of the mode bits ``0o077``) is refused, as ``ssh`` refuses such a key,
    since anyone who can read the token can act on every execution. Checked on POSIX
    systems only.

    Raises:
        ConfigurationError: the file cannot be opened or read, group or others may
            access it (the message says ``chmod 600 PATH``), it is empty, longer than
            :data:`MAX_TOKEN_FILE_BYTES`, not UTF-8, or holds more than one line. The
            messages never include the token.
    """
    where = os.fspath(path)
    try:
        with open(where, "rb") as handle:
            # the mode of the file we opened, not of whatever the path names later
            mode = os.fstat(handle.fileno()).st_mode
            if os.name == "posix" and mode & 0o077:
                raise ConfigurationError(
                    f"refusing the token file {where}: group or others may access it "
                    f"(mode {stat.filemode(mode)}), so other users could read the token; "
                    f"make it private with: chmod 600 {where}"
                )
            raw = handle.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the token file {where}: {exc.strerror or exc}"
        ) from None
    if len(raw) > MAX_TOKEN_FILE_BYTES:
        raise ConfigurationError(
            f"the token file {where} is longer than {MAX_TOKEN_FILE_BYTES} bytes: "
            "it should hold the token alone"
        )
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise ConfigurationError(f"the token file {where} is not UTF-8 text") from None
    if not text:
        raise ConfigurationError(f"the token file {where} is empty")
    if "\n" in text or "\r" in text:
        raise ConfigurationError(
            f"the token file {where} holds more than one line: it should hold the token alone"
        )
    return text


def choose_token(
    given: str | None,
    *,
    token_file: str | os.PathLike[str] | None = None,
    environ: dict[str, str] | None = None,
) -> tuple[str, str]:
    """The write token and where it came from: ``given`` (``"--token"``), else the
    file ``token_file`` (``"--token-file"``, :func:`read_token_file`), else the
    environment variable :data:`TOKEN_ENV` of ``environ`` (default ``os.environ``),
    else a random one (``"generated"``).

    Raises:
        ConfigurationError: both ``given`` and ``token_file``; a token file
            :func:`read_token_file` refuses; a token shorter than
            :data:`MIN_TOKEN_LENGTH`.
    """
    if given and token_file is not None:
        raise ConfigurationError(
            "give the console token one way, --token or --token-file, not both"
        )
    env = os.environ if environ is None else environ
    if given:
        value, source = given, "--token"
    elif token_file is not None:
        value, source = read_token_file(token_file), "--token-file"
    elif env.get(TOKEN_ENV):
        value, source = env[TOKEN_ENV], TOKEN_ENV
    else:
        return secrets.token_urlsafe(24), "generated"
    if len(value) < MIN_TOKEN_LENGTH:
        raise ConfigurationError(
            f"the console token from {source} is too short: use at least "
            f"{MIN_TOKEN_LENGTH} characters (for example: python -c "
            "'import secrets; print(secrets.token_urlsafe(24))')"
        )
    return value, source


def has_explicit_token(
    given: str | None,
    *,
    token_file: str | os.PathLike[str] | None = None,
    environ: dict[str, str] | None = None,
) -> bool:
    """True when the operator named a token (``--token``, ``--token-file`` or
    :data:`TOKEN_ENV`); the file is not read here (:func:`choose_token` does)."""
    env = os.environ if environ is None else environ
    return bool(given or token_file is not None or env.get(TOKEN_ENV))


def check_binding(host: str, *, allow_remote: bool, explicit_token: bool, read_only: bool) -> None:
    """Refuse an unsafe address to listen on (module docstring, "Binding").

    Args:
        host: the address the console would bind.
        allow_remote: the operator passed ``--allow-remote``.
        explicit_token: a token was given (``--token``, ``--token-file`` or the
            environment).
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
            f"--allow-remote with a token (--token-file, ${TOKEN_ENV} or --token) if you "
            "really mean it"
        )
    if not explicit_token:
        raise ConfigurationError(
            f"refusing to listen on {host} without a token: pass --token-file PATH (or set "
            f"${TOKEN_ENV}, or pass --token); a remote console asks for it before it shows "
            "anything" + (" (even with --read-only)" if read_only else "")
        )


@attrs.frozen
class Session:
    """One browser's session as one request sees it: a random ``session_id`` (from its
    cookie) and whether the process holds it signed in (``authenticated``, asked of the
    :class:`SessionRegistry` for this request — never read from the cookie)."""

    session_id: str
    authenticated: bool = False


@attrs.define
class _SignedIn:
    signed_in_s: float  # the clock's monotonic reading when it signed in
    last_seen_s: float  # ... when it last loaded a page (or signed in)


class SessionRegistry:
    """The signed-in sessions of one console process, in its memory (module docstring,
    "Sessions"; ``docs/console.md``, "Security").

    A session id is signed in from :meth:`sign_in` until the first of: :meth:`revoke`
    (signing out), ``idle_seconds`` without activity (:meth:`is_signed_in` with
    ``touch``), ``lifetime_seconds`` after signing in, or the process's end. An ended
    id never becomes signed in again (signing in always makes a new one).

    Args:
        idle_seconds: how long a session lasts without activity, in seconds (> 0).
        lifetime_seconds: how long it lasts at most, in seconds (>= ``idle_seconds``).
        max_sessions: how many signed-in sessions are kept at most (> 0); signing in
            beyond it ends the least recently active one. Only holders of the token
            can add one; visitors who never sign in add nothing here.
        clock: its ``monotonic()`` reading in seconds measures both times (a
            :class:`~phronomy_fsm.runtime.clock.ManualClock` in tests).

    Raises:
        ValueError: a limit out of range.

    Concurrency: thread-safe. Not shared between processes: a console served by
    several processes would sign a browser in in one of them only.
    """

    def __init__(
        self,
        *,
        idle_seconds: float = SESSION_IDLE_SECONDS,
        lifetime_seconds: float = SESSION_LIFETIME_SECONDS,
        max_sessions: int = MAX_SESSIONS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if not idle_seconds > 0:
            raise ValueError(f"idle_seconds must be positive, not {idle_seconds!r}")
        if not lifetime_seconds >= idle_seconds:
            raise ValueError(
                f"lifetime_seconds ({lifetime_seconds!r}) must be at least "
                f"idle_seconds ({idle_seconds!r})"
            )
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, not {max_sessions!r}")
        self.idle_seconds = idle_seconds
        self.lifetime_seconds = lifetime_seconds
        self.max_sessions = max_sessions
        self._clock = clock
        self._lock = threading.Lock()
        # least recently active first, so the idle ones and the one to evict lead
        self._live: OrderedDict[str, _SignedIn] = OrderedDict()

    def __len__(self) -> int:
        """How many sessions are held signed in (ended ones not yet noticed count
        until the next :meth:`sign_in` sweeps them out)."""
        with self._lock:
            return len(self._live)

    def _has_ended(self, entry: _SignedIn, now_s: float) -> bool:
        return (
            now_s - entry.last_seen_s >= self.idle_seconds
            or now_s - entry.signed_in_s >= self.lifetime_seconds
        )

    def sign_in(self) -> str:
        """Register a new, random session id as signed in; return it. Ended sessions
        are swept out first, then the least recently active ones beyond
        ``max_sessions - 1``."""
        now_s = self._clock.monotonic()
        session_id = secrets.token_urlsafe(18)
        with self._lock:
            for ended in [k for k, e in self._live.items() if self._has_ended(e, now_s)]:
                del self._live[ended]
            while len(self._live) >= self.max_sessions:
                self._live.popitem(last=False)
            self._live[session_id] = _SignedIn(now_s, now_s)
        return session_id

    def is_signed_in(self, session_id: str, *, touch: bool = True) -> bool:
        """True while ``session_id`` is signed in; an ended one is forgotten here.
        ``touch``: this request is activity, so the idle time starts again (a page's
        own polling passes ``False``)."""
        now_s = self._clock.monotonic()
        with self._lock:
            entry = self._live.get(session_id)
            if entry is None:
                return False
            if self._has_ended(entry, now_s):
                del self._live[session_id]
                return False
            if touch:
                entry.last_seen_s = now_s
                self._live.move_to_end(session_id)
            return True

    def revoke(self, session_id: str) -> None:
        """End ``session_id`` now (signing out); nothing happens for an unknown or
        ended id."""
        with self._lock:
            self._live.pop(session_id, None)

    def describe_limits(self) -> str:
        """The limits in words, for pages: ``"30 minutes without loading a page, 8
        hours after signing in"``."""
        return (
            f"{_in_words(self.idle_seconds)} without loading a page, "
            f"{_in_words(self.lifetime_seconds)} after signing in"
        )


def _in_words(seconds: float) -> str:
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} seconds"


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
        sessions: the signed-in sessions (:class:`SessionRegistry` with its default
            limits unless given).
    """

    token: str | None
    read_only: bool = False
    token_for_reads: bool = False
    allowed_hosts: tuple[str, ...] | None = LOOPBACK_NAMES
    key: bytes = attrs.field(factory=lambda: secrets.token_bytes(32), repr=False)
    sessions: SessionRegistry = attrs.field(factory=SessionRegistry, repr=False, eq=False)

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

    def new_session(self) -> Session:
        """A fresh, signed-out session with a random id (nothing is stored: a visitor
        who never signs in costs the process nothing)."""
        return Session(secrets.token_urlsafe(18))

    def sign_in(self, previous: Session | None = None) -> Session:
        """A new signed-in session (a new id: an id seen before signing in never
        becomes signed in, so it cannot be planted). ``previous``, the session that
        signed in, is ended if it was signed in."""
        if previous is not None:
            self.sessions.revoke(previous.session_id)
        return Session(self.sessions.sign_in(), True)

    def sign_out(self, session: Session) -> Session:
        """End ``session`` on the server — its cookie, wherever it was kept, is
        signed out from now on — and return a fresh signed-out session."""
        self.sessions.revoke(session.session_id)
        return self.new_session()

    def _mac(self, purpose: str, data: bytes) -> str:
        digest = hmac.new(self.key, purpose.encode() + b"\0" + data, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def encode_session(self, session: Session) -> str:
        """The cookie value of ``session``: its id as JSON, base64url, and its HMAC
        (whether it is signed in is not in the cookie)."""
        body = orjson.dumps({"sid": session.session_id})
        text = base64.urlsafe_b64encode(body).decode().rstrip("=")
        return f"{text}.{self._mac('session', text.encode())}"

    def decode_session(self, cookie: str | None, *, touch: bool = True) -> Session | None:
        """The session a cookie names, signed in only while :attr:`sessions` holds it
        (``touch``: this request counts as activity, :meth:`SessionRegistry.is_signed_in`);
        ``None`` when the cookie is missing, malformed or not signed by this process's
        key."""
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
        session_id: str = data["sid"]
        return Session(session_id, self.sessions.is_signed_in(session_id, touch=touch))

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
    "MAX_SESSIONS",
    "MAX_TOKEN_FILE_BYTES",
    "MIN_TOKEN_LENGTH",
    "SESSION_COOKIE",
    "SESSION_IDLE_SECONDS",
    "SESSION_LIFETIME_SECONDS",
    "TOKEN_ENV",
    "ConsoleSecurity",
    "Session",
    "SessionRegistry",
    "check_binding",
    "choose_token",
    "has_explicit_token",
    "is_loopback_host",
    "read_token_file",
]
