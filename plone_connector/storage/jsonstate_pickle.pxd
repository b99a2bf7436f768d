# Typing for the compiled build of jsonstate_pickle.py (see hatch_build.py); the .py is the reference.

cdef class RecordWriter:
    cdef public list out
    cdef public Py_ssize_t memo_size
    cdef public dict global_memo
    cdef public object root
    cdef public dict shared_memo
    cdef public object shared_defs
    cdef public set in_progress
    cdef public Py_ssize_t depth
    cdef public bint jsonb_order
    cdef public list hoist_boundaries
    cdef public bint hoisted_build
    cdef public bint orders
    cdef public Py_ssize_t open_tuples
    cdef public dict open_nodes

    cpdef enter(self)
    cpdef Py_ssize_t put(self) except -1
    cpdef get(self, Py_ssize_t index)
    cpdef created(self, object share)
    cpdef write_global(self, object dotted)
    cpdef write_str(self, str text)
    cpdef write_bytes(self, bytes data)
    cpdef write_int(self, object value)
    cpdef write_float(self, double value)
    cpdef write_values(self, object values)
    cpdef write_tuple(self, list items)
    cpdef write_items(self, list items)
    cpdef write_dictitems(self, list pairs)
    cpdef value(self, object value, object share=*)
    cpdef open_list(self, list value)
    cpdef write_dict(self, dict value, object share)
    cpdef write_members(self, dict value)
    cpdef call(self, object body, object share, bint newobj)
    cpdef call_operations(self, dict body)
    cpdef persistent_id(self, object write_pid)
    cpdef back_reference(self, object number)


# Tag handlers without closures: direct calls into the writer.
cpdef _tuple(RecordWriter w, object body, object share)
cpdef _bytes(RecordWriter w, object body, object share)
cpdef _str(RecordWriter w, object body, object share)
cpdef _int(RecordWriter w, object body, object share)
cpdef _float(RecordWriter w, object body, object share)
cpdef _dict(RecordWriter w, object body, object share)
cpdef _set(RecordWriter w, object body, object share)
cpdef _frozenset(RecordWriter w, object body, object share)
cpdef _global(RecordWriter w, object body, object share)
cpdef _ref(RecordWriter w, object body, object share)
cpdef _reduce(RecordWriter w, object body, object share)
cpdef _obj(RecordWriter w, object body, object share)
cpdef _datetime(RecordWriter w, object body, object share)
cpdef _date(RecordWriter w, object body, object share)
cpdef _time(RecordWriter w, object body, object share)
cpdef _decimal(RecordWriter w, object body, object share)
cpdef _zope_datetime(RecordWriter w, object body, object share)
cpdef _shared(RecordWriter w, object body, object share)
cpdef _same(RecordWriter w, object body, object share)
