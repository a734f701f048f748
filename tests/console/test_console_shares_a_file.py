"""The console, the CLI and a reader share one SQLite file, each in its own process,
and every write one of them was told is committed is seen by a fourth process (issue
21 item 1; ``docs/store.md``, "Files").

The console holds two stores on the file in one process (a reader, and at its first
write a writer). A plain open of the file by the second one used to drop the process's
SQLite locks; the next CLI process to close then deleted the live WAL, and the
console's later writes were acknowledged (a redirect to "Sent signal") yet invisible
to every other process, and gone after its shutdown checkpoint.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

from tests.console.stores import HOSTILE_ID
from tests.console.test_console_http import form_fields, signed_in

_READ_SIGNALS = """
import json, sqlite3, sys
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
rows = conn.execute("SELECT signal_id, execution_id, event FROM signals ORDER BY seq").fetchall()
print(json.dumps(rows))
"""


def _signals_seen_elsewhere(path: str) -> list[list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_READ_SIGNALS), path],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _console_signal(client: Any, execution_id: str, event: str) -> str:
    page = client.get("/execution", params={"id": execution_id}).text
    fields = form_fields(page, "/execution/signal", event)
    reply = client.post("/execution/signal", data={**fields, "payload": "{}"})
    assert reply.status_code == 303, reply.text
    return fields["signal_id"]


def test_console_cli_and_a_reader_in_separate_processes_see_every_acknowledged_write(
    populated_sqlite: str, serve: Any
) -> None:
    path = populated_sqlite
    acknowledged: list[str] = []
    with serve(path) as served, signed_in(served.url) as client:
        acknowledged.append(_console_signal(client, "order-1", "approve"))  # opens the writer
        cli = subprocess.run(
            [sys.executable, "-m", "phronomy_fsm.cli", "signal", HOSTILE_ID, "approve"]
            + ["--db", path, "--signal-id", "from-the-cli"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert cli.returncode == 0, cli.stderr
        acknowledged.append("from-the-cli")
        # the CLI process closed last: its close must not have taken the WAL away
        acknowledged.append(_console_signal(client, HOSTILE_ID, "approve"))
        seen = {row[0] for row in _signals_seen_elsewhere(path)}
        assert set(acknowledged) <= seen, (acknowledged, seen)
    seen = {row[0] for row in _signals_seen_elsewhere(path)}
    assert set(acknowledged) <= seen, (acknowledged, seen)
