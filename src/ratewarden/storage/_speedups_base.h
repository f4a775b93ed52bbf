/* ratewarden.storage._speedups, part 1 of 9 (included by _speedups.c, which says what the
 * kernel is): the types, the constants, whole-number helpers and a rate's shape. */

#define NEVER (-1)
/* How long an expired state stays before the sweep drops it: the store's _KEEP_EXPIRED_US. */
#define KEEP_EXPIRED_US 1000000LL
#define N_FIELDS 12
/* Arguments a fallback call passes on the stack (the store, then up to this many - 1). */
#define STACK_ARGS 8

/* Decision's slots, in the order the fields are set below. */
static const char *FIELD_NAMES[N_FIELDS] = {
    "allowed", "limit", "remaining", "reset_after", "retry_after", "delay",
    "rate", "cost", "layers", "shadowed", "degraded", "refill_after",
};

enum { F_ALLOWED, F_LIMIT, F_REMAINING, F_RESET, F_RETRY, F_DELAY, F_RATE, F_COST,
       F_LAYERS, F_SHADOWED, F_DEGRADED, F_REFILL };

enum { KIND_GCRA, KIND_WINDOW };

/* One rate's shape as the kernel uses it, with references of its own: another thread may
 * replace the kernel's cache whenever this one runs Python code (a Python clock, a
 * collection, an eviction), so a call copies it out at its start and never reads the cache
 * again. gcra: params (n, d, capacity); fixed_window: n is the limit, d the period in us. */
typedef struct {
    int kind;
    PyObject *suffix, *rate, *limit, *cost;
    long long n, d, capacity, cost_v;
} Shape;

/* A stored state as read: two whole numbers, or none (absent, or expired). */
typedef struct {
    int has;
    long long s0, s1;
} Held;

/* One check's outcome (as algorithms.Outcome, delay always 0), and the state to store if
 * it commits, for ttl us. */
typedef struct {
    int allowed;
    long long remaining, reset_us, retry_us, refill_us;
    long long s0, s1, ttl;
} Step;

/* Shapes decide_calls keeps: found by the identity of the rates and algorithm arguments. */
#define KEPT_SHAPES 16

typedef struct {
    PyObject *rates, *algorithm;
    long long cost_v;
    Shape shape;
} Kept;

typedef struct {
    PyObject_HEAD
    /* Handed by __init__. */
    PyObject *states;       /* the store's OrderedDict */
    PyObject *popitem;      /* states.popitem */
    PyObject *acquire;      /* lock.acquire */
    PyObject *release;      /* lock.release */
    PyObject *locked;       /* lock.locked */
    PyObject *shapes_get;   /* shapes.get */
    PyObject *fallback;     /* the Python path: fallback(store, algorithm, key, rates, cost=1) */
    PyObject *batch_fallback; /* the Python path of a one-rate batch: batch_fallback(store, found) */
    PyObject *evict;        /* evict(store) */
    PyObject *system_clock; /* ratewarden.clock.SystemClock: its time is read here */
    PyObject *rate_type;    /* ratewarden.rate.Rate */
    PyTypeObject *decision_type;
    Py_ssize_t offsets[N_FIELDS];
    /* Its own attributes, the store's clock and max_keys. */
    PyObject *clock;
    int clock_is_system;
    PyObject *max_keys;     /* as set (any object: the Python path compares it) */
    Py_ssize_t max_keys_c;  /* the same as a C number; -1 when it is not an int (ask evict) */
    /* The last shape of decide, found by the identity of the rates argument. */
    PyObject *c_rates;
    PyObject *c_algorithm;
    long long c_cost;
    Shape c_shape;          /* c_shape.suffix is NULL when nothing is cached */
    /* decide_calls's shapes, replaced in turn. */
    Kept kept[KEPT_SHAPES];
    int kept_next;
} MemoryKernel;

static PyObject *S_single, *S_suffixes, *S_params, *S_rates, *S_cost, *S_limit, *S_now_us,
    *S_name, *S_gcra, *S_fixed_window, *EMPTY_STR, *EMPTY_TUPLE, *ZERO_FLOAT, *ONE, *ZERO;

/* Clocks the kernel reads: 0 <= now <= 2**61 us (73,000 years), so that now plus any TTL
 * it computes fits in 64 bits and a window's index is C's division (Python's floor). */
#define NOW_MAX (1LL << 61)

static int
as_i64(PyObject *value, long long *out)
{
    /* 1 and the value for an exact int that fits in 64 bits; 0 otherwise (no error set). */
    if (!PyLong_CheckExact(value)) {
        return 0;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

/* (first, second), stealing both; NULL (and both released) if either is NULL. */
static PyObject *
pair(PyObject *first, PyObject *second)
{
    PyObject *made = first != NULL && second != NULL ? PyTuple_New(2) : NULL;
    if (made == NULL) {
        Py_XDECREF(first);
        Py_XDECREF(second);
        return NULL;
    }
    PyTuple_SET_ITEM(made, 0, first);
    PyTuple_SET_ITEM(made, 1, second);
    return made;
}

static long long
ceil_div(long long a, long long b)
{
    /* ceil(a / b) for a >= 0, b > 0. */
    return a / b + (a % b != 0);
}

static void
shape_clear(Shape *shape)
{
    Py_CLEAR(shape->suffix);
    Py_CLEAR(shape->rate);
    Py_CLEAR(shape->limit);
    Py_CLEAR(shape->cost);
}

/* *to = *from, with references of its own. */
static void
shape_copy(Shape *to, const Shape *from)
{
    *to = *from;
    Py_INCREF(to->suffix);
    Py_INCREF(to->rate);
    Py_INCREF(to->limit);
    Py_INCREF(to->cost);
}

/* Forget the cached shapes. */
static void
clear_shape(MemoryKernel *self)
{
    Py_CLEAR(self->c_rates);
    Py_CLEAR(self->c_algorithm);
    shape_clear(&self->c_shape);
    for (int i = 0; i < KEPT_SHAPES; i++) {
        Py_CLEAR(self->kept[i].rates);
        Py_CLEAR(self->kept[i].algorithm);
        shape_clear(&self->kept[i].shape);
    }
}

/* The kind of an algorithm name the kernel decides, or -1. */
static int
kind_of(PyObject *name)
{
    if (name == S_gcra || name == S_fixed_window) {
        return name == S_gcra ? KIND_GCRA : KIND_WINDOW;
    }
    if (!PyUnicode_CheckExact(name)) {
        return -1;
    }
    if (PyUnicode_Compare(name, S_gcra) == 0) {
        return KIND_GCRA;
    }
    return PyUnicode_Compare(name, S_fixed_window) == 0 ? KIND_WINDOW : -1;
}

/* Read a shape of the store's cache (its public fields) into *out. Returns 1 when the kernel
 * decides it (one rate of an algorithm it knows, numbers in range; *out then holds
 * references), 0 when it does not, -1 on error. */
static int
read_shape(PyObject *shape, Shape *out)
{
    int result = 0;
    PyObject *single = NULL, *name = NULL, *suffixes = NULL, *params = NULL, *shape_rates = NULL,
             *shape_cost = NULL, *limit = NULL;
    long long n, d, capacity = 0, cost_v;
    int kind;
    single = PyObject_GetAttr(shape, S_single);
    if (single == NULL) goto error;
    if (single != Py_True) goto done;
    name = PyObject_GetAttr(shape, S_name);
    if (name == NULL) goto error;
    kind = kind_of(name);
    if (kind < 0) goto done;
    suffixes = PyObject_GetAttr(shape, S_suffixes);
    params = PyObject_GetAttr(shape, S_params);
    shape_rates = PyObject_GetAttr(shape, S_rates);
    shape_cost = PyObject_GetAttr(shape, S_cost);
    if (suffixes == NULL || params == NULL || shape_rates == NULL || shape_cost == NULL) {
        goto error;
    }
    if (!PyTuple_CheckExact(suffixes) || PyTuple_GET_SIZE(suffixes) != 1
        || !PyUnicode_CheckExact(PyTuple_GET_ITEM(suffixes, 0))
        || !PyTuple_CheckExact(params) || PyTuple_GET_SIZE(params) != 1
        || !PyTuple_CheckExact(shape_rates) || PyTuple_GET_SIZE(shape_rates) != 1
        || !as_i64(shape_cost, &cost_v) || cost_v < 0) {
        goto done;
    }
    PyObject *p = PyTuple_GET_ITEM(params, 0);
    if (!PyTuple_CheckExact(p) || PyTuple_GET_SIZE(p) != (kind == KIND_GCRA ? 3 : 2)
        || !as_i64(PyTuple_GET_ITEM(p, 0), &n) || !as_i64(PyTuple_GET_ITEM(p, 1), &d)
        || (kind == KIND_GCRA && !as_i64(PyTuple_GET_ITEM(p, 2), &capacity))) {
        goto done;
    }
    if (kind == KIND_GCRA) {
        /* Keep every product below 2**62: (capacity + cost) * d and the TAT's distance
         * times n are then exact in 64 bits (the Python twin says below 2**53). */
        if (n <= 0 || d <= 0 || capacity < 0 || n > (1LL << 40) || d > (1LL << 52)
            || capacity > (1LL << 40) || cost_v > (1LL << 40)
            || (capacity + cost_v + 1) > (1LL << 62) / d) {
            goto done;
        }
    }
    /* fixed_window: a count read is at most 2**41 (read_entry) and cost below 2**62, so
     * count + cost fits. */
    else if (n < 0 || n >= (1LL << 62) || d <= 0 || d >= (1LL << 62) || cost_v >= (1LL << 62)) {
        goto done;
    }
    limit = PyObject_GetAttr(PyTuple_GET_ITEM(shape_rates, 0), S_limit);
    if (limit == NULL) goto error;
    out->kind = kind;
    out->suffix = Py_NewRef(PyTuple_GET_ITEM(suffixes, 0));
    out->rate = Py_NewRef(PyTuple_GET_ITEM(shape_rates, 0));
    out->limit = Py_NewRef(limit);
    out->cost = Py_NewRef(shape_cost);
    out->n = n;
    out->d = d;
    out->capacity = capacity;
    out->cost_v = cost_v;
    result = 1;
    goto done;
error:
    result = -1;
done:
    Py_XDECREF(single);
    Py_XDECREF(name);
    Py_XDECREF(suffixes);
    Py_XDECREF(params);
    Py_XDECREF(shape_rates);
    Py_XDECREF(shape_cost);
    Py_XDECREF(limit);
    return result;
}

/* read_shape of the shape shapes.get gave (released here) for a call of cost cost_v: 0 as well
 * when the shape is of another cost. */
static int
read_asked_shape(PyObject *found, long long cost_v, Shape *out)
{
    int result = read_shape(found, out);
    Py_DECREF(found);
    if (result > 0 && out->cost_v != cost_v) {
        shape_clear(out);
        return 0;
    }
    return result;
}

/* Look the shape up in the store's shape cache (Python: shapes.get validates the rates and
 * the cost, and raises what the Python path raises) and keep it. Returns 1 when the kernel
 * decides the call, 0 when it does not, -1 on error. */
static int
load_shape(MemoryKernel *self, PyObject *algorithm, PyObject *rates, PyObject *cost,
           long long cost_v)
{
    PyObject *args[3] = {algorithm, rates, cost};
    PyObject *found = PyObject_Vectorcall(self->shapes_get, args, 3, NULL);
    if (found == NULL) {
        return -1;
    }
    Shape shape;
    int result = read_asked_shape(found, cost_v, &shape);
    if (result <= 0) {
        return result;
    }
    clear_shape(self);
    /* A list of rates is looked up by value each time (it may change): never cached. */
    if (Py_IS_TYPE(rates, (PyTypeObject *)self->rate_type) || PyTuple_CheckExact(rates)) {
        self->c_rates = Py_NewRef(rates);
    }
    self->c_algorithm = Py_NewRef(algorithm);
    self->c_cost = cost_v;
    self->c_shape = shape;  /* its references move to the cache */
    return 1;
}
