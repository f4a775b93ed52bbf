/* ratewarden.storage._speedups, part 5 of 9 (included by _speedups.c): decide_calls, hit_all's
 * calls as given, validated here when they are plainly valid. */

/* ---- hit_all's calls as given: validated here when they are plainly valid ---- */

/* Calls a batch validated here may have (more go to the Python path, whose check of a repeated
 * key and rate is a dict where this one compares every pair). */
#define BATCH_MAX 64

/* The shape of (algorithm, rates, cost) from the kernel's own small cache, found by the
 * identity of rates and algorithm (a Rate or a tuple of them, held here so that neither id is
 * reused; the store's Shapes finds them by identity too), else from shapes.get and kept. Returns
 * 1 with *out holding references, 0 when the kernel does not take the call (an error
 * shapes.get raised among them: the Python path raises it again, in its own order), -1 on
 * error. */
static int
find_shape(MemoryKernel *self, PyObject *algorithm, PyObject *rates, PyObject *cost,
           long long cost_v, Shape *out)
{
    for (int i = 0; i < KEPT_SHAPES; i++) {
        const Kept *kept = &self->kept[i];
        if (kept->rates == rates && kept->algorithm == algorithm && kept->cost_v == cost_v
            && kept->shape.suffix != NULL) {
            shape_copy(out, &kept->shape);
            return 1;
        }
    }
    PyObject *args[3] = {algorithm, rates, cost};
    PyObject *found = PyObject_Vectorcall(self->shapes_get, args, 3, NULL);
    if (found == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) {
            return -1;
        }
        PyErr_Clear();
        return 0;
    }
    Shape shape;
    int result = read_asked_shape(found, cost_v, &shape);
    if (result <= 0) {
        return result;
    }
    shape_copy(out, &shape);
    if (!Py_IS_TYPE(rates, (PyTypeObject *)self->rate_type) && !PyTuple_CheckExact(rates)) {
        shape_clear(&shape);  /* a list is looked up by value each time (it may change) */
        return 1;
    }
    /* The new entry goes in before the old one's references go: releasing them may run code. */
    Kept old = self->kept[self->kept_next];
    Kept *slot = &self->kept[self->kept_next];
    slot->rates = Py_NewRef(rates);
    slot->algorithm = Py_NewRef(algorithm);
    slot->cost_v = cost_v;
    slot->shape = shape;
    self->kept_next = (self->kept_next + 1) % KEPT_SHAPES;
    Py_XDECREF(old.rates);
    Py_XDECREF(old.algorithm);
    shape_clear(&old.shape);
    return 1;
}

/* decide_calls on calls[0:count] (zeroed); the same three kinds of return as fast_hit. Takes
 * only what _plan.batch would pass unchanged: a tuple (key, rates, cost) a call, an ASCII str
 * key, a whole cost >= 0, a valid one-rate shape, no key and rate twice. */
static PyObject *
take_calls(MemoryKernel *self, PyObject *algorithm, PyObject *given, Call *calls,
           Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i >= PySequence_Fast_GET_SIZE(given)) {
            return NULL;  /* the list changed under shapes.get: the Python path */
        }
        PyObject *call = PySequence_Fast_GET_ITEM(given, i);
        if (!PyTuple_CheckExact(call) || PyTuple_GET_SIZE(call) != 3) {
            return NULL;
        }
        PyObject *key = PyTuple_GET_ITEM(call, 0), *cost = PyTuple_GET_ITEM(call, 2);
        long long cost_v;
        if (!PyUnicode_CheckExact(key) || PyUnicode_GET_LENGTH(key) == 0
            || !PyUnicode_IS_ASCII(key) || !as_i64(cost, &cost_v) || cost_v < 0) {
            return NULL;
        }
        Py_INCREF(call);  /* held across shapes.get, which is Python */
        int ours = find_shape(self, algorithm, PyTuple_GET_ITEM(call, 1), cost, cost_v,
                              &calls[i].shape);
        if (ours > 0) {
            calls[i].state_key = PyUnicode_Concat(key, calls[i].shape.suffix);
            ours = calls[i].state_key != NULL ? 1 : -1;
        }
        Py_DECREF(call);
        if (ours <= 0) {
            return NULL;
        }
        for (Py_ssize_t j = 0; j < i; j++) {
            if (PyUnicode_GET_LENGTH(calls[j].state_key) == PyUnicode_GET_LENGTH(calls[i].state_key)
                && PyUnicode_Compare(calls[j].state_key, calls[i].state_key) == 0) {
                return NULL;  /* a key and rate twice: the Python path says so */
            }
        }
    }
    return run_batch(self, calls, count);
}

/* decide_calls(algorithm, calls): MemoryStore.hit_all's first try; see the top of this file. */
static PyObject *
MemoryKernel_decide_calls(MemoryKernel *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "decide_calls(algorithm, calls) takes 2 arguments, not %zd",
                     nargs);
        return NULL;
    }
    if (self->shapes_get == NULL || self->clock == NULL || self->max_keys == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the memory store is not set up: MemoryKernel.__init__ and its clock "
                        "and max_keys come first");
        return NULL;
    }
    PyObject *algorithm = args[0], *given = args[1];
    if (kind_of(algorithm) < 0 || !(PyList_CheckExact(given) || PyTuple_CheckExact(given))) {
        Py_RETURN_NONE;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(given);
    if (count == 0 || count > BATCH_MAX) {
        Py_RETURN_NONE;
    }
    Call on_stack[BATCH_STACK];
    Call *calls = count <= BATCH_STACK ? on_stack : PyMem_New(Call, count);
    if (calls == NULL) {
        return PyErr_NoMemory();
    }
    memset(calls, 0, (size_t)count * sizeof(Call));
    Py_INCREF(given);
    PyObject *result = take_calls(self, algorithm, given, calls, count);
    Py_DECREF(given);
    for (Py_ssize_t i = 0; i < count; i++) {
        shape_clear(&calls[i].shape);
        Py_XDECREF(calls[i].state_key);
    }
    if (calls != on_stack) {
        PyMem_Free(calls);
    }
    if (result == NULL && !PyErr_Occurred()) {
        Py_RETURN_NONE;
    }
    return result;
}
