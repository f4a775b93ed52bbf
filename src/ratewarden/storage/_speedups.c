/*
 * ratewarden.storage._speedups: the memory store's kernel in C (storage/_kernel.py loads it).
 *
 * MemoryKernel is the base type of the memory store (storage/_memory_table.py, MemoryTable). It
 * holds the one-rate steps of two algorithms, gcra (algorithms/gcra.py) and fixed_window
 * (algorithms/fixed_window.py: state (window index, count), expiring at the window's end), for a
 * whole cost and an ASCII str key, and the state-table operations those steps need (read, write
 * in place, sweep, and evict through the store's Python method), and nothing else: no Limiter,
 * no middleware. Its method decide(algorithm, key, rates, cost=1) is MemoryStore.hit (assigned
 * at class level, so a call reaches C with no Python frame between) and what
 * AsyncMemoryStore.hit calls. hit_all asks decide_calls(algorithm, calls) first: a batch of
 * plainly valid one-rate calls (a (key, rates, cost) tuple each, an ASCII key, a whole cost, no
 * key and rate twice: what _plan.batch passes unchanged) is validated and decided here, any
 * other answered None and validated by _plan.batch in Python, which raises its own errors;
 * decide_all(found) then decides a validated batch of one-rate calls (found: a list of
 * (key, shape)). Both are all or nothing as the store's _hit_all_single (denied: nothing
 * written, and a call that would have passed reports the check at cost 0). Every call it does not take (another algorithm, layered rates,
 * keywords, another key or cost, numbers beyond the range where 64-bit integers are exact, a
 * clock before the epoch) goes to the Python path it was handed, which stays the reference; the
 * same when the store's lock is held by the Python path (decide; decide_all takes the lock), and
 * a batch of which one call is not its own goes whole to the Python path it was handed. tests/storage/test_speedups.py,
 * test_speedups_fixed_window.py and test_speedups_batch.py feed both the same random sequences
 * and demand identical Decisions and identical stored state.
 *
 * Its interface, and all it knows of the store:
 *   - __init__(*, states, lock, shapes, fallback, batch_fallback, evict, decision_type,
 *     rate_type, system_clock_type) hands it every object it works on, once: the store's
 *     OrderedDict of state key -> (state, expires_at_us), its threading.Lock (acquire, release,
 *     locked), its shape cache (shapes.get(algorithm, rates, cost) and the returned shape's
 *     public fields), the Python paths fallback(store, algorithm, key, rates, cost=1) and
 *     batch_fallback(store, found), evict(store) (drop the oldest entries past max_keys,
 *     counting them), and the classes it builds or recognises. It reads no attribute of the
 *     store by name, private or public.
 *   - clock and max_keys are its own attributes (get/set descriptors here). The store's public
 *     store.clock and store.max_keys are properties of MemoryTable: they check a new value as
 *     the constructor does and hand it on through these, so it is used from the next call.
 *   - Decision's public fields are set through the offsets of the dataclass's slot member
 *     descriptors (read once, at __init__, from decision_type's __dict__); the result is an
 *     ordinary Decision, as decision.make_decision builds it in Python.
 *
 * DecisionMaker(*, decision_type, fallback).single(rate, outcome, cost) is storage._decisions.single
 * (a one-rate call's Decision from its Outcome, what the Redis store's reply decoding builds), in
 * C: an outcome that is not six whole numbers of microseconds within 2**53 goes to the Python
 * function it was handed, the reference (tests/storage/test_speedups_decisions.py).
 *
 * The Redis store's one-rate hit_all (RedisBase._hit_all_call), by two kernels that know no
 * Redis client and no store private: BatchPlanner.plan(algorithm, calls) plans a plainly valid
 * batch as the Python path does, the same request bytes (None for any other: the Python path
 * runs and raises its own errors; _speedups_plan.h says what it takes), and BatchDecoder.decode
 * is _decisions.decode_batch for a reply of one-rate calls (any other: the Python function).
 * tests/storage/test_speedups_redis*.py hold both to the Python path, and on real servers.
 *
 * Built when a C compiler is there (setup.py marks the extension optional);
 * RATEWARDEN_PURE=1 in the environment keeps it unused.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#include <time.h>

/* One translation unit, in parts of its own (every function static): */
#include "_speedups_base.h"
#include "_speedups_table.h"
#include "_speedups_decide.h"
#include "_speedups_batch.h"
#include "_speedups_calls.h"
#include "_speedups_maker.h"
#include "_speedups_reply.h"
#include "_speedups_plan.h"
#include "_speedups_planner.h"

/* ---- the attributes it owns: the store's clock and max_keys ---- */

static PyObject *
MemoryKernel_get_clock(MemoryKernel *self, void *unused)
{
    (void)unused;
    if (self->clock == NULL) {
        PyErr_SetString(PyExc_AttributeError, "the store has no clock yet");
        return NULL;
    }
    return Py_NewRef(self->clock);
}

static int
MemoryKernel_set_clock(MemoryKernel *self, PyObject *value, void *unused)
{
    (void)unused;
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "the store's clock cannot be deleted; set another");
        return -1;
    }
    self->clock_is_system =
        self->system_clock != NULL && Py_IS_TYPE(value, (PyTypeObject *)self->system_clock);
    Py_XSETREF(self->clock, Py_NewRef(value));
    return 0;
}

static PyObject *
MemoryKernel_get_max_keys(MemoryKernel *self, void *unused)
{
    (void)unused;
    if (self->max_keys == NULL) {
        PyErr_SetString(PyExc_AttributeError, "the store has no max_keys yet");
        return NULL;
    }
    return Py_NewRef(self->max_keys);
}

static int
MemoryKernel_set_max_keys(MemoryKernel *self, PyObject *value, void *unused)
{
    (void)unused;
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "the store's max_keys cannot be deleted; set another");
        return -1;
    }
    Py_ssize_t limit = -1;
    if (PyLong_Check(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (overflow > 0 || v > PY_SSIZE_T_MAX) {
            limit = PY_SSIZE_T_MAX;  /* more keys than memory can hold: no bound in practice */
        }
        else if (overflow == 0 && v >= 0) {
            limit = (Py_ssize_t)v;
        }
        /* below 0 (the store's checked setter never hands one on): -1, so every new key
         * asks the store's evict */
    }
    Py_XSETREF(self->max_keys, Py_NewRef(value));
    self->max_keys_c = limit;
    return 0;
}

static PyGetSetDef MemoryKernel_getset[] = {
    {"clock", (getter)MemoryKernel_get_clock, (setter)MemoryKernel_set_clock,
     PyDoc_STR("The store's clock; SystemClock's time is read in C, any other is called."),
     NULL},
    {"max_keys", (getter)MemoryKernel_get_max_keys, (setter)MemoryKernel_set_max_keys,
     PyDoc_STR("The store's bound on keys held; past it evict(store) drops the oldest."), NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- construction ---- */

static int
MemoryKernel_traverse(MemoryKernel *self, visitproc visit, void *arg)
{
    /* The store class itself (a heap type) is visited, and released at dealloc, by the
     * subclass's own slots, which then call these. */
    Py_VISIT(self->states);
    Py_VISIT(self->popitem);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->locked);
    Py_VISIT(self->shapes_get);
    Py_VISIT(self->fallback);
    Py_VISIT(self->batch_fallback);
    Py_VISIT(self->evict);
    Py_VISIT(self->system_clock);
    Py_VISIT(self->rate_type);
    Py_VISIT(self->decision_type);
    Py_VISIT(self->clock);
    Py_VISIT(self->max_keys);
    Py_VISIT(self->c_rates);
    Py_VISIT(self->c_algorithm);
    Py_VISIT(self->c_shape.suffix);
    Py_VISIT(self->c_shape.rate);
    Py_VISIT(self->c_shape.limit);
    Py_VISIT(self->c_shape.cost);
    for (int i = 0; i < KEPT_SHAPES; i++) {
        Py_VISIT(self->kept[i].rates);
        Py_VISIT(self->kept[i].algorithm);
        Py_VISIT(self->kept[i].shape.suffix);
        Py_VISIT(self->kept[i].shape.rate);
        Py_VISIT(self->kept[i].shape.limit);
        Py_VISIT(self->kept[i].shape.cost);
    }
    return 0;
}

static int
MemoryKernel_clear(MemoryKernel *self)
{
    Py_CLEAR(self->states);
    Py_CLEAR(self->popitem);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->locked);
    Py_CLEAR(self->shapes_get);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->batch_fallback);
    Py_CLEAR(self->evict);
    Py_CLEAR(self->system_clock);
    Py_CLEAR(self->rate_type);
    Py_CLEAR(self->decision_type);
    Py_CLEAR(self->clock);
    Py_CLEAR(self->max_keys);
    clear_shape(self);
    return 0;
}

static void
MemoryKernel_dealloc(MemoryKernel *self)
{
    PyObject_GC_UnTrack(self);
    MemoryKernel_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* obj.name (a public method or attribute of a handed object), or NULL with an error that says
 * which argument lacks it. */
static PyObject *
handed_attr(PyObject *obj, const char *name, const char *argument)
{
    PyObject *found = PyObject_GetAttrString(obj, name);
    if (found == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Format(PyExc_TypeError, "MemoryKernel(%s=...): %R has no %s", argument, obj, name);
    }
    return found;
}

static int
MemoryKernel_init(MemoryKernel *self, PyObject *args, PyObject *kwds)
{
    PyObject *states, *lock, *shapes, *fallback, *batch_fallback, *evict, *decision_type,
        *rate_type, *system_clock;
    static char *kwlist[] = {"states", "lock", "shapes", "fallback", "batch_fallback", "evict",
                             "decision_type", "rate_type", "system_clock_type", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$OOOOOOOOO:MemoryKernel", kwlist, &states,
                                     &lock, &shapes, &fallback, &batch_fallback, &evict,
                                     &decision_type, &rate_type, &system_clock)) {
        return -1;
    }
    if (PyTuple_GET_SIZE(args) != 0 || kwds == NULL || PyDict_GET_SIZE(kwds) != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "MemoryKernel takes exactly these keyword arguments: states, lock, "
                        "shapes, fallback, batch_fallback, evict, decision_type, rate_type, "
                        "system_clock_type");
        return -1;
    }
    if (!PyODict_CheckExact(states)) {
        PyErr_Format(PyExc_TypeError, "MemoryKernel(states=...) must be an OrderedDict, not %s",
                     Py_TYPE(states)->tp_name);
        return -1;
    }
    if (!PyCallable_Check(fallback) || !PyCallable_Check(batch_fallback)
        || !PyCallable_Check(evict)) {
        PyErr_SetString(PyExc_TypeError,
                        "MemoryKernel(fallback=..., batch_fallback=..., evict=...) must all be "
                        "callable");
        return -1;
    }
    if (!PyType_Check(decision_type) || !PyType_Check(rate_type) || !PyType_Check(system_clock)) {
        PyErr_SetString(PyExc_TypeError,
                        "MemoryKernel(decision_type=..., rate_type=..., system_clock_type=...) "
                        "must be classes");
        return -1;
    }
    Py_ssize_t offsets[N_FIELDS];
    if (slot_offsets(decision_type, offsets, "MemoryKernel") < 0) {
        return -1;
    }
    PyObject *popitem = handed_attr(states, "popitem", "states");
    PyObject *acquire = popitem ? handed_attr(lock, "acquire", "lock") : NULL;
    PyObject *release = acquire ? handed_attr(lock, "release", "lock") : NULL;
    PyObject *locked = release ? handed_attr(lock, "locked", "lock") : NULL;
    PyObject *shapes_get = locked ? handed_attr(shapes, "get", "shapes") : NULL;
    if (shapes_get == NULL) {
        Py_XDECREF(popitem);
        Py_XDECREF(acquire);
        Py_XDECREF(release);
        Py_XDECREF(locked);
        return -1;
    }
    Py_XSETREF(self->states, Py_NewRef(states));
    Py_XSETREF(self->popitem, popitem);
    Py_XSETREF(self->acquire, acquire);
    Py_XSETREF(self->release, release);
    Py_XSETREF(self->locked, locked);
    Py_XSETREF(self->shapes_get, shapes_get);
    Py_XSETREF(self->fallback, Py_NewRef(fallback));
    Py_XSETREF(self->batch_fallback, Py_NewRef(batch_fallback));
    Py_XSETREF(self->evict, Py_NewRef(evict));
    Py_XSETREF(self->system_clock, Py_NewRef(system_clock));
    Py_XSETREF(self->rate_type, Py_NewRef(rate_type));
    Py_XSETREF(self->decision_type, (PyTypeObject *)Py_NewRef(decision_type));
    memcpy(self->offsets, offsets, sizeof offsets);
    clear_shape(self);  /* shapes of another cache, or another Decision class, are not these */
    if (self->clock != NULL) {
        self->clock_is_system = Py_IS_TYPE(self->clock, (PyTypeObject *)system_clock);
    }
    return 0;
}

static PyObject *
MemoryKernel_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    /* The store's own __init__ takes the store's options; __init__ above takes the kernel's. */
    MemoryKernel *self = (MemoryKernel *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->max_keys_c = PY_SSIZE_T_MAX;
    }
    return (PyObject *)self;
}

static PyMethodDef MemoryKernel_methods[] = {
    {"decide", (PyCFunction)(void (*)(void))MemoryKernel_decide, METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR("decide(algorithm, key, rates, cost=1): the store's hit. One gcra or "
               "fixed_window rate, an ASCII str key and a whole cost are decided here; every "
               "other call by the fallback it was handed.")},
    {"decide_calls", (PyCFunction)(void (*)(void))MemoryKernel_decide_calls, METH_FASTCALL,
     PyDoc_STR("decide_calls(algorithm, calls): the store's hit_all for a gcra or fixed_window "
               "batch of plainly valid one-rate calls (each a (key, rates, cost) tuple, an ASCII "
               "key, no key and rate twice), validated and decided here; None for any other, "
               "which the store then validates and decides in Python.")},
    {"decide_all", (PyCFunction)MemoryKernel_decide_all, METH_O,
     PyDoc_STR("decide_all(found): the store's hit_all when every call has one rate, found being "
               "the validated batch (_plan.batch: a list of (key, shape)). gcra and fixed_window "
               "batches of ASCII keys are decided here; any other by the batch_fallback it was "
               "handed.")},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject MemoryKernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ratewarden.storage._speedups.MemoryKernel",
    .tp_doc = PyDoc_STR(
        "MemoryKernel(*, states, lock, shapes, fallback, batch_fallback, evict, decision_type, "
        "rate_type, system_clock_type): the memory store's base in C, its one-rate GCRA and "
        "fixed-window steps over the state table it is handed."),
    .tp_basicsize = sizeof(MemoryKernel),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = MemoryKernel_new,
    .tp_init = (initproc)MemoryKernel_init,
    .tp_dealloc = (destructor)MemoryKernel_dealloc,
    .tp_traverse = (traverseproc)MemoryKernel_traverse,
    .tp_clear = (inquiry)MemoryKernel_clear,
    .tp_methods = MemoryKernel_methods,
    .tp_getset = MemoryKernel_getset,
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ratewarden.storage._speedups",
    .m_doc = "The memory store's kernel in C: its one-rate GCRA and fixed-window steps, one call "
             "or an all-or-nothing batch, over the state table it is handed "
             "(storage/_memory_table.py).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    S_single = PyUnicode_InternFromString("single");
    S_suffixes = PyUnicode_InternFromString("suffixes");
    S_params = PyUnicode_InternFromString("params");
    S_rates = PyUnicode_InternFromString("rates");
    S_cost = PyUnicode_InternFromString("cost");
    S_limit = PyUnicode_InternFromString("limit");
    S_now_us = PyUnicode_InternFromString("now_us");
    S_name = PyUnicode_InternFromString("name");
    S_gcra = PyUnicode_InternFromString("gcra");
    S_fixed_window = PyUnicode_InternFromString("fixed_window");
    EMPTY_STR = PyUnicode_FromString("");
    EMPTY_TUPLE = PyTuple_New(0);
    ZERO_FLOAT = PyFloat_FromDouble(0.0);
    ONE = PyLong_FromLong(1);
    ZERO = PyLong_FromLong(0);
    if (!S_single || !S_suffixes || !S_params || !S_rates || !S_cost || !S_limit || !S_now_us
        || !S_name || !S_gcra || !S_fixed_window || !EMPTY_STR || !EMPTY_TUPLE || !ZERO_FLOAT
        || !ONE || !ZERO
        || PyType_Ready(&MemoryKernelType) < 0 || PyType_Ready(&DecisionMakerType) < 0
        || PyType_Ready(&BatchDecoderType) < 0 || PyType_Ready(&BatchPlannerType) < 0) {
        return NULL;
    }
    crc16_init();
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "MemoryKernel", (PyObject *)&MemoryKernelType) < 0
        || PyModule_AddObjectRef(module, "DecisionMaker", (PyObject *)&DecisionMakerType) < 0
        || PyModule_AddObjectRef(module, "BatchDecoder", (PyObject *)&BatchDecoderType) < 0
        || PyModule_AddObjectRef(module, "BatchPlanner", (PyObject *)&BatchPlannerType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
