# cython: language_level=3
"""confluent-kafka's Message, compiled: the record path of kwire.confluent.

The pure-Python twin is ``kwire.confluent._types.Message`` (the reference, same API; chosen when
this extension is missing or ``KWIRE_PURE=1``).  A consumed Message holds the kwire Record it
wraps and reads its fields on demand; ``set_*()`` or construction moves the fields into a dict
first.  ``wrap_list`` wraps a consume() batch in one C loop.

Messages do not take part in cyclic garbage collection (they are created by the million, as
kwire's Records): do not make a value set with ``set_value()`` point back to its Message.
"""
cimport cython
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF

IMPLEMENTATION = "cython"

cdef object _NOT_AVAILABLE_TS = (0, 0)


@cython.no_gc
@cython.freelist(1024)
cdef class Message:
    """A consumed or produced message, or an event (``error()`` is not None), with
    confluent-kafka's methods.  Constructible with confluent-kafka's keywords."""

    cdef object _r   # the kwire Record, or None
    cdef dict _f     # the fields, once set or constructed

    def __init__(self, topic=None, partition=None, offset=None, key=None, value=None,
                 headers=None, error=None, timestamp=None, latency=None, leader_epoch=None):
        if timestamp is not None and (not isinstance(timestamp, tuple) or len(timestamp) != 2):
            raise TypeError("timestamp must be a tuple of (int, int)")
        self._r = None
        self._f = {
            "topic": topic,
            "partition": None if partition is None or partition < 0 else partition,
            "offset": None if offset is None or offset < 0 else offset,
            "key": key, "value": value, "headers": headers, "error": error,
            "timestamp": _NOT_AVAILABLE_TS if timestamp is None else
            (int(timestamp[0]), int(timestamp[1])),
            "latency": None if latency is None or latency < 0 else float(latency),
            "leader_epoch": None if leader_epoch is None or leader_epoch < 0 else leader_epoch,
        }

    def topic(self):
        if self._f is None:
            return self._r.topic
        return self._f["topic"]

    def partition(self):
        if self._f is None:
            return self._r.partition
        return self._f["partition"]

    def offset(self):
        if self._f is None:
            return self._r.offset
        return self._f["offset"]

    def key(self):
        if self._f is None:
            return self._r.key
        return self._f["key"]

    def value(self):
        if self._f is None:
            return self._r.value
        return self._f["value"]

    def headers(self):
        if self._f is None:
            return self._r.headers or None
        return self._f["headers"]

    def timestamp(self):
        if self._f is None:
            # kwire: 0 CreateTime, 1 LogAppendTime, -1 none; confluent-kafka: 1, 2, 0
            return (self._r.timestamp_type + 1, self._r.timestamp)
        return self._f["timestamp"]

    def error(self):
        if self._f is None:
            return None
        return self._f["error"]

    def leader_epoch(self):
        if self._f is None:
            e = self._r.leader_epoch
            return e if e >= 0 else None
        return self._f["leader_epoch"]

    def deserialized_key(self):
        """The key (after a DeserializingConsumer: the deserialized object)."""
        return self.key()

    def deserialized_value(self):
        """The value (after a DeserializingConsumer: the deserialized object)."""
        return self.value()

    def delivery_count(self):
        """Share groups only (KIP-932), which kwire does not implement: None."""
        return None

    def latency(self):
        if self._f is None:
            return None
        return self._f["latency"]

    def __len__(self):
        v = self.value()
        return 0 if v is None else len(v)

    cdef dict _fields(self):
        if self._f is None:
            r = self._r
            self._f = {
                "topic": r.topic, "partition": r.partition, "offset": r.offset, "key": r.key,
                "value": r.value, "headers": r.headers or None, "error": None,
                "timestamp": (r.timestamp_type + 1, r.timestamp), "latency": None,
                "leader_epoch": r.leader_epoch if r.leader_epoch >= 0 else None,
            }
            self._r = None
        return self._f

    def set_key(self, key):
        self._fields()["key"] = key

    def set_value(self, value):
        self._fields()["value"] = value

    def set_headers(self, headers):
        self._fields()["headers"] = headers

    def set_topic(self, topic):
        self._fields()["topic"] = topic

    def set_error(self, error):
        self._fields()["error"] = error

    def _values(self):
        return (self.topic(), self.partition(), self.offset(), self.key(), self.value(),
                self.headers(), self.error(), self.timestamp(), self.latency(), self.leader_epoch())

    def __eq__(self, other):
        if other is self:
            return True
        if not isinstance(other, Message):
            return False
        a = self._values()
        b = (<Message>other)._values()
        return a[:8] == b[:8] and a[9] == b[9]  # latency is not compared, as in confluent-kafka

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return id(self) >> 4

    def __reduce__(self):
        v = self._values()
        return (Message, (v[0], -1 if v[1] is None else v[1], -1 if v[2] is None else v[2],
                          v[3], v[4], v[5], v[6], v[7], -1.0 if v[8] is None else v[8],
                          -1 if v[9] is None else v[9]))

    def __repr__(self):
        e = self.error()
        return (f"<Message {self.topic()}[{self.partition()}]@{self.offset()}"
                f"{' error=' + repr(e) if e is not None else ''}>")


cdef inline Message _new_wrap(object r):
    cdef Message m = Message.__new__(Message)
    m._r = r
    return m


def wrap(r):
    """A Message over one kwire Record."""
    return _new_wrap(r)


def wrap_list(list records):
    """Messages over a list of kwire Records (a consume() batch)."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(records)
    cdef list out = PyList_New(n)
    cdef Message m
    for i in range(n):
        m = _new_wrap(<object>PyList_GET_ITEM(records, i))
        Py_INCREF(m)
        PyList_SET_ITEM(out, i, m)
    return out


def make(dict fields):
    """A Message from its fields dict (events, delivery reports): no argument parsing."""
    cdef Message m = Message.__new__(Message)
    m._f = fields
    return m
