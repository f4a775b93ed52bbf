/* ratewarden.storage._speedups, part 4 of 9 (included by _speedups.c): decide_all, a validated
 * batch of one-rate calls, all or nothing. */

/* ---- a one-rate batch (MemoryStore.hit_all) ---- */

/* Calls of a batch whose bookkeeping lives on the stack. */
#define BATCH_STACK 16

typedef struct {
    Shape shape;
    PyObject *state_key;
    Held held;
    int expired;
    Step step;
} Call;

/* method(): 0, or -1 with an error set. */
static int
call_method(PyObject *method)
{
    PyObject *r = PyObject_CallNoArgs(method);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* The batch's steps under the store's lock, as _hit_all_single takes them: every state read
 * (an expired one deleted as _read does), every check, and when all pass every write (the
 * store's _keep); when one is denied nothing is written. Returns 1 done, 0 not ours (nothing
 * changed), -1 on error. */
static int
batch_steps(MemoryKernel *self, Call *calls, Py_ssize_t count, long long now, int *admitted)
{
    Py_ssize_t i;
    for (i = 0; i < count; i++) {
        PyObject *entry = PyDict_GetItemWithError(self->states, calls[i].state_key);
        if (entry == NULL && PyErr_Occurred()) {
            return -1;
        }
        if (!read_entry(&calls[i].shape, entry, now, &calls[i].expired, &calls[i].held)) {
            return 0;
        }
    }
    *admitted = 1;
    for (i = 0; i < count; i++) {
        if (calls[i].expired && PyObject_DelItem(self->states, calls[i].state_key) < 0) {
            return -1;
        }
        check(&calls[i].shape, &calls[i].held, now, calls[i].shape.cost_v, &calls[i].step);
        *admitted &= calls[i].step.allowed;
    }
    if (!*admitted) {
        return 1;
    }
    for (i = 0; i < count; i++) {
        const Step *step = &calls[i].step;
        if (calls[i].shape.cost_v <= 0) {
            continue;
        }
        if (step->ttl <= 0) {
            if (PyObject_DelItem(self->states, calls[i].state_key) < 0) {
                if (!PyErr_ExceptionMatches(PyExc_KeyError)) {
                    return -1;
                }
                PyErr_Clear();
            }
            continue;
        }
        /* Looked up again: an earlier write's sweep or eviction may have moved or dropped it. */
        PyObject *entry = PyDict_GetItemWithError(self->states, calls[i].state_key);
        if (entry == NULL && PyErr_Occurred()) {
            return -1;
        }
        Py_XINCREF(entry);
        int failed = write_state(self, calls[i].state_key, entry, step->s0, step->s1,
                                 now + step->ttl, now) < 0;
        Py_XDECREF(entry);
        if (failed) {
            return -1;
        }
    }
    return 1;
}

/* The batch's Decisions, in call order: when it was not admitted, a call that would have
 * passed is the check it became (cost 0). */
static PyObject *
batch_decisions(MemoryKernel *self, Call *calls, Py_ssize_t count, long long now, int admitted)
{
    PyObject *list = PyList_New(count);
    if (list == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        const Call *call = &calls[i];
        PyObject *made;
        if (admitted || !call->step.allowed) {
            made = decision(self, &call->shape, call->shape.cost, &call->step);
        }
        else {
            Step peek;
            check(&call->shape, &call->held, now, 0, &peek);
            made = decision(self, &call->shape, ZERO, &peek);
        }
        if (made == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, made);
    }
    return list;
}

static PyObject *run_batch(MemoryKernel *self, Call *calls, Py_ssize_t count);

/* decide_all on calls[0:count] (zeroed); the same three kinds of return as fast_hit. */
static PyObject *
decide_batch(MemoryKernel *self, PyObject *found, Call *calls, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i >= PyList_GET_SIZE(found)) {
            return NULL;  /* the list changed under the attribute lookups: the Python path */
        }
        PyObject *item = PyList_GET_ITEM(found, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) {
            return NULL;
        }
        PyObject *key = PyTuple_GET_ITEM(item, 0);
        if (!PyUnicode_CheckExact(key) || PyUnicode_GET_LENGTH(key) == 0
            || !PyUnicode_IS_ASCII(key)) {
            return NULL;
        }
        Py_INCREF(item);  /* its shape's fields are read through Python attribute lookups */
        int ours = read_shape(PyTuple_GET_ITEM(item, 1), &calls[i].shape);
        if (ours > 0) {
            calls[i].state_key = PyUnicode_Concat(key, calls[i].shape.suffix);
            ours = calls[i].state_key != NULL ? 1 : -1;
        }
        Py_DECREF(item);
        if (ours <= 0) {
            return NULL;
        }
        if (calls[i].shape.kind != calls[0].shape.kind) {
            return NULL;  /* one algorithm a batch, as _plan.batch makes it */
        }
    }
    return run_batch(self, calls, count);
}

/* Decide calls[0:count], each with its shape and state key: the clock, the store's lock, the
 * steps, the Decisions. The same three kinds of return as fast_hit. */
static PyObject *
run_batch(MemoryKernel *self, Call *calls, Py_ssize_t count)
{
    long long now;
    if (now_us(self, &now) < 0) {
        return NULL;
    }
    if (now < 0 || now > NOW_MAX) {
        return NULL;
    }
    /* The store's lock is taken, not only looked at (as decide does): an eviction runs the
     * store's Python method between two writes, and no other thread may decide meanwhile. */
    if (call_method(self->acquire) < 0) {
        return NULL;
    }
    const int collecting = PyGC_Disable();
    int admitted = 0;
    int done = batch_steps(self, calls, count, now, &admitted);
    if (collecting) {
        PyGC_Enable();
    }
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (call_method(self->release) < 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return NULL;
    }
    PyErr_Restore(type, value, traceback);
    if (done <= 0) {
        return NULL;  /* an error, or not ours */
    }
    return batch_decisions(self, calls, count, now, admitted);
}

/* decide_all(found): the store's one-rate hit_all; see the top of this file. */
static PyObject *
MemoryKernel_decide_all(MemoryKernel *self, PyObject *found)
{
    if (self->batch_fallback == NULL || self->clock == NULL || self->max_keys == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the memory store is not set up: MemoryKernel.__init__ and its clock "
                        "and max_keys come first");
        return NULL;
    }
    Py_ssize_t count = PyList_CheckExact(found) ? PyList_GET_SIZE(found) : 0;
    PyObject *result = NULL;
    if (count > 0) {
        Call on_stack[BATCH_STACK];
        Call *calls = count <= BATCH_STACK ? on_stack : PyMem_New(Call, count);
        if (calls == NULL) {
            return PyErr_NoMemory();
        }
        memset(calls, 0, (size_t)count * sizeof(Call));
        /* A list, held: the Python code a call may run (attribute lookups) cannot free it. */
        Py_INCREF(found);
        result = decide_batch(self, found, calls, count);
        Py_DECREF(found);
        for (Py_ssize_t i = 0; i < count; i++) {
            shape_clear(&calls[i].shape);
            Py_XDECREF(calls[i].state_key);
        }
        if (calls != on_stack) {
            PyMem_Free(calls);
        }
        if (result != NULL || PyErr_Occurred()) {
            return result;
        }
    }
    PyObject *args[2] = {(PyObject *)self, found};
    return PyObject_Vectorcall(self->batch_fallback, args, 2, NULL);
}
