/* The compiled core of the data path's walks: the request header peek, the Produce request walk and the
 * Produce response scan, in C over the frame's bytes (one buffer acquisition per call, no Python object per
 * field).
 *
 * Optional: scripts/compile (and the image's compiled wheel) builds it as insync_proxy.protocol._wire; without
 * it the same walks run in Python (protocol/headers.py, protocol/produce.py), which stay the reference. Each
 * function here is a fast path for frames that read cleanly: it answers None for anything else (a cut or
 * malformed frame, an unusual shape such as a non-empty tag section or a failed partition), and the Python
 * walk then gives the answer or the precise error. tests/protocol/test_wire_core.py holds the two to the same
 * results on every frame the tests build, and on cut and corrupted ones.
 *
 * Sans-IO like the rest of protocol/: bytes in, Python values out. The wire facts it needs by version (which
 * versions are flexible, a Produce partition's fixed head) come from the generated tables through
 * `configure`, called once by protocol/produce.py; before that every function answers None.
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
static int produce_transactional_id_since = 3;
static int produce_request_topic_id_since = 13;
static int produce_response_topic_id_since = 13;
static int produce_record_errors_since = 8;
static Py_ssize_t produce_partition_fixed[MAX_PRODUCE_VERSIONS];

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

/* ------------------------------------------------------------------ configure */
PyDoc_STRVAR(configure_doc,
"configure(first_flexible, controlled_shutdown, produce_max_version, produce_flexible_since,\n"
"          produce_transactional_id_since, produce_request_topic_id_since, produce_response_topic_id_since, produce_record_errors_since,\n"
"          produce_partition_fixed)\n"
"\n"
"The wire facts by version, from the generated tables: `first_flexible` maps API key -> first flexible\n"
"version (keys above the highest are flexible, absent ones never), `produce_partition_fixed` is a Produce\n"
"response partition's fixed head by version.");

static PyObject *wire_configure(PyObject *self, PyObject *args) {
    PyObject *flexible, *fixed;
    int cs, pmax, pflex, ptxn, preq_id, presp_id, prec;
    if (!PyArg_ParseTuple(args, "O!iiiiiiiO", &PyDict_Type, &flexible, &cs, &pmax, &pflex, &ptxn, &preq_id,
                          &presp_id, &prec, &fixed))
        return NULL;
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
    Py_ssize_t fixed_table[MAX_PRODUCE_VERSIONS];
    PyObject *seq = PySequence_Fast(fixed, "produce_partition_fixed must be a sequence");
    if (seq == NULL) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != pmax + 1) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "produce_partition_fixed needs %d entries", pmax + 1);
        return NULL;
    }
    for (int v = 0; v <= pmax; v++) {
        Py_ssize_t width = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, v));
        if (width == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
        if (width < 6 || width > 1024) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "partition head of Produce v%d is %zd bytes", v, width);
            return NULL;
        }
        fixed_table[v] = width;
    }
    Py_DECREF(seq);
    memcpy(first_flexible, table, sizeof table);
    last_api_key = last;
    controlled_shutdown_key = cs;
    produce_max_version = pmax;
    produce_flexible_since = pflex;
    produce_transactional_id_since = ptxn;
    produce_request_topic_id_since = preq_id;
    produce_response_topic_id_since = presp_id;
    produce_record_errors_since = prec;
    memcpy(produce_partition_fixed, fixed_table, sizeof fixed_table);
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
    Py_ssize_t offset = -1;
    if (configured && pos >= 0 && f.n >= 4) {
        int version = be16(f.p + 2);
        if (version >= 0 && version <= produce_max_version) {
            if (version >= produce_flexible_since) {
                int64_t length;
                if (uvarint(&f, &pos, &length) < 0) goto done;
                if (length) pos += (Py_ssize_t)(length - 1);
            } else if (version >= produce_transactional_id_since) {
                if (pos + 2 > f.n) goto done;
                int length = be16(f.p + pos);
                if (length < -1) goto done;
                pos += length > 0 ? 2 + length : 2;
            }
            if (pos + 2 <= f.n) offset = pos;
        }
    }
done:
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
    PyObject *topic_id = args[2];
    Py_buffer view;
    Frame f;
    if (acquire(args[0], &view, &f) < 0) return NULL;
    PyObject *out = NULL, *topic = NULL, *result = NULL;
    if (acks_offset < 0 || f.n < 4 || acks_offset + 6 > f.n) goto fallback;
    int version = f.p[3]; /* the caller read the header: a version it accepted fits the low byte */
    if (version > produce_max_version) goto fallback;
    int flexible = version >= produce_flexible_since;
    int by_id = version >= produce_request_topic_id_since;
    int acks = be16(f.p + acks_offset);
    Py_ssize_t pos = acks_offset + 6;
    int64_t topics;
    if (array_length(&f, &pos, flexible, &topics) < 0 || topics < 0) goto fallback;
    out = PyList_New(0);
    if (out == NULL) goto done;
    for (int64_t t = 0; t < topics; t++) {
        if (by_id) {
            if (pos + 16 > f.n) goto fallback;
            PyObject *raw = PyBytes_FromStringAndSize((const char *)f.p + pos, 16);
            if (raw == NULL) goto done;
            topic = PyObject_CallOneArg(topic_id, raw);
            Py_DECREF(raw);
            if (topic == NULL) goto done;
            pos += 16;
        } else {
            int64_t length;
            if (string_length(&f, &pos, flexible, &length) < 0 || length < 0 || pos + length > f.n) goto fallback;
            topic = PyUnicode_DecodeUTF8((const char *)f.p + pos, (Py_ssize_t)length, NULL);
            if (topic == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto done;
                PyErr_Clear();
                goto fallback;
            }
            pos += (Py_ssize_t)length;
        }
        int64_t partitions;
        if (array_length(&f, &pos, flexible, &partitions) < 0 || partitions < 0) goto fallback;
        for (int64_t i = 0; i < partitions; i++) {
            if (pos + 4 > f.n) goto fallback;
            int32_t partition = be32(f.p + pos);
            int64_t size;
            if (flexible) {
                pos += 4;
                if (uvarint(&f, &pos, &size) < 0) goto fallback;
                size -= 1;
            } else {
                if (pos + 8 > f.n) goto fallback;
                size = be32(f.p + pos + 4);
                pos += 8;
                if (size < -1) goto fallback;
            }
            Py_ssize_t records_start = pos;
            int64_t records = 0;
            if (size > 0) {
                if (size > f.n - pos) goto fallback;
                pos += (Py_ssize_t)size;
                records = -1;
                if (size >= 61) {
                    int32_t batch_length = be32(f.p + records_start + 8);
                    signed char magic = (signed char)f.p[records_start + 16];
                    records = be32(f.p + records_start + 57);
                    if (magic < 2 || (int64_t)batch_length + 12 != size) records = -1;
                }
                if (records < 0) records = count_records(&f, records_start, (Py_ssize_t)size);
            }
            if (flexible && empty_tags(&f, &pos) < 0) goto fallback;
            if (records < 0) goto fallback;
            Py_INCREF(topic);
            PyObject *items[4] = {topic, PyLong_FromLong(partition), PyLong_FromLongLong(size > 0 ? size : 0),
                                  PyLong_FromLongLong(records)};
            PyObject *row = tuple_of(4, items);
            if (row == NULL) goto done;
            int failed = PyList_Append(out, row);
            Py_DECREF(row);
            if (failed) goto done;
        }
        Py_CLEAR(topic);
        if (flexible && empty_tags(&f, &pos) < 0) goto fallback;
    }
    if (flexible && empty_tags(&f, &pos) < 0) goto fallback;
    if (pos != f.n) goto fallback;
    Py_INCREF(out);
    PyObject *items[2] = {PyLong_FromLong(acks), out};
    result = tuple_of(2, items);
    goto done;
fallback:
    Py_INCREF(Py_None);
    result = Py_None;
done:
    Py_XDECREF(topic);
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ Produce responses */
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
    int flexible = version >= produce_flexible_since;
    int by_id = version >= produce_response_topic_id_since;
    int record_errors = version >= produce_record_errors_since;
    Py_ssize_t fixed = produce_partition_fixed[version];
    Py_ssize_t pos = 4;
    int64_t answered = 0, topics;
    if (f.n < 4) goto fallback;
    if (flexible && empty_tags(&f, &pos) < 0) goto fallback;
    if (array_length(&f, &pos, flexible, &topics) < 0) goto fallback;
    for (int64_t t = 0; t < topics; t++) {
        if (by_id) {
            pos += 16;
        } else {
            int64_t length;
            if (string_length(&f, &pos, flexible, &length) < 0 || length < 0) goto fallback;
            pos += (Py_ssize_t)length;
        }
        int64_t partitions;
        if (array_length(&f, &pos, flexible, &partitions) < 0) goto fallback;
        for (int64_t i = 0; i < partitions; i++) {
            answered++;
            if (pos < 0 || pos + 6 > f.n) goto fallback;
            if (f.p[pos + 4] || f.p[pos + 5]) goto fallback; /* a failed partition */
            pos += fixed;
            if (!record_errors) continue;
            if (flexible && pos + 3 <= f.n && f.p[pos] == 1 && f.p[pos + 1] == 0 && f.p[pos + 2] == 0) {
                pos += 3; /* no record errors, null error message, no tags */
                continue;
            }
            int64_t errors, length;
            if (array_length(&f, &pos, flexible, &errors) < 0 || errors > 0) goto fallback;
            if (string_length(&f, &pos, flexible, &length) < 0) goto fallback;
            if (length > 0) pos += (Py_ssize_t)length;
            if (flexible && empty_tags(&f, &pos) < 0) goto fallback;
        }
        if (flexible && empty_tags(&f, &pos) < 0) goto fallback;
    }
    if (pos > f.n) goto fallback;
    PyObject *items[2] = {PyLong_FromLongLong(answered), PyLong_FromSsize_t(pos)};
    result = tuple_of(2, items);
    goto done;
fallback:
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ the module */
static PyMethodDef wire_methods[] = {
    {"configure", (PyCFunction)wire_configure, METH_VARARGS, configure_doc},
    {"peek_request_header", (PyCFunction)(void (*)(void))wire_peek_request_header, METH_FASTCALL,
     peek_request_header_doc},
    {"produce_acks_offset", (PyCFunction)(void (*)(void))wire_produce_acks_offset, METH_FASTCALL,
     produce_acks_offset_doc},
    {"walk_produce_request", (PyCFunction)(void (*)(void))wire_walk_produce_request, METH_FASTCALL,
     walk_produce_request_doc},
    {"scan_produce_response", (PyCFunction)(void (*)(void))wire_scan_produce_response, METH_FASTCALL,
     scan_produce_response_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT, "_wire",
    "The compiled core of the data path's walks (protocol/_wire.c); the Python walks are the reference.", -1,
    wire_methods,
};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&wire_module); }
