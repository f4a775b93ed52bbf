/* ratewarden.storage._speedups, part 6 of 9 (included by _speedups.c): DecisionMaker,
 * storage._decisions.single in C. */

/* ---- DecisionMaker: _decisions.single in C ---- */

/* Outcome numbers read as C numbers: within 2**53, where us / 1_000_000 in Python is one
 * correctly rounded division of two exact doubles, as here. */
#define EXACT_MAX (1LL << 53)

typedef struct {
    PyObject_HEAD
    PyTypeObject *decision_type;
    Py_ssize_t offsets[N_FIELDS];
    PyObject *fallback;  /* the Python single(rate, outcome, cost), the reference */
} DecisionMaker;

static int
exact_us(PyObject *value, long long *out)
{
    return as_i64(value, out) && *out >= -EXACT_MAX && *out <= EXACT_MAX;
}

/* The Decision of a one-rate call (its layer, then the call listing it), as _decisions.single
 * makes it from (allowed, remaining, the four microsecond numbers, already in range). */
static PyObject *
one_rate(DecisionMaker *self, PyObject *rate, PyObject *allowed, PyObject *remaining,
         long long reset_us, long long retry_us, long long delay_us, long long refill_us,
         PyObject *cost)
{
    PyObject *reset = seconds(reset_us);
    PyObject *retry = seconds(retry_us);
    PyObject *delay = delay_us == 0 ? Py_NewRef(ZERO_FLOAT) : seconds(delay_us);
    PyObject *refill = PyFloat_FromDouble((double)refill_us / 1e6);  /* no NEVER here */
    PyObject *limit = NULL, *layer = NULL, *layers = NULL, *top = NULL;
    if (reset == NULL || retry == NULL || delay == NULL || refill == NULL) goto done;
    limit = PyObject_GetAttr(rate, S_limit);
    if (limit == NULL) goto done;
    PyObject *values[N_FIELDS] = {
        allowed, limit, remaining, reset, retry, delay, rate, cost,
        EMPTY_TUPLE, Py_False, EMPTY_STR, refill,
    };
    layer = build_decision(self->decision_type, self->offsets, values);
    if (layer == NULL) goto done;
    layers = PyTuple_Pack(1, layer);
    if (layers == NULL) goto done;
    values[F_LAYERS] = layers;
    top = build_decision(self->decision_type, self->offsets, values);
done:
    Py_XDECREF(reset);
    Py_XDECREF(retry);
    Py_XDECREF(delay);
    Py_XDECREF(refill);
    Py_XDECREF(limit);
    Py_XDECREF(layer);
    Py_XDECREF(layers);
    return top;
}

/* single(rate, outcome, cost): the Decision of a one-rate call, as _decisions.single makes it.
 * An outcome that is not a tuple of six with whole microseconds in range goes to the Python
 * function it was handed. */
static PyObject *
DecisionMaker_single(DecisionMaker *self, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames)
{
    if (self->fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "DecisionMaker.__init__ comes first");
        return NULL;
    }
    PyObject *outcome = nargs == 3 && kwnames == NULL ? args[1] : NULL;
    long long reset_us, retry_us, delay_us, refill_us;
    if (outcome == NULL || !PyTuple_CheckExact(outcome) || PyTuple_GET_SIZE(outcome) != 6
        || !exact_us(PyTuple_GET_ITEM(outcome, 2), &reset_us)
        || !exact_us(PyTuple_GET_ITEM(outcome, 3), &retry_us)
        || !exact_us(PyTuple_GET_ITEM(outcome, 4), &delay_us)
        || !exact_us(PyTuple_GET_ITEM(outcome, 5), &refill_us)) {
        return PyObject_Vectorcall(self->fallback, args, nargs, kwnames);
    }
    return one_rate(self, args[0], PyTuple_GET_ITEM(outcome, 0), PyTuple_GET_ITEM(outcome, 1),
                    reset_us, retry_us, delay_us, refill_us, args[2]);
}

static int
DecisionMaker_init(DecisionMaker *self, PyObject *args, PyObject *kwds)
{
    PyObject *decision_type, *fallback;
    static char *kwlist[] = {"decision_type", "fallback", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OO:DecisionMaker", kwlist, &decision_type,
                                     &fallback)) {
        return -1;
    }
    if (!PyType_Check(decision_type) || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError,
                        "DecisionMaker(decision_type=..., fallback=...): a class and a callable");
        return -1;
    }
    Py_ssize_t offsets[N_FIELDS];
    if (slot_offsets(decision_type, offsets, "DecisionMaker") < 0) {
        return -1;
    }
    Py_XSETREF(self->decision_type, (PyTypeObject *)Py_NewRef(decision_type));
    Py_XSETREF(self->fallback, Py_NewRef(fallback));
    memcpy(self->offsets, offsets, sizeof offsets);
    return 0;
}

static int
DecisionMaker_traverse(DecisionMaker *self, visitproc visit, void *arg)
{
    Py_VISIT(self->decision_type);
    Py_VISIT(self->fallback);
    return 0;
}

static int
DecisionMaker_clear(DecisionMaker *self)
{
    Py_CLEAR(self->decision_type);
    Py_CLEAR(self->fallback);
    return 0;
}

static void
DecisionMaker_dealloc(DecisionMaker *self)
{
    PyObject_GC_UnTrack(self);
    DecisionMaker_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef DecisionMaker_methods[] = {
    {"single", (PyCFunction)(void (*)(void))DecisionMaker_single, METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR("single(rate, outcome, cost): the Decision of a one-rate call, its one layer "
               "listing itself, as storage._decisions.single makes it (which it calls for any "
               "outcome that is not six whole numbers of microseconds).")},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DecisionMakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ratewarden.storage._speedups.DecisionMaker",
    .tp_doc = PyDoc_STR("DecisionMaker(*, decision_type, fallback): builds one-rate Decisions in "
                        "C, as storage._decisions.single does in Python."),
    .tp_basicsize = sizeof(DecisionMaker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)DecisionMaker_init,
    .tp_dealloc = (destructor)DecisionMaker_dealloc,
    .tp_traverse = (traverseproc)DecisionMaker_traverse,
    .tp_clear = (inquiry)DecisionMaker_clear,
    .tp_methods = DecisionMaker_methods,
};
