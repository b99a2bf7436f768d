# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A fast path of the JSON state encoder for records in a plain subset of the format.

Compiled only (Cython, hatch_build.py); without it the storage runs the reference path
(jsonstate.encode_record) for every record, and the tests compare the two on every record
and on generated object graphs.

The subset is what most ZODB records are: protocol-3 records whose class metadata is a plain
class and whose state holds only None, booleans, ints, finite floats, texts, bytes, tuples,
lists, dicts with text keys, ordinary persistent references and globals, without a mutable
object in two places. A record is read opcode by opcode into a tree of C structs (no Python
object per value), and three things are written from the tree:

- the JSON text, exactly what the reference encoder writes for the same record;
- the record again, exactly as the pickler wrote it (memo puts and gets, batches): it must equal
  the input byte for byte, else the tree is not a faithful reading and the record takes the
  reference path;
- the record that decode_record writes from that JSON in jsonb's key order, predicted from the
  tree (``rebuilt``). The caller decodes the JSON text with this module's decoder (``decode``,
  which loads use too) and compares: equal bytes confirm the JSON, since the predicted record
  loads to the state the tree holds (texts, floats, None and booleans as the opcodes read,
  ints, bytes and globals as the writer writes them, containers the same). That is the
  round-trip check of the format (§8) for these records.

Anything else (other opcodes, a pickle that is not in the pickler's own form, texts with U+0000
or lone surrogates, floats JSON cannot carry, deep nesting, a mutable object shared) returns
None, and the reference path decides.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.math cimport INFINITY, fabs, floor, isfinite, nextafter, signbit
from libc.string cimport memchr, memcmp, memcpy

cdef extern from *:
    # GCC's and Clang's 128-bit integers: exact products of a 54-bit significand and 10**21.
    ctypedef unsigned long long u128 "unsigned __int128"

cdef extern from "Python.h":
    char* PyOS_double_to_string(double val, char format_code, int precision, int flags, int *ptype) except NULL
    int Py_DTSF_ADD_DOT_0
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)
    ctypedef struct PyObject
    double PyOS_string_to_double(const char *s, char **endptr, PyObject *overflow_exception) except? -1.0

# Node kinds
cdef enum:
    K_NONE = 1
    K_TRUE
    K_FALSE
    K_INT
    K_FLOAT
    K_STR
    K_BYTES
    K_GLOBAL
    K_TUPLE
    K_LIST
    K_DICT
    K_REF

# Containers nested deeper than this take the reference path (it keeps them exact beyond 64).
cdef enum:
    MAX_DEPTH = 60
    MAX_MEMO = 1 << 20
cdef long long MAX_SAFE_INT = 9007199254740991  # 2**53 - 1

ctypedef struct FNode:
    int kind
    int mutable       # a list or dict, or holds one
    Py_ssize_t start  # the value's own opcode bytes in the input: [start, end)
    Py_ssize_t end
    Py_ssize_t pstart  # payload (text, bytes, module) [pstart, pend)
    Py_ssize_t pend
    Py_ssize_t nstart  # global: the name [nstart, nend)
    Py_ssize_t nend
    long long ival
    double fval
    int first          # children: a chain of slots
    int last
    int count          # children (dict: keys and values)
    int first_batch    # list/dict: APPEND(S)/SETITEM(S) as the pickle did them
    int last_batch
    int memo           # index of the PUT right after the value, -1 if none
    int tuple_op       # tuple: the opcode that built it
    int closed         # tuple/ref: complete (a list/dict never is: items may follow)

ctypedef struct Slot:
    int node
    int next
    int get            # this occurrence is a memo get of that index, -1 if written in full

ctypedef struct Batch:
    int count          # slots (a dict's are keys and values)
    int marked         # MARK ... APPENDS/SETITEMS, else one APPEND/SETITEM
    int next


cdef enum:
    MAX_GLOBALS = 64


ctypedef struct Globals:
    int count
    Py_ssize_t module[MAX_GLOBALS]
    Py_ssize_t module_size[MAX_GLOBALS]
    Py_ssize_t name[MAX_GLOBALS]
    Py_ssize_t name_size[MAX_GLOBALS]


cdef struct Out:
    char *data
    Py_ssize_t size
    Py_ssize_t capacity


cdef int out_reserve(Out *out, Py_ssize_t extra) except -1:
    cdef Py_ssize_t need = out.size + extra
    cdef Py_ssize_t capacity
    cdef char *data
    if need <= out.capacity:
        return 0
    capacity = out.capacity * 2 if out.capacity else 256
    while capacity < need:
        capacity *= 2
    data = <char *>PyMem_Realloc(out.data, capacity)
    if data == NULL:
        raise MemoryError()
    out.data = data
    out.capacity = capacity
    return 0


cdef inline int out_write(Out *out, const char *data, Py_ssize_t size) except -1:
    if out.size + size > out.capacity:
        out_reserve(out, size)
    memcpy(out.data + out.size, data, size)
    out.size += size
    return 0


cdef inline int out_byte(Out *out, char byte) except -1:
    if out.size + 1 > out.capacity:
        out_reserve(out, 1)
    out.data[out.size] = byte
    out.size += 1
    return 0


cdef int grow(void **array, int *capacity, int count, size_t item) except -1:
    cdef int new_capacity
    cdef void *data
    if count < capacity[0]:
        return 0
    new_capacity = capacity[0] * 2 if capacity[0] else 32
    data = PyMem_Realloc(array[0], new_capacity * item)
    if data == NULL:
        raise MemoryError()
    array[0] = data
    capacity[0] = new_capacity
    return 0


cdef int write_head(Out *out, unsigned char op, Py_ssize_t size) except -1:
    """An opcode and its 4-byte little-endian length (BINUNICODE, BINBYTES)."""
    cdef unsigned char head[5]
    head[0] = op
    head[1] = size & 0xff
    head[2] = (size >> 8) & 0xff
    head[3] = (size >> 16) & 0xff
    head[4] = (size >> 24) & 0xff
    return out_write(out, <char *>head, 5)


cdef int write_short_or_long(Out *out, unsigned char short_op, unsigned char long_op, Py_ssize_t size) except -1:
    """``short_op`` with a 1-byte argument below 256, else ``long_op`` with a 4-byte one."""
    cdef unsigned char head[2]
    if size < 256:
        head[0] = short_op
        head[1] = <unsigned char>size
        return out_write(out, <char *>head, 2)
    return write_head(out, long_op, size)


cdef inline int write_bytes_head(Out *out, Py_ssize_t size) except -1:
    """SHORT_BINBYTES below 256 bytes, else BINBYTES, as the pickler and the writer choose."""
    return write_short_or_long(out, 67, 66, size)


cdef inline int write_memo(Out *out, unsigned char small, unsigned char large, int index) except -1:
    """BINPUT/LONG_BINPUT or BINGET/LONG_BINGET of a memo index."""
    return write_short_or_long(out, small, large, index)


cdef int write_int(Out *out, long long value) except -1:
    """An int as jsonstate_pickle.write_int writes it (LONG1 not trimmed)."""
    cdef unsigned char buffer[10]
    cdef int size, i
    cdef unsigned long long bits
    if 0 <= value < 256:
        buffer[0] = 75
        buffer[1] = <unsigned char>value
        return out_write(out, <char *>buffer, 2)
    if 0 <= value < 65536:
        buffer[0] = 77
        buffer[1] = value & 0xff
        buffer[2] = (value >> 8) & 0xff
        return out_write(out, <char *>buffer, 3)
    if -0x80000000 <= value <= 0x7fffffff:
        bits = <unsigned long long>value
        buffer[0] = 74
        for i in range(4):
            buffer[1 + i] = (bits >> (8 * i)) & 0xff
        return out_write(out, <char *>buffer, 5)
    if value == -0x7fffffffffffffff - 1:
        raise _NotPlain()
    # LONG1 of (bit_length >> 3) + 1 bytes.
    bits = <unsigned long long>(value if value >= 0 else -value)
    size = 0
    while bits:
        size += 1
        bits >>= 1
    size = (size >> 3) + 1
    if size > 8:
        raise _NotPlain()
    bits = <unsigned long long>value
    buffer[0] = 0x8a
    buffer[1] = size
    for i in range(size):
        buffer[2 + i] = (bits >> (8 * i)) & 0xff
    return out_write(out, <char *>buffer, 2 + size)


cdef int write_decimal(Out *out, long long value) except -1:
    """A JSON integer."""
    cdef char digits[24]
    cdef int i = 24
    # Negated as unsigned: -value is undefined for the smallest long long.
    cdef unsigned long long magnitude = <unsigned long long>value if value >= 0 else 0ULL - <unsigned long long>value
    while True:
        i -= 1
        digits[i] = 48 + <int>(magnitude % 10)
        magnitude //= 10
        if magnitude == 0:
            break
    if value < 0:
        i -= 1
        digits[i] = 45
    return out_write(out, digits + i, 24 - i)


# -- floats without dtoa -------------------------------------------------------
# repr() of a float and float() of a decimal go through David Gay's dtoa with big integers
# (about 6,000 and 2,000 instructions). For the common case below both are decided exactly in
# 128-bit integers instead; anything else (a tie, a value on the edge of its rounding interval,
# a power of two, a magnitude outside the range) returns 0 and dtoa decides as before. The tests
# compare both with repr() and float() on millions of values (test_transcoder_floats.py).

cdef u128 POW10[22]
cdef int _i
POW10[0] = 1
for _i in range(1, 22):
    POW10[_i] = POW10[_i - 1] * 10


cdef inline bint split_double(double value, unsigned long long *m, int *e):
    """value = m * 2**e with the 53-bit significand m of a normal double that is not a power of
    two (their rounding interval is not symmetric); else False."""
    cdef unsigned long long bits
    memcpy(&bits, &value, 8)
    cdef unsigned long long fraction = bits & ((1ULL << 52) - 1)
    cdef int biased = (bits >> 52) & 0x7ff
    if biased == 0 or biased == 0x7ff or fraction == 0:
        return False
    m[0] = fraction | (1ULL << 52)
    e[0] = biased - 1075
    return True


cdef int short_float(double value, char *buffer):
    """repr(value) into buffer (at least 32 bytes), its length; 0 when dtoa must decide.

    For 1e-4 <= |value| < 1e15, repr writes the shortest decimal that reads back as value,
    the nearest one if several, in fixed notation. value = m * 2**e (e < 0 in this range)
    rounds from the open interval ((2m - 1) * 2**(e-1), (2m + 1) * 2**(e-1)); for k = 0, 1, ...
    fraction digits, the integers q with q / 10**k in it satisfy
    (2m - 1) * 10**k < q * 2**(1-e) < (2m + 1) * 10**k. The first k that has one gives the
    fewest digits; at that k the integer nearest value * 10**k is the one repr writes.
    """
    cdef double magnitude = fabs(value)
    cdef unsigned long long m, q
    cdef int e, s, k, n, i, length = 0
    cdef u128 center, low, high, mask, q_low, q_high, rest, half
    cdef char digits[24]
    if not (1e-4 <= magnitude < 1e15) or not split_double(magnitude, &m, &e):
        return 0
    s = 1 - e  # 2 <= s <= 67 in this range
    mask = ((<u128>1) << s) - 1
    half = (<u128>1) << (s - 1)
    for k in range(22):
        center = (<u128>(2 * m)) * POW10[k]
        low = center - POW10[k]
        high = center + POW10[k]
        q_low = (low >> s) + 1           # > low / 2**s when low is not a multiple
        q_high = high >> s               # < high / 2**s when high is not a multiple
        if (low & mask) == 0 or (high & mask) == 0:
            return 0                     # an end of the interval is itself a k-digit decimal
        if q_low > q_high:
            continue
        rest = center & mask
        q = <unsigned long long>(center >> s)
        if rest > half:
            q += 1
        elif rest == half:
            return 0                     # value * 10**k halfway between two integers
        if q < q_low or q > q_high:
            return 0
        n = 0
        while True:
            digits[23 - n] = 48 + <int>(q % 10)
            q //= 10
            n += 1
            if q == 0:
                break
        if value < 0:
            buffer[length] = 45
            length += 1
        if k == 0:
            memcpy(buffer + length, digits + 24 - n, n)
            length += n
            buffer[length] = 46
            buffer[length + 1] = 48
            return length + 2
        if n <= k:
            buffer[length] = 48
            buffer[length + 1] = 46
            length += 2
            for i in range(k - n):
                buffer[length] = 48
                length += 1
            memcpy(buffer + length, digits + 24 - n, n)
            return length + n
        memcpy(buffer + length, digits + 24 - n, n - k)
        length += n - k
        buffer[length] = 46
        memcpy(buffer + length + 1, digits + 24 - k, k)
        return length + 1 + k
    return 0


cdef bint decimal_digits(const unsigned char *text, Py_ssize_t start, Py_ssize_t integer_end,
                         Py_ssize_t fraction, Py_ssize_t end, unsigned long long *q, int *k):
    """The digits of integer [start, integer_end) and fraction [fraction, end) as one integer q
    and the count k of fraction digits, when q has at most 19 significant digits (fits 64 bits)."""
    cdef unsigned long long value = 0
    cdef int significant = 0
    cdef Py_ssize_t i
    for i in range(start, integer_end):
        if significant or text[i] != 48:
            significant += 1
            value = value * 10 + (text[i] - 48)
    if fraction == integer_end:  # no fraction
        fraction = end
    for i in range(fraction, end):
        if significant or text[i] != 48:
            significant += 1
            value = value * 10 + (text[i] - 48)
        if significant > 19:
            return False
    if significant > 19:
        return False
    q[0] = value
    k[0] = <int>(end - fraction)
    return True


cdef bint exact_decimal(unsigned long long q, int k, bint negative, double *result):
    """float(q / 10**k) (the decimal's correctly rounded double) into result, decided without
    dtoa; False when dtoa must decide. The quotient in doubles is within two units of the last
    place; each neighbour is tested exactly: q / 10**k rounds to c = m * 2**e when
    (2m - 1) * 10**k < q * 2**(1-e) < (2m + 1) * 10**k."""
    cdef double candidate, guess
    cdef unsigned long long m
    cdef int e, s, step
    cdef u128 scaled, low, high
    if k > 21 or q == 0:
        return False
    guess = (<double>q) / (<double>POW10[k])
    for step in range(5):
        candidate = guess
        if step == 1:
            candidate = nextafter(guess, INFINITY)
        elif step == 2:
            candidate = nextafter(guess, 0.0)
        elif step == 3:
            candidate = nextafter(nextafter(guess, INFINITY), INFINITY)
        elif step == 4:
            candidate = nextafter(nextafter(guess, 0.0), 0.0)
        if not split_double(candidate, &m, &e) or e > 0 or 1 - e > 63:
            return False
        s = 1 - e
        scaled = (<u128>q) << s
        low = (<u128>(2 * m - 1)) * POW10[k]
        high = (<u128>(2 * m + 1)) * POW10[k]
        if low < scaled < high:
            result[0] = -candidate if negative else candidate
            return True
        if scaled == low or scaled == high:
            return False                 # a tie: round half to even, dtoa's business
    return False


cdef inline unsigned int u4(const unsigned char *p):
    return p[0] | (p[1] << 8) | (p[2] << 16) | (<unsigned int>p[3] << 24)


cdef class _Tree:
    """A record read into C structs; freed with the object."""

    cdef const unsigned char *data
    cdef Py_ssize_t size
    cdef bytes source
    cdef FNode *nodes
    cdef int nnodes, cnodes
    cdef Slot *slots
    cdef int nslots, cslots
    cdef Batch *batches
    cdef int nbatches, cbatches
    cdef int *stack
    cdef int nstack, cstack
    cdef int *marks
    cdef int nmarks, cmarks
    cdef int *memo
    cdef int nmemo, cmemo
    cdef int meta      # slot of the class metadata
    cdef int root      # slot of the state
    # Memo gets of tuples, texts and bytes repeat them in JSON: bounds of what emit_json writes
    # (values, bytes of text), within half of jsonstate.expansion_budget, so that a record this
    # path takes is never one the reference keeps exact (its count of a container and its items
    # is at most twice the values written here; its characters at most the bytes written).
    cdef Py_ssize_t json_limit
    cdef Py_ssize_t values_left

    def __dealloc__(self):
        PyMem_Free(self.nodes)
        PyMem_Free(self.slots)
        PyMem_Free(self.batches)
        PyMem_Free(self.stack)
        PyMem_Free(self.marks)
        PyMem_Free(self.memo)

    cdef int new_node(self, int kind, Py_ssize_t start, Py_ssize_t end) except -1:
        grow(<void **>&self.nodes, &self.cnodes, self.nnodes, sizeof(FNode))
        cdef FNode *node = &self.nodes[self.nnodes]
        node.kind = kind
        node.mutable = kind == K_LIST or kind == K_DICT
        node.start = start
        node.end = end
        node.pstart = node.pend = node.nstart = node.nend = 0
        node.ival = 0
        node.fval = 0.0
        node.first = node.last = -1
        node.count = 0
        node.first_batch = node.last_batch = -1
        node.memo = -1
        node.tuple_op = 0
        node.closed = kind != K_LIST and kind != K_DICT
        self.nnodes += 1
        return self.nnodes - 1

    cdef int push(self, int node, int get) except -1:
        """A new slot for one occurrence of ``node``, on top of the stack."""
        grow(<void **>&self.slots, &self.cslots, self.nslots, sizeof(Slot))
        self.slots[self.nslots].node = node
        self.slots[self.nslots].next = -1
        self.slots[self.nslots].get = get
        grow(<void **>&self.stack, &self.cstack, self.nstack, sizeof(int))
        self.stack[self.nstack] = self.nslots
        self.nstack += 1
        self.nslots += 1
        return 0

    cdef int adopt(self, int parent, int first_index) except -1:
        """Move the stack's slots from ``first_index`` up into ``parent``'s children."""
        cdef FNode *node = &self.nodes[parent]
        cdef int i, slot
        for i in range(first_index, self.nstack):
            slot = self.stack[i]
            if self.nodes[self.slots[slot].node].mutable:
                node.mutable = 1
            if node.last < 0:
                node.first = slot
            else:
                self.slots[node.last].next = slot
            node.last = slot
            node.count += 1
        self.nstack = first_index
        return 0

    cdef int add_batch(self, int parent, int count, int marked) except -1:
        grow(<void **>&self.batches, &self.cbatches, self.nbatches, sizeof(Batch))
        cdef FNode *node = &self.nodes[parent]
        self.batches[self.nbatches].count = count
        self.batches[self.nbatches].marked = marked
        self.batches[self.nbatches].next = -1
        if node.last_batch < 0:
            node.first_batch = self.nbatches
        else:
            self.batches[node.last_batch].next = self.nbatches
        node.last_batch = self.nbatches
        self.nbatches += 1
        return 0

    cdef int pop_mark(self) except -2:
        if self.nmarks == 0:
            return -1
        self.nmarks -= 1
        return self.marks[self.nmarks]

    cdef int fill(self, int op) except -1:
        """APPEND(S)/SETITEM(S): 1 on success, 0 if not in the subset."""
        cdef int start, count, target, i, key
        cdef bint marked = op == ord('e') or op == ord('u')
        cdef bint is_dict = op == ord('s') or op == ord('u')
        if marked:
            start = self.pop_mark()
            if start < 1:
                return 0
        else:
            start = self.nstack - (2 if is_dict else 1)
            if start < 1:
                return 0
        count = self.nstack - start
        if is_dict and count % 2:
            return 0
        if not marked and count == 0:
            return 0
        target = self.slots[self.stack[start - 1]].node
        if self.slots[self.stack[start - 1]].get >= 0 or self.nodes[target].kind != (K_DICT if is_dict else K_LIST):
            return 0
        self.add_batch(target, count, marked)
        self.adopt(target, start)
        return 1

    cdef inline Py_ssize_t line_end(self, Py_ssize_t p):
        """Where the line from p ends (its newline), or -1."""
        cdef const unsigned char *newline = <const unsigned char *>memchr(self.data + p, 10, self.size - p)
        return -1 if newline == NULL else newline - self.data

    cdef inline Py_ssize_t argument(self, Py_ssize_t *p, bint wide):
        """The 1-byte, or 4-byte little-endian, argument at p[0] (moved past it); -1 if the
        record ends first."""
        cdef Py_ssize_t value
        if wide:
            if self.size - p[0] < 4:
                return -1
            value = u4(self.data + p[0])
            p[0] += 4
            return value
        if self.size - p[0] < 1:
            return -1
        value = self.data[p[0]]
        p[0] += 1
        return value

    cdef int read(self, Py_ssize_t position, bint second) except -2:
        """Read one pickle from ``position``; return where it ends, or -1 if not in the subset."""
        cdef const unsigned char *data = self.data
        cdef Py_ssize_t size = self.size
        cdef Py_ssize_t p = position, start, length
        cdef int op, node, n, index, slot, first
        cdef long long value
        cdef unsigned long long bits
        cdef int i
        if size - p < 2 or data[p] != 0x80 or data[p + 1] != 3:
            return -1
        p += 2
        while p < size:
            start = p
            op = data[p]
            p += 1
            if op == ord('X') or op == ord('C') or op == ord('B'):  # a text, short bytes, bytes
                length = self.argument(&p, op != ord('C'))
                if length < 0 or length > size - p:
                    return -1
                node = self.new_node(K_STR if op == ord('X') else K_BYTES, start, p + length)
                self.nodes[node].pstart = p
                self.nodes[node].pend = p + length
                p += length
                self.push(node, -1)
            elif op == ord('q') or op == ord('r'):
                length = self.argument(&p, op == ord('r'))
                if length < 0 or length >= MAX_MEMO:
                    return -1
                index = <int>length
                if self.nstack == 0:
                    return -1
                slot = self.stack[self.nstack - 1]
                node = self.slots[slot].node
                # Only right after the value was made, as the pickler does.
                if self.slots[slot].get >= 0 or self.nodes[node].memo >= 0 or self.nodes[node].first_batch >= 0:
                    return -1
                self.nodes[node].memo = index
                while self.nmemo <= index:
                    grow(<void **>&self.memo, &self.cmemo, self.nmemo, sizeof(int))
                    self.memo[self.nmemo] = -1
                    self.nmemo += 1
                self.memo[index] = node
            elif op == ord('h') or op == ord('j'):
                length = self.argument(&p, op == ord('j'))
                if length < 0 or length >= MAX_MEMO:
                    return -1
                index = <int>length
                if index >= self.nmemo or self.memo[index] < 0:
                    return -1
                node = self.memo[index]
                # A mutable object in two places needs @shared/@same: the reference path.
                if self.nodes[node].mutable or not self.nodes[node].closed:
                    return -1
                self.push(node, index)
            elif op == ord('('):
                grow(<void **>&self.marks, &self.cmarks, self.nmarks, sizeof(int))
                self.marks[self.nmarks] = self.nstack
                self.nmarks += 1
            elif op == ord('}') or op == ord(']'):
                self.push(self.new_node(K_DICT if op == ord('}') else K_LIST, start, p), -1)
            elif op == ord('s') or op == ord('u') or op == ord('a') or op == ord('e'):
                if not self.fill(op):
                    return -1
            elif op == ord('K') or op == ord('M') or op == ord('J'):  # BININT1, BININT2, BININT
                n = 1 if op == ord('K') else (2 if op == ord('M') else 4)
                if size - p < n:
                    return -1
                bits = 0
                for i in range(n):
                    bits |= (<unsigned long long>data[p + i]) << (8 * i)
                node = self.new_node(K_INT, start, p + n)
                # BININT is signed; the other two are not.
                self.nodes[node].ival = <int><unsigned int>bits if n == 4 else <long long>bits
                p += n
                self.push(node, -1)
            elif op == 0x8a:  # LONG1
                if size - p < 1:
                    return -1
                n = data[p]
                if n > 8 or size - p - 1 < n:
                    return -1
                bits = 0
                for i in range(n):
                    bits |= (<unsigned long long>data[p + 1 + i]) << (8 * i)
                if 0 < n < 8 and data[p + n] & 0x80:  # sign-extend
                    bits |= (~0ULL) << (8 * n)
                node = self.new_node(K_INT, start, p + 1 + n)
                self.nodes[node].ival = <long long>bits
                p += 1 + n
                self.push(node, -1)
            elif op == ord('G'):
                if size - p < 8:
                    return -1
                bits = 0
                for i in range(8):
                    bits = (bits << 8) | data[p + i]
                node = self.new_node(K_FLOAT, start, p + 8)
                memcpy(&self.nodes[node].fval, &bits, 8)
                p += 8
                self.push(node, -1)
            elif op == ord('N') or op == 0x88 or op == 0x89:
                self.push(self.new_node(K_NONE if op == ord('N') else (K_TRUE if op == 0x88 else K_FALSE), start, p), -1)
            elif op == ord('c'):  # GLOBAL module\n name\n
                length = self.line_end(p)  # the module
                if length < 0 or self.line_end(length + 1) < 0:
                    return -1
                node = self.new_node(K_GLOBAL, start, self.line_end(length + 1) + 1)
                self.nodes[node].pstart = p
                self.nodes[node].pend = length
                self.nodes[node].nstart = length + 1
                self.nodes[node].nend = self.nodes[node].end - 1
                p = self.nodes[node].end
                self.push(node, -1)
            elif op == ord(')'):
                node = self.new_node(K_TUPLE, start, p)
                self.nodes[node].tuple_op = op
                self.push(node, -1)
            elif op == 0x85 or op == 0x86 or op == 0x87 or op == ord('t'):
                if op == ord('t'):
                    first = self.pop_mark()
                    if first < 0:
                        return -1
                else:
                    first = self.nstack - (op - 0x84)
                    if first < 0 or (self.nmarks and self.marks[self.nmarks - 1] > first):
                        return -1
                node = self.new_node(K_TUPLE, start, p)
                self.nodes[node].tuple_op = op
                self.adopt(node, first)
                self.push(node, -1)
            elif op == ord('Q'):
                if self.nstack == 0 or (self.nmarks and self.marks[self.nmarks - 1] >= self.nstack):
                    return -1
                slot = self.stack[self.nstack - 1]
                if not self.is_pid(self.slots[slot].node):
                    return -1
                node = self.new_node(K_REF, start, p)
                self.adopt(node, self.nstack - 1)
                self.push(node, -1)
            elif op == ord('.'):
                if self.nstack != 1 or self.nmarks:
                    return -1
                if second:
                    self.root = self.stack[0]
                else:
                    self.meta = self.stack[0]
                self.nstack = 0
                return p
            else:
                return -1
        return -1

    cdef bint is_pid(self, int node):
        """An ordinary persistent id: an 8-byte oid, or (oid, class)."""
        cdef FNode *pid = &self.nodes[node]
        cdef FNode *oid
        if pid.kind == K_BYTES:
            return pid.pend - pid.pstart == 8
        if pid.kind != K_TUPLE or pid.count != 2:
            return False
        oid = &self.nodes[self.slots[pid.first].node]
        return (
            oid.kind == K_BYTES
            and oid.pend - oid.pstart == 8
            and self.nodes[self.slots[self.slots[pid.first].next].node].kind == K_GLOBAL
        )

    cdef int parse(self, bytes record) except -2:
        """1 if the record is in the subset (as far as reading goes), else 0."""
        cdef Py_ssize_t end
        self.source = record
        self.data = <const unsigned char *>PyBytes_AS_STRING(record)
        self.size = PyBytes_GET_SIZE(record)
        self.json_limit = 64 * self.size + (1 << 20)  # jsonstate.expansion_budget's characters
        self.values_left = (8 * self.size + (1 << 16)) // 2  # half its values
        self.meta = self.root = -1
        end = self.read(0, False)
        if end < 0:
            return 0
        end = self.read(end, True)
        if end != self.size:
            return 0
        return self.nodes[self.slots[self.meta].node].kind == K_GLOBAL and self.slots[self.meta].get < 0

    # -- writing the record again ---------------------------------------------------------

    cdef int emit_exact(self, Out *out, int slot, int depth) except -1:
        """The slot as the pickler wrote it; 0 if nesting is too deep to go on."""
        cdef int node_index = self.slots[slot].node
        cdef FNode *node = &self.nodes[node_index]
        cdef int child, batch, i
        if self.slots[slot].get >= 0:
            return write_memo(out, 104, 106, self.slots[slot].get)  # BINGET / LONG_BINGET
        if depth > MAX_DEPTH:
            raise _TooDeep()
        if node.kind == K_TUPLE:
            if node.tuple_op == ord('t'):
                out_byte(out, b'(')
            child = node.first
            while child >= 0:
                self.emit_exact(out, child, depth + 1)
                child = self.slots[child].next
            out_byte(out, <char>node.tuple_op)
        elif node.kind == K_REF:
            self.emit_exact(out, node.first, depth + 1)
            out_byte(out, b'Q')
        else:
            out_write(out, <const char *>self.data + node.start, node.end - node.start)
        if node.memo >= 0:
            write_memo(out, 113, 114, node.memo)  # BINPUT / LONG_BINPUT
        if node.kind == K_LIST or node.kind == K_DICT:
            child = node.first
            batch = node.first_batch
            while batch >= 0:
                if self.batches[batch].marked:
                    out_byte(out, b'(')
                for i in range(self.batches[batch].count):
                    self.emit_exact(out, child, depth + 1)
                    child = self.slots[child].next
                if node.kind == K_LIST:
                    out_byte(out, b'e' if self.batches[batch].marked else b'a')
                else:
                    out_byte(out, b'u' if self.batches[batch].marked else b's')
                batch = self.batches[batch].next
        return 0

    cdef bint reproduces(self) except -1:
        cdef Out out
        out.data = NULL
        out.size = out.capacity = 0
        try:
            out_write(&out, b"\x80\x03", 2)
            self.emit_exact(&out, self.meta, 0)
            out_write(&out, b".\x80\x03", 3)
            self.emit_exact(&out, self.root, 0)
            out_byte(&out, b'.')
            return out.size == self.size and memcmp(out.data, self.data, self.size) == 0
        finally:
            PyMem_Free(out.data)

    # -- the record as the decoder writes it ------------------------------------------------

    cdef int emit_global(self, Out *out, FNode *node, Globals *memo) except -1:
        """GLOBAL as jsonstate_pickle.write_global writes "module.name": memoized by name, the
        memo counting globals only (the subset has no other memo use)."""
        cdef int i
        cdef Py_ssize_t module = node.pend - node.pstart, name = node.nend - node.nstart
        for i in range(memo.count):
            if (
                memo.module_size[i] == module and memo.name_size[i] == name
                and memcmp(self.data + memo.module[i], self.data + node.pstart, module) == 0
                and memcmp(self.data + memo.name[i], self.data + node.nstart, name) == 0
            ):
                write_memo(out, 104, 106, i)  # BINGET / LONG_BINGET
                return 0
        if memo.count == MAX_GLOBALS:
            raise _NotPlain()
        memo.module[memo.count] = node.pstart
        memo.module_size[memo.count] = module
        memo.name[memo.count] = node.nstart
        memo.name_size[memo.count] = name
        out_write(out, <const char *>self.data + node.start, node.end - node.start)
        write_memo(out, 113, 114, memo.count)  # BINPUT / LONG_BINPUT
        memo.count += 1
        return 0

    cdef int emit_writer(self, Out *out, int slot, int depth, Globals *memo) except -1:
        """The value as decode_record writes it from the JSON (in jsonb's key order, which
        "@order" members make the dict's own)."""
        cdef FNode *node = &self.nodes[self.slots[slot].node]
        cdef FNode *pid
        cdef int child
        cdef Py_ssize_t size
        if depth > MAX_DEPTH:
            raise _TooDeep()
        if out.size > self.json_limit:
            raise _NotPlain()
        if node.kind == K_INT:
            write_int(out, node.ival)
        elif node.kind == K_BYTES:
            size = node.pend - node.pstart
            write_bytes_head(out, size)
            out_write(out, <const char *>self.data + node.pstart, size)
        elif node.kind == K_GLOBAL:
            self.emit_global(out, node, memo)
        elif node.kind == K_TUPLE:
            if node.count > 3:
                out_byte(out, 40)  # MARK
            child = node.first
            while child >= 0:
                self.emit_writer(out, child, depth + 1, memo)
                child = self.slots[child].next
            if node.count > 3:
                out_byte(out, 116)  # TUPLE
            else:
                out_byte(out, 41 if node.count == 0 else 0x84 + node.count)
        elif node.kind == K_LIST:
            out_byte(out, 93)  # EMPTY_LIST
            if node.count:
                out_byte(out, 40)
                child = node.first
                while child >= 0:
                    self.emit_writer(out, child, depth + 1, memo)
                    child = self.slots[child].next
                out_byte(out, 101)  # APPENDS
        elif node.kind == K_REF:
            pid = &self.nodes[self.slots[node.first].node]
            if pid.kind == K_BYTES:
                self.emit_writer(out, node.first, depth + 1, memo)
            else:
                self.emit_writer(out, pid.first, depth + 1, memo)
                self.emit_global(out, &self.nodes[self.slots[self.slots[pid.first].next].node], memo)
                out_byte(out, 0x86)  # TUPLE2
            out_byte(out, 81)  # BINPERSID
        elif node.kind == K_DICT:
            # A JSON object keeps the dict's order ("@order" where jsonb's differs), @dict pairs
            # keep theirs: members in the pickle's order either way.
            out_byte(out, 125)  # EMPTY_DICT
            if node.count:
                out_byte(out, 40)
                child = node.first
                while child >= 0:
                    self.emit_writer(out, child, depth + 1, memo)
                    child = self.slots[child].next
                out_byte(out, 117)  # SETITEMS
        else:  # texts ('X', as the writer too), floats, None, booleans: the opcode as read
            out_write(out, <const char *>self.data + node.start, node.end - node.start)
        return 0

    cdef bytes rebuilt(self):
        """The record decode_record(class, json, jsonb_order=True) writes for this one."""
        cdef Out out
        cdef Globals memo
        out.data = NULL
        out.size = out.capacity = 0
        memo.count = 0
        try:
            out_write(&out, b"\x80\x03", 2)
            self.emit_global(&out, &self.nodes[self.slots[self.meta].node], &memo)
            out_write(&out, b".\x80\x03", 3)
            self.emit_writer(&out, self.root, 0, &memo)
            out_byte(&out, 46)  # STOP
            return PyBytes_FromStringAndSize(out.data, out.size)
        finally:
            PyMem_Free(out.data)

    cdef bint all_text_keys(self, FNode *node):
        cdef int child = node.first
        while child >= 0:
            if self.nodes[self.slots[child].node].kind != K_STR:
                return False
            child = self.slots[self.slots[child].next].next
        return True

    cdef bint plain_keys(self, FNode *node):
        """Can the dict be a JSON object (the reference's _plain_keys; keys with U+0000 or lone
        surrogates make json_text give up, as the reference then writes @s keys)? Not with a key
        "@order" (the member recording key order)."""
        cdef FNode *key
        cdef int child = node.first
        if not self.all_text_keys(node):
            return False
        if node.count == 2:
            key = &self.nodes[self.slots[node.first].node]
            if key.pend > key.pstart and self.data[key.pstart] == 64:  # '@': would read as a tag
                return False
        while child >= 0:
            key = &self.nodes[self.slots[child].node]
            if key.pend - key.pstart == 6 and memcmp(self.data + key.pstart, b"@order", 6) == 0:
                return False
            child = self.slots[self.slots[child].next].next
        return True

    cdef int emit_order(self, Out *out, FNode *node) except -1:
        """The "@order" member of a JSON object whose keys are not in jsonb's order: each key's
        rank in that order, in the dict's own order (jsonstate.key_ranks); nothing otherwise."""
        cdef int count = node.count // 2, i, previous, child
        cdef bint ordered = True
        cdef int *pairs
        cdef int *ranks
        child = node.first
        previous = -1
        while child >= 0:
            if previous >= 0 and self.key_less(child, previous):  # (a key twice: the decoder's)
                ordered = False
                break
            previous = child
            child = self.slots[self.slots[child].next].next
        if ordered:
            return 0
        # (key slot, position) pairs sorted by key: the position of each rank.
        pairs = <int *>PyMem_Malloc(count * 5 * sizeof(int))
        if pairs == NULL:
            raise MemoryError()
        try:
            ranks = pairs + 4 * count
            child = node.first
            for i in range(count):
                pairs[2 * i] = child
                pairs[2 * i + 1] = i
                child = self.slots[self.slots[child].next].next
            self.sort_pairs(pairs, pairs + 2 * count, count)
            for i in range(count):
                ranks[pairs[2 * i + 1]] = i
            out_write(out, b',"@order":[', 11)
            for i in range(count):
                if i:
                    out_byte(out, b',')
                write_decimal(out, ranks[i])
            out_byte(out, b']')
        finally:
            PyMem_Free(pairs)
        return 0

    cdef int check_pair_keys(self, FNode *node) except -1:
        """Keys written as @dict pairs must be what the unpickled dict holds: hashable, and each
        once as Python compares them (1, 1.0 and True are one key; a SETITEMS naming a key twice
        keeps the last value). Anything else is not this subset: the reference decides."""
        cdef set keys = set()
        cdef int child = node.first
        cdef bint is_key = True
        while child >= 0:
            if is_key:
                key = self.key_object(&self.nodes[self.slots[child].node])
                if key in keys:
                    raise _NotPlain()
                keys.add(key)
            is_key = not is_key
            child = self.slots[child].next
        return 0

    cdef object key_object(self, FNode *key):
        """A dict key as a Python value that compares as the unpickled key would."""
        if key.kind == K_INT:
            return key.ival
        if key.kind == K_TRUE:
            return True
        if key.kind == K_FALSE:
            return False
        if key.kind == K_FLOAT:
            return key.fval
        if key.kind == K_NONE:
            return None
        if key.kind == K_STR:
            try:
                return PyUnicode_DecodeUTF8(<const char *>self.data + key.pstart, key.pend - key.pstart, "surrogatepass")
            except UnicodeDecodeError:
                raise _NotPlain()
        if key.kind == K_BYTES:
            return PyBytes_FromStringAndSize(<const char *>self.data + key.pstart, key.pend - key.pstart)
        raise _NotPlain()  # containers (unhashable, or holding something that may be), references, globals

    cdef bint key_less(self, int a, int b):
        # Keys are texts: shorter first, then by their UTF-8 bytes (jsonb's order).
        cdef FNode *x = &self.nodes[self.slots[a].node]
        cdef FNode *y = &self.nodes[self.slots[b].node]
        cdef Py_ssize_t lx = x.pend - x.pstart, ly = y.pend - y.pstart
        if lx != ly:
            return lx < ly
        return memcmp(self.data + x.pstart, self.data + y.pstart, lx) < 0

    cdef void sort_pairs(self, int *pairs, int *scratch, int count):
        """Merge sort of (key slot, value slot) pairs by key; stable."""
        cdef int middle, i, j, k
        if count < 2:
            return
        middle = count // 2
        self.sort_pairs(pairs, scratch, middle)
        self.sort_pairs(pairs + 2 * middle, scratch, count - middle)
        i, j, k = 0, middle, 0
        while i < middle and j < count:
            if self.key_less(pairs[2 * j], pairs[2 * i]):
                scratch[2 * k] = pairs[2 * j]
                scratch[2 * k + 1] = pairs[2 * j + 1]
                j += 1
            else:
                scratch[2 * k] = pairs[2 * i]
                scratch[2 * k + 1] = pairs[2 * i + 1]
                i += 1
            k += 1
        while i < middle:
            scratch[2 * k] = pairs[2 * i]
            scratch[2 * k + 1] = pairs[2 * i + 1]
            i += 1
            k += 1
        while j < count:
            scratch[2 * k] = pairs[2 * j]
            scratch[2 * k + 1] = pairs[2 * j + 1]
            j += 1
            k += 1
        memcpy(pairs, scratch, 2 * count * sizeof(int))

    # -- JSON -----------------------------------------------------------------------------

    cdef int emit_json(self, Out *out, int slot, int depth, list refs, set seen) except -1:
        """JSON of the slot's value; raises _NotPlain where the reference writes another form."""
        cdef FNode *node = &self.nodes[self.slots[slot].node]
        cdef FNode *oid
        cdef FNode *pid
        cdef int child, i
        cdef int kind = node.kind
        cdef char *text
        cdef char short[32]
        if depth > MAX_DEPTH:
            raise _TooDeep()
        self.values_left -= 1
        if out.size > self.json_limit or self.values_left < 0:  # the reference decides
            raise _NotPlain()
        if kind == K_STR:
            json_text(out, self.data + node.pstart, node.pend - node.pstart)
        elif kind == K_DICT and not self.plain_keys(node):
            # Keys that are not all texts, or one key that would read as a tag: pairs.
            self.check_pair_keys(node)
            out_write(out, b'{"@dict":[', 10)
            child = node.first
            i = 0
            while child >= 0:
                if i % 2 == 0:
                    if i:
                        out_byte(out, b',')
                    out_byte(out, b'[')
                else:
                    out_byte(out, b',')
                self.emit_json(out, child, depth + 2, refs, seen)
                if i % 2:
                    out_byte(out, b']')
                child = self.slots[child].next
                i += 1
            out_write(out, b']}', 2)
        elif kind == K_DICT:
            out_byte(out, b'{')
            child = node.first
            i = 0
            while child >= 0:
                if i:
                    out_byte(out, b',' if i % 2 == 0 else b':')
                self.emit_json(out, child, depth + 1, refs, seen)
                child = self.slots[child].next
                i += 1
            if node.count > 2:
                self.emit_order(out, node)
            out_byte(out, b'}')
        elif kind == K_LIST or kind == K_TUPLE:
            if kind == K_TUPLE:
                out_write(out, b'{"@t":[', 7)
            else:
                out_byte(out, b'[')
            child = node.first
            i = 0
            while child >= 0:
                if i:
                    out_byte(out, b',')
                self.emit_json(out, child, depth + 1, refs, seen)
                child = self.slots[child].next
                i += 1
            out_write(out, b']}' if kind == K_TUPLE else b']', 2 if kind == K_TUPLE else 1)
        elif kind == K_INT:
            if -MAX_SAFE_INT <= node.ival <= MAX_SAFE_INT:
                write_decimal(out, node.ival)
            else:
                out_write(out, b'{"@int":"', 9)
                write_decimal(out, node.ival)
                out_write(out, b'"}', 2)
        elif kind == K_NONE:
            out_write(out, b"null", 4)
        elif kind == K_TRUE:
            out_write(out, b"true", 4)
        elif kind == K_FALSE:
            out_write(out, b"false", 5)
        elif kind == K_FLOAT:
            if not isfinite(node.fval) or (node.fval == 0.0 and signbit(node.fval)):
                raise _NotPlain()
            if floor(node.fval) == node.fval and fabs(node.fval) >= 1e16:
                raise _NotPlain()
            i = short_float(node.fval, short)
            if i:
                out_write(out, short, i)
            else:
                text = PyOS_double_to_string(node.fval, b'r', 0, Py_DTSF_ADD_DOT_0, NULL)
                try:
                    i = 0
                    while text[i]:
                        i += 1
                    out_write(out, text, i)
                finally:
                    PyMem_Free(text)
        elif kind == K_REF:
            pid = &self.nodes[self.slots[node.first].node]
            out_write(out, b'{"@ref":', 8)
            if pid.kind == K_BYTES:
                oid = pid
                self.emit_oid(out, oid, refs, seen)
            else:
                oid = &self.nodes[self.slots[pid.first].node]
                out_byte(out, b'[')
                self.emit_oid(out, oid, refs, seen)
                out_byte(out, b',')
                self.emit_dotted(out, &self.nodes[self.slots[self.slots[pid.first].next].node])
                out_byte(out, b']')
            out_byte(out, b'}')
        elif kind == K_BYTES:
            out_write(out, b'{"@b":"', 7)
            base64_write(out, self.data + node.pstart, node.pend - node.pstart)
            out_write(out, b'"}', 2)
        elif kind == K_GLOBAL:
            out_write(out, b'{"@global":', 11)
            self.emit_dotted(out, node)
            out_byte(out, b'}')
        else:
            raise _NotPlain()
        return 0

    cdef int emit_oid(self, Out *out, FNode *oid, list refs, set seen) except -1:
        cdef const unsigned char *p = self.data + oid.pstart
        cdef int i
        cdef char digits[18]
        digits[0] = digits[17] = b'"'
        for i in range(8):
            digits[1 + 2 * i] = b"0123456789abcdef"[p[i] >> 4]
            digits[2 + 2 * i] = b"0123456789abcdef"[p[i] & 15]
        out_write(out, digits, 18)
        key = PyBytes_FromStringAndSize(<const char *>p, 8)
        if key not in seen:
            seen.add(key)
            refs.append(key)
        return 0

    cdef int write_dotted(self, Out *out, FNode *node) except -1:
        """"module.name" of a global (printable ASCII; no dot in the name)."""
        plain_name(out, self.data + node.pstart, node.pend - node.pstart, True)
        out_byte(out, b'.')
        return plain_name(out, self.data + node.nstart, node.nend - node.nstart, False)

    cdef int emit_dotted(self, Out *out, FNode *node) except -1:
        out_byte(out, b'"')
        self.write_dotted(out, node)
        return out_byte(out, b'"')

    cdef str dotted(self, int slot):
        cdef Out out
        out.data = NULL
        out.size = out.capacity = 0
        try:
            self.write_dotted(&out, &self.nodes[self.slots[slot].node])
            return PyUnicode_DecodeUTF8(out.data, out.size, "strict")
        finally:
            PyMem_Free(out.data)


class _NotPlain(Exception):
    pass


class _TooDeep(_NotPlain):
    pass


# -- text ---------------------------------------------------------------------------------

cdef const char *_HEX = b"0123456789abcdef"


cdef int plain_name(Out *out, const unsigned char *p, Py_ssize_t size, bint dots) except -1:
    """A module (``dots``) or class name: printable ASCII without quote or backslash, else not
    plain. A class name with a dot has no plain form ("module.name" splits at the last dot)."""
    cdef Py_ssize_t i
    if size == 0:
        raise _NotPlain()
    for i in range(size):
        if p[i] < 0x21 or p[i] > 0x7e or p[i] == 34 or p[i] == 92 or (p[i] == 46 and not dots):
            raise _NotPlain()
    out_write(out, <const char *>p, size)
    return 0


cdef int utf8_sequence(const unsigned char *p, Py_ssize_t available) except -1:
    """The length of the well-formed UTF-8 sequence of a non-ASCII character at p; no
    overlong forms, no surrogates (the pickler writes them with 'surrogatepass'), nothing above
    U+10FFFF. Anything else is not plain."""
    cdef unsigned char c = p[0]
    cdef int length, i
    if c < 0xc2 or c >= 0xf5:
        raise _NotPlain()
    length = 2 if c < 0xe0 else (3 if c < 0xf0 else 4)
    if length > available:
        raise _NotPlain()
    for i in range(1, length):
        if (p[i] & 0xc0) != 0x80:
            raise _NotPlain()
    if (c == 0xe0 and p[1] < 0xa0) or (c == 0xf0 and p[1] < 0x90):
        raise _NotPlain()  # overlong
    if (c == 0xed and p[1] >= 0xa0) or (c == 0xf4 and p[1] >= 0x90):
        raise _NotPlain()  # a surrogate, or beyond U+10FFFF
    return length


cdef int json_text(Out *out, const unsigned char *p, Py_ssize_t size) except -1:
    """A JSON string as json.dumps(ensure_ascii=False) writes it, from UTF-8 bytes.

    Not plain (the reference writes @s, or the unpickler refuses the bytes): U+0000, surrogates
    (written by the pickler with 'surrogatepass'), malformed or overlong UTF-8.
    """
    cdef Py_ssize_t i = 0, run = 0
    cdef unsigned char c
    cdef char escape[6]
    out_reserve(out, size + 2)
    out_byte(out, b'"')
    while i < size:
        c = p[i]
        if c >= 0x20 and c != 34 and c != 92 and c < 0x80:
            i += 1
            continue
        if c >= 0x80:
            i += utf8_sequence(p + i, size - i)
            continue
        # A character to escape: first the plain run before it.
        out_write(out, <const char *>p + run, i - run)
        if c == 0:
            raise _NotPlain()
        if c == ord('"'):
            out_write(out, b'\\"', 2)
        elif c == 92:
            out_write(out, b'\\\\', 2)
        elif c == b'\n':
            out_write(out, b'\\n', 2)
        elif c == b'\r':
            out_write(out, b'\\r', 2)
        elif c == b'\t':
            out_write(out, b'\\t', 2)
        elif c == 8:
            out_write(out, b'\\b', 2)
        elif c == 12:
            out_write(out, b'\\f', 2)
        else:
            escape[0] = b'\\'
            escape[1] = b'u'
            escape[2] = b'0'
            escape[3] = b'0'
            escape[4] = _HEX[c >> 4]
            escape[5] = _HEX[c & 15]
            out_write(out, escape, 6)
        i += 1
        run = i
    out_write(out, <const char *>p + run, size - run)
    out_byte(out, b'"')
    return 0


cdef const char *_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


cdef int base64_write(Out *out, const unsigned char *p, Py_ssize_t size) except -1:
    cdef Py_ssize_t i = 0
    cdef unsigned int triple
    cdef char quad[4]
    while i + 3 <= size:
        triple = (p[i] << 16) | (p[i + 1] << 8) | p[i + 2]
        quad[0] = _B64[(triple >> 18) & 63]
        quad[1] = _B64[(triple >> 12) & 63]
        quad[2] = _B64[(triple >> 6) & 63]
        quad[3] = _B64[triple & 63]
        out_write(out, quad, 4)
        i += 3
    if size - i == 1:
        triple = p[i] << 16
        quad[0] = _B64[(triple >> 18) & 63]
        quad[1] = _B64[(triple >> 12) & 63]
        quad[2] = b'='
        quad[3] = b'='
        out_write(out, quad, 4)
    elif size - i == 2:
        triple = (p[i] << 16) | (p[i + 1] << 8)
        quad[0] = _B64[(triple >> 18) & 63]
        quad[1] = _B64[(triple >> 12) & 63]
        quad[2] = _B64[(triple >> 6) & 63]
        quad[3] = b'='
        out_write(out, quad, 4)
    return 0


# -- JSON text -> record (the plain subset of what decode_record reads) -----------------------

cdef class _Decoder:
    """Writes the record that jsonstate_pickle.write_record writes for the same JSON, byte for
    byte, for the plain forms and the tags @t, @ref, @b, @global, @dict and @int. Anything else
    raises _NotPlain (the reference decoder then reads the text)."""

    cdef const unsigned char *text
    cdef Py_ssize_t size
    cdef Py_ssize_t p
    cdef Out out
    cdef Out keys                  # decoded object keys, for sorting and duplicates
    cdef bint jsonb_order
    cdef int memo_size
    cdef int nglobals
    cdef Py_ssize_t global_start[MAX_GLOBALS]   # dotted names, copied into ``names``
    cdef Py_ssize_t global_size[MAX_GLOBALS]
    cdef int global_memo[MAX_GLOBALS]
    cdef Out names

    def __dealloc__(self):
        PyMem_Free(self.out.data)
        PyMem_Free(self.keys.data)
        PyMem_Free(self.names.data)

    cdef inline void skip_ws(self):
        cdef unsigned char c
        while self.p < self.size:
            c = self.text[self.p]
            if c == 32 or c == 10 or c == 13 or c == 9:
                self.p += 1
            else:
                break

    cdef inline int expect(self, unsigned char c) except -1:
        self.skip_ws()
        if self.p >= self.size or self.text[self.p] != c:
            raise _NotPlain()
        self.p += 1
        return 0

    cdef int put(self) except -1:
        self.memo_size += 1
        return write_memo(&self.out, 113, 114, self.memo_size - 1)  # BINPUT / LONG_BINPUT

    cdef int write_global(self, const unsigned char *dotted, Py_ssize_t size) except -1:
        """GLOBAL module name, memoized by its dotted name as write_global does."""
        cdef int i
        cdef Py_ssize_t dot = -1, j
        for i in range(self.nglobals):
            if self.global_size[i] == size and memcmp(self.names.data + self.global_start[i], dotted, size) == 0:
                return write_memo(&self.out, 104, 106, self.global_memo[i])  # BINGET / LONG_BINGET
        if self.nglobals == MAX_GLOBALS:
            raise _NotPlain()
        for j in range(size):
            if dotted[j] < 0x21 or dotted[j] > 0x7e:
                raise _NotPlain()
            if dotted[j] == 46:
                dot = j
        if dot <= 0 or dot == size - 1:
            raise _NotPlain()  # not "module.name": the reference raises its own error
        out_byte(&self.out, 99)  # GLOBAL
        out_write(&self.out, <const char *>dotted, dot)
        out_byte(&self.out, 10)
        out_write(&self.out, <const char *>dotted + dot + 1, size - dot - 1)
        out_byte(&self.out, 10)
        self.global_start[self.nglobals] = self.names.size
        self.global_size[self.nglobals] = size
        self.global_memo[self.nglobals] = self.memo_size
        out_write(&self.names, <const char *>dotted, size)
        self.nglobals += 1
        return self.put()

    cdef int read_string(self, Out *into) except -1:
        """A JSON string at p (after its quote) as UTF-8 into ``into``."""
        cdef Py_ssize_t start = self.p
        cdef unsigned char c
        cdef unsigned int code, low
        cdef unsigned char buffer[4]
        while True:
            if self.p >= self.size:
                raise _NotPlain()
            c = self.text[self.p]
            if c == 34:
                out_write(into, <const char *>self.text + start, self.p - start)
                self.p += 1
                return 0
            if c < 0x20:
                raise _NotPlain()
            if c != 92:
                self.p += 1
                continue
            out_write(into, <const char *>self.text + start, self.p - start)
            if self.p + 1 >= self.size:
                raise _NotPlain()
            c = self.text[self.p + 1]
            self.p += 2
            if c == 34 or c == 92 or c == 47:
                out_byte(into, c)
            elif c == 110:
                out_byte(into, 10)
            elif c == 116:
                out_byte(into, 9)
            elif c == 114:
                out_byte(into, 13)
            elif c == 98:
                out_byte(into, 8)
            elif c == 102:
                out_byte(into, 12)
            elif c == 117:
                code = self.hex4()
                if 0xdc00 <= code <= 0xdfff or code == 0:
                    raise _NotPlain()  # a lone low surrogate, or U+0000: not this subset
                if 0xd800 <= code <= 0xdbff:
                    if self.p + 1 >= self.size or self.text[self.p] != 92 or self.text[self.p + 1] != 117:
                        raise _NotPlain()
                    self.p += 2
                    low = self.hex4()
                    if not 0xdc00 <= low <= 0xdfff:
                        raise _NotPlain()
                    code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00)
                utf8_write(into, code)
            else:
                raise _NotPlain()
            start = self.p

    cdef unsigned int hex4(self) except? 0xffffffff:
        cdef unsigned int code = 0
        cdef int i
        if self.p + 4 > self.size:
            raise _NotPlain()
        for i in range(4):
            code = code * 16 + hex_digit(self.text[self.p + i])
        self.p += 4
        return code

    cdef int write_str_from(self, Out *scratch) except -1:
        """'X' opcode of the text just read into scratch[0:]."""
        write_head(&self.out, 88, scratch.size)  # BINUNICODE
        out_write(&self.out, scratch.data, scratch.size)
        return 0

    cdef int digits(self) except -1:
        """One or more decimal digits at p."""
        cdef Py_ssize_t start = self.p
        while self.p < self.size and 48 <= self.text[self.p] <= 57:
            self.p += 1
        if self.p == start:
            raise _NotPlain()
        return 0

    cdef int number(self) except -1:
        """A JSON number at p: int (no fraction or exponent) or float, as json.loads reads it."""
        cdef Py_ssize_t start = self.p, digits, integer_end, fraction
        cdef bint is_float = False
        cdef bint exponent = False
        cdef unsigned long long q
        cdef int k
        cdef bint negative = False
        cdef unsigned long long magnitude = 0
        cdef double value
        cdef unsigned long long bits
        cdef unsigned char buffer[9]
        cdef char *end
        cdef int i
        if self.p < self.size and self.text[self.p] == 45:
            negative = True
            self.p += 1
        digits = self.p
        if self.p < self.size and self.text[self.p] == 48:
            self.p += 1
        else:
            while self.p < self.size and 48 <= self.text[self.p] <= 57:
                self.p += 1
        if self.p == digits:
            raise _NotPlain()
        if self.p - digits > 18:
            is_float = True  # beyond int64 as an int: not this subset; checked below
            if not (self.p < self.size and self.text[self.p] in (46, 101, 69)):
                raise _NotPlain()
        else:
            for i in range(digits, self.p):
                magnitude = magnitude * 10 + (self.text[i] - 48)
        integer_end = fraction = self.p
        if self.p < self.size and self.text[self.p] == 46:  # a fraction
            is_float = True
            self.p += 1
            fraction = self.p
            self.digits()
        if self.p < self.size and (self.text[self.p] == 101 or self.text[self.p] == 69):  # exponent
            is_float = True
            exponent = True
            self.p += 1
            if self.p < self.size and (self.text[self.p] == 43 or self.text[self.p] == 45):
                self.p += 1
            self.digits()
        if not is_float:
            return write_int(&self.out, -<long long>magnitude if negative else <long long>magnitude)
        if not (not exponent and decimal_digits(self.text, digits, integer_end, fraction, self.p, &q, &k)
                and exact_decimal(q, k, negative, &value)):
            value = PyOS_string_to_double(<const char *>self.text + start, &end, NULL)
            if end != <char *>self.text + self.p:
                raise _NotPlain()
        memcpy(&bits, &value, 8)
        buffer[0] = 71
        for i in range(8):
            buffer[1 + i] = (bits >> (56 - 8 * i)) & 0xff
        out_write(&self.out, <char *>buffer, 9)
        return 0

    cdef int value(self, int depth) except -1:
        cdef unsigned char c
        if depth > MAX_DEPTH:
            raise _TooDeep()
        self.skip_ws()
        if self.p >= self.size:
            raise _NotPlain()
        c = self.text[self.p]
        if c == 34:
            self.p += 1
            self.keys.size = 0
            self.read_string(&self.keys)
            self.write_str_from(&self.keys)
        elif c == 123:
            self.p += 1
            self.obj(depth)
        elif c == 91:
            self.p += 1
            out_byte(&self.out, 93)  # EMPTY_LIST
            self.items(depth, 101)   # APPENDS
        elif c == 116 and self.p + 4 <= self.size and memcmp(self.text + self.p, b"true", 4) == 0:
            self.p += 4
            out_byte(&self.out, 0x88)
        elif c == 102 and self.p + 5 <= self.size and memcmp(self.text + self.p, b"false", 5) == 0:
            self.p += 5
            out_byte(&self.out, 0x89)
        elif c == 110 and self.p + 4 <= self.size and memcmp(self.text + self.p, b"null", 4) == 0:
            self.p += 4
            out_byte(&self.out, 78)
        elif c == 45 or 48 <= c <= 57:
            self.number()
        else:
            raise _NotPlain()
        return 0

    cdef int more(self, unsigned char close) except -1:
        """After an item: 1 at ',' (another follows), 0 at ``close`` (both consumed)."""
        self.skip_ws()
        if self.p < self.size:
            if self.text[self.p] == 44:
                self.p += 1
                return 1
            if self.text[self.p] == close:
                self.p += 1
                return 0
        raise _NotPlain()

    cdef bint closes(self, unsigned char close) except -1:
        """At ``close`` (an empty array or object): consume it."""
        self.skip_ws()
        if self.p < self.size and self.text[self.p] == close:
            self.p += 1
            return True
        return False

    cdef int items(self, int depth, unsigned char close) except -1:
        """Array items (after '['): MARK items ``close`` if any. Returns the count."""
        cdef int count = 0
        if self.closes(93):
            return 0
        out_byte(&self.out, 40)  # MARK
        while True:
            self.value(depth + 1)
            count += 1
            if not self.more(93):
                break
        if close:
            out_byte(&self.out, close)
        return count

    cdef int obj(self, int depth) except -1:
        """An object (after '{'): a tag, or a plain dict."""
        cdef Py_ssize_t members[2 * 32]
        cdef Py_ssize_t *positions = members
        cdef Py_ssize_t *allocated = NULL
        cdef int count = 0, capacity = 32, i
        cdef char tag_key[16]
        cdef Py_ssize_t key_start, after
        cdef int recorded
        cdef int *order = NULL
        cdef int *scratch = NULL
        try:
            if self.closes(125):
                out_byte(&self.out, 125)  # EMPTY_DICT
                return 0
            # Keys decoded into self.keys one after the other; positions: (key end, value start).
            self.keys.size = 0
            while True:
                self.expect(34)
                if count == capacity:
                    allocated = <Py_ssize_t *>PyMem_Realloc(allocated, 4 * capacity * sizeof(Py_ssize_t))
                    if allocated == NULL:
                        raise MemoryError()
                    if positions == members:
                        memcpy(allocated, members, 2 * capacity * sizeof(Py_ssize_t))
                    positions = allocated
                    capacity *= 2
                self.read_string(&self.keys)
                positions[2 * count] = self.keys.size
                self.expect(58)
                positions[2 * count + 1] = self.p
                self.skip_value(depth + 1)
                count += 1
                if not self.more(125):
                    break
            after = self.p
            if count == 1 and positions[0] > 0 and self.keys.data[0] == 64:
                if positions[0] > 16:
                    raise _NotPlain()  # no tag of this subset is that long
                memcpy(tag_key, self.keys.data, positions[0])  # nested values reuse self.keys
                self.p = positions[1]
                self.tag(tag_key, positions[0], depth)
                self.skip_ws()
                if self.p >= self.size or self.text[self.p] != 125:
                    raise _NotPlain()
                self.p = after
                return 0
            # A plain dict: members in text order, or in jsonb's, or in the order its "@order"
            # member records; a key twice is not this subset.
            order = <int *>PyMem_Malloc(4 * count * sizeof(int))
            if order == NULL:
                raise MemoryError()
            scratch = order + count
            for i in range(count):
                order[i] = i
            self.sort_keys(order, scratch, count, positions)
            for i in range(1, count):
                if self.key_compare(order[i - 1], order[i], positions) == 0:
                    raise _NotPlain()
            recorded = -1
            for i in range(count):
                key_start = positions[2 * i - 2] if i else 0
                if positions[2 * i] - key_start == 6 and memcmp(self.keys.data + key_start, b"@order", 6) == 0:
                    recorded = i
            if recorded >= 0:
                self.recorded_order(order, count, recorded, positions, depth)
            # The keys buffer is reused by nested values: keep this object's keys aside.
            saved = PyBytes_FromStringAndSize(self.keys.data, self.keys.size)
            out_byte(&self.out, 125)  # EMPTY_DICT
            out_byte(&self.out, 40)   # MARK
            if recorded >= 0:
                for i in range(count - 1):
                    self.member(order[2 * count + i], positions, saved, depth)
            else:
                for i in range(count):
                    self.member(order[i] if self.jsonb_order else i, positions, saved, depth)
            out_byte(&self.out, 117)  # SETITEMS
            self.p = after
            return 0
        finally:
            PyMem_Free(allocated)
            PyMem_Free(order)

    cdef int recorded_order(self, int *order, int count, int recorded, Py_ssize_t *positions, int depth) except -1:
        """The members of an object with an "@order" member (index ``recorded``), in the order it
        records, into order[2 * count:]: it lists the jsonb rank (order[:count], sorted) of each
        other member, each once (jsonstate_pickle.recorded_order); anything else is the
        reference's to refuse."""
        cdef int *others = order + count          # the other members in jsonb's order
        cdef int *result = order + 2 * count
        cdef int *taken = order + 3 * count
        cdef int n = 0, i, rank
        cdef unsigned long long value
        cdef Py_ssize_t start
        for i in range(count):
            if order[i] != recorded:
                others[n] = order[i]
                n += 1
            taken[i] = 0
        self.p = positions[2 * recorded + 1]
        self.expect(91)  # '['
        i = 0
        if not self.closes(93):
            while True:
                self.skip_ws()
                start = self.p
                value = 0
                while self.p < self.size and 48 <= self.text[self.p] <= 57 and self.p - start < 10:
                    value = value * 10 + (self.text[self.p] - 48)
                    self.p += 1
                if self.p == start or (self.text[start] == 48 and self.p - start > 1):
                    raise _NotPlain()  # not a plain non-negative JSON integer
                if value >= <unsigned long long>n or i >= n or taken[value]:
                    raise _NotPlain()
                taken[value] = 1
                result[i] = others[value]
                i += 1
                if not self.more(93):
                    break
        if i != n:
            raise _NotPlain()
        # The array ends where the member does.
        self.skip_ws()
        if self.p >= self.size or (self.text[self.p] != 44 and self.text[self.p] != 125):
            raise _NotPlain()
        return 0

    cdef int member(self, int index, Py_ssize_t *positions, bytes keys, int depth) except -1:
        cdef Py_ssize_t start = positions[2 * index - 2] if index else 0
        cdef Py_ssize_t end = positions[2 * index]
        write_head(&self.out, 88, end - start)  # BINUNICODE
        out_write(&self.out, PyBytes_AS_STRING(keys) + start, end - start)
        self.p = positions[2 * index + 1]
        self.value(depth + 1)
        # The value ends where the member does (skip_value found the end by delimiters only:
        # "01", "1x" or "nullnull" must not pass as the value read first).
        self.skip_ws()
        if self.p >= self.size or (self.text[self.p] != 44 and self.text[self.p] != 125):
            raise _NotPlain()
        return 0

    cdef int key_compare(self, int a, int b, Py_ssize_t *positions):
        cdef Py_ssize_t sa = positions[2 * a - 2] if a else 0
        cdef Py_ssize_t sb = positions[2 * b - 2] if b else 0
        cdef Py_ssize_t la = positions[2 * a] - sa, lb = positions[2 * b] - sb
        cdef int result
        if la != lb:
            return -1 if la < lb else 1
        result = memcmp(self.keys.data + sa, self.keys.data + sb, la)
        return result

    cdef void sort_keys(self, int *order, int *scratch, int count, Py_ssize_t *positions):
        """Stable merge sort of member indexes by jsonb's key order."""
        cdef int middle, i, j, k
        if count < 2:
            return
        middle = count // 2
        self.sort_keys(order, scratch, middle, positions)
        self.sort_keys(order + middle, scratch, count - middle, positions)
        i, j, k = 0, middle, 0
        while i < middle and j < count:
            if self.key_compare(order[j], order[i], positions) < 0:
                scratch[k] = order[j]
                j += 1
            else:
                scratch[k] = order[i]
                i += 1
            k += 1
        while i < middle:
            scratch[k] = order[i]
            i += 1
            k += 1
        while j < count:
            scratch[k] = order[j]
            j += 1
            k += 1
        memcpy(order, scratch, count * sizeof(int))

    cdef int skip_value(self, int depth) except -1:
        """Move p past one JSON value, checking only what finding its end needs."""
        cdef unsigned char c
        cdef int level = 0
        cdef const unsigned char *quote
        cdef Py_ssize_t backslashes
        self.skip_ws()
        while True:
            if self.p >= self.size:
                raise _NotPlain()
            c = self.text[self.p]
            if c == 34:
                self.p += 1
                while True:
                    quote = <const unsigned char *>memchr(self.text + self.p, 34, self.size - self.p)
                    if quote == NULL:
                        raise _NotPlain()
                    # The quote ends the string unless an odd number of backslashes precede it.
                    backslashes = 0
                    while quote - backslashes - 1 >= self.text + self.p and (quote - backslashes - 1)[0] == 92:
                        backslashes += 1
                    self.p = quote - self.text + 1
                    if backslashes % 2 == 0:
                        break
            elif c == 123 or c == 91:
                level += 1
                if depth + level > MAX_DEPTH:
                    raise _TooDeep()
                self.p += 1
            elif c == 125 or c == 93:
                level -= 1
                if level < 0:
                    raise _NotPlain()
                self.p += 1
            else:
                self.p += 1
            if level == 0:
                # A scalar ends at the next delimiter; a container or string just closed.
                if c != 34 and c != 125 and c != 93:
                    while self.p < self.size and self.text[self.p] not in (44, 125, 93, 32, 10, 13, 9):
                        self.p += 1
                return 0

    cdef int tag(self, const char *key, Py_ssize_t size, int depth) except -1:
        """The body at p of a one-member object whose key starts with '@'."""
        cdef unsigned char c
        cdef unsigned char oid[8]
        self.skip_ws()
        if size == 2 and key[1] == 116:  # @t
            self.expect(91)
            self.tuple_items(depth)
            return 0
        if size == 4 and memcmp(key, b"@ref", 4) == 0:
            self.skip_ws()
            if self.p < self.size and self.text[self.p] == 34:
                self.p += 1
                self.read_oid(oid)
                self.write_oid(oid)
                out_byte(&self.out, 81)  # BINPERSID
                return 0
            self.expect(91)
            self.expect(34)
            self.read_oid(oid)
            self.write_oid(oid)
            self.expect(44)
            self.expect(34)
            self.names_scratch()
            self.expect(93)
            out_byte(&self.out, 0x86)  # TUPLE2
            out_byte(&self.out, 81)    # BINPERSID
            return 0
        if size == 2 and key[1] == 98:  # @b
            self.expect(34)
            self.base64()
            return 0
        if size == 7 and memcmp(key, b"@global", 7) == 0:
            self.expect(34)
            self.names_scratch()
            return 0
        if size == 5 and memcmp(key, b"@dict", 5) == 0:
            self.expect(91)
            out_byte(&self.out, 125)  # EMPTY_DICT
            if self.closes(93):
                return 0
            out_byte(&self.out, 40)   # MARK
            while True:
                self.expect(91)
                self.value(depth + 2)
                self.expect(44)
                self.value(depth + 2)
                self.expect(93)
                if not self.more(93):
                    break
            out_byte(&self.out, 117)  # SETITEMS
            return 0
        if size == 4 and memcmp(key, b"@int", 4) == 0:
            self.expect(34)
            self.int_text()
            return 0
        raise _NotPlain()

    cdef int tuple_items(self, int depth) except -1:
        """@t: items then TUPLE1-3, or MARK items TUPLE; the array's '[' is read."""
        cdef Py_ssize_t mark_at = self.out.size
        cdef int count
        out_byte(&self.out, 40)  # MARK, removed again for short tuples
        count = self.items_unmarked(depth)
        if count == 0:
            self.out.size = mark_at
            out_byte(&self.out, 41)  # EMPTY_TUPLE
        elif count <= 3:
            memmove_left(&self.out, mark_at)
            out_byte(&self.out, 0x84 + count)
        else:
            out_byte(&self.out, 116)  # TUPLE
        return 0

    cdef int items_unmarked(self, int depth) except -1:
        cdef int count = 0
        if self.closes(93):
            return 0
        while True:
            self.value(depth + 1)
            count += 1
            if not self.more(93):
                return count

    cdef int read_oid(self, unsigned char *oid) except -1:
        cdef int i
        cdef unsigned int high, low
        if self.p + 17 > self.size or self.text[self.p + 16] != 34:
            raise _NotPlain()
        for i in range(8):
            high = hex_digit(self.text[self.p + 2 * i])
            low = hex_digit(self.text[self.p + 2 * i + 1])
            oid[i] = (high << 4) | low
        self.p += 17
        return 0

    cdef int write_oid(self, unsigned char *oid) except -1:
        out_byte(&self.out, 67)  # SHORT_BINBYTES
        out_byte(&self.out, 8)
        out_write(&self.out, <char *>oid, 8)
        return 0

    cdef int names_scratch(self) except -1:
        """A dotted global name string (after its quote): GLOBAL, memoized."""
        cdef Py_ssize_t start = self.p
        while self.p < self.size and self.text[self.p] != 34:
            if self.text[self.p] == 92:
                raise _NotPlain()
            self.p += 1
        if self.p >= self.size:
            raise _NotPlain()
        self.p += 1
        return self.write_global(self.text + start, self.p - 1 - start)

    cdef int base64(self) except -1:
        """@b: standard base64 with padding (what b64decode(validate=True) takes, no newlines)."""
        cdef Py_ssize_t start = self.p, end, n, i, size
        cdef unsigned int quad, v
        cdef int pad = 0, k
        while self.p < self.size and self.text[self.p] != 34:
            self.p += 1
        if self.p >= self.size:
            raise _NotPlain()
        end = self.p
        self.p += 1
        n = end - start
        if n % 4:
            raise _NotPlain()
        if n and self.text[end - 1] == 61:
            pad = 1
            if self.text[end - 2] == 61:
                pad = 2
        size = n // 4 * 3 - pad
        write_bytes_head(&self.out, size)
        out_reserve(&self.out, size + 3)
        i = start
        while i < end:
            quad = 0
            for k in range(4):
                if i + k >= end - pad and end - i <= 4:
                    v = 0  # padding
                else:
                    v = b64_value(self.text[i + k])
                quad = (quad << 6) | v
            out_byte(&self.out, (quad >> 16) & 0xff)
            if i + 4 < end or pad < 2:
                out_byte(&self.out, (quad >> 8) & 0xff)
            if i + 4 < end or pad < 1:
                out_byte(&self.out, quad & 0xff)
            if i + 4 >= end and pad and (quad & ((1 << (8 * pad)) - 1)):
                raise _NotPlain()  # bits set in the padding: b64decode would drop them
            i += 4
        return 0

    cdef int int_text(self) except -1:
        """@int: a decimal string (after its quote); beyond int64 is not this subset."""
        cdef Py_ssize_t start = self.p
        while self.p < self.size and self.text[self.p] != 34:
            self.p += 1
        if self.p >= self.size:
            raise _NotPlain()
        literal = PyBytes_FromStringAndSize(<const char *>self.text + start, self.p - start)
        self.p += 1
        try:
            number = int(literal)
        except ValueError:
            raise _NotPlain()
        if not -0x8000000000000000 <= number <= 0x7fffffffffffffff:
            raise _NotPlain()
        return write_int(&self.out, number)


cdef inline unsigned int hex_digit(unsigned char c) except 99:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    raise _NotPlain()


cdef inline unsigned int b64_value(unsigned char c) except 99:
    if 65 <= c <= 90:
        return c - 65
    if 97 <= c <= 122:
        return c - 71
    if 48 <= c <= 57:
        return c + 4
    if c == 43:
        return 62
    if c == 47:
        return 63
    raise _NotPlain()


cdef int memmove_left(Out *out, Py_ssize_t at) except -1:
    """Remove the byte at ``at`` (a MARK that a short tuple does not use)."""
    cdef Py_ssize_t i
    for i in range(at, out.size - 1):
        out.data[i] = out.data[i + 1]
    out.size -= 1
    return 0


cdef int utf8_write(Out *out, unsigned int code) except -1:
    cdef char buffer[4]
    if code < 0x80:
        buffer[0] = code
        return out_write(out, buffer, 1)
    if code < 0x800:
        buffer[0] = 0xc0 | (code >> 6)
        buffer[1] = 0x80 | (code & 0x3f)
        return out_write(out, buffer, 2)
    if code < 0x10000:
        buffer[0] = 0xe0 | (code >> 12)
        buffer[1] = 0x80 | ((code >> 6) & 0x3f)
        buffer[2] = 0x80 | (code & 0x3f)
        return out_write(out, buffer, 3)
    buffer[0] = 0xf0 | (code >> 18)
    buffer[1] = 0x80 | ((code >> 12) & 0x3f)
    buffer[2] = 0x80 | ((code >> 6) & 0x3f)
    buffer[3] = 0x80 | (code & 0x3f)
    return out_write(out, buffer, 4)


# -- the module's functions ---------------------------------------------------------------


def float_repr(double value):
    """repr(value) as the fast path writes it, or None where dtoa decides (for the tests)."""
    cdef char buffer[32]
    cdef int length = short_float(value, buffer)
    return buffer[:length].decode("ascii") if length else None


def float_parse(str text):
    """float(text) of a plain decimal as the decoder reads it without dtoa, or None where dtoa
    decides (for the tests)."""
    cdef bytes data = text.encode("ascii")
    cdef const unsigned char *p = data
    cdef Py_ssize_t size = len(data), start = 0, integer_end, fraction, i
    cdef bint negative = size > 0 and p[0] == 45
    cdef unsigned long long q
    cdef int k
    cdef double value
    if negative:
        start = 1
    integer_end = start
    while integer_end < size and 48 <= p[integer_end] <= 57:
        integer_end += 1
    fraction = integer_end
    if integer_end < size and p[integer_end] == 46:
        fraction = integer_end + 1
    for i in range(fraction, size):
        if not 48 <= p[i] <= 57:
            raise ValueError(text)
    if decimal_digits(p, start, integer_end, fraction, size, &q, &k) and exact_decimal(q, k, negative, &value):
        return value
    return None


def scan(bytes record):
    """(class name, JSON text, refs, rebuilt record) of a record in the plain subset, else None.

    ``refs`` are the 8-byte oids of its persistent references, first occurrence first, each once.
    The record itself is reproduced from what was read before anything is returned.
    """
    cdef _Tree tree = _Tree()
    cdef Out out
    cdef list refs = []
    cdef set seen = set()
    try:
        if not tree.parse(record) or not tree.reproduces():
            return None
        out.data = NULL
        out.size = out.capacity = 0
        try:
            tree.emit_json(&out, tree.root, 0, refs, seen)
            if out.size > tree.json_limit:
                return None
            text = PyUnicode_DecodeUTF8(out.data, out.size, "strict")
        finally:
            PyMem_Free(out.data)
        return tree.dotted(tree.meta), text, refs, tree.rebuilt()
    except _NotPlain:
        return None


def encode(bytes record):
    """``scan``, checked: its result when the JSON text decodes (with ``decode``, as loads do, in
    jsonb's key order) to exactly the record predicted from what was read; else None, and the
    reference path decides."""
    scanned = scan(record)
    if scanned is None:
        return None
    rebuilt = decode(scanned[0], scanned[1], True)
    if rebuilt is None or rebuilt != scanned[3]:
        return None
    return scanned


def rebuild(bytes record):
    """The record decode_record writes (in jsonb's key order) from the JSON of a record in the
    subset, written from what was read (what ``scan`` returns last); else None."""
    cdef _Tree tree = _Tree()
    try:
        if not tree.parse(record) or not tree.reproduces():
            return None
        return tree.rebuilt()
    except _NotPlain:
        return None


def decode(str class_name, text, bint jsonb_order=False):
    """The record ``decode_record(class_name, json.loads(text), jsonb_order)`` returns, byte for
    byte, when the JSON is in the subset this decoder reads; else None."""
    cdef _Decoder decoder = _Decoder()
    cdef bytes data
    cdef bytes name
    try:
        data = text.encode("utf-8") if type(text) is str else bytes(text)
        name = class_name.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: not this subset
        return None
    decoder.text = <const unsigned char *>PyBytes_AS_STRING(data)
    decoder.size = PyBytes_GET_SIZE(data)
    decoder.p = 0
    decoder.jsonb_order = jsonb_order
    try:
        out_write(&decoder.out, b"\x80\x03", 2)
        decoder.write_global(<const unsigned char *>PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name))
        out_write(&decoder.out, b".\x80\x03", 3)
        # A whole state that is @record or @exact is the reference's (tag() refuses them).
        decoder.value(0)
        decoder.skip_ws()
        if decoder.p != decoder.size:
            return None
        out_byte(&decoder.out, 46)  # STOP
        return PyBytes_FromStringAndSize(decoder.out.data, decoder.out.size)
    except _NotPlain:
        return None
