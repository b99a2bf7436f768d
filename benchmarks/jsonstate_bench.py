"""Speed of the JSON state transcoder on the records of a real Plone site.

    .venv/bin/python benchmarks/jsonstate_bench.py [--save corpus.pickle | --load corpus.pickle]

Builds a Plone site with content (the corpus of tests/storage/test_jsonstate_plone.py),
then times each stage over all its records and prints records/s and MB/s (MB of pickle
input). "ZODB unpickle" is the baseline: what loading the state costs ZODB anyway.
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from plone_connector.storage import jsonstate  # noqa: E402
from plone_connector.storage.jsonstate import decode_record, encode_record, json_dumps  # noqa: E402
from plone_connector.storage.jsonstate_tree import load_structure, same_structure  # noqa: E402


def build_corpus() -> list[bytes]:
    from tests.storage.test_jsonstate_plone import plone_site, reachable_records

    with plone_site() as db:
        return list(reachable_records(db.storage).values())


def _time(label: str, records: list, func, size: int, repeat: int) -> tuple[str, float, float, float]:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for item in records:
            func(item)
        best = min(best, time.perf_counter() - start)
    count = len(records)
    return label, count / best, size / best / 1e6, best / count * 1e6


def run(records: list[bytes], repeat: int) -> None:
    size = sum(map(len, records))
    encoded = [encode_record(data) for data in records]
    exact = sum(1 for e in encoded if e.exact is not None)
    texts = [json_dumps(e.state) for e in encoded]
    states = [json.loads(text) for text in texts]
    pairs = list(zip([e.class_name for e in encoded], states, strict=True))
    structures = [load_structure(data) for data in records]
    rebuilt = [decode_record(name, state) for name, state in pairs]
    from zodbpickle.pickle import Unpickler

    class _Any:
        def __init__(self, *args, **kwargs):
            pass

        def __setstate__(self, state):
            pass

        def append(self, item):
            pass

        def __setitem__(self, key, value):
            pass

    class _StandInUnpickler(Unpickler):
        def find_class(self, module, name):
            return _Any

        def persistent_load(self, pid):
            return pid

    def zodb_like_unpickle(data: bytes):
        # What ZODB's reader does, with stand-ins instead of importing application classes.
        unpickler = _StandInUnpickler(io.BytesIO(data))
        unpickler.load()
        return unpickler.load()

    rows = [
        _time("unpickle, stand-in classes (baseline)", records, zodb_like_unpickle, size, repeat),
        _time("load_structure (C unpickler + hooks)", records, load_structure, size, repeat),
        _time(
            "tree -> JSON",
            list(range(len(records))),
            lambda i: jsonstate._to_json(structures[i][1]),
            size,
            repeat,
        ),
        _time("JSON -> record (decode_record)", pairs, lambda p: decode_record(*p), size, repeat),
        _time(
            "check: reload + compare",
            list(range(len(records))),
            lambda i: same_structure(structures[i][1], load_structure(rebuilt[i])[1]),
            size,
            repeat,
        ),
        _time("encode_record (all of the above)", records, encode_record, size, repeat),
        _time("json_dumps", [e.state for e in encoded], json_dumps, size, repeat),
        _time("json.loads", texts, json.loads, size, repeat),
    ]
    json_size = sum(len(t.encode()) for t in texts)
    print(
        f"{len(records)} records, {size / 1e6:.2f} MB of pickles, {json_size / 1e6:.2f} MB of JSON text, {exact} kept exact"
    )
    print(f"{'stage':42s} {'records/s':>10s} {'MB/s':>7s} {'us/record':>10s}")
    for label, per_second, mb_per_second, micros in rows:
        print(f"{label:42s} {per_second:10.0f} {mb_per_second:7.2f} {micros:10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="write the corpus records to this file")
    parser.add_argument("--load", type=Path, help="read the corpus records from this file")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.load:
        records = pickle.loads(args.load.read_bytes())
    else:
        records = build_corpus()
        if args.save:
            args.save.write_bytes(pickle.dumps(records))
    run(records, args.repeat)


if __name__ == "__main__":
    main()
