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
 *   - clock and max_keys are its own attributes (get/set descriptors here): the store's public
 *     store.clock and store.max_keys are these, so a new value is used from the next call.
 *   - Decision's public fields are set through the offsets of the dataclass's slot member
 *     descriptors (read once, at __init__, from decision_type's __dict__); the result is an
 *     ordinary Decision, as decision.make_decision builds it in Python.
 *
 * DecisionMaker(*, decision_type, fallback).single(rate, outcome, cost) is storage._decisions.single
 * (a one-rate call's Decision from its Outcome, what the Redis store's reply decoding builds), in
 * C: an outcome that is not six whole numbers of microseconds within 2**53 goes to the Python
 * function it was handed, the reference (tests/storage/test_speedups_decisions.py).
 *
 * Built when a C compiler is there (setup.py marks the extension optional);
 * RATEWARDEN_PURE=1 in the environment keeps it unused.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#include <time.h>

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
    /* fixed_window: count <= limit and cost below 2**62, so count + cost fits. */
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
    int result = read_shape(found, &shape);
    Py_DECREF(found);
    if (result <= 0) {
        return result;
    }
    if (shape.cost_v != cost_v) {
        shape_clear(&shape);
        return 0;
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

static int
now_us(MemoryKernel *self, long long *out)
{
    if (self->clock_is_system) {
        struct timespec ts;
        if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        /* time.time_ns() // 1000, as SystemClock.now_us. */
        *out = (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
        return 0;
    }
    /* A reference of its own: a new store.clock may drop the old one meanwhile. */
    PyObject *clock = Py_NewRef(self->clock);
    PyObject *value = PyObject_CallMethodNoArgs(clock, S_now_us);
    Py_DECREF(clock);
    if (value == NULL) {
        return -1;
    }
    int ok = as_i64(value, out);
    Py_DECREF(value);
    if (!ok) {
        PyErr_SetString(PyExc_TypeError, "clock.now_us() must return an int");
        return -1;
    }
    return 0;
}

/* A Decision of type with every slot (at offsets) set; steals nothing, returns a new
 * reference. */
static PyObject *
build_decision(PyTypeObject *type, const Py_ssize_t offsets[N_FIELDS], PyObject *values[N_FIELDS])
{
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL) {
        return NULL;
    }
    for (int i = 0; i < N_FIELDS; i++) {
        PyObject **slot = (PyObject **)((char *)obj + offsets[i]);
        Py_XSETREF(*slot, Py_NewRef(values[i]));
    }
    return obj;
}

static PyObject *
make_decision(MemoryKernel *self, PyObject *values[N_FIELDS])
{
    return build_decision(self->decision_type, self->offsets, values);
}

/* The offsets of decision_type's slots, from their member descriptors (a public field, not a
 * name): 0, or -1 with an error naming who was handed the class. */
static int
slot_offsets(PyObject *decision_type, Py_ssize_t offsets[N_FIELDS], const char *who)
{
    PyObject *type_dict = ((PyTypeObject *)decision_type)->tp_dict;
    for (int i = 0; i < N_FIELDS; i++) {
        PyObject *descr = PyDict_GetItemString(type_dict, FIELD_NAMES[i]);
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)
            || ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "%s(decision_type=...): %R has no object slot %s", who,
                         decision_type, FIELD_NAMES[i]);
            return -1;
        }
        offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    return 0;
}

static PyObject *
seconds(long long us)
{
    if (us == NEVER) {
        return PyFloat_FromDouble(Py_HUGE_VAL);
    }
    /* Exact below 2**53, then one correctly rounded division: the same float as us / 1_000_000. */
    return PyFloat_FromDouble((double)us / 1e6);
}

static PyObject *
decision(MemoryKernel *self, const Shape *shape, PyObject *cost, const Step *step)
{
    PyObject *rem = PyLong_FromLongLong(step->remaining);
    PyObject *reset = seconds(step->reset_us);
    PyObject *retry = seconds(step->retry_us);
    PyObject *refill = seconds(step->refill_us);
    PyObject *layer = NULL, *layers = NULL, *top = NULL;
    if (rem == NULL || reset == NULL || retry == NULL || refill == NULL) goto done;
    PyObject *values[N_FIELDS] = {
        step->allowed ? Py_True : Py_False, shape->limit, rem, reset, retry, ZERO_FLOAT,
        shape->rate, cost, EMPTY_TUPLE, Py_False, EMPTY_STR, refill,
    };
    layer = make_decision(self, values);
    if (layer == NULL) goto done;
    layers = PyTuple_Pack(1, layer);
    if (layers == NULL) goto done;
    values[F_LAYERS] = layers;
    top = make_decision(self, values);
done:
    Py_XDECREF(rem);
    Py_XDECREF(reset);
    Py_XDECREF(retry);
    Py_XDECREF(refill);
    Py_XDECREF(layer);
    Py_XDECREF(layers);
    return top;
}

/* Read a state table entry (NULL: none) for shape at now into *held, *expired saying whether
 * it was there but expired (as if never seen). Returns 1, or 0 when the entry is not one the
 * kernel reads (the Python path then decides). Runs no Python code. */
static int
read_entry(const Shape *shape, PyObject *entry, long long now, int *expired, Held *held)
{
    long long expires, a, b;
    held->has = 0;
    *expired = 0;
    if (entry == NULL) {
        return 1;
    }
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2
        || !as_i64(PyTuple_GET_ITEM(entry, 1), &expires)) {
        return 0;
    }
    if (expires <= now) {
        *expired = 1;
        return 1;
    }
    PyObject *state = PyTuple_GET_ITEM(entry, 0);
    if (!PyTuple_CheckExact(state) || PyTuple_GET_SIZE(state) != 2
        || !as_i64(PyTuple_GET_ITEM(state, 0), &a) || !as_i64(PyTuple_GET_ITEM(state, 1), &b)) {
        return 0;
    }
    if (shape->kind == KIND_GCRA) {
        /* (tat, frac): frac in [0, n); a TAT far beyond any this rate can build is not ours. */
        if (b < 0 || b >= shape->n || (a >= now && a - now > ((1LL << 62) / shape->n) - 1)) {
            return 0;
        }
    }
    else if (a == now / shape->d && (b < 0 || b > shape->n)) {
        return 0;  /* (window, count): a count of this window beyond the limit is not ours */
    }
    held->has = 1;
    held->s0 = a;
    held->s1 = b;
    return 1;
}

/* algorithms.gcra.check, in whole numbers. */
static void
gcra_check(const Shape *shape, const Held *held, long long now, long long cost, Step *out)
{
    const long long n = shape->n, d = shape->d, capacity = shape->capacity;
    long long tat = now, frac = 0;
    if (held->has && held->s0 >= now) {
        tat = held->s0;
        frac = held->s1;
    }
    const long long ahead = (tat - now) * n + frac;
    const long long room = capacity * d;
    out->s0 = out->s1 = out->ttl = 0;
    /* cost <= capacity before cost * d is formed: below 2**62 then. */
    if (cost > capacity || ahead + cost * d > room) {
        out->allowed = 0;
        out->remaining = (room > ahead ? room - ahead : 0) / d;
        out->reset_us = ceil_div(ahead, n);
        out->retry_us = cost > capacity ? NEVER : ceil_div(ahead + cost * d - room, n);
        /* The next unit fits once the TAT, moved by the remaining units, is one T from full.
         * Below 2**63: ahead < 2**62 and the rest at most (capacity + 1) * d. */
        out->refill_us = ceil_div(ahead + (out->remaining + 1) * d - room, n);
        return;
    }
    const long long after = ahead + cost * d, total = frac + cost * d;
    out->allowed = 1;
    out->remaining = (room - after) / d;
    out->reset_us = ceil_div(after, n);
    out->retry_us = 0;
    out->refill_us = ceil_div(d - (room - after) % d, n);
    out->s0 = tat + total / n;
    out->s1 = total % n;
    out->ttl = out->reset_us;
}

/* algorithms.fixed_window.check: (window index, count), the window ending its count. */
static void
window_check(const Shape *shape, const Held *held, long long now, long long cost, Step *out)
{
    const long long limit = shape->n, period = shape->d;
    const long long window = now / period;  /* now >= 0: Python's floor division */
    const long long count = held->has && held->s0 == window ? held->s1 : 0;
    const long long to_end = period - (now - window * period);
    out->refill_us = to_end;
    out->s0 = out->s1 = out->ttl = 0;
    if (count + cost > limit) {
        out->allowed = 0;
        out->remaining = limit - count;
        out->reset_us = count > 0 ? to_end : 0;
        out->retry_us = cost > limit ? NEVER : to_end;
        return;
    }
    const long long total = count + cost;
    out->allowed = 1;
    out->remaining = limit - total;
    out->reset_us = total > 0 ? to_end : 0;
    out->retry_us = 0;
    out->s0 = window;
    out->s1 = total;
    out->ttl = out->reset_us;
}

static void
check(const Shape *shape, const Held *held, long long now, long long cost, Step *out)
{
    if (shape->kind == KIND_GCRA) {
        gcra_check(shape, held, now, cost, out);
    }
    else {
        window_check(shape, held, now, cost, out);
    }
}

/* The store's _write after states[key] = value: a key that was there keeps its place
 * and nothing else happens; a new key (an OrderedDict appends it) makes the store sweep
 * its oldest end and, past max_keys, evict. */
static int
after_write(MemoryKernel *self, int was_there, long long now)
{
    if (was_there) {
        return 0;
    }
    /* The store's _sweep: take the two oldest keys out, one after the other; one expired
     * for KEEP_EXPIRED_US or longer stays out, any other goes back in at the end. */
    for (int i = 0; i < 2; i++) {
        PyObject *item = PyObject_CallOneArg(self->popitem, Py_False);
        if (item == NULL) return -1;
        PyObject *entry = PyTuple_GET_ITEM(item, 1);
        long long expires;
        if (!(PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == 2
              && as_i64(PyTuple_GET_ITEM(entry, 1), &expires))) {
            expires = now + 1;  /* not ours to judge: keep it, as live */
        }
        if (expires + KEEP_EXPIRED_US <= now) {
            Py_DECREF(item);
            continue;
        }
        int failed = PyObject_SetItem(self->states, PyTuple_GET_ITEM(item, 0), entry) < 0;
        Py_DECREF(item);
        if (failed) return -1;
    }
    /* Past max_keys (or a max_keys that is no C number: the Python method compares it and
     * raises what the Python path raises), the store's own method evicts and counts. */
    if (self->max_keys_c < 0 || PyDict_GET_SIZE(self->states) > self->max_keys_c) {
        PyObject *r = PyObject_CallOneArg(self->evict, (PyObject *)self);
        if (r == NULL) return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* Store (tat, frac) expiring at expires for state_key, as the store's _write does.
 *
 * ``entry`` is the live entry read for this key (a new reference) or NULL. When
 * nothing but the store holds that entry and its state tuple (the usual case: the
 * Python path never keeps them), their numbers are replaced in place, which spares
 * two tuples and a dict store; otherwise new tuples go in, as in Python. */
static int
write_state(MemoryKernel *self, PyObject *state_key, PyObject *entry, long long tat,
            long long frac, long long expires, long long now)
{
    PyObject *t_new = PyLong_FromLongLong(tat);
    PyObject *f_new = PyLong_FromLongLong(frac);
    PyObject *e_new = PyLong_FromLongLong(expires);
    if (t_new == NULL || f_new == NULL || e_new == NULL) {
        Py_XDECREF(t_new);
        Py_XDECREF(f_new);
        Py_XDECREF(e_new);
        return -1;
    }
    PyObject *state = entry != NULL ? PyTuple_GET_ITEM(entry, 0) : NULL;
    /* 2: the dict's reference and the caller's. */
    if (entry != NULL && Py_REFCNT(entry) == 2 && PyTuple_CheckExact(state)
        && PyTuple_GET_SIZE(state) == 2 && Py_REFCNT(state) == 1) {
        PyObject *old_t = PyTuple_GET_ITEM(state, 0), *old_f = PyTuple_GET_ITEM(state, 1);
        PyObject *old_e = PyTuple_GET_ITEM(entry, 1);
        PyTuple_SET_ITEM(state, 0, t_new);
        PyTuple_SET_ITEM(state, 1, f_new);
        PyTuple_SET_ITEM(entry, 1, e_new);
        Py_DECREF(old_t);
        Py_DECREF(old_f);
        Py_DECREF(old_e);
    }
    else {
        PyObject *made = pair(pair(t_new, f_new), e_new);
        if (made == NULL) {
            return -1;
        }
        int stored = PyObject_SetItem(self->states, state_key, made);
        Py_DECREF(made);
        if (stored < 0) {
            return -1;
        }
    }
    return after_write(self, entry != NULL, now);
}

/* The lock.
 *
 * The store's state is guarded by its lock, which the Python path holds from reading a
 * state to writing the next one. With the GIL, this code needs no lock of its own between
 * reading the state and writing the new one: it runs no Python code there, and the garbage
 * collector is off meanwhile (a collection could run a finalizer, which could let another
 * thread in), so no other thread can run in between. It only has to keep out of a
 * Python-path section in progress: when the lock is held, the call goes to the Python path,
 * which waits for it. A build without the GIL takes the lock. lock() returns 0 to go on,
 * -1 with an error set, or -1 without one to hand the call to the Python path. */
static int
lock(MemoryKernel *self)
{
#ifdef Py_GIL_DISABLED
    PyObject *r = PyObject_CallNoArgs(self->acquire);
#else
    PyObject *r = PyObject_CallNoArgs(self->locked);
#endif
    if (r == NULL) {
        return -1;
    }
    int held = r == Py_True;
    Py_DECREF(r);
#ifdef Py_GIL_DISABLED
    (void)held;
    return 0;
#else
    return held ? -1 : 0;
#endif
}

static int
unlock(MemoryKernel *self)
{
#ifdef Py_GIL_DISABLED
    PyObject *r = PyObject_CallNoArgs(self->release);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
#else
    (void)self;
#endif
    return 0;
}

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
    int result = read_shape(found, &shape);
    Py_DECREF(found);
    if (result <= 0) {
        return result;
    }
    if (shape.cost_v != cost_v) {
        shape_clear(&shape);
        return 0;
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
        /* below 0: -1, so every new key asks the store's evict, as the Python path does */
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
    PyObject *reset = seconds(reset_us);
    PyObject *retry = seconds(retry_us);
    PyObject *delay = delay_us == 0 ? Py_NewRef(ZERO_FLOAT) : seconds(delay_us);
    PyObject *refill = PyFloat_FromDouble((double)refill_us / 1e6);  /* no NEVER here */
    PyObject *limit = NULL, *layer = NULL, *layers = NULL, *top = NULL;
    if (reset == NULL || retry == NULL || delay == NULL || refill == NULL) goto done;
    limit = PyObject_GetAttr(args[0], S_limit);
    if (limit == NULL) goto done;
    PyObject *values[N_FIELDS] = {
        PyTuple_GET_ITEM(outcome, 0), limit, PyTuple_GET_ITEM(outcome, 1), reset, retry, delay,
        args[0], args[2], EMPTY_TUPLE, Py_False, EMPTY_STR, refill,
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
        || PyType_Ready(&MemoryKernelType) < 0 || PyType_Ready(&DecisionMakerType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "MemoryKernel", (PyObject *)&MemoryKernelType) < 0
        || PyModule_AddObjectRef(module, "DecisionMaker", (PyObject *)&DecisionMakerType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
