"""The DBOS Transact peer of ``tools/bench.py waiting``: workflows blocked in
``DBOS.recv``, their system database in SQLite on the same disk.

Run as ``python tools/benchmarks/_waiting_dbos.py DB_PATH EXECUTIONS SIGNALS`` (a
process of its own: ``DBOS()`` is a process-wide singleton); prints one JSON object on
its last line: ``idle_rss_mb`` (after ``DBOS.launch()``, before any workflow),
``held_rss_mb`` (once ``EXECUTIONS`` workflows are blocked in ``recv`` — half with
a day-long timeout standing for the timer waits, half with the same), ``executions``,
``blocked`` (how many of them hold a thread of DBOS's executor — a blocked
workflow does; its executor is sized to ``EXECUTIONS`` — when the memory was read: the
count stops growing short of ``EXECUTIONS`` on a loaded machine) and ``threads``, and ``signal_seconds``: for ``SIGNALS`` workflows picked at random,
the time from ``DBOS.send`` (from another thread of this process, through the system
database) until the workflow's ``SUCCESS`` status is visible in it.

The database is in WAL mode with ``synchronous=FULL`` on every connection DBOS opens
(as ``_agent_dbos.py`` does), so its durability matches the other side's.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import sys
import threading
import time
from typing import Any


def rss_mb() -> float:
    """This process's resident set, in MB (``/proc/self/status`` VmRSS)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    """Run the peer and print its JSON result."""
    path, executions, signals = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    import sqlalchemy as sa
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.close()

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute("PRAGMA synchronous=FULL")

    sa.event.listen(sa.pool.Pool, "connect", on_connect)
    config: DBOSConfig = {
        "name": "phronomy-waiting-peer",
        "system_database_url": f"sqlite:///{path}",
        "log_level": "WARNING",
        "max_executor_threads": executions + 16,
        "sys_db_pool_size": 20,
    }
    DBOS(config=config)

    @DBOS.workflow()
    def waiting_run(kind: str) -> str:
        answer = DBOS.recv("answer", timeout_seconds=86400)
        return f"{kind}: {answer}"

    DBOS.launch()
    time.sleep(1.0)
    idle = rss_mb()
    ids = [f"dbos-w-{i}" for i in range(executions)]
    for i, wid in enumerate(ids):
        with SetWorkflowID(wid):
            DBOS.start_workflow(waiting_run, "answer" if i % 2 else "timer")
    # every one blocked in recv: its status row written and its thread waiting
    deadline = time.monotonic() + 600
    blocked, grew_at = 0, time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - grew_at < 20:
        now = sum(1 for t in threading.enumerate() if t.name.startswith("dbos-executor-"))
        if now > blocked:
            blocked, grew_at = now, time.monotonic()
        if blocked >= executions:
            break
        time.sleep(0.5)
    time.sleep(2.0)
    held = rss_mb()
    blocked = sum(1 for t in threading.enumerate() if t.name.startswith("dbos-executor-"))
    threads = threading.active_count()

    samples: list[float] = []
    rng = random.Random(26)
    for wid in rng.sample(ids, min(signals, len(ids))):
        sent = time.perf_counter()
        DBOS.send(wid, "go", topic="answer")
        handle = DBOS.retrieve_workflow(wid)
        while handle.get_status().status != "SUCCESS":
            time.sleep(0.001)
        samples.append(time.perf_counter() - sent)
    print(
        json.dumps(
            {
                "idle_rss_mb": idle,
                "held_rss_mb": held,
                "executions": executions,
                "blocked": blocked,
                "threads": threads,
                "signal_seconds": samples,
            }
        ),
        flush=True,
    )
    # Why no DBOS.destroy(): it joins the executor, whose threads wait in recv for a
    # day; the process ends here instead (the database is in the bench's folder)
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
