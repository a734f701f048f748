"""The DBOS Transact peer of ``tools/bench.py scale``: the same seven-step scripted run
(LLM, tool, LLM, tool, LLM, tool, LLM with the same simulated latencies) as a DBOS
workflow of seven steps, its system database on the same PostgreSQL server.

Run as ``python tools/benchmarks/_scale_dbos.py DSN RUNS CONCURRENCY MODE`` (a process
of its own: DBOS is process-global); prints ``{"seconds": ..., "completed": ...}``.
``MODE`` is ``queue`` (a DBOS queue with that worker concurrency, polled every 50 ms:
the same shape as our workers) or ``direct`` (``DBOS.start_workflow`` for every run at
once).
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> int:
    dsn, runs, concurrency, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    from dbos import DBOS, DBOSConfig

    llm = float(os.environ.get("SCALE_LLM_SECONDS", "0.02"))
    tool = float(os.environ.get("SCALE_TOOL_SECONDS", "0.005"))
    config: DBOSConfig = {
        "name": "phronomy-scale-peer",
        "system_database_url": dsn.replace("postgresql://", "postgresql+psycopg://", 1),
        "log_level": "WARNING",
        "max_executor_threads": max(64, concurrency * 2),
        "sys_db_pool_size": 40,
    }
    DBOS(config=config)

    @DBOS.step()
    def step(name: str, run_id: str) -> dict[str, str]:
        time.sleep(llm if name.startswith("llm") else tool)
        return {"step": name, "text": f"{name} answer for {run_id}"}

    @DBOS.workflow()
    def scripted_run(run_id: str) -> int:
        answers = []
        for name in ("llm1", "tool1", "llm2", "tool2", "llm3", "tool3", "llm4"):
            answers.append(step(name, run_id))
        return len(answers)

    DBOS.launch()
    queue = DBOS.register_queue("scale", worker_concurrency=concurrency, polling_interval_sec=0.05)
    started = time.monotonic()
    if mode == "queue":
        handles = [queue.enqueue(scripted_run, f"run-{i}") for i in range(runs)]
    else:
        handles = [DBOS.start_workflow(scripted_run, f"run-{i}") for i in range(runs)]
    completed = sum(1 for h in handles if h.get_result() == 7)
    seconds = time.monotonic() - started
    print(json.dumps({"seconds": seconds, "completed": completed}))
    DBOS.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
