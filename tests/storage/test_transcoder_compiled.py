"""The compiled JSON state transcoder against the pure Python modules it is built from.

``make install`` compiles jsonstate_tree, jsonstate_pickle and jsonstate with Cython
(hatch_build.py); the storage then runs the extension modules. The ``.py`` sources are the
reference: on generated object graphs, on arbitrary JSON and on deeply nested input, both must
give the same answers, byte for byte. (The records of a Plone site are compared in
test_jsonstate_plone.py.)
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plone_connector.storage import jsonstate, jsonstate_pickle, jsonstate_tree, transcoder
from plone_connector.storage.jsonstate import TranscodeError
from tests.storage.test_jsonstate import Plain, commit_value, json_values, latest_records, record, values

ROOT = Path(__file__).resolve().parents[2]
PURE = transcoder.load_pure()
COMPILED = {"jsonstate_tree": jsonstate_tree, "jsonstate_pickle": jsonstate_pickle, "jsonstate": jsonstate}


def _hatch_build():
    spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "hatch_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_storage_runs_the_compiled_transcoder_built_from_the_current_sources():
    if transcoder.pure_requested():
        # PLONE_CONNECTOR_PURE_PYTHON is set for this run: then the reference must be in use.
        assert transcoder.active() == "pure"
        assert not any(transcoder.is_compiled(module) for module in COMPILED.values())
        return
    for name, module in COMPILED.items():
        assert transcoder.is_compiled(module), f"{name} is not compiled: run `make install`"
    assert transcoder.active() == "compiled"
    manifest = ROOT / "plone_connector" / "storage" / "compiled_sources.json"
    built_from = json.loads(manifest.read_text())
    assert built_from == _hatch_build().source_digests(ROOT), (
        "the compiled transcoder is older than its sources: run `make install`"
    )
    assert set(built_from) >= {f"{name}.py" for name in transcoder.MODULES}
    assert set(built_from) >= {f"{name}.pxd" for name in transcoder.MODULES}


def test_the_reference_is_loaded_from_the_sources_beside_the_compiled_modules():
    assert not any(transcoder.is_compiled(module) for module in PURE.values())
    # Each pure module uses the pure versions of the others ...
    assert PURE["jsonstate"].write_record is PURE["jsonstate_pickle"].write_record
    assert PURE["jsonstate"].Node is PURE["jsonstate_tree"].Node
    # ... and loading them left the modules every other import gets alone.
    for name, module in COMPILED.items():
        assert sys.modules[f"plone_connector.storage.{name}"] is module
    assert PURE["jsonstate"].Node is not jsonstate_tree.Node


@pytest.mark.parametrize(("variable", "expected"), [("1", "pure False"), ("", "compiled True")])
def test_the_environment_variable_switches_a_process_to_the_reference(variable, expected):
    if not variable and transcoder.pure_requested():
        expected = "pure False"
    env = {**os.environ, transcoder.PURE_VARIABLE: variable}
    code = (
        "from plone_connector.storage import JsonbStorage, transcoder\n"
        "from plone_connector.storage import jsonstate_tree\n"
        "from plone_connector.storage.jsonstate import write_record\n"
        "from plone_connector.storage import jsonstate_pickle\n"
        "assert write_record is jsonstate_pickle.write_record\n"
        "print(transcoder.active(), transcoder.is_compiled(jsonstate_tree))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split("\n")[0] == expected


def _encoding(module, data: bytes):
    encoded = module.encode_record(data)
    text = module.json_dumps(encoded.state)
    return encoded.class_name, text, encoded.refs, encoded.exact, encoded.reason, encoded.record


def _decoding(module, class_name: str, state):
    results = []
    for jsonb_order in (False, True):
        try:
            results.append(module.decode_record(class_name, state, jsonb_order=jsonb_order))
        except module.TranscodeError as error:
            results.append(f"TranscodeError: {error}")
    return results


@given(values)
def test_generated_graphs_encode_and_decode_identically(value):
    db, _ = commit_value(value)
    for data in latest_records(db.storage).values():
        compiled = _encoding(jsonstate, data)
        assert compiled == _encoding(PURE["jsonstate"], data)
        class_name, text = compiled[0], compiled[1]
        if compiled[3] is None:
            state = json.loads(text)
            assert _decoding(jsonstate, class_name, state) == _decoding(PURE["jsonstate"], class_name, state)
    db.close()


@given(st.lists(values, min_size=2, max_size=2))
def test_structures_compare_identically(pair):
    """same_structure on the trees of two records (and of each with itself)."""
    db, _ = commit_value(pair)
    records = list(latest_records(db.storage).values())
    for a in records[:4]:
        for b in records[:4]:
            for ordered in (True, False):
                answers = []
                for module in (jsonstate_tree, PURE["jsonstate_tree"]):
                    tree_a, tree_b = module.load_structure(a)[1], module.load_structure(b)[1]
                    answers.append(module.same_structure(tree_a, tree_b, ordered=ordered))
                assert answers[0] == answers[1], (a, b, ordered)
                if a is b:
                    assert answers[0]
    db.close()


@given(json_values)
def test_any_json_decodes_identically(state):
    assert _decoding(jsonstate, "some.module.Class", state) == _decoding(
        PURE["jsonstate"], "some.module.Class", state
    )


# -- nesting: the compiled code recurses on the C stack, so both stop at the same bounds --------

BOTH = pytest.mark.parametrize("module", ["compiled", "pure"])


def _module(kind: str, name: str = "jsonstate"):
    return COMPILED[name] if kind == "compiled" else PURE[name]


@BOTH
def test_nesting_up_to_the_limit_is_json_beyond_it_exact(module):
    limit = jsonstate_tree.MAX_NESTING
    assert limit == _module(module, "jsonstate_tree").MAX_NESTING
    within = record(b"]" * limit + b"a" * (limit - 1))
    encoded = _module(module).encode_record(within)
    assert encoded.exact is None
    rebuilt = _module(module).decode_record(encoded.class_name, json.loads(json.dumps(encoded.state)))
    assert jsonstate_tree.same_structure(jsonstate_tree.load_structure(rebuilt)[1], jsonstate_tree.load_structure(within)[1])
    beyond = record(b"]" * (limit + 1) + b"a" * limit)
    encoded = _module(module).encode_record(beyond)
    assert encoded.exact == beyond
    assert encoded.reason == f"unsupported: containers nested deeper than {limit}"


def _nested(levels: int, wrap) -> object:
    value: object = "leaf"
    for _ in range(levels):
        value = wrap(value)
    return value


def _shared_pair(inner):
    return [inner, inner]  # each level shared twice: @shared and @same around every list


def _called_deep(depth: int, func):
    # Stands for the stack of a request (Zope, the publisher, ZODB) the storage is called from.
    return func() if depth == 0 else _called_deep(depth - 1, func)


@pytest.mark.parametrize(
    ("wrap", "containers"),
    [
        pytest.param(lambda v: [v], 1, id="lists"),
        pytest.param(lambda v: (v,), 1, id="tuples"),
        pytest.param(lambda v: collections.OrderedDict(a=v), 1, id="reduce-with-dictitems"),
        pytest.param(lambda v: Plain(a=v), 2, id="objects"),  # the call and its state dict
        pytest.param(_shared_pair, 1, id="shared"),
    ],
)
def test_the_deepest_states_the_encoder_writes_agree_in_both_builds(wrap, containers):
    """Nested as deep as the encoder gives JSON for (the record's own state is one level), and
    called 400 frames deep: both builds write the same JSON and decode it to the same bytes."""
    levels = (jsonstate_tree.MAX_NESTING - 1) // containers
    db, holder = commit_value(_nested(levels, wrap))
    data = db.storage.load(holder._p_oid)[0]
    results = []
    for module in (jsonstate, PURE["jsonstate"]):
        encoded = _called_deep(400, lambda module=module: module.encode_record(data))
        assert encoded.exact is None, encoded.reason
        text = module.json_dumps(encoded.state)
        state = json.loads(text)
        decoded = _called_deep(
            400, lambda module=module, name=encoded.class_name, state=state: _decoding(module, name, state)
        )
        results.append((text, decoded))
    assert results[0] == results[1]
    assert not any(isinstance(item, str) for item in results[0][1])  # decoded, not refused
    deeper = _nested(levels + 1, wrap)
    db2, holder2 = commit_value(deeper)
    data2 = db2.storage.load(holder2._p_oid)[0]
    reasons = {module.encode_record(data2).reason for module in (jsonstate, PURE["jsonstate"])}
    assert reasons == {f"unsupported: containers nested deeper than {jsonstate_tree.MAX_NESTING}"}
    db.close()
    db2.close()


@pytest.mark.parametrize(
    "ops",
    [
        pytest.param(b"]" * 200_000 + b"a" * (200_000 - 1), id="lists"),
        pytest.param(b")" + b"\x85" * 200_000, id="tuples"),
        pytest.param(b"c__main__\nY\n" + b")R" * 200_000, id="calls"),
        # ZODB's own reader (referencesf) cannot read persistent ids inside persistent ids
        # either: not a ZODB record at all (the storage keeps such bytes opaque).
        pytest.param(b"C\x08" + b"\x00" * 8 + b"Q" * 200_000, id="persistent ids"),
    ],
)
def test_very_deep_records_are_kept_exact_without_exhausting_the_stack(ops):
    data = record(ops)
    outcomes = []
    for module in (jsonstate, PURE["jsonstate"]):
        try:
            encoded = module.encode_record(data)
        except module.TranscodeError as error:
            outcomes.append(f"TranscodeError: {error}")
        else:
            assert encoded.exact == data
            outcomes.append(encoded.reason)
    assert outcomes[0] == outcomes[1]
    assert "nested deeper than" in outcomes[0]


@BOTH
def test_very_deep_json_is_refused_without_exhausting_the_stack(module):
    deep: object = 1
    for _ in range(200_000):
        deep = [deep]
    with pytest.raises(TranscodeError if module == "compiled" else PURE["jsonstate"].TranscodeError):
        _module(module).decode_record("m.C", deep)
    nested: object = {"@shared": {"id": 1, "value": 2}}
    for _ in range(200_000):
        nested = {"a": nested}
    shared = [{"@same": 1}, nested]  # the @same makes the writer search the whole state first
    with pytest.raises(TranscodeError if module == "compiled" else PURE["jsonstate"].TranscodeError):
        _module(module).decode_record("m.C", shared)


@BOTH
def test_comparing_very_deep_structures_raises_recursion_error(module):
    tree = _module(module, "jsonstate_tree")
    data = record(b"]" * 200_000 + b"a" * (200_000 - 1))
    deep = tree.load_structure(data)[1]
    with pytest.raises(RecursionError):
        tree.same_structure(deep, tree.load_structure(data)[1])
    calls = tree.load_structure(record(b"c__main__\nY\n" + b")R" * 200_000))[1]
    with pytest.raises(RecursionError):
        tree.same_structure(calls, calls)


@pytest.mark.parametrize(("build", "variable"), [("compiled", ""), ("pure", "1")])
@pytest.mark.parametrize(
    "ops",
    [
        pytest.param(b"c__main__\nY\n" + b")R" * 1_000_000, id="calls"),
        pytest.param(b"C\x08" + b"\x00" * 8 + b"Q" * 1_000_000, id="persistent ids"),
    ],
)
def test_freeing_very_deep_structures_does_not_exhaust_the_stack(build, variable, ops):
    """Chains of Nodes or Refs (a call of a call ..., a persistent id of a persistent id ...),
    read, encoded and freed in a thread with a 1 MiB stack: no crash (in a child process, so
    that a crash fails this test and nothing else)."""
    code = (
        "import sys, threading\n"
        "from plone_connector.storage import jsonstate, jsonstate_tree, transcoder\n"
        "data = sys.stdin.buffer.read()\n"
        "def work():\n"
        "    tree = jsonstate_tree.load_structure(data)\n"
        "    del tree\n"
        "    try:\n"
        "        jsonstate.encode_record(data)\n"
        "    except jsonstate.TranscodeError:\n"
        "        pass\n"
        "threading.stack_size(1 << 20)\n"
        "thread = threading.Thread(target=work)\n"
        "thread.start()\n"
        "thread.join()\n"
        "print(transcoder.active(), 'done')\n"
    )
    env = {**os.environ, transcoder.PURE_VARIABLE: variable}
    result = subprocess.run([sys.executable, "-c", code], input=record(ops), env=env, cwd=ROOT,
                            capture_output=True, timeout=600)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    expected = "pure" if variable or transcoder.pure_requested() else build
    assert result.stdout.decode().split() == [expected, "done"]
