"""The DBOS Transact peer of ``tools/bench.py agent``: the same scripted 10-step run
(LLM, tool, LLM, tool, LLM, tool, LLM; no simulated latency) as a DBOS workflow of
seven ``@DBOS.step()`` calls, its system database in SQLite on the same disk.

Run as ``python tools/benchmarks/_agent_dbos.py DB_PATH RUNS CONCURRENCY`` (a process of
its own: ``DBOS()`` is a process-wide singleton); prints one JSON object on its last
line: ``seconds``, ``cpu_seconds`` (``time.process_time()``: every thread of the
process, DBOS's background threads included) and ``commits`` over the timed runs, plus
``completed``, ``step_rows``, ``workflow_rows`` and ``pragmas``. ``CONCURRENCY`` threads
each call the workflow function directly (DBOS runs a directly called workflow on the
caller's thread), ``RUNS // CONCURRENCY`` times each, after ``WARMUP_RUNS`` untimed runs
that pay the process's first-call costs.

Durability: DBOS 3.4 opens its SQLite system database with SQLAlchemy, sets only
``busy_timeout``, ``foreign_keys`` and ``BEGIN IMMEDIATE`` on each connection, and
leaves the journal in SQLite's default rollback mode. Here the database file is created
in WAL mode first (WAL is persistent in the file), and a SQLAlchemy pool ``connect``
listener, registered on every pool before ``DBOS()`` builds its engine, sets
``PRAGMA synchronous=FULL`` on every connection DBOS opens and reads ``PRAGMA
synchronous`` and ``PRAGMA journal_mode`` back from it; after the run the same two
pragmas are read again on a connection checked out of DBOS's own system-database
engine. All the values seen are printed under ``pragmas`` (``synchronous`` 2 is FULL),
and the caller refuses a result with anything else. That is the durability of the other
two sides: WAL, ``synchronous=FULL``, one fsync per committed transaction.

Commits: a SQLAlchemy ``commit`` event listener on that engine counts the transactions
that had written something (the sqlite3 connection is in a transaction at commit time
only when a statement wrote: pysqlite opens ``BEGIN IMMEDIATE`` only before DML), i.e.
the durable writes DBOS made: each step's recorded output and the workflow's status
rows. Measured: 9 per run (7 step outputs, the status row's insert and its final update),
plus now and then one from DBOS's background threads during the timed window (counted
too; cross-checked once against a ``sqlite3`` trace callback counting ``COMMIT``
statements on every connection: the same total).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time
from typing import Any

#: Untimed runs before the measurement (first calls: imports, statement caches).
WARMUP_RUNS = 4
TOOL_CYCLES = 3


def main() -> int:
    """Run the peer and print its JSON result."""
    path, runs, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    import sqlalchemy as sa
    from dbos import DBOS, DBOSConfig

    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.close()

    pragmas: dict[str, set[Any]] = {"synchronous": set(), "journal_mode": set()}

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute("PRAGMA synchronous=FULL")
        pragmas["synchronous"].add(dbapi_conn.execute("PRAGMA synchronous").fetchone()[0])
        pragmas["journal_mode"].add(dbapi_conn.execute("PRAGMA journal_mode").fetchone()[0])

    sa.event.listen(sa.pool.Pool, "connect", on_connect)

    config: DBOSConfig = {
        "name": "phronomy-agent-peer",
        "system_database_url": f"sqlite:///{path}",
        "log_level": "WARNING",
        "max_executor_threads": max(64, concurrency * 2),
        "sys_db_pool_size": max(20, concurrency * 2),
    }
    DBOS(config=config)

    @DBOS.step()
    def llm(answered: int) -> dict[str, Any]:
        if answered < TOOL_CYCLES:
            return {"role": "assistant", "tool_call": {"name": "step", "args": {"n": answered}}}
        return {"role": "assistant", "content": "done"}

    @DBOS.step()
    def tool(call: dict[str, Any]) -> dict[str, Any]:
        return {"role": "tool", "content": str({"ok": call["args"]["n"]})}

    @DBOS.workflow()
    def scripted_run(prompt: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        answered = 0
        while True:
            reply = llm(answered)
            messages.append(reply)
            answered += 1
            if "tool_call" not in reply:
                return str(reply["content"])
            messages.append(tool(reply["tool_call"]))

    DBOS.launch()
    from dbos._dbos import _get_dbos_instance

    engine = _get_dbos_instance()._sys_db.engine
    commits = [0]
    counting = [False]

    def on_commit(connection: Any) -> None:
        if counting[0] and connection.connection.dbapi_connection.in_transaction:
            commits[0] += 1

    sa.event.listen(engine, "commit", on_commit)

    for _ in range(WARMUP_RUNS):
        assert scripted_run("go") == "done"

    per_thread = max(1, runs // concurrency)
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(per_thread):
                if scripted_run("go") != "done":
                    raise RuntimeError("unexpected workflow result")
        except Exception as error:  # noqa: BLE001 - re-raised on the main thread below
            failures.append(error)

    threads = [threading.Thread(target=work) for _ in range(concurrency)]
    counting[0] = True
    cpu0 = time.process_time()
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    counting[0] = False
    if failures:
        raise failures[0]

    with engine.connect() as c:
        pragmas["synchronous"].add(c.exec_driver_sql("PRAGMA synchronous").scalar())
        pragmas["journal_mode"].add(c.exec_driver_sql("PRAGMA journal_mode").scalar())
        step_rows = c.exec_driver_sql("SELECT count(*) FROM operation_outputs").scalar()
        workflow_rows = c.exec_driver_sql(
            "SELECT count(*) FROM workflow_status WHERE status = 'SUCCESS'"
        ).scalar()
    DBOS.destroy()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu_seconds": cpu,
                "commits": commits[0],
                "completed": per_thread * concurrency,
                "warmup_runs": WARMUP_RUNS,
                "step_rows": step_rows,
                "workflow_rows": workflow_rows,
                "pragmas": {k: sorted(v) for k, v in pragmas.items()},
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
