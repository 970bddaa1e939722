"""The floor under a durable turn on DBOS (#71 item 4): the CPU of DBOS's own journal work for a
workflow of 0, 1 and 2 steps — what a turn of one LLM call costs on memora-plugin-dbos before any
of memora's work — beside the floor of the feature itself, one SQLite row a step written and
committed with plain ``sqlite3`` (a journal that keeps each step).  Each case runs in a process of
its own (DBOS is one per process), its journal a SQLite file, ``N`` workflows after a warm-up;
printed: CPU a workflow (ms), and each case's ratio to the plain journal with as many steps.

``python bench/bench_durable_floor.py`` (``--pg`` adds DBOS on a temporary PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

N = 400
WARM = 50
STATE = {"messages": [{"role": "user", "content": "x" * 2000}], "step": "model"}


def _dbos_case(url: str, steps: int, delete: bool) -> float:
    from dbos import DBOS, DBOSPortableJSONSerializer, SetWorkflowID

    async def step(i: int) -> dict[str, object]:
        return {**STATE, "i": i}

    @DBOS.workflow(name="turn")
    async def turn(n: int) -> str:
        for i in range(steps):
            await DBOS.run_step_async({"name": "segment"}, step, i)
        return "ended"

    async def main() -> float:
        DBOS(
            config={
                "name": "floor",
                "system_database_url": url,
                "serializer": DBOSPortableJSONSerializer(),
                "log_level": "WARNING",
            }
        )
        DBOS.launch()

        async def one(k: int) -> None:
            with SetWorkflowID(f"wf{k}"):
                handle = await DBOS.start_workflow_async(turn, k)
            await handle.get_result()
            if delete:
                await DBOS.delete_workflow_async(f"wf{k}")

        for k in range(WARM):
            await one(k)
        start = time.process_time()
        for k in range(WARM, WARM + N):
            await one(k)
        spent = time.process_time() - start
        DBOS.destroy()
        return 1000 * spent / N

    return asyncio.run(main())


def _plain_case(path: str, steps: int) -> float:
    """One row a step, committed (WAL, synchronous=FULL as DBOS's SQLite has it), and the
    turn's row deleted at its end: the least a journal that keeps each step can do."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE steps (turn TEXT, n INTEGER, state TEXT, PRIMARY KEY (turn, n))")

    def one(k: int) -> None:
        db.execute("INSERT INTO steps VALUES (?, 0, ?)", (f"wf{k}", json.dumps(STATE)))
        for i in range(steps):
            db.execute(
                "INSERT INTO steps VALUES (?, ?, ?)",
                (f"wf{k}", i + 1, json.dumps({**STATE, "i": i})),
            )
        db.execute("DELETE FROM steps WHERE turn = ?", (f"wf{k}",))

    for k in range(WARM):
        one(k)
    start = time.process_time()
    for k in range(WARM, WARM + N):
        one(k)
    return 1000 * (time.process_time() - start) / N


def _child(args: list[str]) -> None:
    kind, target, steps, delete = args[0], args[1], int(args[2]), args[3] == "1"
    ms = _plain_case(target, steps) if kind == "plain" else _dbos_case(target, steps, delete)
    print(json.dumps({"ms": ms}))


def _run(*args: str) -> float:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return float(json.loads(done.stdout.strip().splitlines()[-1])["ms"])


def main() -> None:
    if "--child" in sys.argv:
        _child(sys.argv[sys.argv.index("--child") + 1 :])
        return
    with tempfile.TemporaryDirectory() as tmp:
        journals = [("dbos sqlite", lambda name: f"sqlite:///{Path(tmp) / name}.sqlite")]
        cluster = None
        if "--pg" in sys.argv:
            from psycopg.conninfo import conninfo_to_dict

            from memora_plugin_postgres.testing import temporary_cluster

            cluster = temporary_cluster()
            parts = conninfo_to_dict(cluster.__enter__())
            pg = f"postgresql://{parts.get('user', '')}@{parts['host']}:{parts['port']}/"

            # a database per case (DBOS makes it): the workflow ids of one case are not another's
            journals.append(("dbos postgres", lambda name: pg + "floor_" + name))
        try:
            print(f"CPU a workflow, ms (median of 3 processes, {N} workflows each):")
            for steps in (0, 1, 2):
                plain = sorted(
                    _run("plain", f"{tmp}/plain{steps}-{i}", str(steps), "1") for i in range(3)
                )[1]
                print(f"  {steps} steps   plain sqlite3 journal   {plain:6.2f}   1.00x")
                for label, url in journals:
                    for delete in (False, True):
                        runs = sorted(
                            _run(
                                "dbos",
                                url(f"d{steps}{int(delete)}{i}"),
                                str(steps),
                                str(int(delete)),
                            )
                            for i in range(3)
                        )
                        ms = runs[1]
                        what = f"{label}{', deleted' if delete else ''}"
                        print(f"  {steps} steps   {what:<24}{ms:6.2f}   {ms / plain:5.2f}x")
        finally:
            if cluster is not None:
                cluster.__exit__(None, None, None)


if __name__ == "__main__":
    main()
