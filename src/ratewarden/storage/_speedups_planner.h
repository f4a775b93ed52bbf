/* ratewarden.storage._speedups, part 9 of 9 (included by _speedups.c): BatchPlanner's method
 * and type (its plan is part 8). */

/* plan(algorithm, calls): RedisBase._hit_all_call's first try; see the top of _speedups.c. */
static PyObject *
BatchPlanner_plan(BatchPlanner *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "plan(algorithm, calls) takes 2 arguments, not %zd", nargs);
        return NULL;
    }
    if (self->shapes_get == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "BatchPlanner.__init__ comes first");
        return NULL;
    }
    PyObject *algorithm = args[0], *calls = args[1];
    if (!PyUnicode_CheckExact(algorithm) || !(PyList_CheckExact(calls)
                                              || PyTuple_CheckExact(calls))) {
        Py_RETURN_NONE;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(calls);
    if (count == 0 || count > PLAN_MAX) {
        Py_RETURN_NONE;
    }
    /* A list is read from a copy (shapes.get is Python, and could change it), and the plan is
     * the Python path's when the list no longer holds the same calls afterwards. */
    PyObject *given = PyList_CheckExact(calls) ? PyList_AsTuple(calls) : Py_NewRef(calls);
    if (given == NULL) {
        return NULL;
    }
    PyObject *entries[PLAN_MAX] = {NULL};
    PyObject *result = plan_calls(self, algorithm, given, entries, count);
    if (result != NULL && PyList_CheckExact(calls)) {
        int same = PyList_GET_SIZE(calls) == count;
        for (Py_ssize_t i = 0; same && i < count; i++) {
            same = PyList_GET_ITEM(calls, i) == PyTuple_GET_ITEM(given, i);
        }
        if (!same) {
            Py_CLEAR(result);
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_XDECREF(entries[i]);
    }
    Py_DECREF(given);
    if (result == NULL && !PyErr_Occurred()) {
        Py_RETURN_NONE;
    }
    return result;
}

static int
BatchPlanner_traverse(BatchPlanner *self, visitproc visit, void *arg)
{
    Py_VISIT(self->shapes_get);
    Py_VISIT(self->script);
    Py_VISIT(self->now_us);
    Py_VISIT(self->head);
    Py_VISIT(self->rate_type);
    for (int i = 0; i < KEPT_SHAPES; i++) {
        Py_VISIT(self->kept[i].rates);
        Py_VISIT(self->kept[i].algorithm);
        Py_VISIT(self->kept[i].entry);
    }
    return 0;
}

static int
BatchPlanner_clear(BatchPlanner *self)
{
    Py_CLEAR(self->shapes_get);
    Py_CLEAR(self->script);
    Py_CLEAR(self->now_us);
    Py_CLEAR(self->head);
    Py_CLEAR(self->rate_type);
    for (int i = 0; i < KEPT_SHAPES; i++) {
        Py_CLEAR(self->kept[i].rates);
        Py_CLEAR(self->kept[i].algorithm);
        Py_CLEAR(self->kept[i].entry);
    }
    return 0;
}

static void
BatchPlanner_dealloc(BatchPlanner *self)
{
    PyObject_GC_UnTrack(self);
    BatchPlanner_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
BatchPlanner_init(BatchPlanner *self, PyObject *args, PyObject *kwds)
{
    PyObject *shapes, *prefix, *script, *now_us, *rate_type;
    int clustered;
    static char *kwlist[] = {"shapes", "prefix", "script", "now_us", "clustered", "rate_type",
                             NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OUOOpO:BatchPlanner", kwlist, &shapes,
                                     &prefix, &script, &now_us, &clustered, &rate_type)) {
        return -1;
    }
    if (!PyCallable_Check(script) || (now_us != Py_None && !PyCallable_Check(now_us))
        || !PyType_Check(rate_type)) {
        PyErr_SetString(PyExc_TypeError, "BatchPlanner(script=..., now_us=..., rate_type=...): "
                                         "callable, None or callable, a class");
        return -1;
    }
    PyObject *get = PyObject_GetAttrString(shapes, "get");
    PyObject *head = get == NULL ? NULL : PyUnicode_FromFormat("%U:{", prefix);
    PyObject *encoded = head == NULL ? NULL : PyUnicode_AsUTF8String(head);
    Py_XDECREF(head);
    if (encoded == NULL) {
        Py_XDECREF(get);
        return -1;
    }
    BatchPlanner_clear(self);  /* shapes of another cache are not these */
    self->shapes_get = get;
    self->head = encoded;
    self->script = Py_NewRef(script);
    self->now_us = Py_NewRef(now_us);
    self->rate_type = Py_NewRef(rate_type);
    self->clustered = clustered;
    return 0;
}

static PyMethodDef BatchPlanner_methods[] = {
    {"plan", (PyCFunction)(void (*)(void))BatchPlanner_plan, METH_FASTCALL,
     PyDoc_STR("plan(algorithm, calls): ((script, route key, packed EVALSHA), found) for a "
               "plainly valid hit_all of one-rate calls (on a Cluster, of one slot), as "
               "RedisBase._hit_all_call plans it; None for any other.")},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BatchPlannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ratewarden.storage._speedups.BatchPlanner",
    .tp_doc = PyDoc_STR("BatchPlanner(*, shapes, prefix, script, now_us, clustered, rate_type): "
                        "a Redis store's one-rate hit_all planned in C."),
    .tp_basicsize = sizeof(BatchPlanner),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)BatchPlanner_init,
    .tp_dealloc = (destructor)BatchPlanner_dealloc,
    .tp_traverse = (traverseproc)BatchPlanner_traverse,
    .tp_clear = (inquiry)BatchPlanner_clear,
    .tp_methods = BatchPlanner_methods,
};
