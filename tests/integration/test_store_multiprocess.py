"""Two processes racing revision-checked commits on one SQLite file.

Each process walks revisions 0..N-1 and tries ``expected_revision = i`` for each, so
every revision is won by exactly one process: the store must end at revision N with N
barrier-log rows after the ``@start`` one, the per-process win counts read back from
the barrier log must equal what each process was told, and no raw ``sqlite3`` error
(nor a storage error: the busy timeout is long) may escape.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from phronomy_fsm.store import SqliteBarrierStore
from tests.store.helpers import admit

WORKER = textwrap.dedent(
    """
    import json, sqlite3, sys
    import attrs
    from phronomy_fsm.durable.records import DurableCommit
    from phronomy_fsm.errors import ConflictError, PhronomyError
    from phronomy_fsm.store import SqliteBarrierStore

    path, name, count, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    store = SqliteBarrierStore(path, busy_timeout_seconds=60)
    base = store.load_record("ex-race")
    counts = {"won": 0, "conflict": 0, "other": {}, "raw_sqlite": 0}
    print("ready", flush=True)
    sys.stdin.readline()  # the parent releases both processes together
    for i in range(count):
        nxt = attrs.evolve(base, revision=i + 1, state=f"{name}-{i}")
        commit = DurableCommit(f"race-{name}", nxt, i)
        try:
            if mode == "submit":
                store.submit(commit).result()
            else:
                store.commit(commit)
            counts["won"] += 1
        except ConflictError:
            counts["conflict"] += 1
        except sqlite3.Error:
            counts["raw_sqlite"] += 1
        except PhronomyError as exc:
            counts["other"][type(exc).__name__] = counts["other"].get(type(exc).__name__, 0) + 1
    store.close()
    print(json.dumps(counts), flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["commit", "submit"])
def test_two_processes_race_500_revision_checked_writes(tmp_path: Path, mode: str):
    count = 500
    db = tmp_path / "race.db"
    with SqliteBarrierStore(db) as store:
        admit(store, "ex-race", "a1")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(db), name, str(count), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("p1", "p2")
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = {}
    for name, p in zip(("p1", "p2"), procs):
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        assert "Traceback" not in err
        results[name] = json.loads(out.strip().splitlines()[-1])
    for counts in results.values():
        assert counts["raw_sqlite"] == 0 and counts["other"] == {}
        assert counts["won"] + counts["conflict"] == count
    assert results["p1"]["won"] + results["p2"]["won"] == count
    with SqliteBarrierStore(db) as store:
        final = store.load_record("ex-race")
        history = store.barrier_log("ex-race")
    assert final.revision == count
    assert [b.revision for b in history] == list(range(count + 1))
    from_log = {
        name: sum(1 for b in history if b.barrier == f"race-{name}") for name in ("p1", "p2")
    }
    assert from_log == {name: results[name]["won"] for name in ("p1", "p2")}
