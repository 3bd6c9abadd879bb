/* The compiled core of the data path's walks: the request header peek, the Produce request walk and the
 * Produce response scan, the framing's split of a whole frame, in C over the frame's bytes (one buffer acquisition per call, no Python object per
 * field).
 *
 * Optional: scripts/compile (and the image's compiled wheel) builds it as insync_proxy.protocol._wire; without
 * it the same walks run in Python (protocol/headers.py, protocol/produce.py), which stay the reference. Each
 * function here is a fast path for frames that read cleanly: it answers None for anything else (a cut or
 * malformed frame, an unusual shape such as a non-empty tag section or a failed partition), and the Python
 * walk then gives the answer or the precise error. tests/protocol/test_wire_core.py holds the two to the same
 * results on every frame the tests build, and on cut and corrupted ones.
 *
 * The Produce grammar is generated from Kafka's specs (protocol/_wire_walkers.h, from the same capture IR as the
 * Python walks of protocol/kafka_walkers.py: the request and response walks, where acks starts): this file holds
 * their hooks (the Python objects they build, the record-batch header peek) and the request header peek.
 *
 * Sans-IO like the rest of protocol/: bytes in, Python values out. The other wire facts it needs by version (which
 * versions of which API are flexible, Produce's highest) come from the generated tables through `configure`,
 * called once by protocol/native.py; before that every function answers None.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ the facts, from the generated tables */
#define MAX_API_KEYS 256
#define MAX_PRODUCE_VERSIONS 32

static int configured = 0;
/* First flexible version of each API key; 255: never flexible; keys above last_api_key are flexible. */
static unsigned char first_flexible[MAX_API_KEYS];
static int last_api_key = -1;
static int controlled_shutdown_key = 7;
static int produce_max_version = -1;
static int produce_flexible_since = 9;

/* ------------------------------------------------------------------ readers: 0 on success, -1 past the end */
typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} Frame;

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static inline int16_t be16(const unsigned char *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

/* An unsigned varint of at most 5 bytes and 32 bits at *pos. */
static inline int uvarint(const Frame *f, Py_ssize_t *pos, int64_t *out) {
    Py_ssize_t at = *pos;
    if (at < 0 || at >= f->n) return -1;
    unsigned char b = f->p[at];
    if (b < 0x80) {
        *out = b;
        *pos = at + 1;
        return 0;
    }
    uint64_t result = b & 0x7F;
    int shift = 7;
    at++;
    for (int i = 0; i < 4; i++) {
        if (at >= f->n) return -1;
        b = f->p[at++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            if (result > 0xFFFFFFFFu) return -1;
            *out = (int64_t)result;
            *pos = at;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* An ARRAY (int32, -1 null) or COMPACT_ARRAY (uvarint N+1, 0 null) length that fits in the bytes left. */
static inline int array_length(const Frame *f, Py_ssize_t *pos, int compact, int64_t *out) {
    int64_t count;
    if (compact) {
        if (uvarint(f, pos, &count) < 0) return -1;
        count -= 1;
    } else {
        if (*pos < 0 || *pos + 4 > f->n) return -1;
        count = be32(f->p + *pos);
        *pos += 4;
        if (count < -1) return -1;
    }
    if (count > f->n - *pos) return -1;
    *out = count;
    return 0;
}

/* Past an empty tagged-field section; a non-empty one is left to the Python walk. */
static inline int empty_tags(const Frame *f, Py_ssize_t *pos) {
    if (*pos < 0 || *pos >= f->n || f->p[*pos] != 0) return -1;
    *pos += 1;
    return 0;
}

/* A (compact) nullable string's length, -1 for null. */
static inline int string_length(const Frame *f, Py_ssize_t *pos, int flexible, int64_t *out) {
    if (flexible) {
        int64_t length;
        if (uvarint(f, pos, &length) < 0) return -1;
        *out = length - 1;
        return 0;
    }
    if (*pos < 0 || *pos + 2 > f->n) return -1;
    int64_t length = be16(f->p + *pos);
    if (length < -1) return -1;
    *pos += 2;
    *out = length;
    return 0;
}

/* A tuple of `n` new references (stolen, NULL-checked: a NULL item fails it and releases the others). Cheaper
 * than Py_BuildValue, which parses its format at every call. */
static PyObject *tuple_of(Py_ssize_t n, PyObject **items) {
    PyObject *tuple = NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (items[i] == NULL) goto fail;
    tuple = PyTuple_New(n);
    if (tuple == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(tuple, i, items[i]);
    return tuple;
fail:
    for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(items[i]);
    return NULL;
}

static int acquire(PyObject *obj, Py_buffer *view, Frame *f) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    f->p = (const unsigned char *)view->buf;
    f->n = view->len;
    return 0;
}

/* The generated walks (their hooks are below). */
#include "_wire_walkers.h"

/* ------------------------------------------------------------------ configure */
PyDoc_STRVAR(configure_doc,
"configure(first_flexible, controlled_shutdown, produce_max_version, produce_flexible_since)\n"
"\n"
"The wire facts by version, from the generated tables: `first_flexible` maps API key -> first flexible\n"
"version (keys above the highest are flexible, absent ones never).");

static PyObject *wire_configure(PyObject *self, PyObject *args) {
    PyObject *flexible;
    int cs, pmax, pflex;
    if (!PyArg_ParseTuple(args, "O!iii", &PyDict_Type, &flexible, &cs, &pmax, &pflex)) return NULL;
    if (pmax < 0 || pmax >= MAX_PRODUCE_VERSIONS) {
        PyErr_Format(PyExc_ValueError, "produce_max_version %d outside 0..%d", pmax, MAX_PRODUCE_VERSIONS - 1);
        return NULL;
    }
    unsigned char table[MAX_API_KEYS];
    memset(table, 255, sizeof table);
    int last = -1;
    PyObject *key, *value;
    Py_ssize_t it = 0;
    while (PyDict_Next(flexible, &it, &key, &value)) {
        long k = PyLong_AsLong(key);
        if (k == -1 && PyErr_Occurred()) return NULL;
        if (k < 0 || k >= MAX_API_KEYS - 1) {
            PyErr_Format(PyExc_ValueError, "API key %ld outside 0..%d", k, MAX_API_KEYS - 2);
            return NULL;
        }
        if (k > last) last = (int)k;
        if (value == Py_None) continue;
        long v = PyLong_AsLong(value);
        if (v == -1 && PyErr_Occurred()) return NULL;
        if (v < 0 || v >= 255) {
            PyErr_Format(PyExc_ValueError, "first flexible version %ld of API key %ld outside 0..254", v, k);
            return NULL;
        }
        table[k] = (unsigned char)v;
    }
    memcpy(first_flexible, table, sizeof table);
    last_api_key = last;
    controlled_shutdown_key = cs;
    produce_max_version = pmax;
    produce_flexible_since = pflex;
    configured = 1;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ the request header */
PyDoc_STRVAR(peek_request_header_doc,
"peek_request_header(frame, cached_client_id) -> (api_key, api_version, correlation_id, client_id, header_size)\n"
"| None\n"
"\n"
"A request header v1 or v2 (size prefix stripped). `client_id` is None (null), `cached_client_id` itself when\n"
"its bytes are those (the caller's decoded copy applies), or the raw bytes (not decoded). None: header v0, a\n"
"non-empty tag section, or anything cut or malformed.");

static PyObject *wire_peek_request_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "peek_request_header(frame, cached_client_id)");
        return NULL;
    }
    if (!configured) Py_RETURN_NONE;
    Py_buffer view;
    Frame f;
    if (acquire(args[0], &view, &f) < 0) return NULL;
    PyObject *result = NULL;
    if (f.n < 10) goto fallback;
    int api_key = be16(f.p), api_version = be16(f.p + 2);
    int32_t correlation_id = be32(f.p + 4);
    int flexible;
    if (api_key < 0) {
        flexible = 0;
    } else if (api_key > last_api_key) {
        flexible = api_version >= 0; /* Kafka's rule for keys above the highest known: flexible from v0 */
    } else {
        unsigned char first = first_flexible[api_key];
        flexible = first != 255 && api_version >= first;
    }
    if (api_key == controlled_shutdown_key && api_version == 0) goto fallback; /* header v0 */
    Py_ssize_t n = be16(f.p + 8), pos = 10;
    PyObject *client_id;
    if (n >= 0) {
        if (pos + n > f.n) goto fallback;
        PyObject *cached = args[1];
        if (PyBytes_CheckExact(cached) && PyBytes_GET_SIZE(cached) == n &&
            memcmp(PyBytes_AS_STRING(cached), f.p + pos, (size_t)n) == 0) {
            Py_INCREF(cached);
            client_id = cached;
        } else {
            client_id = PyBytes_FromStringAndSize((const char *)f.p + pos, n);
            if (client_id == NULL) goto done;
        }
        pos += n;
    } else if (n == -1) {
        Py_INCREF(Py_None);
        client_id = Py_None;
    } else {
        goto fallback;
    }
    if (flexible && empty_tags(&f, &pos) < 0) {
        Py_DECREF(client_id);
        goto fallback;
    }
    PyObject *items[5] = {PyLong_FromLong(api_key), PyLong_FromLong(api_version), PyLong_FromLong(correlation_id),
                          client_id, PyLong_FromSsize_t(pos)};
    result = tuple_of(5, items);
    goto done;
fallback:
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ Produce requests */
PyDoc_STRVAR(produce_acks_offset_doc,
"produce_acks_offset(frame, header_size) -> offset of acks | -1\n"
"\n"
"protocol/produce.py `produce_acks_offset` of a Produce request frame whose header is `header_size` bytes:\n"
"past transactional_id (v3+). -1: anything the Python reader would refuse.");

/* Where acks is in a Produce request whose header is `header_size` bytes: past transactional_id (v3+), generated
 * (protocol/_wire_walkers.h); -1 for a version outside the caps or a frame too short. */
static Py_ssize_t acks_offset_of(const Frame *f, Py_ssize_t header_size) {
    if (header_size < 0 || f->n < 4) return -1;
    Py_ssize_t at = produce_request_acks_at(be16(f->p + 2), f, header_size);
    return at >= 0 && at + 2 <= f->n ? at : -1;
}

static PyObject *wire_produce_acks_offset(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "produce_acks_offset(frame, header_size)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    Frame f;
    if (acquire(args[0], &view, &f) < 0) return NULL;
    Py_ssize_t offset = configured ? acks_offset_of(&f, pos) : -1;
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(offset);
}

/* How many records a record set holds from its batch headers (protocol/produce.py count_records); -1 where
 * they do not read cleanly. */
static int64_t count_records(const Frame *f, Py_ssize_t start, Py_ssize_t size) {
    Py_ssize_t end = start + size, pos = start;
    int64_t count = 0;
    while (pos + 12 <= end) {
        int32_t length = be32(f->p + pos + 8);
        if (length < 0) return -1;
        if (pos + 16 >= f->n) return -1;
        if (f->p[pos + 16] >= 2) {
            if (pos + 61 > end) return -1;
            count += be32(f->p + pos + 57);
        } else {
            count += 1;
        }
        pos += 12 + (Py_ssize_t)length;
    }
    return count;
}

/* The hooks of the generated Produce request walk (protocol/_wire_walkers.h): each partition appended to `out` as
 * (topic, partition, record bytes, records), the topic decoded once per topic (`topic` is that of the key at
 * `key_at`), the acks and where the walk ended kept for the caller. */
struct ProduceRequestWalk {
    const Frame *f;
    PyObject *topic_id; /* topic_id(raw16) -> the topic of a v13+ request */
    PyObject *out;
    PyObject *topic;
    const unsigned char *key_at;
    int64_t acks;
    Py_ssize_t end;
};

/* The last topic name decoded and its bytes: a producer's requests name the same topics again and again. */
static PyObject *last_topic = NULL;
static unsigned char last_topic_bytes[249]; /* Kafka's longest topic name */
static Py_ssize_t last_topic_length = -1;

/* The topic of a key: its name (UTF-8; -1 where it is not: the Python walk refuses it) or topic_id(raw). */
static int request_topic(ProduceRequestWalk *w, Key key) {
    if (w->topic != NULL && w->key_at == key.at) return 0;
    PyObject *topic;
    if (key.uuid) {
        PyObject *raw = PyBytes_FromStringAndSize((const char *)key.at, 16);
        if (raw == NULL) return -2;
        topic = PyObject_CallOneArg(w->topic_id, raw);
        Py_DECREF(raw);
        if (topic == NULL) return -2;
    } else if (last_topic != NULL && key.length == last_topic_length && memcmp(key.at, last_topic_bytes, key.length) == 0) {
        topic = Py_NewRef(last_topic); /* the topic of the last request: no decode, its hash kept */
    } else {
        topic = PyUnicode_DecodeUTF8((const char *)key.at, key.length, NULL);
        if (topic == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -2;
            PyErr_Clear();
            return -1;
        }
        if (key.length <= (Py_ssize_t)sizeof(last_topic_bytes)) {
            Py_XSETREF(last_topic, Py_NewRef(topic));
            memcpy(last_topic_bytes, key.at, key.length);
            last_topic_length = key.length;
        }
    }
    Py_XSETREF(w->topic, topic);
    w->key_at = key.at;
    return 0;
}

static int produce_request_partition_data(ProduceRequestWalk *w, Key key, Py_ssize_t key_end, int64_t index,
                                          Py_ssize_t records_start, int64_t records_size, Py_ssize_t start,
                                          Py_ssize_t tags_start, Py_ssize_t end) {
    const Frame *f = w->f;
    int64_t records = 0;
    if (records_size > 0) {
        records = -1;
        if (records_size >= 61) { /* one batch (what producers send) is counted from its header in one read */
            int32_t batch_length = be32(f->p + records_start + 8);
            signed char magic = (signed char)f->p[records_start + 16];
            records = be32(f->p + records_start + 57);
            if (magic < 2 || (int64_t)batch_length + 12 != records_size) records = -1;
        }
        if (records < 0) records = count_records(f, records_start, (Py_ssize_t)records_size);
        if (records < 0) return -1;
    }
    int rc = request_topic(w, key);
    if (rc < 0) return rc;
    Py_INCREF(w->topic);
    PyObject *items[4] = {w->topic, PyLong_FromLongLong(index), PyLong_FromLongLong(records_size > 0 ? records_size : 0),
                          PyLong_FromLongLong(records)};
    PyObject *row = tuple_of(4, items);
    if (row == NULL) return -2;
    int failed = PyList_Append(w->out, row);
    Py_DECREF(row);
    return failed ? -2 : 0;
}

static int produce_request_topic_data(ProduceRequestWalk *w, Key key, Py_ssize_t key_end, Py_ssize_t start,
                                      Py_ssize_t tags_start, Py_ssize_t end) {
    return request_topic(w, key); /* a topic without partitions: its name is read all the same */
}

static int produce_request(ProduceRequestWalk *w, int64_t acks, int64_t timeout_ms, Py_ssize_t start,
                           Py_ssize_t tags_start, Py_ssize_t end) {
    w->acks = acks;
    w->end = end;
    return 0;
}

/* The generated walk of a Produce request's partitions into a new list `w->out` (its reference the caller's,
 * like `w->topic`): 1 walked, 0 left to the Python walk, -1 an exception set. */
static int walk_partitions(const Frame *f, Py_ssize_t acks_offset, ProduceRequestWalk *w) {
    if (acks_offset < 0 || f->n < 4) return 0;
    w->out = PyList_New(0);
    if (w->out == NULL) return -1;
    /* the caller read the header: a version it accepted fits the low byte */
    int rc = walk_produce_request(f->p[3], f, acks_offset, w);
    if (rc == -2) return -1;
    return rc >= 0 && w->end == f->n ? 1 : 0;
}

PyDoc_STRVAR(walk_produce_request_doc,
"walk_produce_request(frame, acks_offset, topic_id) -> (acks, [(topic, partition, record bytes, records), ...])\n"
"| None\n"
"\n"
"protocol/produce.py `produce_partition_records` of a Produce request frame (header + body) whose acks is at\n"
"`acks_offset`; `topic_id(raw16)` gives the topic of a v13+ request. None: anything the Python walk would\n"
"refuse, or tags it would read.");

static PyObject *wire_walk_produce_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "walk_produce_request(frame, acks_offset, topic_id)");
        return NULL;
    }
    if (!configured) Py_RETURN_NONE;
    Py_ssize_t acks_offset = PyLong_AsSsize_t(args[1]);
    if (acks_offset == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    Frame f;
    if (acquire(args[0], &view, &f) < 0) return NULL;
    PyObject *result = NULL;
    ProduceRequestWalk w = {&f, args[2], NULL, NULL, NULL, 0, -1};
    int walked = walk_partitions(&f, acks_offset, &w);
    if (walked > 0) {
        PyObject *items[2] = {PyLong_FromLongLong(w.acks), w.out};
        w.out = NULL;
        result = tuple_of(2, items);
    } else if (walked == 0) {
        Py_INCREF(Py_None);
        result = Py_None;
    }
    Py_XDECREF(w.topic);
    Py_XDECREF(w.out);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(walk_produce_exchange_doc,
"walk_produce_exchange(frame, header_size, topic_id) -> (acks offset, acks, partitions | None) | None\n"
"\n"
"What a Produce exchange reads of its request in one call: `produce_acks_offset`, the acks there, and for acks\n"
"-1, 0 or 1 `walk_produce_request`'s partitions. None: the acks offset is left to the Python reader; partitions\n"
"None: other acks, or a request the Python walk reads (or refuses) itself.");

static PyObject *wire_walk_produce_exchange(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "walk_produce_exchange(frame, header_size, topic_id)");
        return NULL;
    }
    if (!configured) Py_RETURN_NONE;
    Py_ssize_t header_size = PyLong_AsSsize_t(args[1]);
    if (header_size == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    Frame f;
    if (acquire(args[0], &view, &f) < 0) return NULL;
    PyObject *result = NULL, *partitions = Py_None;
    ProduceRequestWalk w = {&f, args[2], NULL, NULL, NULL, 0, -1};
    Py_ssize_t acks_offset = acks_offset_of(&f, header_size);
    if (acks_offset < 0) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    int16_t acks = be16(f.p + acks_offset);
    if (acks >= -1 && acks <= 1) {
        int walked = walk_partitions(&f, acks_offset, &w);
        if (walked < 0) goto done;
        if (walked > 0) {
            partitions = w.out;
            w.out = NULL;
        }
    }
    if (partitions == Py_None) Py_INCREF(Py_None);
    PyObject *items[3] = {PyLong_FromSsize_t(acks_offset), PyLong_FromLong(acks), partitions};
    result = tuple_of(3, items);
done:
    Py_XDECREF(w.topic);
    Py_XDECREF(w.out);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ Produce responses */
/* The hooks of the generated Produce response scan: the partitions answered and where the responses end. */
struct ProduceResponseWalk {
    int64_t answered;
    Py_ssize_t end;
};

static int produce_response_partition_responses(ProduceResponseWalk *w, Key key, Py_ssize_t key_end, int64_t index,
                                                int64_t error_code, Py_ssize_t start, Py_ssize_t tags_start,
                                                Py_ssize_t end) {
    return -1; /* a failed partition: the Python walk names it */
}

static int produce_response(ProduceResponseWalk *w, int64_t partition_responses_count, Py_ssize_t start,
                            Py_ssize_t tags_start, Py_ssize_t end) {
    w->answered = partition_responses_count;
    w->end = end;
    return 0;
}

PyDoc_STRVAR(scan_produce_response_doc,
"scan_produce_response(frame, api_version) -> (partitions answered, where the responses end) | None\n"
"\n"
"protocol/produce.py `_walk_response` of a Produce response frame (header + body) in which no partition\n"
"failed. None: a failed partition (the Python walk names it), record errors, tags, or a frame that does not\n"
"read cleanly.");

static PyObject *wire_scan_produce_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "scan_produce_response(frame, api_version)");
        return NULL;
    }
    if (!configured) Py_RETURN_NONE;
    long version = PyLong_AsLong(args[1]);
    if (version == -1 && PyErr_Occurred()) return NULL;
    if (version < 0 || version > produce_max_version) Py_RETURN_NONE;
    Py_buffer view;
    Frame f;
    if (acquire(args[0], &view, &f) < 0) return NULL;
    PyObject *result = NULL;
    ProduceResponseWalk w = {0, -1};
    Py_ssize_t pos = 4; /* the correlation id, then (flexible) the response header's tags */
    if (f.n < 4) goto fallback;
    if (version >= produce_flexible_since && empty_tags(&f, &pos) < 0) goto fallback;
    if (walk_produce_response((int)version, &f, pos, &w) < 0 || w.end > f.n) goto fallback;
    PyObject *items[2] = {PyLong_FromLongLong(w.answered), PyLong_FromSsize_t(w.end)};
    result = tuple_of(2, items);
    goto done;
fallback:
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ framing */
/* The byte view of a memoryview the framing reads (one dimension of bytes, contiguous), or NULL: any other shape,
 * or a released view, is left to the Python reader. Read in place: no buffer acquisition. */
static const Py_buffer *byte_view(PyObject *obj) {
    if (!PyMemoryView_Check(obj)) return NULL;
    const PyMemoryViewObject *mv = (const PyMemoryViewObject *)obj;
    if (mv->flags & _Py_MEMORYVIEW_RELEASED) return NULL;
    const Py_buffer *b = &mv->view;
    if (b->ndim != 1 || b->itemsize != 1 || b->suboffsets != NULL || (b->strides != NULL && b->strides[0] != 1))
        return NULL;
    return b;
}

/* view[start:start + length] of a byte view: a new view of the same buffer, as slicing makes it, without the slice
 * object (the new view's shape is its own: memoryview keeps it in the object). */
static PyObject *view_slice(PyObject *view, Py_ssize_t start, Py_ssize_t length) {
    PyObject *sliced = PyMemoryView_FromObject(view);
    if (sliced == NULL) return NULL;
    Py_buffer *b = PyMemoryView_GET_BUFFER(sliced);
    b->buf = (char *)b->buf + start;
    b->len = length;
    b->shape[0] = length;
    return sliced;
}

PyDoc_STRVAR(split_frame_doc,
"split_frame(view, pos, max_frame_size) -> (framed, payload, end) | None\n"
"\n"
"protocol/framing.py `FrameStream.next` where a whole frame starts at `pos` of a memoryview of bytes: the frame\n"
"with its size prefix (`view` itself when it is that frame), without it (both views of `view`'s buffer) and where it\n"
"ends. None: anything else (fewer than 4 bytes, a size out of range or not all there yet, another kind of buffer):\n"
"the Python reader decides.");

static PyObject *wire_split_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "split_frame(view, pos, max_frame_size)");
        return NULL;
    }
    const Py_buffer *b = byte_view(args[0]);
    if (b == NULL) Py_RETURN_NONE;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t max_frame_size = PyLong_AsSsize_t(args[2]);
    if (max_frame_size == -1 && PyErr_Occurred()) return NULL;
    if (pos < 0 || b->len - pos < 4) Py_RETURN_NONE;
    int32_t size = be32((const unsigned char *)b->buf + pos);
    if (size < 0 || size > max_frame_size || size > b->len - pos - 4) Py_RETURN_NONE;
    /* A view that is one whole frame (a read of one frame: the common case) is its own framed view: no new one. */
    PyObject *framed;
    if (pos == 0 && 4 + (Py_ssize_t)size == b->len) {
        Py_INCREF(args[0]);
        framed = args[0];
    } else {
        framed = view_slice(args[0], pos, 4 + (Py_ssize_t)size);
    }
    PyObject *items[3] = {framed, view_slice(args[0], pos + 4, size), PyLong_FromSsize_t(pos + 4 + (Py_ssize_t)size)};
    return tuple_of(3, items);
}

PyDoc_STRVAR(is_whole_read_doc,
"is_whole_read(data, pieces) -> bool\n"
"\n"
"Whether `pieces` (a list) are byte views of `data` (bytes) whose sizes add up to its size: what a proxy gathered\n"
"from one read, each piece a view of it in stream order, is then the read itself (proxy/datapath/core.py `_as_read`).");

static PyObject *wire_is_whole_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "is_whole_read(data, pieces: list)");
        return NULL;
    }
    PyObject *data = args[0];
    Py_ssize_t n = PyList_GET_SIZE(args[1]);
    if (!PyBytes_CheckExact(data) || n == 0) Py_RETURN_FALSE;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *piece = PyList_GET_ITEM(args[1], i);
        const Py_buffer *b = byte_view(piece);
        if (b == NULL || b->obj != data) Py_RETURN_FALSE;
        total += b->len;
    }
    return PyBool_FromLong(total == PyBytes_GET_SIZE(data));
}

PyDoc_STRVAR(view_of_doc,
"view_of(data) -> memoryview\n"
"\n"
"memoryview(data), without the type call's argument parsing (protocol/framing.py's view of each read).");

static PyObject *wire_view_of(PyObject *self, PyObject *data) { return PyMemoryView_FromObject(data); }

PyDoc_STRVAR(int32_at_doc,
"int32_at(view, pos) -> int | None\n"
"\n"
"The big-endian int32 at `pos` of a memoryview of bytes (a frame's size, a correlation id). None: past its end, or\n"
"another kind of buffer (struct reads it).");

/* The big-endian int of `width` bytes (2 or 4) at args[1] of the byte view args[0]; None where it cannot be read. */
static PyObject *int_at(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t width, const char *usage) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    const Py_buffer *b = byte_view(args[0]);
    if (b == NULL) Py_RETURN_NONE;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    if (pos < 0 || b->len - pos < width) Py_RETURN_NONE;
    const unsigned char *at = (const unsigned char *)b->buf + pos;
    return PyLong_FromLong(width == 4 ? be32(at) : be16(at));
}

static PyObject *wire_int32_at(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return int_at(args, nargs, 4, "int32_at(view, pos)");
}

PyDoc_STRVAR(int16_at_doc,
"int16_at(view, pos) -> int | None\n"
"\n"
"The big-endian int16 at `pos` of a memoryview of bytes (a Produce request's acks). None: as `int32_at`.");

static PyObject *wire_int16_at(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return int_at(args, nargs, 2, "int16_at(view, pos)");
}

/* ------------------------------------------------------------------ the module */
static PyMethodDef wire_methods[] = {
    {"configure", (PyCFunction)wire_configure, METH_VARARGS, configure_doc},
    {"peek_request_header", (PyCFunction)(void (*)(void))wire_peek_request_header, METH_FASTCALL,
     peek_request_header_doc},
    {"produce_acks_offset", (PyCFunction)(void (*)(void))wire_produce_acks_offset, METH_FASTCALL,
     produce_acks_offset_doc},
    {"walk_produce_exchange", (PyCFunction)(void (*)(void))wire_walk_produce_exchange, METH_FASTCALL,
     walk_produce_exchange_doc},
    {"walk_produce_request", (PyCFunction)(void (*)(void))wire_walk_produce_request, METH_FASTCALL,
     walk_produce_request_doc},
    {"scan_produce_response", (PyCFunction)(void (*)(void))wire_scan_produce_response, METH_FASTCALL,
     scan_produce_response_doc},
    {"split_frame", (PyCFunction)(void (*)(void))wire_split_frame, METH_FASTCALL, split_frame_doc},
    {"is_whole_read", (PyCFunction)(void (*)(void))wire_is_whole_read, METH_FASTCALL, is_whole_read_doc},
    {"view_of", (PyCFunction)wire_view_of, METH_O, view_of_doc},
    {"int32_at", (PyCFunction)(void (*)(void))wire_int32_at, METH_FASTCALL, int32_at_doc},
    {"int16_at", (PyCFunction)(void (*)(void))wire_int16_at, METH_FASTCALL, int16_at_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT, "_wire",
    "The compiled core of the data path's walks (protocol/_wire.c); the Python walks are the reference.", -1,
    wire_methods,
};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&wire_module); }
