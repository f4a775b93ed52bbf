/* ratewarden.storage._speedups, part 3 of 9 (included by _speedups.c): decide, one call. */

static PyObject *decide(MemoryKernel *self, const Shape *shape, PyObject *key, long long cost_v);

/* The fast path. Returns a new Decision; NULL with an error set; or NULL without an
 * error when the call is not one it takes (the caller then runs the Python path). */
static PyObject *
fast_hit(MemoryKernel *self, PyObject *algorithm, PyObject *key, PyObject *rates,
         PyObject *cost)
{
    long long cost_v;
    if (!PyUnicode_CheckExact(key) || PyUnicode_GET_LENGTH(key) == 0 || !PyUnicode_IS_ASCII(key)
        || !as_i64(cost, &cost_v) || cost_v < 0) {
        return NULL;
    }
    if (rates != self->c_rates || self->c_cost != cost_v || algorithm != self->c_algorithm) {
        if (kind_of(algorithm) < 0) {
            return NULL;
        }
        int found = load_shape(self, algorithm, rates, cost, cost_v);
        if (found <= 0) {
            return NULL;  /* error set (-1) or not ours (0) */
        }
    }
    /* No Python code has run since the cache was read or filled: copy it out now. */
    Shape shape;
    shape_copy(&shape, &self->c_shape);
    PyObject *result = decide(self, &shape, key, cost_v);
    shape_clear(&shape);
    return result;
}

/* Release the lock and turn the collector back on, keeping any error set. */
static int
leave(MemoryKernel *self, int collecting)
{
    if (collecting) {
        PyGC_Enable();
    }
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (unlock(self) < 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return -1;
    }
    PyErr_Restore(type, value, traceback);
    return 0;
}

/* fast_hit once the call's shape is known; the same three kinds of return. */
static PyObject *
decide(MemoryKernel *self, const Shape *shape, PyObject *key, long long cost_v)
{
    long long now;
    if (now_us(self, &now) < 0) {
        return NULL;
    }
    if (now < 0 || now > NOW_MAX) {
        return NULL;  /* the Python path's numbers */
    }
    PyObject *state_key = PyUnicode_Concat(key, shape->suffix);
    if (state_key == NULL) {
        return NULL;
    }
    if (lock(self) < 0) {
        Py_DECREF(state_key);
        return NULL;  /* an error, or the lock is held: the Python path */
    }
    /* No collection, so no finalizer, runs until the state is written: see "The lock". */
    const int collecting = PyGC_Disable();
    int failed = 0, stale;
    Held held;
    Step step;
    PyObject *entry = PyDict_GetItemWithError(self->states, state_key);
    if (entry == NULL && PyErr_Occurred()) {
        failed = 1;
        goto unlock;
    }
    Py_XINCREF(entry);
    if (!read_entry(shape, entry, now, &stale, &held)) {
        goto unlock;  /* not ours: the Python path */
    }
    check(shape, &held, now, cost_v, &step);
    if (step.allowed && cost_v > 0 && step.ttl > 0) {
        /* An expired entry is as if never seen, and is written over in place. */
        failed = write_state(self, state_key, entry, step.s0, step.s1, now + step.ttl, now) < 0;
    }
    else if (entry != NULL && (stale || (step.allowed && cost_v > 0))) {
        failed = PyObject_DelItem(self->states, state_key) < 0;
    }
    if (!failed) {
        Py_XDECREF(entry);
        Py_DECREF(state_key);
        if (leave(self, collecting) < 0) {
            return NULL;
        }
        return decision(self, shape, shape->cost, &step);
    }
unlock:
    Py_XDECREF(entry);
    Py_DECREF(state_key);
    if (leave(self, collecting) < 0) {
        return NULL;
    }
    if (failed && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_SystemError, "ratewarden.storage._speedups: failed without an error");
    }
    return NULL;
}

/* fallback(store, *args, **kwargs): the Python path, for a call the kernel does not take. */
static PyObject *
call_fallback(MemoryKernel *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t total = 1 + nargs + (kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *stack[STACK_ARGS];
    PyObject **given = total <= STACK_ARGS ? stack : PyMem_New(PyObject *, total);
    if (given == NULL) {
        return PyErr_NoMemory();
    }
    given[0] = (PyObject *)self;
    memcpy(given + 1, args, (size_t)(total - 1) * sizeof(PyObject *));
    PyObject *result = PyObject_Vectorcall(self->fallback, given, 1 + nargs, kwnames);
    if (given != stack) {
        PyMem_Free(given);
    }
    return result;
}

/* decide(algorithm, key, rates, cost=1): the store's hit; see the top of this file. */
static PyObject *
MemoryKernel_decide(MemoryKernel *self, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames)
{
    if (self->fallback == NULL || self->clock == NULL || self->max_keys == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the memory store is not set up: MemoryKernel.__init__ and its clock "
                        "and max_keys come first");
        return NULL;
    }
    if (kwnames == NULL && (nargs == 3 || nargs == 4)) {
        PyObject *result = fast_hit(self, args[0], args[1], args[2], nargs == 4 ? args[3] : ONE);
        if (result != NULL || PyErr_Occurred()) {
            return result;
        }
    }
    return call_fallback(self, args, nargs, kwnames);
}
