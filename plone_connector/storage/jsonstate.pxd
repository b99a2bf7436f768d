# Typing for the compiled build of jsonstate.py (see hatch_build.py); the .py is the reference.

from plone_connector.storage.jsonstate_tree cimport Node

cdef class _Encoder:
    cdef public set shared
    cdef public dict seen
    cdef public set duplicates
    cdef public dict numbers
    cdef public Py_ssize_t depth
    cdef public Py_ssize_t items
    cdef public Py_ssize_t chars
    cdef public set open

    cpdef enter(self, Py_ssize_t items=*)
    cpdef charge(self, Py_ssize_t items)
    cpdef spend(self, Py_ssize_t chars)

    cpdef object track(self, object value)
    cpdef object wrap(self, object value, object body)
    cpdef number(self, object value)
    cpdef object enc(self, object value)
    cpdef object enc_tuple(self, tuple value)
    cpdef list enc_items(self, object values)
    cpdef object enc_dict(self, dict value)
    cpdef object enc_ref(self, object pid)
    cpdef object enc_node(self, Node node)
    cpdef object enc_call(self, Node node)
