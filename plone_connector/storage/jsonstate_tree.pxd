# Typing for the compiled build of jsonstate_tree.py (see hatch_build.py); the .py is the reference.

cdef class Node:
    cdef public object kind
    cdef public object func
    cdef public object args
    cdef public list ops


cdef class Ref:
    cdef public object pid


cdef class _PersistentIds:
    cdef public list pids


cdef class _Comparison:
    cdef bint ordered
    cdef dict pairs
    cdef dict back
    cdef dict open
    cdef dict open_back
    cdef Py_ssize_t depth
    cpdef enter(self)
    cpdef bint same(self, object a, object b) except -1
    cpdef bint same_calls(self, Node a, Node b) except -1
    cpdef bint same_tuples(self, tuple a, tuple b) except -1
    cpdef bint same_items(self, object a, object b) except -1
    cpdef bint same_dicts(self, dict a, dict b) except -1
