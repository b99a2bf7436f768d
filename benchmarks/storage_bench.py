"""Storage benchmark in the shape of zodbshootout: JsonbStorage vs RelStorage vs FileStorage.

    .venv/bin/python benchmarks/storage_bench.py [--objects 1000] [--repeat 3] [--concurrency 1,4]

For each storage and concurrency level, every worker (a process for the PostgreSQL storages,
a thread for FileStorage, which one process must own) times, in objects per second:

- add:       create N PersistentMappings in one transaction and commit;
- update:    change all N and commit;
- cold read: load all N into an empty ZODB cache of a freshly opened storage;
- warm read: load them again after ``cacheMinimize()`` (ZODB cache empty, storage caches warm:
             RelStorage's local cache and JsonbStorage's process cache, storage/cache.py).

The per-worker rates are summed (the throughput of all workers together) and the best of
``--repeat`` runs is kept. Small commits: one process commits 200 transactions that each
change one object (what a web request that saves a form does), ms per commit. At concurrency 1
the add and update also count CPU time per object: the worker's own (client) and that of every
PostgreSQL process on this machine (server), read from /proc around each commit. CPU time moves
far less than wall time on a shared machine, and it shows which side a difference is on. Pack
time: 20k objects, half unreachable, garbage-collected.
RelStorage runs history-free on the same PostgreSQL server (its own database). Without
DATABASE_URL the embedded PostgreSQL of the tests is used. Writes docs/benchmarks/storage.md
and docs/benchmarks/storage.png.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import transaction  # noqa: E402
import ZODB  # noqa: E402
from persistent.mapping import PersistentMapping  # noqa: E402

OPERATIONS = ["add", "update", "cold read", "warm read"]


def open_storage(kind: str, target: str):
    if kind == "JsonbStorage":
        from plone_connector.storage import JsonbStorage

        return JsonbStorage(target)
    if kind == "RelStorage":
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        from relstorage.options import Options
        from relstorage.storage import RelStorage

        options = Options(keep_history=False, cache_local_mb=50)
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        # RelStorage's driver (psycopg2) wants key=value connection strings, not URLs.
        dsn = make_conninfo(**{k: v for k, v in conninfo_to_dict(target).items() if v})
        return RelStorage(PostgreSQLAdapter(dsn=dsn, options=options), options=options)
    if kind == "FileStorage":
        import ZODB.FileStorage

        return ZODB.FileStorage.FileStorage(target)
    raise ValueError(kind)


def _document(i: int) -> PersistentMapping:
    return PersistentMapping(
        title=f"Document {i}",
        description="A document with a few fields, like a small Plone content item " * 2,
        count=i,
        tags=["news", "event", str(i % 10)],
        ratio=i / 7,
    )


def make_containers(kind: str, target: str, count: int) -> list[bytes]:
    """One container per worker, created up front so workers never conflict on the root."""
    db = ZODB.DB(open_storage(kind, target))
    with db.transaction() as conn:
        containers = [PersistentMapping() for _ in range(count)]
        for container in containers:
            conn.root()[f"worker-{time.monotonic_ns()}"] = container
            conn.add(container)
    oids = [container._p_oid for container in containers]
    db.close()
    return oids


def server_cpu() -> float | None:
    """CPU seconds used so far by every PostgreSQL process of this machine (None without /proc):
    the first field of /proc/<pid>/schedstat (nanoseconds on a CPU) of the live ones, plus what
    the postmasters reaped from backends that ended (cutime and cstime of /proc/<pid>/stat,
    clock ticks), so that a connection closing between two readings does not take its CPU time
    out of the difference."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm", "rb") as comm:
                if comm.read().strip() != b"postgres":
                    continue
            with open(f"/proc/{pid}/schedstat", "rb") as stat:
                total += int(stat.read().split()[0]) / 1e9
            with open(f"/proc/{pid}/stat", "rb") as stat:
                # After the command name in parentheses: fields 3.. ; cutime and cstime are 16, 17.
                fields = stat.read().rsplit(b")", 1)[1].split()
                total += (int(fields[13]) + int(fields[14])) / tick
        except (OSError, ValueError, IndexError):  # ended meanwhile, or not readable
            continue
    return total


def run_worker(db, n: int, oid: bytes, cpu: dict[str, float] | None = None) -> dict[str, float]:
    """Add, then update, n objects in the worker's own container. With ``cpu``, the client's
    and the PostgreSQL server's CPU seconds of each are put there too."""
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    container = conn.get(oid)
    times = {}

    def timed(operation, change):
        server = server_cpu() if cpu is not None else None
        client = time.process_time()
        start = time.perf_counter()
        for i in range(n):
            change(i)
        tm.commit()
        times[operation] = time.perf_counter() - start
        if cpu is not None:
            cpu[f"{operation} client"] = time.process_time() - client
            if server is not None:
                cpu[f"{operation} server"] = server_cpu() - server

    timed("add", lambda i: container.__setitem__(i, _document(i)))
    def change(i):
        container[i]["count"] += 1

    timed("update", change)
    conn.close()
    return times


def read_pass(db, oid, n: int) -> tuple[float, float]:
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    conn.cacheMinimize()
    tm.begin()
    start = time.perf_counter()
    container = conn.get(oid)
    for i in range(n):
        container[i]["count"]
    cold = time.perf_counter() - start
    tm.abort()
    conn.cacheMinimize()
    tm.begin()
    start = time.perf_counter()
    container = conn.get(oid)
    for i in range(n):
        container[i]["count"]
    warm = time.perf_counter() - start
    tm.abort()
    conn.close()
    return cold, warm


def _process_worker(kind, target, n, oid, barrier, results):
    try:
        db = ZODB.DB(open_storage(kind, target))
        barrier.wait()
        cpu = {}
        times = run_worker(db, n, oid, cpu if barrier.parties == 1 else None)
        db.close()
        # Cold: a new storage (as a new process would have) with empty caches.
        db = ZODB.DB(open_storage(kind, target))
        times["cold read"], times["warm read"] = read_pass(db, oid, n)
        db.close()
        results.put({**times, **{f"cpu {key}": value for key, value in cpu.items()}})
    except BaseException as error:
        results.put(repr(error))
        raise


def run_concurrent(kind: str, target: str, n: int, concurrency: int) -> dict[str, float]:
    """objects/s summed over the workers."""
    oids = make_containers(kind, target, concurrency)
    if kind == "FileStorage":
        db = ZODB.DB(open_storage(kind, target))
        results, errors = [], []

        def thread(oid):
            try:
                times = run_worker(db, n, oid)
                times["cold read"], times["warm read"] = read_pass(db, oid, n)
                results.append(times)
            except Exception as error:  # noqa: BLE001 - re-raised below
                errors.append(error)

        threads = [threading.Thread(target=thread, args=(oid,)) for oid in oids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        db.close()
        if errors:
            raise errors[0]
    else:
        context = multiprocessing.get_context("fork")
        queue, barrier = context.Queue(), context.Barrier(concurrency)
        procs = [
            context.Process(target=_process_worker, args=(kind, target, n, oid, barrier, queue))
            for oid in oids
        ]
        for p in procs:
            p.start()
        results = [queue.get(timeout=600) for _ in procs]
        for p in procs:
            p.join()
        failures = [r for r in results if isinstance(r, str)]
        if failures:
            raise RuntimeError(f"{kind} worker failed: {failures[0]}")
    rates = {op: sum(n / r[op] for r in results) for op in OPERATIONS}
    if len(results) == 1:  # CPU microseconds per object
        rates.update({key: value / n * 1e6 for key, value in results[0].items() if key.startswith("cpu ")})
    return rates


def small_commits(kind: str, target: str, n: int = 200) -> float:
    """ms per transaction that changes one object, over ``n`` commits in one process."""
    db = ZODB.DB(open_storage(kind, target))
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    counter = conn.root()[f"small-{time.monotonic_ns()}"] = PersistentMapping(n=0)
    tm.commit()
    start = time.perf_counter()
    for _ in range(n):
        counter["n"] += 1
        tm.commit()
    elapsed = time.perf_counter() - start
    conn.close()
    db.close()
    return elapsed / n * 1e3


def pack_time(kind: str, target: str, n: int = 20000) -> float:
    db = ZODB.DB(open_storage(kind, target))
    with db.transaction() as conn:
        conn.root()["pack"] = PersistentMapping({i: _document(i) for i in range(n)})
    with db.transaction() as conn:
        container = conn.root()["pack"]
        for i in range(0, n, 2):
            del container[i]
    time.sleep(0.01)
    start = time.perf_counter()
    db.pack(time.time())
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed


def _fresh_database(admin: str, name: str) -> str:
    import psycopg

    from tests.pg import with_database

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')
        conn.execute(f'create database "{name}"')
    return with_database(admin, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "storage.md"))
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]

    from tests.pg import server_url

    admin = server_url()
    workdir = tempfile.mkdtemp(prefix="storage-bench-")
    targets = {
        "JsonbStorage": _fresh_database(admin, "bench_jsonb"),
        "RelStorage": _fresh_database(admin, "bench_relstorage"),
        "FileStorage": os.path.join(workdir, "Data.fs"),
    }
    open_storage("RelStorage", targets["RelStorage"]).close()  # creates its schema once
    # Round-robin: each repeat runs every storage at every level, so that a slow stretch of a
    # shared machine hits all of them instead of the one that happened to run then.
    rows = {(kind, level): {op: 0.0 for op in OPERATIONS} for kind in targets for level in levels}
    cpu: dict[str, dict[str, float]] = {kind: {} for kind in targets if kind != "FileStorage"}
    small = {kind: float("inf") for kind in targets}
    for repeat in range(args.repeat):
        for kind, target in targets.items():
            small[kind] = min(small[kind], small_commits(kind, target))
            for level in levels:
                rates = run_concurrent(kind, target, args.objects, level)
                rows[(kind, level)] = {op: max(rows[(kind, level)][op], rates[op]) for op in OPERATIONS}
                if kind in cpu:  # the least of the repeats, each measure on its own
                    for key, value in rates.items():
                        if key.startswith("cpu "):
                            cpu[kind][key[4:]] = min(cpu[kind].get(key[4:], value), value)
        print(f"after repeat {repeat + 1}:", flush=True)
        for (kind, level), best in rows.items():
            print(" ", kind, level, {op: round(v) for op, v in best.items()}, flush=True)
    packs = {kind: pack_time(kind, target) for kind, target in targets.items()}
    print("pack seconds", {k: round(v, 3) for k, v in packs.items()})
    write_report(Path(args.output), rows, packs, levels, args, cpu, small)


def write_report(path: Path, rows, packs, levels, args, cpu, small) -> None:
    import platform

    import psycopg

    from tests.pg import server_url

    with psycopg.connect(server_url()) as conn:
        server = conn.execute("show server_version").fetchone()[0]
    lines = [
        "# Storage benchmark: JsonbStorage, RelStorage, FileStorage",
        "",
        f"`benchmarks/storage_bench.py --objects {args.objects} --repeat {args.repeat}"
        f" --concurrency {args.concurrency}`, PostgreSQL {server} (same server for both"
        f" PostgreSQL storages), Python {platform.python_version()}, {os.cpu_count()} CPUs.",
        "Objects per second summed over the concurrent workers, best of the repeats, which run"
        " round-robin (every storage and level once per repeat)"
        " (higher is better). Workers are processes for the PostgreSQL storages and threads"
        " for FileStorage. RelStorage is history-free with its default local cache (50 MB)."
        " The machine is shared with other test runs: differences under about 20% are noise.",
        "",
        "| storage | concurrency | " + " | ".join(OPERATIONS) + " |",
        "|---|---:|" + "---:|" * len(OPERATIONS),
    ]
    for (kind, level), rates in rows.items():
        lines.append(f"| {kind} | {level} | " + " | ".join(f"{rates[op]:,.0f}" for op in OPERATIONS) + " |")
    if 1 in levels and all(cpu.values()):
        lines += [
            "",
            "CPU microseconds per object at concurrency 1, the least of the repeats: the worker"
            " process (client) and every PostgreSQL process of the machine (server; includes"
            " background work such as WAL writing), read from /proc/<pid>/schedstat around each commit.",
            "",
            "| storage | add client | add server | add total | update client | update server | update total |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for kind, measured in cpu.items():
            cells = []
            for op in ("add", "update"):
                client, server = measured.get(f"{op} client"), measured.get(f"{op} server")
                total = client + server if client is not None and server is not None else None
                cells += [f"{value:.1f}" if value is not None else "" for value in (client, server, total)]
            lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Small commits: ms per transaction that changes one object (200 in a row, one process,"
        " best of the repeats; lower is better):",
        "",
        "| storage | ms per commit |",
        "|---|---:|",
    ]
    lines += [f"| {kind} | {ms:.2f} |" for kind, ms in small.items()]
    lines += ["", "Pack (garbage collection of 10,000 unreachable objects among 20,000), seconds:", ""]
    lines += ["| storage | pack s |", "|---|---:|"]
    lines += [f"| {kind} | {seconds:.3f} |" for kind, seconds in packs.items()]
    lines += ["", "![objects per second](storage.png)", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    plot(path.with_suffix(".png"), rows, levels)
    print(path.read_text())


def plot(path: Path, rows, levels) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = sorted({kind for kind, _ in rows})
    fig, axes = plt.subplots(1, len(levels), figsize=(6 * len(levels), 4), squeeze=False)
    width = 0.8 / len(kinds)
    for ax, level in zip(axes[0], levels, strict=True):
        for k, kind in enumerate(kinds):
            rates = rows[(kind, level)]
            ax.bar([i + k * width for i in range(len(OPERATIONS))], [rates[op] for op in OPERATIONS], width, label=kind)
        ax.set_xticks([i + width * (len(kinds) - 1) / 2 for i in range(len(OPERATIONS))], OPERATIONS)
        ax.set_yscale("log")
        ax.set_title(f"concurrency {level}")
        ax.set_ylabel("objects/s")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
