/* ratewarden.storage._speedups, part 7 of 9 (included by _speedups.c): BatchDecoder,
 * storage._decisions.decode_batch in C for a hit_all of one-rate calls. */

/* ---- BatchDecoder: a one-rate hit_all's reply into its Decisions ---- */

/* Values per call in a hit_all reply (_decisions.REPLY_WIDTH). */
#define REPLY_WIDTH 6

/* decode(found, reply): what _decisions.decode_batch makes of the reply
 * {now_us, admitted, per call: allowed, remaining, reset, retry, delay, refill} of the calls
 * found (a list of (key, shape), each shape with one rate). A reply that is not a list of the
 * right length of whole numbers (the times within 2**53), or a call that is not a (key, shape)
 * with shape.single True and shape.rates a tuple, goes whole to the Python function it was
 * handed (the fallback of this DecisionMaker-shaped object), the reference. Decided here, a
 * call that was allowed in a batch that was not admitted costs 0, as there. */
static PyObject *
BatchDecoder_decode(DecisionMaker *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "BatchDecoder.__init__ comes first");
        return NULL;
    }
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1])) {
        return PyObject_Vectorcall(self->fallback, args, nargs, NULL);
    }
    PyObject *found = args[0], *reply = args[1];
    Py_ssize_t count = PyList_GET_SIZE(found);
    if (count == 0 || PyList_GET_SIZE(reply) != 2 + REPLY_WIDTH * count) {
        return PyObject_Vectorcall(self->fallback, args, nargs, NULL);
    }
    /* Every number is read before anything is built: the reply and found are lists, which the
     * attribute lookups below (Python) could change, so both are held and re-checked. */
    Py_INCREF(found);
    Py_INCREF(reply);
    PyObject *result = NULL;
    long long admitted_v;
    int ours = as_i64(PyList_GET_ITEM(reply, 1), &admitted_v);
    for (Py_ssize_t i = 2; ours && i < PyList_GET_SIZE(reply); i++) {
        long long v;
        ours = (i - 2) % REPLY_WIDTH < 2 ? as_i64(PyList_GET_ITEM(reply, i), &v)
                                         : exact_us(PyList_GET_ITEM(reply, i), &v);
    }
    PyObject *list = ours ? PyList_New(count) : NULL;
    if (ours && list == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; ours && i < count; i++) {
        PyObject *item = PyList_GET_ITEM(found, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) {
            ours = 0;
            break;
        }
        PyObject *single = PyObject_GetAttr(PyTuple_GET_ITEM(item, 1), S_single);
        Py_XDECREF(single);
        if (single == NULL) {
            goto done;
        }
        ours = single == Py_True;
    }
    for (Py_ssize_t i = 0; ours && i < count; i++) {
        if (PyList_GET_SIZE(found) != count
            || PyList_GET_SIZE(reply) != 2 + REPLY_WIDTH * count) {
            ours = 0;  /* changed under a lookup: the Python function reads them as they are */
            break;
        }
        PyObject *shape = PyTuple_GET_ITEM(PyList_GET_ITEM(found, i), 1);
        PyObject *const *values = PySequence_Fast_ITEMS(reply) + 2 + REPLY_WIDTH * i;
        long long allowed_v, us[4];
        if (!as_i64(values[0], &allowed_v) || !exact_us(values[2], &us[0])
            || !exact_us(values[3], &us[1]) || !exact_us(values[4], &us[2])
            || !exact_us(values[5], &us[3])) {
            ours = 0;
            break;
        }
        PyObject *remaining = Py_NewRef(values[1]);  /* before any Python code runs */
        Py_INCREF(shape);
        PyObject *rates = PyObject_GetAttr(shape, S_rates);
        if (rates == NULL || !PyTuple_CheckExact(rates) || PyTuple_GET_SIZE(rates) < 1) {
            Py_XDECREF(rates);
            Py_DECREF(remaining);
            Py_DECREF(shape);
            if (rates == NULL) {
                goto done;
            }
            ours = 0;
            break;
        }
        PyObject *cost = admitted_v == 1 || allowed_v == 0 ? PyObject_GetAttr(shape, S_cost)
                                                            : Py_NewRef(ZERO);
        Py_DECREF(shape);
        PyObject *made = cost == NULL ? NULL
                         : one_rate(self, PyTuple_GET_ITEM(rates, 0),
                                    allowed_v != 0 ? Py_True : Py_False, remaining, us[0],
                                    us[1], us[2], us[3], cost);
        Py_DECREF(rates);
        Py_XDECREF(cost);
        Py_DECREF(remaining);
        if (made == NULL) {
            goto done;
        }
        PyList_SET_ITEM(list, i, made);
    }
    if (ours) {
        result = Py_NewRef(list);
    }
    else {
        result = PyObject_Vectorcall(self->fallback, args, nargs, NULL);
    }
done:
    Py_XDECREF(list);
    Py_DECREF(found);
    Py_DECREF(reply);
    return result;
}

static PyMethodDef BatchDecoder_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))BatchDecoder_decode, METH_FASTCALL,
     PyDoc_STR("decode(found, reply): the Decisions of a hit_all of one-rate calls from the "
               "script's reply, as storage._decisions.decode_batch makes them (which it calls "
               "for any reply or batch it does not read).")},
    {NULL, NULL, 0, NULL},
};

/* The same object as DecisionMaker (a Decision class and a fallback), with another method. */
static PyTypeObject BatchDecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ratewarden.storage._speedups.BatchDecoder",
    .tp_doc = PyDoc_STR("BatchDecoder(*, decision_type, fallback): decodes a one-rate hit_all's "
                        "reply in C, as storage._decisions.decode_batch does in Python."),
    .tp_basicsize = sizeof(DecisionMaker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)DecisionMaker_init,
    .tp_dealloc = (destructor)DecisionMaker_dealloc,
    .tp_traverse = (traverseproc)DecisionMaker_traverse,
    .tp_clear = (inquiry)DecisionMaker_clear,
    .tp_methods = BatchDecoder_methods,
};
