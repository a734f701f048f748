"""A throwaway PostgreSQL server started from the distribution's binaries.

Tests, the crash matrix and the benchmark need a real server; this module starts one in
a temporary directory (``initdb`` then ``pg_ctl start``; in the system's temporary
folder, or in ``base_dir``) listening on a free loopback port, and stops and removes it
afterwards. As root the binaries run through ``runuser -u postgres`` (``initdb`` refuses
root); the temporary directory is given to that user, who must be able to reach it (every
folder above it searchable by others: ``chmod o+x``). Durability is the production
setting: ``fsync=on`` and ``synchronous_commit=on``.

Where a server is given instead (the environment variable
:data:`DSN_ENVIRONMENT_VARIABLE`), :func:`server_from_environment` returns it and
nothing is started.

Usage::

    with LocalPostgres() as server:
        dsn = server.create_database("t1")   # postgresql://postgres@127.0.0.1:PORT/t1
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self
from urllib.parse import urlsplit, urlunsplit

#: The environment variable naming an existing server (a ``postgresql://`` DSN whose
#: user may create databases); tests and the benchmark use it instead of starting one.
DSN_ENVIRONMENT_VARIABLE = "PHRONOMY_TEST_POSTGRES_DSN"

#: Where Debian and Ubuntu install the server binaries (newest version first).
_BIN_GLOBS = ("/usr/lib/postgresql/*/bin",)

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries were found (install the ``postgresql`` package)."""


def find_binaries() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres`` (the newest version
    installed), found on ``PATH`` or under ``/usr/lib/postgresql/*/bin``.

    Raises:
        PostgresUnavailable: none is installed.
    """
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).resolve().parent
    found = []
    for pattern in _BIN_GLOBS:
        for folder in glob.glob(pattern):
            if os.access(os.path.join(folder, "initdb"), os.X_OK):
                version = re.findall(r"\d+", folder)
                found.append((int(version[-1]) if version else 0, folder))
    if not found:
        raise PostgresUnavailable(
            "no PostgreSQL server binaries (initdb, pg_ctl): install them "
            "(Debian: apt-get install postgresql), or name a server with "
            f"{DSN_ENVIRONMENT_VARIABLE}=postgresql://..."
        )
    return Path(max(found)[1])


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def with_database(dsn: str, database: str) -> str:
    """``dsn`` naming ``database`` instead of its own."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


class LocalPostgres:
    """A PostgreSQL server of its own in a temporary directory (module docstring).

    Args:
        port: the TCP port (default: a free one); listens on ``listen`` only.
        listen: ``listen_addresses`` (default loopback only).
        settings: extra ``postgresql.conf`` settings (``{"max_connections": "200"}``).
        keep: leave the data directory behind on :meth:`stop` (for post-mortems).
        trust_networks: more client networks (CIDR) allowed without a password, e.g.
            the test hosts of network namespaces a test made itself.
        base_dir: the folder to make the server's temporary directory in (default: the
            system's temporary folder), e.g. one on the disk being measured. As root,
            user ``postgres`` must be able to reach it (:meth:`start` checks).
        directory: use this folder (created if needed) instead of a temporary one and
            keep it on :meth:`stop` (``keep`` is then true): a server that lives across
            processes, as ``phronomy-fsm dev postgres`` keeps one.

    Attributes: ``dsn`` (the ``postgres`` database as superuser ``postgres``, no
    password: trust on loopback only), ``port``, ``data_dir``.

    Raises:
        PostgresUnavailable: no binaries.
        RuntimeError: initdb or the start failed (the message carries the server log),
            or, as root, user ``postgres`` cannot reach the directory.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        listen: str = "127.0.0.1",
        settings: dict[str, str] | None = None,
        keep: bool = False,
        trust_networks: tuple[str, ...] = (),
        base_dir: str | os.PathLike[str] | None = None,
        directory: str | os.PathLike[str] | None = None,
    ) -> None:
        self.bin = find_binaries()
        self.trust_networks = trust_networks
        self.listen = listen
        self.port = port or free_port()
        if directory is not None:
            # A server that outlives this object (phronomy_fsm.store.postgres.dev): its
            # folder is given and kept; start() on an existing data folder just starts it.
            self.base = Path(directory).resolve()
            self.base.mkdir(parents=True, exist_ok=True)
            keep = True
        else:
            self.base = Path(tempfile.mkdtemp(prefix="phronomy-pg-", dir=base_dir))
        self.keep = keep
        self.data_dir = self.base / "data"
        self.log_path = self.base / "server.log"
        self.socket_dir = self.base / "sock"
        self.settings = {
            "fsync": "on",
            "synchronous_commit": "on",
            "max_connections": "200",
            "shared_buffers": "128MB",
            **(settings or {}),
        }
        self.started = False
        host = listen.split(",")[0].strip()
        self.host = host
        self.dsn = f"postgresql://postgres@{host}:{self.port}/postgres"

    # ------------------------------------------------------------------ commands

    def _as_owner(self, argv: list[str]) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *argv]
        return argv

    def _run(self, argv: list[str], timeout: float = 120) -> str:
        proc = subprocess.run(
            self._as_owner(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd="/",
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}\n"
                f"{self.server_log()[-3000:]}"
            )
        return proc.stdout

    def server_log(self) -> str:
        """The server's log so far ('' when none)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def start(self) -> Self:
        """initdb (first time) and start the server; returns once it accepts
        connections. Raises RuntimeError with the server log when it does not."""
        if not self.data_dir.exists():
            self.socket_dir.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                owner = pwd.getpwnam("postgres")
                for path in (self.base, self.socket_dir):
                    os.chown(path, owner.pw_uid, owner.pw_gid)
                self._check_owner_reaches_base()
            self._run(
                [
                    str(self.bin / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ]
            )
            conf = "\n".join(f"{k} = '{v}'" for k, v in self.settings.items())
            if self.trust_networks:
                with open(self.data_dir / "pg_hba.conf", "a") as fh:
                    fh.writelines(f"host all all {net} trust\n" for net in self.trust_networks)
            with open(self.data_dir / "postgresql.conf", "a") as fh:
                fh.write(
                    f"\nlisten_addresses = '{self.listen}'\nport = {self.port}\n"
                    f"unix_socket_directories = '{self.socket_dir}'\n{conf}\n"
                )
        self._pg_ctl("start", "-w", "-t", "60", "-l", str(self.log_path))
        self.started = True
        return self

    def _check_owner_reaches_base(self) -> None:
        """As root: user ``postgres`` can write the directory (a folder above it that
        others may not search, such as a private ``base_dir``, would stop initdb with a
        bare "Permission denied")."""
        probe = subprocess.run(
            self._as_owner(["test", "-w", str(self.base)]), cwd="/", check=False, timeout=30
        )
        if probe.returncode != 0:
            raise RuntimeError(
                f"user postgres cannot reach {self.base}: every folder above it must be "
                "searchable by others (chmod o+x on each), or choose a folder that is "
                "(`phronomy-fsm dev postgres start --dir DIR`)"
            )

    def _pg_ctl(self, *args: str) -> None:
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data_dir), *args])

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m MODE``: every connection is cut; returns once the
        server accepts connections again."""
        self._pg_ctl("restart", "-w", "-t", "60", "-m", mode, "-l", str(self.log_path))

    def shutdown(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE`` on this data folder, keeping the folder (a server
        started by another process too, as ``phronomy-fsm dev postgres stop`` does).
        Raises RuntimeError with the server log when it fails."""
        self._pg_ctl("stop", "-w", "-t", "60", "-m", mode)
        self.started = False

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server (``immediate`` by default: no shutdown checkpoint) and
        remove its directory unless ``keep``. Idempotent."""
        if self.started:
            try:
                self._pg_ctl("stop", "-w", "-t", "60", "-m", mode)
            except RuntimeError:
                pass
            self.started = False
        if not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)

    def create_database(self, name: str) -> str:
        """Create database ``name`` (lower-case letters, digits, ``_``); its DSN."""
        return create_database(self.dsn, name)

    def __enter__(self) -> Self:
        """Start the server for the block."""
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def create_database(admin_dsn: str, name: str, *, drop: bool = True) -> str:
    """Create database ``name`` on the server of ``admin_dsn`` (dropping an old one of
    that name first when ``drop``); returns its DSN.

    Raises:
        ValueError: ``name`` is not a plain lower-case identifier.
        psycopg.Error: the server refused.
    """
    import psycopg

    if not _NAME.match(name):
        raise ValueError(f"database name {name!r}: use lower-case letters, digits and _")
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        if drop:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 STRATEGY WAL_LOG")
    return with_database(admin_dsn, name)


def server_from_environment() -> str | None:
    """The admin DSN named by :data:`DSN_ENVIRONMENT_VARIABLE`, or ``None``."""
    return os.environ.get(DSN_ENVIRONMENT_VARIABLE) or None


def wait_until_accepting(dsn: str, timeout_seconds: float = 30.0) -> None:
    """Block until a connection to ``dsn`` succeeds. Raises TimeoutError."""
    import psycopg

    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{dsn} does not accept connections") from None
            time.sleep(0.05)


__all__ = [
    "DSN_ENVIRONMENT_VARIABLE",
    "LocalPostgres",
    "PostgresUnavailable",
    "create_database",
    "find_binaries",
    "free_port",
    "server_from_environment",
    "wait_until_accepting",
    "with_database",
]
