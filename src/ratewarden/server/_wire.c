/*
 * ratewarden.server._wire: a RateLimitResponse's wire bytes, written in C (server/wire.py loads
 * it; its Python function encode_response is the reference, with the same answers).
 *
 * encode_response(overall, statuses, tail) -> bytes writes what protobuf's SerializeToString
 * writes for an envoy.service.ratelimit.v3.RateLimitResponse whose
 *   - overall_code (field 1) is overall (omitted when 0, as proto3 omits a default),
 *   - statuses (field 2) are one DescriptorStatus per (head, remaining, duration_us) tuple:
 *       head         the status's fields 1 and 2 (code, current_limit) as protobuf wrote them,
 *       remaining    limit_remaining (field 3), omitted when 0,
 *       duration_us  duration_until_reset (field 4), a Duration of that many microseconds
 *                    (seconds, nanos; each omitted when 0), or absent when negative,
 * followed by tail: the response's later fields (3 and up) as protobuf wrote them.
 * It knows nothing of rules, stores or transports. Anything not of that shape raises TypeError
 * or OverflowError and writes nothing. tests/server/test_wire.py holds it to the Python
 * function and to protobuf's own serialization.
 *
 * Built when a C compiler is there (setup.py marks the extension optional);
 * RATEWARDEN_PURE=1 in the environment keeps it unused.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* A status's body is at most its head, a tag and a 10-byte varint, a tag, a length byte and a
 * Duration of two tags and two 10-byte varints. */
#define STATUS_EXTRA 48

static size_t
varint_size(uint64_t value)
{
    size_t size = 1;
    while (value >= 0x80) {
        value >>= 7;
        size++;
    }
    return size;
}

static char *
put_varint(char *at, uint64_t value)
{
    while (value >= 0x80) {
        *at++ = (char)((value & 0x7F) | 0x80);
        value >>= 7;
    }
    *at++ = (char)value;
    return at;
}

/* One status tuple read: its head and the numbers to write after it. */
typedef struct {
    const char *head;
    Py_ssize_t head_size;
    uint64_t remaining;
    long long duration_us; /* < 0: no duration */
    size_t body_size;
} Status;

static int
read_status(PyObject *item, Status *status)
{
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3) {
        PyErr_SetString(PyExc_TypeError, "a status is a (head, remaining, duration_us) tuple");
        return -1;
    }
    PyObject *head = PyTuple_GET_ITEM(item, 0);
    if (!PyBytes_CheckExact(head)) {
        PyErr_SetString(PyExc_TypeError, "a status's head is bytes");
        return -1;
    }
    status->head = PyBytes_AS_STRING(head);
    status->head_size = PyBytes_GET_SIZE(head);
    status->remaining = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 1));
    if (status->remaining == (unsigned long long)-1 && PyErr_Occurred()) {
        return -1;
    }
    status->duration_us = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 2));
    if (status->duration_us == -1 && PyErr_Occurred()) {
        return -1;
    }
    size_t size = (size_t)status->head_size;
    if (status->remaining) {
        size += 1 + varint_size(status->remaining);
    }
    if (status->duration_us >= 0) {
        uint64_t seconds = (uint64_t)(status->duration_us / 1000000);
        uint64_t nanos = (uint64_t)(status->duration_us % 1000000) * 1000;
        size_t inner = (seconds ? 1 + varint_size(seconds) : 0) + (nanos ? 1 + varint_size(nanos) : 0);
        size += 2 + inner; /* a Duration is at most 22 bytes: its length is one byte */
    }
    status->body_size = size;
    return 0;
}

static char *
put_status(char *at, const Status *status)
{
    *at++ = 0x12; /* field 2 (statuses), length-delimited */
    at = put_varint(at, status->body_size);
    memcpy(at, status->head, (size_t)status->head_size);
    at += status->head_size;
    if (status->remaining) {
        *at++ = 0x18; /* field 3 (limit_remaining), varint */
        at = put_varint(at, status->remaining);
    }
    if (status->duration_us >= 0) {
        uint64_t seconds = (uint64_t)(status->duration_us / 1000000);
        uint64_t nanos = (uint64_t)(status->duration_us % 1000000) * 1000;
        *at++ = 0x22; /* field 4 (duration_until_reset), length-delimited */
        *at++ = (char)((seconds ? 1 + varint_size(seconds) : 0) + (nanos ? 1 + varint_size(nanos) : 0));
        if (seconds) {
            *at++ = 0x08;
            at = put_varint(at, seconds);
        }
        if (nanos) {
            *at++ = 0x10;
            at = put_varint(at, nanos);
        }
    }
    return at;
}

static PyObject *
encode_response(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "encode_response(overall, statuses, tail)");
        return NULL;
    }
    unsigned long long overall = PyLong_AsUnsignedLongLong(args[0]);
    if (overall == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *statuses = args[1];
    PyObject *tail = args[2];
    if (!PyList_CheckExact(statuses) || !PyBytes_CheckExact(tail)) {
        PyErr_SetString(PyExc_TypeError, "encode_response(overall, statuses: list, tail: bytes)");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(statuses);
    Status small[8];
    Status *read = small;
    if (count > 8) {
        read = PyMem_Malloc((size_t)count * sizeof(Status));
        if (read == NULL) {
            return PyErr_NoMemory();
        }
    }
    size_t total = (overall ? 1 + varint_size(overall) : 0) + (size_t)PyBytes_GET_SIZE(tail);
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (read_status(PyList_GET_ITEM(statuses, i), &read[i]) < 0) {
            goto done;
        }
        total += 1 + varint_size(read[i].body_size) + read[i].body_size;
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (result == NULL) {
        goto done;
    }
    char *at = PyBytes_AS_STRING(result);
    if (overall) {
        *at++ = 0x08; /* field 1 (overall_code), varint */
        at = put_varint(at, overall);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        at = put_status(at, &read[i]);
    }
    memcpy(at, PyBytes_AS_STRING(tail), (size_t)PyBytes_GET_SIZE(tail));
done:
    if (read != small) {
        PyMem_Free(read);
    }
    return result;
}

static PyMethodDef wire_methods[] = {
    {"encode_response", (PyCFunction)(void (*)(void))encode_response, METH_FASTCALL,
     PyDoc_STR("encode_response(overall, statuses, tail) -> bytes: a RateLimitResponse's wire "
               "bytes from its overall code, its statuses as (head, remaining, duration_us) "
               "tuples and the bytes of its later fields (server/wire.py says more).")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ratewarden.server._wire",
    .m_doc = "A RateLimitResponse's wire bytes, written in C (server/wire.py).",
    .m_size = -1,
    .m_methods = wire_methods,
};

PyMODINIT_FUNC
PyInit__wire(void)
{
    return PyModule_Create(&wire_module);
}
