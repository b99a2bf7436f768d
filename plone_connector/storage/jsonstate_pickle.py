"""Write a ZODB record (two protocol-3 pickles) from the JSON state format, opcode by opcode.

No application class is imported: globals are written by name. The pickles are not byte
for byte what ZODB's ObjectWriter writes (fewer memo entries), but they load to the same
structure; the encoder checks exactly that for every record it accepts.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import itertools
import struct

_pack_double = struct.Struct(">d").pack
_pack_i4 = struct.Struct("<i").pack
_pack_u4 = struct.Struct("<I").pack

PROTO3 = b"\x80\x03"
STOP = b"."
MARK = b"("
NONE = b"N"
NEWTRUE = b"\x88"
NEWFALSE = b"\x89"
EMPTY_LIST = b"]"
EMPTY_DICT = b"}"
EMPTY_TUPLE = b")"
APPENDS = b"e"
SETITEMS = b"u"
TUPLE = b"t"
TUPLES = (EMPTY_TUPLE, b"\x85", b"\x86", b"\x87")
REDUCE = b"R"
NEWOBJ = b"\x81"
BUILD = b"b"
BINPERSID = b"Q"
POP = b"0"
POP_MARK = b"1"

# Format version 2: the member of a JSON object that records its dict's key order where that is
# not jsonb's (state_format.md §10): the jsonb ranks of the keys, in the dict's insertion order.
ORDER_KEY = "@order"

# Opcodes with a one-byte argument, prebuilt: memo puts and gets, small ints, short bytes.
_BINPUT = [b"q" + bytes((i,)) for i in range(256)]
_BINGET = [b"h" + bytes((i,)) for i in range(256)]
_BININT1 = [b"K" + bytes((i,)) for i in range(256)]
_SHORT_BINBYTES = [b"C" + bytes((i,)) for i in range(256)]

# The opcodes of names and short texts that recur from record to record (attribute names,
# classes), built once. Bounded: cleared when full.
_CACHE_LIMIT = 20_000
_CACHED_TEXT_LENGTH = 64
_str_opcodes: dict[str, bytes] = {}
_global_opcodes: dict[str, bytes] = {}

# JSON nested deeper than this is refused. The encoder writes far less (jsonstate_tree.MAX_NESTING
# containers, a few JSON levels each); json.loads stops near Python's recursion limit anyway.
# The compiled writer recurses on the C stack, which that limit does not guard: this does.
MAX_JSON_NESTING = 1000

_CALL_FIELDS = frozenset({"func", "class", "args", "items", "dictitems", "state"})
_DATETIME_FIELDS = frozenset({"utc", "tz", "naive"})

_EPOCH = datetime.datetime(1970, 1, 1)
_MICROSECOND = datetime.timedelta(microseconds=1)


class FormatError(ValueError):
    """The JSON is not a valid state of this format version."""


def oid_from_hex(text) -> bytes:
    if type(text) is not str:
        raise FormatError(f"oid must be a hex string, not {text!r}")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise FormatError(f"bad oid {text!r}") from None


def split_global(dotted) -> tuple[str, str]:
    if type(dotted) is not str:
        raise FormatError(f"global name must be a string, not {dotted!r}")
    module, sep, name = dotted.rpartition(".")
    if not sep or not module or not name:
        raise FormatError(f"global name {dotted!r} is not 'module.name'")
    return module, name


def micros_from_utc(text) -> int:
    if type(text) is not str or not text.endswith("Z"):
        raise FormatError(f"bad DateTime utc {text!r}")
    try:
        moment = datetime.datetime.fromisoformat(text[:-1])
    except ValueError:
        raise FormatError(f"bad DateTime utc {text!r}") from None
    return (moment - _EPOCH) // _MICROSECOND


def utc_from_micros(micros: int) -> str:
    return (_EPOCH + datetime.timedelta(microseconds=micros)).isoformat(timespec="microseconds") + "Z"


def _decode_str_pieces(pieces) -> str:
    if type(pieces) is not list:
        raise FormatError("@s takes a list")
    parts = []
    for piece in pieces:
        if type(piece) is str:
            parts.append(piece)
        elif type(piece) is int and 0 <= piece <= 0x10FFFF:
            parts.append(chr(piece))
        else:
            raise FormatError(f"bad @s piece {piece!r}")
    return "".join(parts)


def _pairs(value, tag: str) -> list:
    if type(value) is not list or not all(type(p) is list and len(p) == 2 for p in value):
        raise FormatError(f"{tag} takes a list of [key, value] pairs")
    return value


def _check_list(value, tag: str) -> list:
    if type(value) is not list:
        raise FormatError(f"{tag} takes a list")
    return value


def _str_opcode(text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")
    opcode = b"X" + _pack_u4(len(data)) + data
    if len(text) <= _CACHED_TEXT_LENGTH:
        if len(_str_opcodes) >= _CACHE_LIMIT:
            _str_opcodes.clear()
        _str_opcodes[text] = opcode
    return opcode


def _global_opcode(dotted) -> bytes:
    module, name = split_global(dotted)
    opcode = b"c" + module.encode("utf-8") + b"\n" + name.encode("utf-8") + b"\n"
    if len(_global_opcodes) >= _CACHE_LIMIT:
        _global_opcodes.clear()
    _global_opcodes[dotted] = opcode
    return opcode


class RecordWriter:
    """Emits one record; the memo is shared by the class pickle and the state pickle."""

    def __init__(self, state_root, jsonb_order: bool = False, orders: bool = True):
        # With jsonb_order, object members are written in the order PostgreSQL's jsonb keeps
        # them (shorter keys first, then by their UTF-8 bytes), whatever order the JSON has;
        # an object with an ORDER_KEY member is written in the order it records either way.
        self.jsonb_order = jsonb_order
        # False reads format version 1, where ORDER_KEY was a key like any other.
        self.orders = orders
        self.out: list[bytes] = []
        self.memo_size = 0
        self.global_memo: dict[str, int] = {}  # "module.name" -> memo index
        self.root = state_root
        self.shared_memo: dict[int, int] = {}  # @shared id -> memo index
        self.shared_defs: dict[int, object] | None = None
        self.in_progress: set[int] = set()
        self.depth = 0  # JSON objects and arrays being written, one inside the other
        # For each definition being written at a @same that came before it (jsonb's order) and
        # that builds objects: the shared values in progress when it began, itself included.
        # A reference back to one of those from inside it is a cycle across the move: code run
        # while loading may then see an object half built.
        self.hoist_boundaries: list[set[int]] = []
        self.hoisted_build = False
        # Inside the definition of a tuple reachable from itself (open_tuples > 0): the memo
        # indexes of the unshared containers being written (by id of their JSON), so that the
        # copy of the tuple written where it refers to itself takes them, as the pickler does.
        self.open_tuples = 0
        self.open_nodes: dict[int, int] = {}

    # -- low level ---------------------------------------------------------------------

    def enter(self) -> None:
        """One JSON object or array deeper; an error aborts the whole record."""
        depth = self.depth + 1
        if depth > MAX_JSON_NESTING:
            raise FormatError(f"JSON nested deeper than {MAX_JSON_NESTING}")
        self.depth = depth

    def put(self) -> int:
        index = self.memo_size
        self.memo_size = index + 1
        self.out.append(_BINPUT[index] if index < 256 else b"r" + _pack_u4(index))
        return index

    def get(self, index: int) -> None:
        self.out.append(_BINGET[index] if index < 256 else b"j" + _pack_u4(index))

    def created(self, share: int | None) -> None:
        """Called right after an object is created, before its contents (recursion)."""
        if share is not None:
            self.shared_memo[share] = self.put()

    def write_global(self, dotted) -> None:
        """GLOBAL "module.name"; memoized, so a record names each global once."""
        opcode = None
        if type(dotted) is str:
            index = self.global_memo.get(dotted)
            if index is not None:
                self.get(index)
                return
            opcode = _global_opcodes.get(dotted)
        if opcode is None:
            opcode = _global_opcode(dotted)
        self.out.append(opcode)
        self.global_memo[dotted] = self.put()

    def write_str(self, text: str) -> None:
        opcode = _str_opcodes.get(text)
        self.out.append(opcode if opcode is not None else _str_opcode(text))

    def write_bytes(self, data: bytes) -> None:
        if len(data) < 256:
            self.out.append(_SHORT_BINBYTES[len(data)] + data)
        else:
            self.out.append(b"B" + _pack_u4(len(data)) + data)

    def write_int(self, value: int) -> None:
        if 0 <= value < 256:
            self.out.append(_BININT1[value])
        elif 0 <= value < 65536:
            self.out.append(b"M" + value.to_bytes(2, "little"))
        elif -0x80000000 <= value <= 0x7FFFFFFF:
            self.out.append(b"J" + _pack_i4(value))
        else:
            size = (value.bit_length() >> 3) + 1
            data = value.to_bytes(size, "little", signed=True)
            if size < 256:
                self.out.append(b"\x8a" + bytes((size,)) + data)
            else:
                self.out.append(b"\x8b" + _pack_i4(size) + data)

    def write_float(self, value: float) -> None:
        self.out.append(b"G" + _pack_double(value))

    def write_values(self, values) -> None:
        # Texts, None and booleans (most items) inline, without a call.
        append = self.out.append
        str_get = _str_opcodes.get
        for item in values:
            kind = type(item)
            if kind is str:
                opcode = str_get(item)
                append(opcode if opcode is not None else _str_opcode(item))
            elif item is None:
                append(NONE)
            elif kind is bool:
                append(NEWTRUE if item else NEWFALSE)
            else:
                self.value(item)

    def write_tuple(self, items: list) -> None:
        if len(items) <= 3:
            self.write_values(items)
            self.out.append(TUPLES[len(items)])
        else:
            self.out.append(MARK)
            self.write_values(items)
            self.out.append(TUPLE)

    def write_items(self, items: list) -> None:
        if items:
            self.out.append(MARK)
            self.write_values(items)
            self.out.append(APPENDS)

    def write_dictitems(self, pairs: list) -> None:
        if pairs:
            self.out.append(MARK)
            for key, value in pairs:
                self.value(key)
                self.value(value)
            self.out.append(SETITEMS)

    # -- values ------------------------------------------------------------------------

    def value(self, value, share: int | None = None) -> None:
        kind = type(value)
        if kind is dict:
            self.enter()
            if len(value) == 1:
                (key,) = value
                if key[:1] == "@":
                    handler = _TAGS.get(key)
                    if handler is None:
                        raise FormatError(f"unknown tag {key!r}")
                    handler(self, value[key], share)
                    self.depth -= 1
                    return
            self.write_dict(value, share)
            self.depth -= 1
            return
        if kind is str:
            self.write_str(value)
        elif kind is int:
            self.write_int(value)
        elif value is None:
            self.out.append(NONE)
        elif kind is bool:
            self.out.append(NEWTRUE if value else NEWFALSE)
        elif kind is list:
            self.enter()
            if self.open_tuples and share is None:
                self.open_list(value)
            else:
                self.out.append(EMPTY_LIST)
                self.created(share)
                self.write_items(value)
            self.depth -= 1
            return
        elif kind is float:
            self.write_float(value)
        else:
            raise FormatError(f"not a JSON value: {value!r}")
        if share is not None:
            # A shared immutable value: memoize it so later uses are the same object.
            self.shared_memo[share] = self.put()

    def open_list(self, value: list) -> None:
        """A list inside a tuple that refers to itself: memoized while it is written."""
        key = id(value)
        index = self.open_nodes.get(key)
        if index is not None:  # the copy of the tuple, inside this list: the list itself
            self.get(index)
            return
        self.out.append(EMPTY_LIST)
        self.open_nodes[key] = self.put()
        self.write_items(value)
        del self.open_nodes[key]

    def write_dict(self, value: dict, share: int | None) -> None:
        append = self.out.append
        key = id(value)
        if self.open_tuples and share is None:
            index = self.open_nodes.get(key)
            if index is not None:
                self.get(index)
                return
            append(EMPTY_DICT)
            self.open_nodes[key] = self.put()
            try:
                self.write_members(value)
            finally:
                del self.open_nodes[key]
            return
        append(EMPTY_DICT)
        if share is not None:
            self.shared_memo[share] = self.put()
        self.write_members(value)

    def write_members(self, value: dict) -> None:
        append = self.out.append
        if not value:
            return
        append(MARK)
        for key in value:
            if type(key) is not str:
                raise FormatError(f"object key {key!r} is not a string")
        # Keys and values alternate, as SETITEMS reads them; write_values takes texts inline.
        if self.orders and ORDER_KEY in value:
            items = []
            for key in recorded_order(value):
                items.append(key)
                items.append(value[key])
            self.write_values(items)
        elif self.jsonb_order and len(value) > 1:
            items = []
            for key in sorted(value, key=jsonb_key):
                items.append(key)
                items.append(value[key])
            self.write_values(items)
        else:
            self.write_values(itertools.chain.from_iterable(value.items()))
        append(SETITEMS)

    def call(self, body, share: int | None, newobj: bool) -> None:
        if type(body) is not dict:
            raise FormatError("@reduce/@obj take an object")
        if not _CALL_FIELDS.issuperset(body):
            raise FormatError(f"unknown fields {sorted(body.keys() - _CALL_FIELDS)}")
        if self.open_tuples and share is None:
            index = self.open_nodes.get(id(body))
            if index is not None:  # the copy of a tuple, inside this object: the object itself
                self.get(index)
                return
        callable_ = body.get("class" if newobj else "func")
        if type(callable_) is str:
            self.write_global(callable_)
        elif newobj or callable_ is None:
            raise FormatError("@obj needs 'class', @reduce needs 'func'")
        else:
            self.value(callable_)
        self.write_tuple(_check_list(body.get("args", []), "args"))
        self.out.append(NEWOBJ if newobj else REDUCE)
        if self.open_tuples and share is None:
            key = id(body)
            self.open_nodes[key] = self.put()
            try:
                self.call_operations(body)
            finally:
                del self.open_nodes[key]
            return
        self.created(share)
        self.call_operations(body)

    def call_operations(self, body: dict) -> None:
        if "items" in body:
            self.write_items(_check_list(body["items"], "items"))
        if "dictitems" in body:
            self.write_dictitems(_pairs(body["dictitems"], "dictitems"))
        if "state" in body:
            self.value(body["state"])
            self.out.append(BUILD)

    def persistent_id(self, write_pid) -> None:
        write_pid()
        self.out.append(BINPERSID)

    # -- shared objects ----------------------------------------------------------------

    def find_shared(self, number: int):
        if self.shared_defs is None:
            self.shared_defs = {}
            _collect_shared(self.root, self.shared_defs, 0)
        try:
            return self.shared_defs[number]
        except KeyError:
            raise FormatError(f"@same {number} has no @shared definition") from None

    def shared(self, body, share: int | None) -> None:
        if type(body) is not dict or body.keys() != {"id", "value"} or type(body["id"]) is not int:
            raise FormatError("@shared takes {'id': int, 'value': ...}")
        number = body["id"]
        index = self.shared_memo.get(number)
        if index is not None:
            # Already written where an earlier @same needed it.
            self.back_reference(number)
            self.get(index)
            return
        value = body["value"]
        is_tuple = type(value) is dict and len(value) == 1 and "@t" in value
        if number in self.in_progress:
            if not is_tuple:
                raise FormatError(f"@shared {number} contains itself where pickle cannot")
            # A tuple that refers to itself through a container: built here, inside that
            # container (memoized meanwhile), from its items; the definition then drops its own
            # items and takes this one (as the pickler writes it).
            self.value(value, number)
            return
        self.in_progress.add(number)
        if is_tuple:
            self.open_tuples += 1
            try:
                self.value(value, number)
            finally:
                self.open_tuples -= 1
        else:
            self.value(value, number)
        self.in_progress.discard(number)

    def same(self, number, share: int | None) -> None:
        if type(number) is not int:
            raise FormatError("@same takes an int")
        index = self.shared_memo.get(number)
        if index is None and number in self.in_progress:
            self.shared(self.find_shared(number), None)  # a tuple inside itself
        elif index is None:
            # JSONB may order keys so that a use comes before its definition: write the
            # definition here; the definition site then becomes a memo get.
            definition = self.find_shared(number)
            builds = _builds_objects(definition.get("value"), 0)
            if builds:
                self.hoist_boundaries.append(self.in_progress | {number})
            try:
                self.shared(definition, None)
            finally:
                if builds:
                    self.hoist_boundaries.pop()
        else:
            self.back_reference(number)
            self.get(index)

    def back_reference(self, number: int) -> None:
        if number in self.in_progress:
            for boundary in self.hoist_boundaries:
                if number in boundary:
                    self.hoisted_build = True


# Tags whose values load without running code that could look at other objects of the record:
# builtin containers and scalars, persistent references (ghosts), globals, stdlib and Zope value
# types. @obj, @reduce and @pid (anything else) call application code.
_INERT_TAGS = frozenset({
    "@t", "@b", "@s", "@int", "@f", "@dict", "@set", "@frozenset", "@global", "@ref", "@wref",
    "@mref", "@nref", "@datetime", "@date", "@time", "@timedelta", "@decimal", "@DateTime",
    "@shared", "@same",
})


def _builds_objects(value, depth: int) -> bool:
    """Does loading this JSON value call application code (an object built by its class)?"""
    kind = type(value)
    if kind is list:
        return any(_builds_objects(item, depth + 1) for item in value)
    if kind is not dict:
        return False
    if depth > MAX_JSON_NESTING:
        return True  # the writer refuses it anyway
    if len(value) == 1:
        key = next(iter(value))
        if key[:1] == "@":
            return key not in _INERT_TAGS or _builds_objects(value[key], depth + 1)
    return any(_builds_objects(item, depth + 1) for item in value.values())


def _collect_shared(value, found: dict, depth: int) -> None:
    kind = type(value)
    if kind is not list and kind is not dict:
        return
    depth += 1
    if depth > MAX_JSON_NESTING:
        raise FormatError(f"JSON nested deeper than {MAX_JSON_NESTING}")
    if kind is list:
        for item in value:
            _collect_shared(item, found, depth)
    else:
        if len(value) == 1:
            key = next(iter(value))
            if key == "@shared":
                body = value[key]
                if type(body) is dict and type(body.get("id")) is int:
                    found[body["id"]] = body
                    _collect_shared(body.get("value"), found, depth)
                return
            if key[:1] == "@":
                _collect_shared(value[key], found, depth)
                return
        for item in value.values():
            _collect_shared(item, found, depth)


# -- tag handlers -------------------------------------------------------------------------


def _tuple(w: RecordWriter, body, share) -> None:
    if type(body) is not list:
        raise FormatError("@t takes a list")
    if share is None:
        w.write_tuple(body)
        return
    count = len(body)
    if count > 3:
        w.out.append(MARK)
    w.write_values(body)
    index = w.shared_memo.get(share)
    if index is None:
        w.out.append(TUPLE if count > 3 else TUPLES[count])
        w.shared_memo[share] = w.put()
    else:
        # Built meanwhile inside its own items (a tuple that refers to itself): drop the items.
        w.out.append(POP_MARK if count > 3 else POP * count)
        w.get(index)


def _bytes(w: RecordWriter, body, share) -> None:
    if type(body) is not str:
        raise FormatError("@b takes a base64 string")
    try:
        w.write_bytes(base64.b64decode(body, validate=True))
    except binascii.Error:
        raise FormatError("bad base64 in @b") from None
    if share is not None:
        w.shared_memo[share] = w.put()


def _str(w: RecordWriter, body, share) -> None:
    w.value(_decode_str_pieces(body), share)


def _int(w: RecordWriter, body, share) -> None:
    if type(body) is not str:
        raise FormatError("@int takes a decimal string")
    try:
        number = int(body)
    except ValueError:
        raise FormatError(f"bad @int {body!r}") from None
    w.value(number, share)


def _float(w: RecordWriter, body, share) -> None:
    if type(body) is not str:
        raise FormatError("@f takes a string")
    try:
        if body[:2] == "0x" and len(body) == 18:
            number = struct.unpack(">d", bytes.fromhex(body[2:]))[0]
        else:
            number = float(body)
    except ValueError:
        raise FormatError(f"bad @f {body!r}") from None
    w.value(number, share)


def _dict(w: RecordWriter, body, share) -> None:
    pairs = _pairs(body, "@dict")
    if w.open_tuples and share is None:
        key = id(body)
        index = w.open_nodes.get(key)
        if index is not None:  # the copy of a tuple, inside this dict: the dict itself
            w.get(index)
            return
        w.out.append(EMPTY_DICT)
        w.open_nodes[key] = w.put()
        try:
            w.write_dictitems(pairs)
        finally:
            del w.open_nodes[key]
        return
    w.out.append(EMPTY_DICT)
    w.created(share)
    w.write_dictitems(pairs)


def _set(w: RecordWriter, body, share) -> None:
    w.write_global("builtins.set")
    w.out.append(EMPTY_LIST)
    w.write_items(_check_list(body, "@set"))
    w.out.append(b"\x85" + REDUCE)
    w.created(share)


def _frozenset(w: RecordWriter, body, share) -> None:
    w.write_global("builtins.frozenset")
    w.out.append(EMPTY_LIST)
    w.write_items(_check_list(body, "@frozenset"))
    w.out.append(b"\x85" + REDUCE)
    w.created(share)


def _global(w: RecordWriter, body, share) -> None:
    w.write_global(body)
    if share is not None:
        w.shared_memo[share] = w.put()


def _ref(w: RecordWriter, body, share) -> None:
    if type(body) is str:
        w.write_bytes(oid_from_hex(body))
        w.out.append(BINPERSID)
    elif type(body) is list and len(body) == 2:
        w.write_bytes(oid_from_hex(body[0]))
        w.write_global(body[1])
        w.out.append(TUPLES[2] + BINPERSID)
    else:
        raise FormatError("@ref takes 'oid' or ['oid', 'module.Class']")
    if share is not None:
        w.shared_memo[share] = w.put()


def _list_pid(w: RecordWriter, kind: str, write_args) -> None:
    def pid():
        w.out.append(EMPTY_LIST + MARK)
        w.write_str(kind)
        write_args()
        w.out.append(APPENDS)

    w.persistent_id(pid)


def _wref(w: RecordWriter, body, share) -> None:
    if type(body) is str:
        oid = oid_from_hex(body)

        def args():
            w.write_bytes(oid)
            w.out.append(TUPLES[1])

    elif type(body) is list and len(body) == 2 and type(body[1]) is str:
        oid = oid_from_hex(body[0])

        def args():
            w.write_bytes(oid)
            w.write_str(body[1])
            w.out.append(TUPLES[2])

    else:
        raise FormatError("@wref takes 'oid' or ['oid', 'database']")
    _list_pid(w, "w", args)
    if share is not None:
        w.shared_memo[share] = w.put()


def _mref(w: RecordWriter, body, share) -> None:
    if not (type(body) is list and len(body) == 3 and type(body[0]) is str):
        raise FormatError("@mref takes ['database', 'oid', 'module.Class']")
    oid = oid_from_hex(body[1])

    def args():
        w.write_str(body[0])
        w.write_bytes(oid)
        w.write_global(body[2])
        w.out.append(TUPLES[3])

    _list_pid(w, "m", args)
    if share is not None:
        w.shared_memo[share] = w.put()


def _nref(w: RecordWriter, body, share) -> None:
    if not (type(body) is list and len(body) == 2 and type(body[0]) is str):
        raise FormatError("@nref takes ['database', 'oid']")
    oid = oid_from_hex(body[1])

    def args():
        w.write_str(body[0])
        w.write_bytes(oid)
        w.out.append(TUPLES[2])

    _list_pid(w, "n", args)
    if share is not None:
        w.shared_memo[share] = w.put()


def _pid(w: RecordWriter, body, share) -> None:
    w.persistent_id(lambda: w.value(body))
    if share is not None:
        w.shared_memo[share] = w.put()


def _reduce(w: RecordWriter, body, share) -> None:
    w.call(body, share, newobj=False)


def _obj(w: RecordWriter, body, share) -> None:
    w.call(body, share, newobj=True)


def _with_tz(body, tag: str) -> tuple[str, list]:
    if type(body) is str:
        return body, []
    if type(body) is list and len(body) == 2 and type(body[0]) is str:
        return body[0], [body[1]]
    raise FormatError(f"{tag} takes 'iso' or ['iso', tzinfo]")


def _pickled_bytes(value) -> bytes:
    return value.__reduce__()[1][0]


def _datetime(w: RecordWriter, body, share) -> None:
    text, tz = _with_tz(body, "@datetime")
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise FormatError(f"bad @datetime {text!r}") from None
    if moment.tzinfo is not None:
        raise FormatError("@datetime text must be naive; the tzinfo is the second item")
    w.write_global("datetime.datetime")
    w.write_bytes(_pickled_bytes(moment))
    for item in tz:
        w.value(item)
    w.out.append(TUPLES[1 + len(tz)] + REDUCE)
    w.created(share)


def _date(w: RecordWriter, body, share) -> None:
    try:
        day = datetime.date.fromisoformat(body) if type(body) is str else None
    except ValueError:
        day = None
    if day is None:
        raise FormatError(f"bad @date {body!r}")
    w.write_global("datetime.date")
    w.write_bytes(_pickled_bytes(day))
    w.out.append(TUPLES[1] + REDUCE)
    w.created(share)


def _time(w: RecordWriter, body, share) -> None:
    text, tz = _with_tz(body, "@time")
    try:
        moment = datetime.time.fromisoformat(text)
    except ValueError:
        raise FormatError(f"bad @time {text!r}") from None
    if moment.tzinfo is not None:
        raise FormatError("@time text must be naive; the tzinfo is the second item")
    w.write_global("datetime.time")
    w.write_bytes(_pickled_bytes(moment))
    for item in tz:
        w.value(item)
    w.out.append(TUPLES[1 + len(tz)] + REDUCE)
    w.created(share)


def _timedelta(w: RecordWriter, body, share) -> None:
    if not (type(body) is list and len(body) == 3 and all(type(x) is int for x in body)):
        raise FormatError("@timedelta takes [days, seconds, microseconds]")
    w.write_global("datetime.timedelta")
    w.write_tuple(body)
    w.out.append(REDUCE)
    w.created(share)


def _decimal(w: RecordWriter, body, share) -> None:
    if type(body) is not str:
        raise FormatError("@decimal takes a string")
    w.write_global("decimal.Decimal")
    w.write_str(body)
    w.out.append(TUPLES[1] + REDUCE)
    w.created(share)


def _zope_datetime(w: RecordWriter, body, share) -> None:
    if not (type(body) is dict and body.keys() == _DATETIME_FIELDS and type(body["naive"]) is bool):
        raise FormatError("@DateTime takes {'utc': ..., 'tz': ..., 'naive': bool}")
    w.write_global("DateTime.DateTime.DateTime")
    w.out.append(EMPTY_TUPLE + NEWOBJ)
    w.created(share)
    w.write_int(micros_from_utc(body["utc"]))
    w.out.append(NEWTRUE if body["naive"] else NEWFALSE)
    w.value(body["tz"])
    w.out.append(TUPLES[3] + BUILD)


def _shared(w: RecordWriter, body, share) -> None:
    w.shared(body, share)


def _same(w: RecordWriter, body, share) -> None:
    w.same(body, share)


def _misplaced(w: RecordWriter, body, share) -> None:
    raise FormatError("@record and @exact are only valid as the whole state")


_TAGS = {
    "@t": _tuple,
    "@b": _bytes,
    "@s": _str,
    "@int": _int,
    "@f": _float,
    "@dict": _dict,
    "@set": _set,
    "@frozenset": _frozenset,
    "@global": _global,
    "@ref": _ref,
    "@wref": _wref,
    "@mref": _mref,
    "@nref": _nref,
    "@pid": _pid,
    "@reduce": _reduce,
    "@obj": _obj,
    "@datetime": _datetime,
    "@date": _date,
    "@time": _time,
    "@timedelta": _timedelta,
    "@decimal": _decimal,
    "@DateTime": _zope_datetime,
    "@shared": _shared,
    "@same": _same,
    "@record": _misplaced,
    "@exact": _misplaced,
}


def jsonb_key(key: str) -> tuple[int, bytes]:
    """Where jsonb puts an object's key: shorter first, then by UTF-8 bytes."""
    raw = key.encode("utf-8")
    return len(raw), raw


def recorded_order(value: dict) -> list:
    """The keys of a JSON object with an ORDER_KEY member in the order it records: the jsonb
    ranks of the other keys, in the dict's own order (state_format.md §10)."""
    ranks = value[ORDER_KEY]
    keys = [key for key in value if key != ORDER_KEY]
    count = len(keys)
    if (
        type(ranks) is not list
        or len(ranks) != count
        or not all(type(rank) is int for rank in ranks)
        or sorted(ranks) != list(range(count))
    ):
        raise FormatError(f"{ORDER_KEY} takes the ranks 0..{count - 1} of the other keys, each once")
    keys.sort(key=jsonb_key)
    return [keys[rank] for rank in ranks]


def write_record(
    class_meta, state, jsonb_order: bool = False, hoisted: list | None = None, orders: bool = True
) -> bytes:
    """Return the record bytes for a class (dotted name or class-metadata JSON) and state.

    ``class_meta`` is a "module.Class" string for the usual plain-class metadata, or the
    JSON of any other class metadata (``@record``). ``jsonb_order``: write object members as
    if the state had come back from a jsonb column (see RecordWriter). ``hoisted``: a list that
    gets True appended when a ``@same`` came before its ``@shared`` whose value builds objects
    and refers back into a value still being built: a load then builds them at another point
    than the original did, inside a cycle, where code run while loading may see an object half
    built. ``orders``: False reads format version 1, which had no ORDER_KEY member.
    """
    writer = RecordWriter(state, jsonb_order, orders)
    writer.out.append(PROTO3)
    if type(class_meta) is str:
        writer.write_global(class_meta)
    else:
        writer.value(class_meta)
    writer.out.append(STOP + PROTO3)
    writer.value(state)
    writer.out.append(STOP)
    if hoisted is not None and writer.hoisted_build:
        hoisted.append(True)
    return b"".join(writer.out)
