"""Transcode ZODB records (pickles) to the JSON state format and back.

The format is specified in schemas/catalog_schemas/state_format.md (version FORMAT_VERSION).
``encode_record`` checks every result: it writes the record back from the JSON as a load from
PostgreSQL will (object members in jsonb's order), unpickles both without importing application
classes and compares the structures (string-keyed dicts as mappings, since jsonb keeps its own
key order). That rebuilt record is also what the storage caches for its own commits. When they differ,
or the record holds something the format has no form for, the result carries the original
bytes in ``exact``: the storage keeps them, so nothing is ever lost, only less readable.
"""

from __future__ import annotations

import base64
import datetime
import json
import json.encoder
import math
import re
import struct
from typing import NamedTuple

from plone_connector.storage.jsonstate_pickle import (
    ORDER_KEY,
    FormatError,
    jsonb_key,
    utc_from_micros,
    write_record,
)
from plone_connector.storage.jsonstate_tree import (
    MAX_NESTING,
    GlobalMeta,
    Node,
    Ref,
    load_structure,
    same_structure,
)

FORMAT_VERSION = 2
# Version 2 (state_format.md §11): dict key order (ORDER_KEY) and tuples that refer to themselves.

# Integers beyond this are written as {"@int": "..."}: JSONB would keep them, but most JSON
# clients (JavaScript numbers) would not.
MAX_SAFE_INT = 2**53 - 1

# Integral floats at or beyond this magnitude are written by repr() in exponent form, which
# JSONB turns into an integer literal (1e16 reads back as 10000000000000000).
_FLOAT_INTEGRAL_LIMIT = 1e16

_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")

_NAN_BITS = 0x7FF8000000000000
_NEGATIVE_NAN_BITS = 0xFFF8000000000000


def _float_bits(value: float) -> int:
    return struct.unpack(">Q", struct.pack(">d", value))[0]


# Reasons end up in logs and in the state column's marker: keep them short.
_REASON_LIMIT = 300


class TranscodeError(Exception):
    """A record or a JSON state that cannot be transcoded at all (not even kept exact)."""


class EncodedState(NamedTuple):
    class_name: str
    state: object
    refs: list[bytes]
    exact: bytes | None
    # Why ``exact`` is set (for metrics and logs); None when the JSON is exact.
    reason: str | None = None
    # The record a load from PostgreSQL returns (rebuilt from the JSON in jsonb's key order, and
    # checked); None when ``exact`` is set.
    record: bytes | None = None
    # ``json_dumps(state)`` when the fast path wrote it already.
    text: str | None = None


class _Unsupported(Exception):
    pass


_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# The C encoder json.dumps builds for every call, built once: a third of the call's cost.
# Without a circular check (the states are trees) and thread-safe (it keeps no state).
_c_json = (
    json.encoder.c_make_encoder(None, _JSON.default, json.encoder.encode_basestring, None, ":", ",", False, False, False)
    if json.encoder.c_make_encoder is not None
    else None
)


def json_dumps(state) -> str:
    """JSON text of a state that PostgreSQL's jsonb accepts as is.

    The encoder never produces NaN, infinities or NUL characters, so plain ``json`` will do;
    ``allow_nan=False`` makes a violation an error rather than bad data.
    """
    if _c_json is None:
        return _JSON.encode(state)
    return "".join(_c_json(state, 0))


# -- encoding -----------------------------------------------------------------------------


def _str_pieces(text: str) -> list:
    pieces: list = []
    start = 0
    for match in _BAD_CHARS.finditer(text):
        if match.start() > start:
            pieces.append(text[start : match.start()])
        pieces.append(ord(match.group()))
        start = match.end()
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def _plain_str(text: str) -> bool:
    if text.isascii():
        return "\x00" not in text
    return _BAD_CHARS.search(text) is None


def _plain_keys(value: dict) -> int:
    """Can the dict be a JSON object: keys all texts without U+0000 or lone surrogates, not one
    single key that would read as a tag, and not ORDER_KEY? 0 if not, 1 for ASCII keys, else 2."""
    try:
        # One check over all keys at once (the structure has only exact str, no subclasses).
        keys = "".join(value)
    except TypeError:  # a key that is not a text
        return 0
    if keys.isascii():
        if "\x00" in keys:
            return 0
        plain = 1
    elif _BAD_CHARS.search(keys) is not None:
        return 0
    else:
        plain = 2
    if len(value) == 1:
        return 0 if keys[:1] == "@" else plain
    return 0 if ORDER_KEY in value else plain


def _ascii_jsonb_key(key: str) -> tuple[int, str]:
    # jsonb_key of an ASCII text: its length, then the text (bytes and characters agree).
    return len(key), key


def key_ranks(value: dict, ascii_keys: bool = False) -> list[int] | None:
    """The ORDER_KEY record of a dict with text keys: each key's rank in jsonb's key order, in
    the dict's own order; None when the two orders are the same (nothing to record)."""
    keys = list(value)
    ordered = sorted(keys, key=_ascii_jsonb_key if ascii_keys else jsonb_key)
    if ordered == keys:
        return None
    rank = {key: index for index, key in enumerate(ordered)}
    return [rank[key] for key in keys]


def _float_json(value: float):
    if math.isfinite(value):
        if value == 0.0:
            return value if math.copysign(1.0, value) > 0 else {"@f": "-0.0"}
        if value.is_integer() and abs(value) >= _FLOAT_INTEGRAL_LIMIT:
            return {"@f": repr(value)}
        return value
    if math.isnan(value):
        bits = _float_bits(value)
        if bits == _NAN_BITS:
            return {"@f": "nan"}
        if bits == _NEGATIVE_NAN_BITS:
            return {"@f": "-nan"}
        return {"@f": f"0x{bits:016x}"}  # a NaN with a payload: its bit pattern
    return {"@f": repr(value)}


def _is_datetime_bytes(args, size: int, fold_byte: int) -> bool:
    return (
        1 <= len(args) <= 2
        and type(args[0]) is bytes
        and len(args[0]) == size
        and not args[0][fold_byte] & 0x80
    )


# JSON has no form for an immutable value used twice (the pickle's memo get of a tuple, a text
# or bytes): each use is written out in full. So a record can describe a JSON state far larger
# than itself: a tuple of a thousand items used a thousand times, or exponentially so with shared
# tuples nested (a tuple holding one tuple twice, which holds one tuple twice, ...). Unshared, a
# record holds at most one value per byte (containers and their items) and one character of text
# or byte of bytes per byte; past these multiples of its length it is kept exact instead (keys
# and values repeated from the memo, as the pickler writes interned keys, stay well within).
# Texts shorter than LONG_TEXT are counted as items only (so at most LONG_TEXT characters each).
EXPANSION_ITEMS = 8
EXPANSION_CHARS = 64
EXPANSION_SLACK = 1 << 16
LONG_TEXT = 256  # texts from this length count against the characters too (dict keys always do)
_EXPANDS = "shared immutable values expand too far in JSON"


def expansion_budget(size: int) -> tuple[int, int]:
    """(values, characters of text and bytes) the JSON of a record of ``size`` bytes may hold.
    The compiled fast path takes a record only within half of it (jsonstate_fast.pyx), so that
    the two paths never disagree on what is kept exact."""
    return (
        EXPANSION_ITEMS * size + EXPANSION_SLACK,
        EXPANSION_CHARS * size + 16 * EXPANSION_SLACK,
    )


class _Encoder:
    """Tree -> JSON. Pass 1 finds mutable objects that occur twice; if any, pass 2 writes
    the first occurrence as @shared and the others as @same."""

    def __init__(self, shared: set[int] | None = None, budget: tuple[int, int] = (1 << 62, 1 << 62)):
        self.shared = shared or set()
        self.seen: dict[int, object] = {}
        self.duplicates: set[int] = set()
        self.numbers: dict[int, int] = {}
        self.depth = 0  # containers being encoded, one inside the other
        self.items, self.chars = budget  # what is left of the expansion budget
        # Tuples and value calls being encoded (by id): met again inside themselves, a tuple is
        # shared (@shared/@same, format version 2) so that it loads as one object again.
        self.open: set[int] = set()

    def enter(self, items: int = 0) -> None:
        """A container of ``items`` values begins."""
        depth = self.depth + 1
        if depth > MAX_NESTING:
            raise _Unsupported(f"containers nested deeper than {MAX_NESTING}")
        self.depth = depth
        self.charge(1 + items)

    def charge(self, items: int) -> None:
        self.items -= items
        if self.items < 0:
            raise _Unsupported(_EXPANDS)

    def spend(self, chars: int) -> None:
        self.chars -= chars
        if self.chars < 0:
            raise _Unsupported(_EXPANDS)

    def track(self, value) -> dict | None:
        """Register a mutable object; return the JSON to use instead if it was seen."""
        key = id(value)
        if key in self.seen:
            if self.shared:
                return {"@same": self.numbers[key]}
            self.duplicates.add(key)
            return {"@same": -1}
        self.seen[key] = value
        return None

    def wrap(self, value, body):
        key = id(value)
        if key in self.shared:
            return {"@shared": {"id": self.numbers[key], "value": body}}
        return body

    def number(self, value) -> None:
        key = id(value)
        if key in self.shared:
            self.numbers[key] = len(self.numbers) + 1

    def enc(self, value):
        # Types in the order of their frequency in Plone states.
        kind = type(value)
        if kind is str:
            if len(value) >= LONG_TEXT:
                self.spend(len(value))
            if value.isascii():
                if "\x00" not in value:
                    return value
            elif _BAD_CHARS.search(value) is None:
                return value
            return {"@s": _str_pieces(value)}
        if kind is tuple:
            return self.enc_tuple(value)
        if value is None or kind is bool:
            return value
        if kind is int:
            if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
                return value
            try:
                return {"@int": str(value)}
            except ValueError as exc:  # beyond sys.get_int_max_str_digits()
                raise _Unsupported("integer too long") from exc
        if kind is dict:
            return self.enc_dict(value)
        if kind is Ref:
            return self.enc_ref(value.pid)
        if kind is GlobalMeta:
            return {"@global": value.dotted}
        if kind is bytes:
            self.spend(len(value))
            return {"@b": base64.b64encode(value).decode("ascii")}
        if kind is list:
            again = self.track(value)
            if again is not None:
                return again
            self.number(value)
            return self.wrap(value, self.enc_items(value))
        if kind is Node:
            return self.enc_node(value)
        if kind is float:
            return _float_json(value)
        raise _Unsupported(f"no JSON form for {kind.__name__}")

    def enc_tuple(self, value: tuple):
        key = id(value)
        if key in self.shared:  # a tuple that refers to itself (through a container)
            number = self.numbers.get(key)
            if number is not None:
                return {"@same": number}
            self.number(value)
            return self.wrap(value, {"@t": self.enc_items(value)})
        if key in self.open:
            if self.numbers or self.shared:
                raise _Unsupported("a tuple inside itself found late")  # not expected: pass 1 finds all
            self.duplicates.add(key)
            return {"@same": -1}
        self.open.add(key)
        body = {"@t": self.enc_items(value)}
        self.open.discard(key)
        return body

    def enc_items(self, values) -> list:
        # ASCII texts without U+0000 and None are their own JSON (the common items): no call.
        self.enter(len(values))
        enc = self.enc
        items = [
            item
            if (type(item) is str and len(item) < LONG_TEXT and item.isascii() and "\x00" not in item)
            or item is None
            else enc(item)
            for item in values
        ]
        self.depth -= 1
        return items

    def enc_dict(self, value: dict):
        again = self.track(value)
        if again is not None:
            return again
        self.number(value)
        self.enter(len(value))
        plain = _plain_keys(value)
        if plain:
            self.spend(sum(map(len, value)))
            enc = self.enc
            body = {
                key: item
                if (type(item) is str and len(item) < LONG_TEXT and item.isascii() and "\x00" not in item)
                or item is None
                else enc(item)
                for key, item in value.items()
            }
            if len(value) > 1:
                ranks = key_ranks(value, plain == 1)
                if ranks is not None:
                    body[ORDER_KEY] = ranks
        else:
            body = {"@dict": [[self.enc(key), self.enc(item)] for key, item in value.items()]}
        self.depth -= 1
        return self.wrap(value, body)

    def enc_ref(self, pid):
        kind = type(pid)
        if kind is bytes:
            return {"@ref": pid.hex()}
        if kind is tuple and len(pid) == 2 and type(pid[0]) is bytes and type(pid[1]) is GlobalMeta:
            return {"@ref": [pid[0].hex(), pid[1].dotted]}
        if kind is list and len(pid) == 2 and type(pid[1]) is tuple:
            ref_type, args = pid
            if ref_type == "w" and args and type(args[0]) is bytes:
                if len(args) == 1:
                    return {"@wref": args[0].hex()}
                if len(args) == 2 and type(args[1]) is str:
                    return {"@wref": [args[0].hex(), args[1]]}
            if (
                ref_type == "m"
                and len(args) == 3
                and type(args[0]) is str
                and type(args[1]) is bytes
                and type(args[2]) is GlobalMeta
            ):
                return {"@mref": [args[0], args[1].hex(), args[2].dotted]}
            if ref_type == "n" and len(args) == 2 and type(args[0]) is str and type(args[1]) is bytes:
                return {"@nref": [args[0], args[1].hex()]}
        self.enter()  # a persistent id may hold another one
        body = {"@pid": self.enc(pid)}
        self.depth -= 1
        return body

    def enc_node(self, node: Node):
        items = len(node.args)
        for kind, payload in node.ops:
            if kind != "state":  # items or dictitems: a list
                items += len(payload)
        self.enter(items)
        if node.is_value():
            # A value (frozenset, datetime, ...) reached from inside itself: the pickle builds it
            # inside its own arguments, which the format has no form for (kept exact).
            key = id(node)
            if key in self.open:
                raise _Unsupported("a value call inside itself")
            self.open.add(key)
            body = self.enc_call(node)
            self.open.discard(key)
        else:
            body = self.enc_call(node)
        self.depth -= 1
        return body

    def enc_call(self, node: Node):
        func = node.func
        if type(func) is GlobalMeta:
            sugar = _SUGAR.get((node.kind, func.module, func.name))
            if sugar is not None:
                found = sugar(self, node)
                if found is not None:
                    return found
        if not node.is_value():
            again = self.track(node)
            if again is not None:
                return again
            self.number(node)
        if type(func) is GlobalMeta:
            callable_json = func.dotted
        elif node.kind == "newobj":
            raise _Unsupported("NEWOBJ of a non-global class")
        else:
            callable_json = self.enc(func)
        body = {"class" if node.kind == "newobj" else "func": callable_json}
        if node.args:
            body["args"] = [self.enc(arg) for arg in node.args]
        order = [kind for kind, _ in node.ops]
        if order != [kind for kind in ("items", "dictitems", "state") if kind in order]:
            raise _Unsupported(f"operations in an order the format cannot keep: {order}")
        for kind, payload in node.ops:
            if kind == "items":
                body["items"] = [self.enc(item) for item in payload]
            elif kind == "dictitems":
                body["dictitems"] = [[self.enc(key), self.enc(item)] for key, item in payload]
            else:
                body["state"] = self.enc(payload)
        tag = "@obj" if node.kind == "newobj" else "@reduce"
        return self.wrap(node, {tag: body})

    # -- readable forms of common values; None means "use the generic form" -----------

    def sugar_set(self, node: Node, tag: str):
        args = node.args
        if node.ops or len(args) != 1 or type(args[0]) is not list:
            return None
        items = args[0]
        if id(items) in self.seen or id(items) in self.shared:
            return None
        self.seen[id(items)] = items
        if tag == "@set":  # a set is mutable: it may be shared
            again = self.track(node)
            if again is not None:
                return again
            self.number(node)
        return self.wrap(node, {tag: [self.enc(item) for item in items]})

    def sugar_datetime(self, node: Node):
        args = node.args
        if node.ops or not _is_datetime_bytes(args, 10, 2):
            return None
        try:
            text = datetime.datetime(args[0]).isoformat()
        except (ValueError, TypeError):
            return None
        if len(args) == 1:
            return {"@datetime": text}
        return {"@datetime": [text, self.enc(args[1])]}

    def sugar_date(self, node: Node):
        args = node.args
        if node.ops or len(args) != 1 or type(args[0]) is not bytes or len(args[0]) != 4:
            return None
        try:
            return {"@date": datetime.date(args[0]).isoformat()}
        except (ValueError, TypeError):
            return None

    def sugar_time(self, node: Node):
        args = node.args
        if node.ops or not _is_datetime_bytes(args, 6, 0):
            return None
        try:
            text = datetime.time(args[0]).isoformat()
        except (ValueError, TypeError):
            return None
        if len(args) == 1:
            return {"@time": text}
        return {"@time": [text, self.enc(args[1])]}

    def sugar_timedelta(self, node: Node):
        args = node.args
        if node.ops or len(args) != 3 or not all(type(x) is int for x in args):
            return None
        if not all(-MAX_SAFE_INT <= x <= MAX_SAFE_INT for x in args):
            return None
        return {"@timedelta": list(args)}

    def sugar_decimal(self, node: Node):
        args = node.args
        if node.ops or len(args) != 1 or type(args[0]) is not str or not _plain_str(args[0]):
            return None
        return {"@decimal": args[0]}

    def sugar_zope_datetime(self, node: Node):
        # DateTime pickles as NEWOBJ + BUILD (micros, timezone_naive, tz).
        if node.args or len(node.ops) != 1 or node.ops[0][0] != "state":
            return None
        state = node.ops[0][1]
        if type(state) is not tuple or len(state) != 3:
            return None
        micros, naive, tz = state
        if type(micros) is not int or type(naive) is not bool:
            return None
        try:
            utc = utc_from_micros(micros)
        except OverflowError:
            return None
        return {"@DateTime": {"utc": utc, "tz": self.enc(tz), "naive": naive}}


_SUGAR = {
    ("reduce", "builtins", "set"): lambda e, n: e.sugar_set(n, "@set"),
    ("reduce", "builtins", "frozenset"): lambda e, n: e.sugar_set(n, "@frozenset"),
    ("reduce", "datetime", "datetime"): _Encoder.sugar_datetime,
    ("reduce", "datetime", "date"): _Encoder.sugar_date,
    ("reduce", "datetime", "time"): _Encoder.sugar_time,
    ("reduce", "datetime", "timedelta"): _Encoder.sugar_timedelta,
    ("reduce", "decimal", "Decimal"): _Encoder.sugar_decimal,
    ("newobj", "DateTime.DateTime", "DateTime"): _Encoder.sugar_zope_datetime,
}


def _to_json(value, budget: tuple[int, int] = (1 << 62, 1 << 62)):
    encoder = _Encoder(None, budget)
    body = encoder.enc(value)
    if encoder.duplicates:
        body = _Encoder(encoder.duplicates, budget).enc(value)
    return body


def _class_of(meta, budget: tuple[int, int] = (1 << 62, 1 << 62)) -> tuple[str | None, object]:
    """(dotted class name, None) for a plain class; (best name, metadata JSON) otherwise."""
    if type(meta) is GlobalMeta:
        return meta.dotted, None
    name = None
    if type(meta) is tuple and len(meta) == 2:
        first = meta[0]
        if type(first) is GlobalMeta:
            name = first.dotted
        elif type(first) is tuple and len(first) == 2 and all(type(x) is str for x in first):
            name = f"{first[0]}.{first[1]}"
    return name, _to_json(meta, budget)


def _ordinary_refs(pids: list) -> list[bytes]:
    """Oids of ordinary references, as ZODB.serialize.referencesf finds them (no weak or
    cross-database references), without duplicates."""
    refs: dict[bytes, None] = {}
    for pid in pids:
        if type(pid) is tuple:
            oid = pid[0] if pid else None
        elif type(pid) in (bytes, str):
            oid = pid
        else:
            continue
        if type(oid) is str:
            oid = oid.encode("ascii")
        if type(oid) is bytes:
            refs[oid] = None
    return list(refs)


def _unreadable(data: bytes, reason: str) -> EncodedState:
    # Our unpickler failed; ZODB's own tools must still find class and references, or
    # the storage could neither load nor garbage-collect the record safely.
    from ZODB.serialize import referencesf
    from ZODB.utils import get_pickle_metadata

    try:
        refs = list(dict.fromkeys(referencesf(data)))
        module, name = get_pickle_metadata(data)
    except Exception as exc:
        raise TranscodeError(f"not a readable ZODB record: {reason}") from exc
    class_name = f"{module}.{name}"
    return EncodedState(class_name, {"@exact": reason}, refs, data, reason)


def _fast_module():
    """The compiled fast path (jsonstate_fast.pyx), used by the compiled build of this module only:
    run from its .py, this module is the reference the tests compare the fast path with."""
    if str(globals().get("__file__", "")).endswith(".py"):
        return None
    try:
        from plone_connector.storage import jsonstate_fast
    except ImportError:  # built without a C compiler, or PLONE_CONNECTOR_PURE_PYTHON
        return None
    return jsonstate_fast


_fast = _fast_module()


def encode_record(data: bytes, with_state: bool = True) -> EncodedState:
    """Encode a ZODB record; ``exact`` is set whenever the JSON would not load equal.

    Without ``with_state`` the result may carry the JSON as ``text`` only (``state`` None): what
    the storage writes, without parsing the fast path's text into Python objects.
    """
    data = bytes(data)
    if _fast is not None:
        fast = _fast.encode(data)  # read, written and checked in C (jsonstate_fast.pyx)
        if fast is not None:
            class_name, text, refs, record = fast
            return EncodedState(class_name, json.loads(text) if with_state else None, refs, None, None, record, text)
    try:
        meta, state, pids = load_structure(data)
    except Exception as exc:  # any unpickling failure: keep the record as it is
        return _unreadable(data, f"unreadable: {type(exc).__name__}: {exc}"[:_REASON_LIMIT])
    refs = _ordinary_refs(pids)
    try:
        budget = expansion_budget(len(data))
        class_name, meta_json = _class_of(meta, budget)
        state_json = _to_json(state, budget)
    except (_Unsupported, RecursionError) as exc:
        return _with_exact(data, f"unsupported: {exc}"[:_REASON_LIMIT], refs)
    if meta_json is not None:
        state_json = {"@record": {"class": meta_json, "state": state_json}}
        if class_name is None:
            class_name = _unreadable(data, "").class_name
    hoisted: list = []
    try:
        rebuilt = decode_record(class_name, state_json, jsonb_order=True, hoisted=hoisted)
        meta2, state2, _ = load_structure(rebuilt)
        # Dicts in order (format version 2 keeps it), and tuples that refer to themselves must
        # do so again (same_structure).
        exact = (meta is meta2 or same_structure(meta, meta2)) and same_structure(state, state2)
    except Exception:  # any failure of the check means "keep exact"
        exact = False
    if not exact:
        return EncodedState(class_name, state_json, refs, data, "round trip differs")
    if hoisted:
        # jsonb's key order puts a use of a shared value that builds objects before its
        # definition: a load builds them at another point than the original did. The
        # structures compare equal, but code that runs while loading (a key's __hash__, a
        # __setstate__) may see a half-built object: keep the original.
        return EncodedState(class_name, state_json, refs, data, "shared value reordered by jsonb")
    return EncodedState(class_name, state_json, refs, None, None, rebuilt)


def encode_row(data: bytes) -> tuple[str, str, list[bytes], bytes | None, str | None, bytes | None]:
    """``encode_record(data, with_state=False)`` as the storage writes it: (class name, JSON
    text, refs, exact, reason, record), a plain tuple (the fast path's answer, unwrapped)."""
    if _fast is not None:
        fast = _fast.encode(data) if type(data) is bytes else None
        if fast is not None:
            class_name, text, refs, record = fast
            return class_name, text, refs, None, None, record
    encoded = encode_record(data, with_state=False)
    text = encoded.text if encoded.text is not None else json_dumps(encoded.state)
    return encoded.class_name, text, encoded.refs, encoded.exact, encoded.reason, encoded.record


def _with_exact(data: bytes, reason: str, refs: list[bytes]) -> EncodedState:
    fallback = _unreadable(data, reason)
    return EncodedState(fallback.class_name, {"@exact": reason}, refs, data, reason)


def decode_text(class_name: str, text, jsonb_order: bool = False) -> bytes:
    """``decode_record`` of a JSON text (str, or UTF-8 bytes as PostgreSQL sends it): by the
    compiled fast decoder when the text is in its subset, else by the reference."""
    if _fast is not None:
        record = _fast.decode(class_name, text, jsonb_order)
        if record is not None:
            return record
    return decode_record(class_name, json.loads(text), jsonb_order)


def decode_record(
    class_name: str, state, jsonb_order: bool = False, hoisted: list | None = None, version: int = FORMAT_VERSION
) -> bytes:
    """Rebuild a record (class pickle + state pickle) that ZODB loads to an equal state.

    ``jsonb_order``: the record a load from PostgreSQL would give, whose jsonb column keeps
    object members in its own order (jsonstate_pickle.jsonb_key), not the JSON's; objects that
    record their order (ORDER_KEY) are written in that order either way. ``version``: the format
    version the JSON was written in (1 had no ORDER_KEY: a member of that name is a key).
    """
    if not 1 <= version <= FORMAT_VERSION:
        raise TranscodeError(f"no state format version {version} (this code reads 1 to {FORMAT_VERSION})")
    class_meta = class_name
    if type(state) is dict and len(state) == 1:
        key = next(iter(state))
        if key == "@exact":
            raise TranscodeError("the JSON state is only a marker; the record is in 'exact'")
        if key == "@record":
            body = state[key]
            if type(body) is not dict or body.keys() != {"class", "state"}:
                raise TranscodeError("@record takes {'class': ..., 'state': ...}")
            class_meta, state = body["class"], body["state"]
    try:
        return write_record(class_meta, state, jsonb_order, hoisted, version >= 2)
    except (FormatError, RecursionError, ValueError, TypeError, OverflowError) as exc:
        raise TranscodeError(f"{type(exc).__name__}: {exc}"[:_REASON_LIMIT]) from exc
