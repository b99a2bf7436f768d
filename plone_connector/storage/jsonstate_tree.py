"""A ZODB record unpickled into a neutral structure, without importing application classes.

The C unpickler (zodbpickle's, the one ZODB reads with) does the parsing. Globals become
``Global`` placeholder types, calls (REDUCE, NEWOBJ) become ``Node`` objects that record
their callable, arguments and the later BUILD/APPENDS/SETITEMS operations, persistent ids
become ``Ref`` objects. Everything else stays the plain Python value the pickle holds.

The transcoder encodes this structure to JSON, and checks its own output by comparing the
structure of the rebuilt record with the original one (``same_structure``).
"""

from __future__ import annotations

import functools
import io
import pickletools
import struct

from zodbpickle.pickle import Unpickler

try:
    import cython
except ImportError:  # Cython compiles this module; running it as Python needs none of it

    class cython:  # noqa: N801 - stands in for the module
        @staticmethod
        def cclass(cls):
            return cls

        @staticmethod
        def trashcan(flag):
            return lambda cls: cls

# Names whose call results are values: unpickling two of them instead of one shared object
# gives an equal state, so sharing them need not be kept.
VALUE_GLOBALS = frozenset(
    {
        ("builtins", "frozenset"),
        ("__builtin__", "frozenset"),
        ("datetime", "datetime"),
        ("datetime", "date"),
        ("datetime", "time"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("decimal", "Decimal"),
        ("DateTime.DateTime", "DateTime"),
        ("pytz", "_p"),
        ("pytz", "_UTC"),
        ("zope.interface.declarations", "Provides"),
        ("zope.interface.declarations", "implementedBy"),
    }
)

# Containers nested deeper than this have no JSON form: such a record is kept exact. The bound
# is the transcoder's own, not Python's recursion limit, so that the compiled transcoder (which
# recurses on the C stack, unguarded by that limit) and the pure one stop at the same depth,
# and the pure one stays well within the limit (a few frames per level).
MAX_NESTING = 64

# Distinct globals seen in a process are few (classes and functions of the application);
# the cap only guards against a hostile stream of made-up names.
_GLOBAL_CACHE_LIMIT = 100_000


class GlobalMeta(type):
    """Metaclass of the placeholder types standing for pickled globals."""

    module: str
    name: str
    dotted: str  # "module.name"

    def __call__(cls, *args, **kwargs):
        # REDUCE with a global callable: record the call instead of making it.
        if kwargs:
            raise TypeError("keyword arguments in REDUCE")
        return Node("reduce", cls, args)

    def __repr__(cls):
        return f"<global {cls.module} {cls.name}>"


class _GlobalBase(metaclass=GlobalMeta):
    __slots__ = ()
    module = ""
    name = ""
    dotted = ""

    def __new__(cls, *args, **kwargs):
        # NEWOBJ: the C unpickler calls tp_new directly.
        if kwargs:
            raise TypeError("keyword arguments in NEWOBJ")
        return Node("newobj", cls, args)


@functools.lru_cache(maxsize=_GLOBAL_CACHE_LIMIT)
def global_ref(module: str, name: str) -> GlobalMeta:
    # Cached in C: the unpickler's find_class, called for every GLOBAL, needs no Python frame.
    namespace = {"__slots__": (), "module": module, "name": name, "dotted": f"{module}.{name}"}
    return GlobalMeta("Global", (_GlobalBase,), namespace)


# Compiled, Node and Ref are extension types. Freeing a chain of them (a Node whose callable is
# a Node, ..., as a record can hold) must not recurse on the C stack: the trashcan defers deep
# deallocations as CPython does for its own containers.
@cython.trashcan(True)
@cython.cclass
class Node:
    """A call in the pickle: ``kind`` is "reduce" (REDUCE) or "newobj" (NEWOBJ).

    ``ops`` lists what the pickle did to the result afterwards, in order, merged when
    consecutive: ("items", [..]) for APPEND(S), ("dictitems", [(k, v), ..]) for
    SETITEM(S), ("state", value) for BUILD.
    """

    __slots__ = ("kind", "func", "args", "ops")

    def __init__(self, kind: str, func, args: tuple):
        self.kind = kind
        self.func = func
        self.args = args
        self.ops: list = []

    def __setstate__(self, state):
        self.ops.append(("state", state))

    def append(self, item):
        ops = self.ops
        if ops and ops[-1][0] == "items":
            ops[-1][1].append(item)
        else:
            ops.append(("items", [item]))

    def __setitem__(self, key, value):
        ops = self.ops
        if ops and ops[-1][0] == "dictitems":
            ops[-1][1].append((key, value))
        else:
            ops.append(("dictitems", [(key, value)]))

    def __call__(self, *args):
        return Node("reduce", self, args)

    def is_value(self) -> bool:
        func = self.func
        return type(func) is GlobalMeta and (func.module, func.name) in VALUE_GLOBALS

    def __repr__(self):
        return f"<{self.kind} {self.func!r} {self.args!r} {self.ops!r}>"


@cython.trashcan(True)
@cython.cclass
class Ref:
    """A persistent reference; ``pid`` is the persistent id as the pickle holds it."""

    __slots__ = ("pid",)

    def __init__(self, pid):
        self.pid = pid

    def __call__(self, *args):
        return Node("reduce", self, args)

    def __repr__(self):
        return f"<ref {self.pid!r}>"


class _Input(io.BytesIO):
    """The record as a file that can ``peek``: the C unpickler then reads it in one go
    instead of calling ``read`` for every opcode."""

    def peek(self, size: int) -> bytes:
        position = self.tell()
        return self.getvalue()[position : position + size]  # getvalue() is not a copy


class _StructureUnpickler(Unpickler):
    __slots__ = ()
    find_class = staticmethod(global_ref)


class _PersistentIds:
    """The unpickler's ``persistent_load``: records each persistent id and stands a ``Ref`` in
    for it. Not a method of the unpickler: the C unpickler keeps its ``persistent_load`` as a
    bound method, a reference cycle that left two unpicklers per encoded record (with their
    input and memo) to the cyclic garbage collector."""

    __slots__ = ("pids",)

    def __init__(self):
        self.pids: list = []

    def __call__(self, pid):
        self.pids.append(pid)
        ref = _new_ref(Ref)  # without a call of Ref.__init__
        ref.pid = pid
        return ref


_new_ref = Ref.__new__  # not object.__new__: Ref may be an extension type


def load_structure(record: bytes) -> tuple[object, object, list]:
    """Return (class metadata, state, persistent ids in stream order) of a ZODB record.

    One unpickler reads both pickles, as ZODB does: the state may refer to memo entries
    of the class pickle.
    """
    stream = _Input(record)
    unpickler = _StructureUnpickler(stream)
    unpickler.persistent_load = persistent_ids = _PersistentIds()
    meta = _load(unpickler)
    if not (record.startswith(PROTO3) and record.startswith(PROTO3, stream.tell())):
        _refuse_legacy_instances(record)
    state = _load(unpickler)
    return meta, state, persistent_ids.pids


def _load(unpickler: _StructureUnpickler):
    try:
        return unpickler.load()
    except SystemError as exc:
        # After an error the C unpickler still reads the input it had peeked at, and
        # Python reports that call as a SystemError caused by the error: raise the error.
        if exc.__cause__ is not None and str(exc).endswith("returned a result with an exception set"):
            raise exc.__cause__ from None
        raise


PROTO3 = b"\x80\x03"


class LegacyInstanceError(ValueError):
    """INST/OBJ opcodes: how they build an object depends on the real class."""


def _refuse_legacy_instances(record: bytes) -> None:
    # Python 2 pickled classic-class instances with INST/OBJ. With no arguments these call
    # cls.__new__(cls) or cls() depending on the class (__getinitargs__, being a type), which
    # placeholders cannot know. Python 3 never writes them, so only pre-protocol-3 pickles
    # are scanned (slowly, in Python).
    stream = io.BytesIO(record)
    for _ in range(2):
        for opcode, _arg, _pos in pickletools.genops(stream):
            if opcode.name in ("INST", "OBJ"):
                raise LegacyInstanceError(f"legacy {opcode.name} opcode")


_pack_double = struct.Struct(">d").pack


def same_structure(a, b, *, ordered: bool = True) -> bool:
    """Do two unpickled structures load to equal states?

    Stricter than ``==``: types must match (1, 1.0 and True differ), floats compare by bit
    pattern (NaN equals the same NaN, -0.0 differs from 0.0), mutable objects shared (or
    recursive) in one must be shared the same way in the other, and so must a tuple or a value
    call met again inside itself (a tuple that refers to itself through a list). Other repeated
    immutable values compare by value. Dict items compare in order unless ``ordered`` is false;
    then string-keyed dicts compare as mappings (JSONB's view).
    """
    return _Comparison(ordered).same(a, b)


# Tuples, op lists and persistent ids nest within one level of the encoder's count.
_COMPARE_NESTING = 4 * MAX_NESTING

# Types compared by ==, once the types match.
_ATOMS = frozenset({str, int, bytes, bool, type(None)})


class _Comparison:
    def __init__(self, ordered: bool):
        self.ordered = ordered
        self.pairs: dict[int, object] = {}
        self.back: dict[int, object] = {}
        # Tuples and value calls being compared (by id, each side): met again inside themselves,
        # the other side must be its partner.
        self.open: dict[int, object] = {}
        self.open_back: dict[int, object] = {}
        # Nesting of the comparison; a False answer ends it, so only True paths step back out.
        self.depth = 0

    def enter(self) -> None:
        depth = self.depth + 1
        if depth > _COMPARE_NESTING:
            raise RecursionError(f"structures nested deeper than {_COMPARE_NESTING}")
        self.depth = depth

    def same(self, a, b) -> bool:
        ta = type(a)
        if ta is not type(b):
            return False
        if ta in _ATOMS:
            return a == b
        if ta is tuple:
            return len(a) == len(b) and self.same_tuples(a, b)
        if ta is GlobalMeta:
            return a is b or (a.module == b.module and a.name == b.name)
        if ta is Ref:
            a, b = a.pid, b.pid
            if type(a) is tuple:  # (oid, class), the usual persistent id
                return type(b) is tuple and len(a) == len(b) and self.same_items(a, b)
            self.enter()  # a persistent id may hold another one
            if not self.same(a, b):
                return False
            self.depth -= 1
            return True
        if ta is float:
            return _pack_double(a) == _pack_double(b)
        if ta is list or ta is dict or (ta is Node and not a.is_value()):
            # Identity must correspond one to one; this also ends recursion.
            seen = self.pairs.get(id(a))
            if seen is not None:
                return seen is b
            if id(b) in self.back:
                return False
            self.pairs[id(a)] = b
            self.back[id(b)] = a
        if ta is dict:
            return len(a) == len(b) and self.same_dicts(a, b)
        if ta is list:
            return len(a) == len(b) and self.same_items(a, b)
        if ta is Node:
            if a.kind != b.kind or len(a.ops) != len(b.ops):
                return False
            if a.is_value():
                partner = self.open.get(id(a))
                if partner is not None:
                    return partner is b
                if id(b) in self.open_back:
                    return False
                self.open[id(a)] = b
                self.open_back[id(b)] = a
                if not self.same_calls(a, b):
                    return False
                del self.open[id(a)]
                del self.open_back[id(b)]
                return True
            return self.same_calls(a, b)
        # Anything else (sets, bytearrays of newer protocols) is not part of the format.
        return False

    def same_calls(self, a: Node, b: Node) -> bool:
        self.enter()
        if not (self.same(a.func, b.func) and self.same(a.args, b.args)):
            return False
        for (ka, va), (kb, vb) in zip(a.ops, b.ops, strict=True):
            if ka != kb or not self.same(_op_value(ka, va), _op_value(kb, vb)):
                return False
        self.depth -= 1
        return True

    def same_tuples(self, a: tuple, b: tuple) -> bool:
        """Tuples of equal length: items alike, and a tuple met inside itself on one side is
        met inside itself on the other (the same partner)."""
        if not a:
            return True
        partner = self.open.get(id(a))
        if partner is not None:
            return partner is b
        if id(b) in self.open_back:
            return False
        self.open[id(a)] = b
        self.open_back[id(b)] = a
        if not self.same_items(a, b):
            return False
        del self.open[id(a)]
        del self.open_back[id(b)]
        return True

    def same_items(self, a, b) -> bool:
        self.enter()
        same = self.same
        for x, y in zip(a, b, strict=True):
            tx = type(x)
            if tx in _ATOMS:  # the common cases, without a call
                if type(y) is not tx or x != y:
                    return False
            elif tx is GlobalMeta and x is y:
                continue
            elif tx is tuple:
                if type(y) is not tuple or len(x) != len(y) or not self.same_tuples(x, y):
                    return False
            elif not same(x, y):
                return False
        self.depth -= 1
        return True

    def same_dicts(self, a: dict, b: dict) -> bool:
        self.enter()
        same = self.same
        if not self.ordered and _all_str(a):
            if a.keys() != b.keys():
                return False
            for key in a:
                if not same(a[key], b[key]):
                    return False
            self.depth -= 1
            return True
        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True):
            if type(ka) is str:
                if type(kb) is not str or ka != kb:
                    return False
            elif not same(ka, kb):
                return False
            tv = type(va)
            if tv in _ATOMS:
                if type(vb) is not tv or va != vb:
                    return False
            elif tv is tuple:
                if type(vb) is not tuple or len(va) != len(vb) or not self.same_tuples(va, vb):
                    return False
            elif tv is GlobalMeta and va is vb:
                continue
            elif not same(va, vb):
                return False
        self.depth -= 1
        return True


def _all_str(keys) -> bool:
    # Outside the class: the compiled build allows no generator inside its methods.
    return all(type(key) is str for key in keys)


def _op_value(kind: str, value):
    # items and dictitems lists are the structure's own, never shared: compare as tuples.
    return value if kind == "state" else tuple(value)
