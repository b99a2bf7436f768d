"""Speed of the JSON state transcoder on the records of a real Plone site, compiled and pure.

    .venv/bin/python benchmarks/jsonstate_bench.py [--save corpus.pickle | --load corpus.pickle]

Builds a Plone site with content (the corpus of tests/storage/test_jsonstate_plone.py), then
times each stage over all its records, for the compiled transcoder (what the storage runs, built
by `make install`) and for the pure Python modules it is compiled from, alternately in the same
process. Prints microseconds per record and MB/s (MB of pickle input), and writes
docs/benchmarks/jsonstate.md and jsonstate.png. "unpickle, stand-in classes" is the baseline:
what loading the state costs ZODB anyway.
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

from zodbpickle.pickle import Unpickler  # noqa: E402

from plone_connector.storage import jsonstate, jsonstate_tree, transcoder  # noqa: E402

OUTPUT = ROOT / "docs" / "benchmarks" / "jsonstate.md"


def build_corpus() -> list[bytes]:
    from tests.storage.test_jsonstate_plone import plone_site, reachable_records

    with plone_site() as db:
        return list(reachable_records(db.storage).values())


def _best(items: list, func, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for item in items:
            func(item)
        best = min(best, time.perf_counter() - start)
    return best


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


def _zodb_like_unpickle(data: bytes):
    # What ZODB's reader does, with stand-ins instead of importing application classes.
    unpickler = _StandInUnpickler(io.BytesIO(data))
    unpickler.load()
    return unpickler.load()


def stages(records: list[bytes], tree, codec) -> list[tuple[str, list, object]]:
    """(label, inputs, function) of each stage, for one implementation (tree, jsonstate)."""
    encoded = [codec.encode_record(data) for data in records]
    texts = [codec.json_dumps(e.state) for e in encoded]
    pairs = [(e.class_name, json.loads(text)) for e, text in zip(encoded, texts, strict=True)]
    structures = [tree.load_structure(data)[1] for data in records]
    # As encode_record checks: rebuilt in jsonb's key order, compared as a load will see it.
    rebuilt = [codec.decode_record(name, state, jsonb_order=True) for name, state in pairs]
    indexes = list(range(len(records)))
    return [
        ("load_structure (C unpickler + hooks)", records, tree.load_structure),
        ("tree -> JSON", structures, codec._to_json),
        ("JSON -> record (decode_record)", pairs, lambda pair: codec.decode_record(*pair)),
        (
            "check: reload + compare",
            indexes,
            lambda i: tree.same_structure(structures[i], tree.load_structure(rebuilt[i])[1], ordered=False),
        ),
        ("encode_record (all of the above)", records, codec.encode_record),
        ("json_dumps", [e.state for e in encoded], codec.json_dumps),
        # What the storage runs: the compiled build takes its fast path where it can.
        ("store: encode_record(with_state=False) + text", records, lambda data: _storage_encode(codec, data)),
        ("load: decode_text (JSON text -> record)", [(e.class_name, text.encode()) for e, text in
                                                    zip(encoded, texts, strict=True)],
         lambda pair: codec.decode_text(*pair)),
    ]


def _storage_encode(codec, data: bytes) -> str:
    encoded = codec.encode_record(data, with_state=False)
    return encoded.text if encoded.text is not None else codec.json_dumps(encoded.state)


def fast_share(records: list[bytes]) -> str:
    """How many records the compiled fast path takes (read and confirmed), by class."""
    fast = getattr(jsonstate, "_fast", None)
    if fast is None:
        return "the fast path is not built"
    taken = {}
    total = {}
    for data in records:
        name = jsonstate.encode_record(data).class_name
        total[name] = total.get(name, 0) + 1
        if fast.encode(data) is not None:
            taken[name] = taken.get(name, 0) + 1
    common = sorted(total, key=total.get, reverse=True)[:8]
    detail = ", ".join(f"{name.rsplit('.', 1)[-1]} {taken.get(name, 0)}/{total[name]}" for name in common)
    return f"fast path taken for {sum(taken.values())} of {len(records)} records ({detail})"


def run(records: list[bytes], repeat: int, output: Path | None) -> None:
    size = sum(map(len, records))
    pure = transcoder.load_pure()
    implementations = {
        "compiled": (jsonstate_tree, jsonstate),
        "pure": (pure["jsonstate_tree"], pure["jsonstate"]),
    }
    if not transcoder.is_compiled(jsonstate):
        print("the compiled transcoder is not built (make install): both columns are the pure modules")
    outputs = {}
    for name, (_tree, codec) in implementations.items():
        encoded = [codec.encode_record(data) for data in records]
        outputs[name] = [(e.class_name, codec.json_dumps(e.state), e.refs, e.exact) for e in encoded]
    identical = outputs["compiled"] == outputs["pure"]
    exact = sum(1 for row in outputs["compiled"] if row[3] is not None)
    json_size = sum(len(row[1].encode()) for row in outputs["compiled"])
    plan = {name: stages(records, *modules) for name, modules in implementations.items()}
    rows = [("unpickle, stand-in classes (baseline)", _best(records, _zodb_like_unpickle, repeat), None)]
    rows.append(("json.loads", _best([row[1] for row in outputs["compiled"]], json.loads, repeat), None))
    for index, (label, items, _) in enumerate(plan["compiled"]):
        best = {"compiled": float("inf"), "pure": float("inf")}
        for _ in range(repeat):  # alternate, so that a noisy moment hits both
            for name in best:
                best[name] = min(best[name], _best(items if name == "compiled" else plan[name][index][1],
                                                   plan[name][index][2], 1))
        rows.append((label, best["compiled"], best["pure"]))
    count = len(records)
    lines = [
        f"{count} records, {size / 1e6:.2f} MB of pickles, {json_size / 1e6:.2f} MB of JSON text, "
        f"{exact} kept exact; compiled and pure output identical: {identical}",
        "",
        fast_share(records),
        "",
        "| stage | compiled µs/record | pure µs/record | speed-up | compiled MB/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, compiled, pure_time in rows:
        if pure_time is None:
            lines.append(f"| {label} | {compiled / count * 1e6:.1f} | (same) | | {size / compiled / 1e6:.1f} |")
        else:
            lines.append(
                f"| {label} | {compiled / count * 1e6:.1f} | {pure_time / count * 1e6:.1f} | "
                f"{pure_time / compiled:.2f}x | {size / compiled / 1e6:.1f} |"
            )
    print("\n".join(lines))
    if output is not None:
        write_report(output, lines, rows, count, repeat)


def write_report(output: Path, lines: list[str], rows, count: int, repeat: int) -> None:
    import platform

    head = [
        "# JSON state transcoder: compiled and pure Python",
        "",
        f"`benchmarks/jsonstate_bench.py --repeat {repeat}`, Python {platform.python_version()}, on the "
        "records of the test Plone site (tests/storage/test_jsonstate_plone.py). Best of the repeats, "
        "compiled and pure timed alternately in one process. `encode_record` is what the storage runs "
        "for every object it writes (unpickle, JSON, the round-trip check); `decode_record` for every "
        "object it loads from PostgreSQL.",
        "",
    ]
    output.write_text("\n".join(head + lines) + "\n\n![microseconds per record](jsonstate.png)\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timed = [row for row in rows if row[2] is not None]
    labels = [row[0] for row in timed]
    positions = range(len(timed))
    figure, axes = plt.subplots(figsize=(8, 4))
    axes.barh([p + 0.2 for p in positions], [row[2] / count * 1e6 for row in timed], 0.4, label="pure Python")
    axes.barh([p - 0.2 for p in positions], [row[1] / count * 1e6 for row in timed], 0.4, label="compiled")
    axes.set_yticks(list(positions), labels)
    axes.invert_yaxis()
    axes.set_xlabel("µs per record (lower is better)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(output.with_suffix(".png"), dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="write the corpus records to this file")
    parser.add_argument("--load", type=Path, help="read the corpus records from this file")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--output", type=Path, default=OUTPUT, help="report file ('-' for none)")
    args = parser.parse_args()
    if args.load:
        records = pickle.loads(args.load.read_bytes())
    else:
        records = build_corpus()
        if args.save:
            args.save.write_bytes(pickle.dumps(records))
    run(records, args.repeat, None if str(args.output) == "-" else args.output)


if __name__ == "__main__":
    main()
