"""Client-side instructions per stored object: JsonbStorage, RelStorage and ZODB alone.

    .venv/bin/python benchmarks/storage_instructions.py [--objects 300]

Wall-clock rates on a shared machine move by a third between runs (docs/benchmarks/storage.md);
instruction counts do not. Each storage runs, in a process of its own under valgrind's
callgrind with instrumentation switched on only around the measured part, the add and update of
storage_bench.py (N documents added in one transaction, then each modified in another) and a
transaction that empties the container, after one unmeasured warm-up round. MappingStorage is
ZODB's in-memory storage: what ZODB itself costs, so each storage's own share is its count minus
MappingStorage's. The PostgreSQL server's work is not counted (it runs in other processes).
Needs valgrind (callgrind_control); writes docs/benchmarks/storage_instructions.md; `--keep DIR`
keeps the callgrind files for callgrind_annotate.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

OUTPUT = ROOT / "docs" / "benchmarks" / "storage_instructions.md"
KINDS = ["MappingStorage", "RelStorage", "JsonbStorage"]


def worker(kind: str, target: str, n: int) -> None:
    import storage_bench
    import transaction
    import ZODB
    from persistent.mapping import PersistentMapping

    if kind == "MappingStorage":
        import ZODB.MappingStorage

        db = ZODB.DB(ZODB.MappingStorage.MappingStorage())
        with db.transaction() as conn:
            conn.root()["container"] = PersistentMapping()
        with db.transaction() as conn:
            oid = conn.root()["container"]._p_oid
    else:
        (oid,) = storage_bench.make_containers(kind, target, 1)
        db = ZODB.DB(storage_bench.open_storage(kind, target))

    def rounds():
        storage_bench.run_worker(db, n, oid)  # the benchmark's add and update
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.get(oid).clear()
        tm.commit()
        conn.close()

    rounds()  # warm-up: connections, caches, imports
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True)
    rounds()
    subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True, capture_output=True)
    db.close()


def measure(kind: str, target: str, n: int, workdir: Path) -> int:
    out = subprocess.run(
        [
            "valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={workdir / (kind + '.callgrind')}",
            sys.executable, __file__, "--worker", kind, "--target", target, "--objects", str(n),
        ],
        capture_output=True, text=True, check=True,
    )
    match = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count from valgrind for {kind}:\n{out.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=300)
    parser.add_argument("--output", default=str(OUTPUT))
    parser.add_argument("--keep", help="keep the callgrind files in this directory (for callgrind_annotate)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.target, args.objects)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("valgrind (with callgrind_control) is needed: apt-get install valgrind")

    import tempfile

    from storage_bench import _fresh_database

    from tests.pg import server_url

    admin = server_url()
    stored = 2 * args.objects  # added, then modified
    counts = {}
    with tempfile.TemporaryDirectory(prefix="storage-instructions-") as scratch:
        workdir = args.keep or scratch
        Path(workdir).mkdir(parents=True, exist_ok=True)
        for kind in KINDS:
            target = "" if kind == "MappingStorage" else _fresh_database(admin, f"instr_{kind.lower()}")
            counts[kind] = measure(kind, target, args.objects, Path(workdir))
            print(kind, f"{counts[kind]:,}", flush=True)
    zodb = counts["MappingStorage"]
    lines = [
        "# Client instructions per stored object",
        "",
        f"`benchmarks/storage_instructions.py --objects {args.objects}`: {args.objects} documents added in one "
        f"transaction, each modified in a second, the container emptied in a third ({stored} objects stored), "
        "counted by valgrind's callgrind in the client process after a warm-up round. The PostgreSQL "
        "server's own work is not in these counts. MappingStorage is ZODB alone; \"storage's own\" is a "
        "storage's count minus MappingStorage's.",
        "",
        "| storage | instructions | per stored object | storage's own per object | own, relative to RelStorage |",
        "|---|---:|---:|---:|---:|",
    ]
    own_rs = (counts["RelStorage"] - zodb) / stored
    for kind in KINDS:
        own = (counts[kind] - zodb) / stored
        relative = "" if kind == "MappingStorage" else f"{own / own_rs:.2f}"
        lines.append(
            f"| {kind} | {counts[kind]:,} | {counts[kind] / stored:,.0f} | "
            f"{own:,.0f} | {relative} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.output).write_text(text)


if __name__ == "__main__":
    main()
