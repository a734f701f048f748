"""Commands the library prints name the store without its password
(docs/scale-out.md, "What an operator does"): every form libpq takes a password in."""

from __future__ import annotations

import pytest

from phronomy_fsm.store.open import redact_dsn


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("postgresql://ops:pw@db:5432/app", "postgresql://ops@db:5432/app"),
        ("postgres://ops:p%40ss@db/app?sslmode=require", "postgres://ops@db/app?sslmode=require"),
        ("postgresql://db/app?password=pw&sslmode=require", "postgresql://db/app?sslmode=require"),
        ("postgresql://ops@db/app", "postgresql://ops@db/app"),
        ("host=db password=pw dbname=app", "host=db dbname=app"),
        ("host=db dbname=app password='a b\\' c'", "host=db dbname=app"),
        ("host=db PASSWORD = pw user=ops", "host=db user=ops"),
        ("postgresql://ops:p#w@db/app", "postgresql://ops@db/app"),  # libpq: to the '@'
        ("postgresql://ops:p?w@db/app", "postgresql://ops@db/app"),
        ("postgresql://:pw@db/app", "postgresql://db/app"),
        (
            "postgresql://ops:pw@db/app?options=-c%20statement_timeout%3D5000&password=x",
            "postgresql://ops@db/app?options=-c%20statement_timeout%3D5000",  # not re-encoded
        ),
        ("orders.db", "orders.db"),
        ("password=pw.db", "password=pw.db"),  # a file name, not a DSN
    ],
)
def test_the_password_is_left_out(given: str, shown: str) -> None:
    assert redact_dsn(given) == shown
