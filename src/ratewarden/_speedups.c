/*
 * ratewarden._speedups: the two hottest paths in C, each a twin of Python code that stays the
 * reference (ratewarden/_native.py loads it).
 *
 * MemoryGcra / LimiterHit: the memory store's most common decision. One rate, algorithm "gcra",
 * a plain ASCII key, a whole cost: MemoryStore.hit for that case, with the same state, the same
 * writes to the same OrderedDict under the same lock, and the same Decision. Every other call,
 * every unusual argument and every number outside the range where 64-bit integers are exact
 * goes to the Python method. tests/storage/test_speedups.py feeds both the same random
 * sequences and demands identical Decisions and identical stored state.
 *
 * ScopeRule / AddHeaders: the ASGI middleware's path for a rule set of one plain rule (see
 * below); tests/middleware/test_scope_rule.py compares them with their Python code.
 *
 * Built when a C compiler is there (setup.py marks the extension optional);
 * RATEWARDEN_PURE=1 in the environment keeps it unused.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define NEVER (-1)
/* How long an expired state stays before the sweep drops it: the store's _KEEP_EXPIRED_US. */
#define KEEP_EXPIRED_US 1000000LL
#define N_FIELDS 12

/* Decision's slots, in the order the fields are set below. */
static const char *FIELD_NAMES[N_FIELDS] = {
    "allowed", "limit", "remaining", "reset_after", "retry_after", "delay",
    "rate", "cost", "layers", "shadowed", "degraded", "refill_after",
};

enum { F_ALLOWED, F_LIMIT, F_REMAINING, F_RESET, F_RETRY, F_DELAY, F_RATE, F_COST,
       F_LAYERS, F_SHADOWED, F_DEGRADED, F_REFILL };

typedef struct {
    PyObject_HEAD
    PyObject *store;        /* the MemoryStore (for _sweep, _evict, max_keys) */
    PyObject *states;       /* store._states, an OrderedDict */
    PyObject *popitem;      /* states.popitem */
    PyObject *acquire;      /* store._lock.acquire */
    PyObject *release;      /* store._lock.release */
    PyObject *locked;       /* store._lock.locked */
    PyObject *system_clock; /* ratewarden.clock.SystemClock: its time is read here */
    PyObject *clock;        /* store.clock, as of the last reload() */
    int clock_is_system;
    Py_ssize_t max_keys;    /* store.max_keys, as of the last reload() */
    PyObject *shapes_get;   /* store._shapes.get */
    PyObject *fallback;     /* the pure Python hit, bound to the store */
    PyObject *gcra;         /* "gcra" */
    PyObject *rate_type;    /* ratewarden.rate.Rate */
    PyTypeObject *decision_type;
    Py_ssize_t offsets[N_FIELDS];
    PyObject *empty_str;
    PyObject *empty_tuple;
    PyObject *zero_float;
    /* The last shape, found by the identity of the rates argument. */
    PyObject *c_rates;
    PyObject *c_algorithm;
    long long c_cost;
    PyObject *c_cost_obj;   /* shape.cost */
    PyObject *c_suffix;     /* shape.suffixes[0] */
    PyObject *c_rate;       /* shape.rates[0] */
    PyObject *c_limit;      /* rate.limit */
    long long c_n, c_d, c_capacity;
    vectorcallfunc vectorcall;
} MemoryGcra;

/* One call's shape, copied out of the cache with references of its own: another
 * thread may replace the cache whenever this one runs Python code (a Python clock,
 * a collection, an eviction), so a call never reads the cache after its start. */
typedef struct {
    PyObject *suffix, *rate, *limit, *cost;
    long long n, d, capacity;
} Shape;

static PyObject *S_evict, *S_max_keys, *S_single, *S_suffixes, *S_params,
    *S_rates, *S_cost, *S_limit, *S_now_us, *S_clock;

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

/* Forget the cached shape. */
static void
clear_shape(MemoryGcra *self)
{
    Py_CLEAR(self->c_rates);
    Py_CLEAR(self->c_algorithm);
    Py_CLEAR(self->c_cost_obj);
    Py_CLEAR(self->c_suffix);
    Py_CLEAR(self->c_rate);
    Py_CLEAR(self->c_limit);
}

/* Look the shape up in the store's Shapes (Python) and keep what the fast path needs.
 * Returns 1 when the fast path applies, 0 when it does not, -1 on error (the same error
 * the Python path raises: Shapes.get validates the rates and the cost). */
static int
load_shape(MemoryGcra *self, PyObject *algorithm, PyObject *rates, PyObject *cost,
           long long cost_v)
{
    PyObject *args[3] = {algorithm, rates, cost};
    PyObject *shape = PyObject_Vectorcall(self->shapes_get, args, 3, NULL);
    if (shape == NULL) {
        return -1;
    }
    int result = 0;
    PyObject *single = NULL, *suffixes = NULL, *params = NULL, *shape_rates = NULL,
             *shape_cost = NULL, *limit = NULL;
    long long n, d, capacity, shape_cost_v;
    single = PyObject_GetAttr(shape, S_single);
    if (single == NULL) goto error;
    if (single != Py_True) goto done;
    suffixes = PyObject_GetAttr(shape, S_suffixes);
    params = PyObject_GetAttr(shape, S_params);
    shape_rates = PyObject_GetAttr(shape, S_rates);
    shape_cost = PyObject_GetAttr(shape, S_cost);
    if (suffixes == NULL || params == NULL || shape_rates == NULL || shape_cost == NULL) {
        goto error;
    }
    if (!PyTuple_CheckExact(suffixes) || PyTuple_GET_SIZE(suffixes) != 1
        || !PyTuple_CheckExact(params) || PyTuple_GET_SIZE(params) != 1
        || !PyTuple_CheckExact(shape_rates) || PyTuple_GET_SIZE(shape_rates) != 1) {
        goto done;
    }
    PyObject *p = PyTuple_GET_ITEM(params, 0);
    if (!PyTuple_CheckExact(p) || PyTuple_GET_SIZE(p) != 3
        || !as_i64(PyTuple_GET_ITEM(p, 0), &n) || !as_i64(PyTuple_GET_ITEM(p, 1), &d)
        || !as_i64(PyTuple_GET_ITEM(p, 2), &capacity)
        || !as_i64(shape_cost, &shape_cost_v) || shape_cost_v != cost_v) {
        goto done;
    }
    /* Keep every product below 2**62: (capacity + cost) * d and the TAT's distance
     * times n are then exact in 64 bits (the Python twin says below 2**53). */
    if (n <= 0 || d <= 0 || capacity < 0 || n > (1LL << 40) || d > (1LL << 52)
        || capacity > (1LL << 40) || cost_v > (1LL << 40)
        || (capacity + cost_v + 1) > (1LL << 62) / d) {
        goto done;
    }
    PyObject *rate = PyTuple_GET_ITEM(shape_rates, 0);
    limit = PyObject_GetAttr(rate, S_limit);
    if (limit == NULL) goto error;
    clear_shape(self);
    /* A list of rates is looked up by value each time (it may change): never cached. */
    if (Py_IS_TYPE(rates, (PyTypeObject *)self->rate_type) || PyTuple_CheckExact(rates)) {
        self->c_rates = Py_NewRef(rates);
    }
    self->c_algorithm = Py_NewRef(algorithm);
    self->c_cost = cost_v;
    self->c_cost_obj = Py_NewRef(shape_cost);
    self->c_suffix = Py_NewRef(PyTuple_GET_ITEM(suffixes, 0));
    self->c_rate = Py_NewRef(rate);
    self->c_limit = Py_NewRef(limit);
    self->c_n = n;
    self->c_d = d;
    self->c_capacity = capacity;
    result = 1;
    goto done;
error:
    result = -1;
done:
    Py_XDECREF(single);
    Py_XDECREF(suffixes);
    Py_XDECREF(params);
    Py_XDECREF(shape_rates);
    Py_XDECREF(shape_cost);
    Py_XDECREF(limit);
    Py_DECREF(shape);
    return result;
}

static int
now_us(MemoryGcra *self, long long *out)
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
    /* A reference of its own: a new store.clock (reload) may drop the old one meanwhile. */
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

/* A Decision with every slot set; steals nothing, returns a new reference. */
static PyObject *
make_decision(MemoryGcra *self, PyObject *values[N_FIELDS])
{
    PyTypeObject *type = self->decision_type;
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL) {
        return NULL;
    }
    for (int i = 0; i < N_FIELDS; i++) {
        PyObject **slot = (PyObject **)((char *)obj + self->offsets[i]);
        Py_XSETREF(*slot, Py_NewRef(values[i]));
    }
    return obj;
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
decision(MemoryGcra *self, const Shape *shape, int allowed, long long remaining,
         long long reset_us, long long retry_us, long long refill_us)
{
    PyObject *rem = PyLong_FromLongLong(remaining);
    PyObject *reset = seconds(reset_us);
    PyObject *retry = seconds(retry_us);
    PyObject *refill = seconds(refill_us);
    PyObject *layer = NULL, *layers = NULL, *top = NULL;
    if (rem == NULL || reset == NULL || retry == NULL || refill == NULL) goto done;
    PyObject *values[N_FIELDS] = {
        allowed ? Py_True : Py_False, shape->limit, rem, reset, retry, self->zero_float,
        shape->rate, shape->cost, self->empty_tuple, Py_False, self->empty_str, refill,
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

/* The store's _write after states[key] = value: a key that was there keeps its place
 * and nothing else happens; a new key (an OrderedDict appends it) makes the store sweep
 * its oldest end and, past max_keys, evict. */
static int
after_write(MemoryGcra *self, int was_there, long long now)
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
    Py_ssize_t size = PyObject_Length(self->states);
    if (size < 0) return -1;
    if (size > self->max_keys) {
        PyObject *r = PyObject_CallMethodNoArgs(self->store, S_evict);
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
write_state(MemoryGcra *self, PyObject *state_key, PyObject *entry, long long tat,
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
 * The store's state is guarded by store._lock, which the Python path holds from
 * reading a state to writing the next one. With the GIL, this code needs no lock
 * of its own between reading the state and writing the new one: it runs no
 * Python code there, and the garbage collector is off meanwhile (a collection
 * could run a finalizer, which could let another thread in), so no other thread
 * can run in between. It only has to keep out of a Python-path section in progress:
 * when the lock is held, the call goes to the Python path, which waits for it.
 * A build without the GIL takes the lock. lock() returns 0 to go on, -1 with an
 * error set, or -1 without one to hand the call to the Python path. */
static int
lock(MemoryGcra *self)
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
    return 0;
#else
    return held ? -1 : 0;
#endif
}

static int
unlock(MemoryGcra *self)
{
#ifdef Py_GIL_DISABLED
    PyObject *r = PyObject_CallNoArgs(self->release);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
#endif
    return 0;
}

static PyObject *decide(MemoryGcra *self, const Shape *shape, PyObject *key, long long cost_v);

/* The fast path. Returns a new Decision; NULL with an error set; or NULL without an
 * error when the call is not one it takes (the caller then runs the Python path). */
static PyObject *
fast_hit(MemoryGcra *self, PyObject *algorithm, PyObject *key, PyObject *rates,
         PyObject *cost)
{
    long long cost_v;
    if (!PyUnicode_CheckExact(key) || PyUnicode_GET_LENGTH(key) == 0 || !PyUnicode_IS_ASCII(key)
        || !as_i64(cost, &cost_v) || cost_v < 0) {
        return NULL;
    }
    if (algorithm != self->gcra
        && !(PyUnicode_CheckExact(algorithm) && PyUnicode_Compare(algorithm, self->gcra) == 0)) {
        return NULL;
    }
    if (rates != self->c_rates || rates == NULL || self->c_cost != cost_v
        || algorithm != self->c_algorithm) {
        int found = load_shape(self, algorithm, rates, cost, cost_v);
        if (found <= 0) {
            return NULL;  /* error set (-1) or not ours (0) */
        }
    }
    /* No Python code has run since the cache was read or filled: copy it out now. */
    Shape shape = {
        Py_NewRef(self->c_suffix), Py_NewRef(self->c_rate), Py_NewRef(self->c_limit),
        Py_NewRef(self->c_cost_obj), self->c_n, self->c_d, self->c_capacity,
    };
    PyObject *result = decide(self, &shape, key, cost_v);
    Py_DECREF(shape.suffix);
    Py_DECREF(shape.rate);
    Py_DECREF(shape.limit);
    Py_DECREF(shape.cost);
    return result;
}

/* fast_hit once the call's shape is known; the same three kinds of return. */
static PyObject *
decide(MemoryGcra *self, const Shape *shape, PyObject *key, long long cost_v)
{
    long long now;
    if (now_us(self, &now) < 0) {
        return NULL;
    }
    const long long n = shape->n, d = shape->d, capacity = shape->capacity;
    PyObject *state_key = PyUnicode_Concat(key, shape->suffix);
    if (state_key == NULL) {
        return NULL;
    }
    int failed = 0;
    if (lock(self) < 0) {
        Py_DECREF(state_key);
        return NULL;  /* an error, or the lock is held: the Python path */
    }
    /* No collection, so no finalizer, runs until the state is written: see "The lock". */
    const int collecting = PyGC_Disable();
    PyObject *entry = PyDict_GetItemWithError(self->states, state_key);
    long long tat = now, frac = 0, expires = 0;
    int stale = 0;
    if (entry == NULL && PyErr_Occurred()) {
        failed = 1;
        goto unlock;
    }
    Py_XINCREF(entry);
    if (entry != NULL) {
        PyObject *state;
        long long t, f;
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2
            || !as_i64(PyTuple_GET_ITEM(entry, 1), &expires)) {
            goto decline;
        }
        if (expires <= now) {
            /* Expired: as if never seen. Deleted below unless the key is written, which
             * then reuses the entry where it stands, as the Python path does. */
            stale = 1;
        }
        else {
            state = PyTuple_GET_ITEM(entry, 0);
            if (!PyTuple_CheckExact(state) || PyTuple_GET_SIZE(state) != 2
                || !as_i64(PyTuple_GET_ITEM(state, 0), &t)
                || !as_i64(PyTuple_GET_ITEM(state, 1), &f) || f < 0 || f >= n) {
                goto decline;
            }
            if (t >= now) {
                if (t - now > ((1LL << 62) / n) - 1) {
                    goto decline;  /* far beyond any TAT this rate can build */
                }
                tat = t;
                frac = f;
            }
        }
    }
    {
        const long long ahead = (tat - now) * n + frac;
        const long long room = capacity * d;
        long long remaining, reset_us, retry_us, refill_us;
        int allowed;
        if (cost_v > capacity) {
            allowed = 0;
            remaining = (room > ahead ? room - ahead : 0) / d;
            reset_us = ceil_div(ahead, n);
            retry_us = NEVER;
            /* gcra.check: the next unit fits once the TAT, moved by the remaining units, is
             * one T from full. Below 2**63: ahead < 2**62 and the rest at most (capacity+1)*d. */
            refill_us = ceil_div(ahead + (remaining + 1) * d - room, n);
        }
        else {
            const long long after = ahead + cost_v * d;
            if (after > room) {
                allowed = 0;
                remaining = (room > ahead ? room - ahead : 0) / d;
                reset_us = ceil_div(ahead, n);
                retry_us = ceil_div(after - room, n);
                refill_us = ceil_div(ahead + (remaining + 1) * d - room, n);
            }
            else {
                allowed = 1;
                const long long total = frac + cost_v * d;
                reset_us = ceil_div(after, n);
                remaining = (room - after) / d;
                retry_us = 0;
                refill_us = ceil_div(d - (room - after) % d, n);
                /* ttl = reset_us > 0 when cost_v > 0 (cost_v * d > 0): always a write. */
                if (cost_v > 0) {
                    if (write_state(self, state_key, entry, tat + total / n, total % n,
                                    now + reset_us, now) < 0) {
                        failed = 1;
                        goto unlock;
                    }
                    stale = 0;
                }
            }
        }
        if (stale && PyObject_DelItem(self->states, state_key) < 0) {
            failed = 1;
            goto unlock;
        }
        Py_XDECREF(entry);
        Py_DECREF(state_key);
        if (collecting) {
            PyGC_Enable();
        }
        if (unlock(self) < 0) {
            return NULL;
        }
        return decision(self, shape, allowed, remaining, reset_us, retry_us, refill_us);
    }
decline:
unlock:
    Py_XDECREF(entry);
    Py_DECREF(state_key);
    if (collecting) {
        PyGC_Enable();
    }
    {
        /* Release whatever happened above, keeping its error. */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (unlock(self) < 0) {
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
            return NULL;
        }
        PyErr_Restore(type, value, traceback);
    }
    if (failed && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_SystemError, "ratewarden._speedups: failed without an error");
    }
    return NULL;
}

static PyObject *
MemoryGcra_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                      PyObject *kwnames)
{
    MemoryGcra *self = (MemoryGcra *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames == NULL && (nargs == 3 || nargs == 4)) {
        PyObject *cost = nargs == 4 ? args[3] : NULL;
        PyObject *one = NULL;
        if (cost == NULL) {
            one = PyLong_FromLong(1);
            if (one == NULL) return NULL;
            cost = one;
        }
        PyObject *result = fast_hit(self, args[0], args[1], args[2], cost);
        Py_XDECREF(one);
        if (result != NULL || PyErr_Occurred()) {
            return result;
        }
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static int
MemoryGcra_traverse(MemoryGcra *self, visitproc visit, void *arg)
{
    Py_VISIT(self->store);
    Py_VISIT(self->states);
    Py_VISIT(self->popitem);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->locked);
    Py_VISIT(self->system_clock);
    Py_VISIT(self->clock);
    Py_VISIT(self->shapes_get);
    Py_VISIT(self->fallback);
    Py_VISIT(self->rate_type);
    Py_VISIT(self->decision_type);
    Py_VISIT(self->c_rates);
    Py_VISIT(self->c_algorithm);
    Py_VISIT(self->c_cost_obj);
    Py_VISIT(self->c_suffix);
    Py_VISIT(self->c_rate);
    Py_VISIT(self->c_limit);
    return 0;
}

static int
MemoryGcra_clear(MemoryGcra *self)
{
    Py_CLEAR(self->store);
    Py_CLEAR(self->states);
    Py_CLEAR(self->popitem);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->locked);
    Py_CLEAR(self->system_clock);
    Py_CLEAR(self->clock);
    Py_CLEAR(self->shapes_get);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->gcra);
    Py_CLEAR(self->rate_type);
    Py_CLEAR(self->decision_type);
    Py_CLEAR(self->empty_str);
    Py_CLEAR(self->empty_tuple);
    Py_CLEAR(self->zero_float);
    clear_shape(self);
    return 0;
}

static void
MemoryGcra_dealloc(MemoryGcra *self)
{
    PyObject_GC_UnTrack(self);
    MemoryGcra_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *MemoryGcra_new(PyTypeObject *type, PyObject *args, PyObject *kwds);

/* Read store.clock and store.max_keys again (the store calls this when either is set). */
static PyObject *
MemoryGcra_reload(MemoryGcra *self, PyObject *unused)
{
    PyObject *clock = PyObject_GetAttr(self->store, S_clock);
    if (clock == NULL) {
        return NULL;
    }
    PyObject *max_keys = PyObject_GetAttr(self->store, S_max_keys);
    if (max_keys == NULL) {
        Py_DECREF(clock);
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(max_keys);
    Py_DECREF(max_keys);
    if (limit == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            Py_DECREF(clock);
            return NULL;
        }
        PyErr_Clear();  /* more keys than memory can hold: no bound in practice */
        limit = PY_SSIZE_T_MAX;
    }
    self->clock_is_system = Py_IS_TYPE(clock, (PyTypeObject *)self->system_clock);
    Py_XSETREF(self->clock, clock);
    self->max_keys = limit;
    Py_RETURN_NONE;
}

static PyMethodDef MemoryGcra_methods[] = {
    {"reload", (PyCFunction)MemoryGcra_reload, METH_NOARGS,
     PyDoc_STR("reload(): read store.clock and store.max_keys again.")},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject MemoryGcraType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ratewarden._speedups.MemoryGcra",
    .tp_doc = PyDoc_STR(
        "MemoryGcra(store, fallback, system_clock_type, rate_type, decision_type): "
        "store.hit for one GCRA rate, in C; anything else goes to fallback."),
    .tp_basicsize = sizeof(MemoryGcra),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = MemoryGcra_new,
    .tp_dealloc = (destructor)MemoryGcra_dealloc,
    .tp_traverse = (traverseproc)MemoryGcra_traverse,
    .tp_clear = (inquiry)MemoryGcra_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(MemoryGcra, vectorcall),
    .tp_methods = MemoryGcra_methods,
};

static PyObject *
MemoryGcra_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *store, *fallback, *system_clock, *rate_type, *decision_type;
    static char *kwlist[] = {"store", "fallback", "system_clock_type", "rate_type",
                             "decision_type", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO:MemoryGcra", kwlist, &store, &fallback,
                                     &system_clock, &rate_type, &decision_type)) {
        return NULL;
    }
    if (!PyType_Check(decision_type) || !PyType_Check(rate_type) || !PyType_Check(system_clock)) {
        PyErr_SetString(PyExc_TypeError,
                        "system_clock_type, rate_type and decision_type must be classes");
        return NULL;
    }
    MemoryGcra *self = (MemoryGcra *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = MemoryGcra_vectorcall;
    self->store = Py_NewRef(store);
    self->fallback = Py_NewRef(fallback);
    self->system_clock = Py_NewRef(system_clock);
    self->rate_type = Py_NewRef(rate_type);
    self->decision_type = (PyTypeObject *)Py_NewRef(decision_type);
    self->states = PyObject_GetAttrString(store, "_states");
    PyObject *lock = PyObject_GetAttrString(store, "_lock");
    PyObject *shapes = PyObject_GetAttrString(store, "_shapes");
    if (self->states == NULL || lock == NULL || shapes == NULL) {
        goto error;
    }
    self->popitem = PyObject_GetAttrString(self->states, "popitem");
    self->acquire = PyObject_GetAttrString(lock, "acquire");
    self->release = PyObject_GetAttrString(lock, "release");
    self->locked = PyObject_GetAttrString(lock, "locked");
    self->shapes_get = PyObject_GetAttrString(shapes, "get");
    self->gcra = PyUnicode_InternFromString("gcra");
    self->empty_str = PyUnicode_FromString("");
    self->empty_tuple = PyTuple_New(0);
    self->zero_float = PyFloat_FromDouble(0.0);
    if (self->popitem == NULL || self->acquire == NULL || self->release == NULL
        || self->locked == NULL
        || self->shapes_get == NULL || self->gcra == NULL || self->empty_str == NULL
        || self->empty_tuple == NULL || self->zero_float == NULL) {
        goto error;
    }
    for (int i = 0; i < N_FIELDS; i++) {
        PyObject *descr = PyDict_GetItemString(self->decision_type->tp_dict, FIELD_NAMES[i]);
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)
            || ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "decision_type has no object slot %s", FIELD_NAMES[i]);
            goto error;
        }
        self->offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    Py_DECREF(lock);
    Py_DECREF(shapes);
    PyObject *loaded = MemoryGcra_reload(self, NULL);
    if (loaded == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    Py_DECREF(loaded);
    return (PyObject *)self;
error:
    Py_XDECREF(lock);
    Py_XDECREF(shapes);
    Py_DECREF(self);
    return NULL;
}

/* LimiterHit: Limiter.hit(key, rates, cost=1, *, shadow=False) over a MemoryGcra, for a
 * Limiter with no decision hook: the same as calling store.hit(algorithm, ...), which is
 * all Limiter.hit does then. Shadow calls and anything unusual go to the Python method. */
typedef struct {
    PyObject_HEAD
    MemoryGcra *core;
    PyObject *algorithm;
    PyObject *fallback;  /* Limiter.hit bound to the limiter */
    vectorcallfunc vectorcall;
} LimiterHit;

static PyObject *S_key, *S_shadow;

static int
is_name(PyObject *name, PyObject *wanted)
{
    return name == wanted || PyUnicode_Compare(name, wanted) == 0;
}

static PyObject *
LimiterHit_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                      PyObject *kwnames)
{
    LimiterHit *self = (LimiterHit *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *given[3] = {NULL, NULL, NULL};  /* key, rates, cost */
    int usable = nargs <= 3;
    for (Py_ssize_t i = 0; usable && i < nargs; i++) {
        given[i] = args[i];
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; usable && i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        PyObject *value = args[nargs + i];
        int slot = is_name(name, S_rates) ? 1 : is_name(name, S_cost) ? 2
                 : is_name(name, S_key) ? 0 : is_name(name, S_shadow) ? 3 : -1;
        if (slot == 3) {
            usable = value == Py_False;  /* shadow=True: the Python method */
        }
        else if (slot < 0 || given[slot] != NULL) {
            usable = 0;  /* the Python method raises the TypeError */
        }
        else {
            given[slot] = value;
        }
    }
    if (usable && given[0] != NULL && given[1] != NULL) {
        PyObject *one = NULL;
        if (given[2] == NULL) {
            one = PyLong_FromLong(1);
            if (one == NULL) return NULL;
            given[2] = one;
        }
        PyObject *result = fast_hit(self->core, self->algorithm, given[0], given[1], given[2]);
        Py_XDECREF(one);
        if (result != NULL || PyErr_Occurred()) {
            return result;
        }
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static int
LimiterHit_traverse(LimiterHit *self, visitproc visit, void *arg)
{
    Py_VISIT(self->core);
    Py_VISIT(self->algorithm);
    Py_VISIT(self->fallback);
    return 0;
}

static int
LimiterHit_clear(LimiterHit *self)
{
    Py_CLEAR(self->core);
    Py_CLEAR(self->algorithm);
    Py_CLEAR(self->fallback);
    return 0;
}

static void
LimiterHit_dealloc(LimiterHit *self)
{
    PyObject_GC_UnTrack(self);
    LimiterHit_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *LimiterHit_new(PyTypeObject *type, PyObject *args, PyObject *kwds);

static PyTypeObject LimiterHitType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ratewarden._speedups.LimiterHit",
    .tp_doc = PyDoc_STR(
        "LimiterHit(core, algorithm, fallback): Limiter.hit over a MemoryGcra core; "
        "shadow calls and anything else go to fallback."),
    .tp_basicsize = sizeof(LimiterHit),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = LimiterHit_new,
    .tp_dealloc = (destructor)LimiterHit_dealloc,
    .tp_traverse = (traverseproc)LimiterHit_traverse,
    .tp_clear = (inquiry)LimiterHit_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(LimiterHit, vectorcall),
};

static PyObject *
LimiterHit_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *core, *algorithm, *fallback;
    static char *kwlist[] = {"core", "algorithm", "fallback", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!UO:LimiterHit", kwlist, &MemoryGcraType,
                                     &core, &algorithm, &fallback)) {
        return NULL;
    }
    LimiterHit *self = (LimiterHit *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = LimiterHit_vectorcall;
    self->core = (MemoryGcra *)Py_NewRef(core);
    self->algorithm = Py_NewRef(algorithm);
    self->fallback = Py_NewRef(fallback);
    return (PyObject *)self;
}

/* ------------------------------------------------------------------------------------------
 * ScopeRule: the ASGI middleware's one-rule scope path (middleware/_core.py, RuleSet.decide_asgi).
 *
 * A twin of three Python steps, for a rule set of one plain rule with the default header plan:
 * the store key read from the scope (by_api_key's asgi twin, or any asgi extractor called as
 * it is), and the allowed decision's two RateLimit headers as ASGI byte pairs (HeaderPlan.asgi).
 * Whatever it does not handle exactly (a scope that is not a dict, a header list that is not
 * byte pairs, a repeated header, a decision it cannot render) goes back to the Python code,
 * which stays the reference; tests/middleware/test_scope_rule.py compares the two.
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *header;    /* bytes: the lower-case header read, or Py_None (call extract) */
    PyObject *identity;  /* the header's value (str) -> identity or None */
    PyObject *extract;   /* the rule's asgi extractor: scope -> identity or None */
    PyObject *prefix;    /* "<rule name>:" */
    PyObject *fallback;  /* the identity of a request without one */
    PyObject *rates;     /* the rule's rates (a tuple of one Rate) */
    PyObject *cost;      /* the rule's fixed cost */
    PyObject *rate;      /* rates[0] */
    PyObject *policy;    /* (b"ratelimit-policy", value) */
    PyObject *state;     /* b'"<name>";r=': the RateLimit value up to the number */
    PyObject *window;    /* the layer attribute t is read from: "refill_after" (draft-11) or
                            "reset_after" (draft-10), as HeaderPlan reads it */
    PyObject *keys;      /* header value (bytes) -> store key: identity is a pure function */
    vectorcallfunc vectorcall;
} ScopeRule;

/* Header values whose store key is kept; past it the cache starts over. */
#define SCOPE_KEYS_MAX 4096

static PyObject *S_headers, *S_allowed, *S_layers, *S_rate, *S_remaining, *B_ratelimit;

/* The one value of header self->header in scope["headers"]: 1 found (*value borrowed),
 * 0 absent, -2 when the Python twin must answer (repeated, or not a list of byte pairs). */
static int
header_in(ScopeRule *self, PyObject *scope, PyObject **value)
{
    PyObject *headers = PyDict_GetItemWithError(scope, S_headers);
    *value = NULL;
    if (headers == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    if (!PyList_CheckExact(headers) && !PyTuple_CheckExact(headers)) {
        return -2;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(self->header);
    const char *wanted = PyBytes_AS_STRING(self->header);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(headers);
    PyObject **items = PySequence_Fast_ITEMS(headers);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = items[i];
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) {
            return -2;
        }
        PyObject *name = PyTuple_GET_ITEM(item, 0);
        PyObject *found = PyTuple_GET_ITEM(item, 1);
        if (!PyBytes_CheckExact(name) || !PyBytes_CheckExact(found)) {
            return -2;
        }
        if (PyBytes_GET_SIZE(name) != size) {
            continue;
        }
        const char *text = PyBytes_AS_STRING(name);
        int same = 1;
        for (Py_ssize_t j = 0; same && j < size; j++) {
            char c = text[j];
            /* bytes.lower(): ASCII letters only */
            same = (c >= 'A' && c <= 'Z' ? (char)(c + 32) : c) == wanted[j];
        }
        if (!same) {
            continue;
        }
        if (*value != NULL) {
            return -2;  /* repeated: the Python twin joins them */
        }
        *value = found;
    }
    return *value != NULL;
}

/* prefix + (identity or fallback); steals identity. */
static PyObject *
keyed(ScopeRule *self, PyObject *identity)
{
    int truth = PyObject_IsTrue(identity);
    PyObject *key = truth < 0 ? NULL
                  : PyUnicode_Concat(self->prefix, truth ? identity : self->fallback);
    Py_DECREF(identity);
    return key;
}

/* The rule's store key for scope: prefix + (identity or fallback). */
static PyObject *
scope_key(ScopeRule *self, PyObject *scope)
{
    PyObject *identity = NULL;
    if (self->header != Py_None && PyDict_CheckExact(scope)) {
        PyObject *raw;
        int found = header_in(self, scope, &raw);
        if (found == -1) {
            return NULL;
        }
        if (found == 0 || (found == 1 && PyBytes_GET_SIZE(raw) == 0)) {
            identity = Py_NewRef(Py_None);
        }
        else if (found == 1) {
            /* The same client sends the same key again and again: its store key is kept,
             * and handing the store the same str object makes its lookup an identity test. */
            PyObject *known = PyDict_GetItemWithError(self->keys, raw);
            if (known != NULL) {
                return Py_NewRef(known);
            }
            if (PyErr_Occurred()) {
                return NULL;
            }
            PyObject *text = PyUnicode_DecodeLatin1(PyBytes_AS_STRING(raw),
                                                    PyBytes_GET_SIZE(raw), NULL);
            if (text == NULL) {
                return NULL;
            }
            identity = PyObject_CallOneArg(self->identity, text);
            Py_DECREF(text);
            if (identity == NULL) {
                return NULL;
            }
            PyObject *key = keyed(self, identity);
            if (key == NULL) {
                return NULL;
            }
            if (PyDict_GET_SIZE(self->keys) >= SCOPE_KEYS_MAX) {
                PyDict_Clear(self->keys);
            }
            if (PyDict_SetItem(self->keys, raw, key) < 0) {
                Py_DECREF(key);
                return NULL;
            }
            return key;
        }
    }
    if (identity == NULL) {
        identity = PyObject_CallOneArg(self->extract, scope);
        if (identity == NULL) {
            return NULL;
        }
    }
    return keyed(self, identity);
}

/* The allowed decision's headers as ASGI pairs, or None when the Python twin must render. */
static PyObject *
scope_headers(ScopeRule *self, PyObject *decision)
{
    PyObject *value = NULL, *layers = NULL, *layer = NULL, *field = NULL, *result = NULL;
    long long remaining = 0, t = 0;
    int ok = 0;
    value = PyObject_GetAttr(decision, S_allowed);
    if (value == NULL) goto done;
    int allowed = PyObject_IsTrue(value);
    Py_CLEAR(value);
    if (allowed < 0) goto done;
    if (!allowed) goto skip;
    layers = PyObject_GetAttr(decision, S_layers);
    if (layers == NULL) goto done;
    if (!PyTuple_CheckExact(layers) || PyTuple_GET_SIZE(layers) != 1) goto skip;
    layer = Py_NewRef(PyTuple_GET_ITEM(layers, 0));
    value = PyObject_GetAttr(decision, S_rate);
    if (value == NULL) goto done;
    if (value != self->rate) goto skip;
    Py_CLEAR(value);
    value = PyObject_GetAttr(layer, S_rate);
    if (value == NULL) goto done;
    if (value != self->rate) goto skip;
    Py_CLEAR(value);
    value = PyObject_GetAttr(layer, self->window);
    if (value == NULL) goto done;
    if (!PyFloat_CheckExact(value)) goto skip;
    double window = PyFloat_AS_DOUBLE(value);
    if (window > 0) {
        if (!(window < 9.0e15)) goto skip;  /* math.ceil's range checks stay in Python */
        t = (long long)ceil(window);
    }
    Py_CLEAR(value);
    value = PyObject_GetAttr(layer, S_remaining);
    if (value == NULL) goto done;
    if (!PyLong_CheckExact(value)) goto skip;
    int overflow = 0;
    remaining = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (remaining == -1 && PyErr_Occurred()) goto done;
    if (overflow) goto skip;
    Py_CLEAR(value);
    value = PyObject_GetAttr(layer, S_allowed);
    if (value == NULL) goto done;
    int layer_allowed = PyObject_IsTrue(value);
    if (layer_allowed < 0) goto done;
    if (!layer_allowed || remaining < 0) {
        remaining = 0;
    }
    char numbers[64];
    int length = snprintf(numbers, sizeof numbers, "%lld;t=%lld", remaining, t);
    Py_ssize_t head = PyBytes_GET_SIZE(self->state);
    field = PyBytes_FromStringAndSize(NULL, head + length);
    if (field == NULL) goto done;
    memcpy(PyBytes_AS_STRING(field), PyBytes_AS_STRING(self->state), head);
    memcpy(PyBytes_AS_STRING(field) + head, numbers, length);
    PyObject *pair = PyTuple_Pack(2, B_ratelimit, field);
    if (pair == NULL) goto done;
    result = PyList_New(2);
    if (result == NULL) {
        Py_DECREF(pair);
        goto done;
    }
    PyList_SET_ITEM(result, 0, Py_NewRef(self->policy));
    PyList_SET_ITEM(result, 1, pair);
    goto done;
skip:
    ok = 1;
done:
    Py_XDECREF(value);
    Py_XDECREF(layers);
    Py_XDECREF(layer);
    Py_XDECREF(field);
    if (result == NULL && ok) {
        return Py_NewRef(Py_None);
    }
    return result;
}

static PyObject *
ScopeRule_key(ScopeRule *self, PyObject *scope)
{
    return scope_key(self, scope);
}

static PyObject *
ScopeRule_headers(ScopeRule *self, PyObject *decision)
{
    return scope_headers(self, decision);
}

/* rule(scope, hit): hit the rule's key; the allowed headers, or (key, decision) for Python. */
static PyObject *
ScopeRule_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                     PyObject *kwnames)
{
    ScopeRule *self = (ScopeRule *)callable;
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "ScopeRule(scope, hit) takes two positional arguments");
        return NULL;
    }
    PyObject *key = scope_key(self, args[0]);
    if (key == NULL) {
        return NULL;
    }
    PyObject *call[3] = {key, self->rates, self->cost};
    PyObject *decision = PyObject_Vectorcall(args[1], call, 3, NULL);
    if (decision == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *found = scope_headers(self, decision);
    if (found == Py_None) {
        Py_DECREF(found);
        found = PyTuple_Pack(2, key, decision);
    }
    Py_DECREF(key);
    Py_DECREF(decision);
    return found;
}

static int
ScopeRule_traverse(ScopeRule *self, visitproc visit, void *arg)
{
    Py_VISIT(self->header);
    Py_VISIT(self->identity);
    Py_VISIT(self->extract);
    Py_VISIT(self->prefix);
    Py_VISIT(self->fallback);
    Py_VISIT(self->rates);
    Py_VISIT(self->cost);
    Py_VISIT(self->rate);
    Py_VISIT(self->policy);
    Py_VISIT(self->state);
    Py_VISIT(self->window);
    Py_VISIT(self->keys);
    return 0;
}

static int
ScopeRule_clear(ScopeRule *self)
{
    Py_CLEAR(self->header);
    Py_CLEAR(self->identity);
    Py_CLEAR(self->extract);
    Py_CLEAR(self->prefix);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->rates);
    Py_CLEAR(self->cost);
    Py_CLEAR(self->rate);
    Py_CLEAR(self->policy);
    Py_CLEAR(self->state);
    Py_CLEAR(self->window);
    Py_CLEAR(self->keys);
    return 0;
}

static void
ScopeRule_dealloc(ScopeRule *self)
{
    PyObject_GC_UnTrack(self);
    ScopeRule_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *ScopeRule_new(PyTypeObject *type, PyObject *args, PyObject *kwds);

static PyMethodDef ScopeRule_methods[] = {
    {"key", (PyCFunction)ScopeRule_key, METH_O, "The rule's store key for an ASGI scope."},
    {"headers", (PyCFunction)ScopeRule_headers, METH_O,
     "An allowed decision's RateLimit headers as ASGI byte pairs, or None."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScopeRuleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ratewarden._speedups.ScopeRule",
    .tp_doc = PyDoc_STR(
        "ScopeRule(header, identity, extract, prefix, fallback, rates, cost, policy, state, "
        "window): one plain rule's scope path; see middleware/_core.py."),
    .tp_basicsize = sizeof(ScopeRule),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = ScopeRule_new,
    .tp_dealloc = (destructor)ScopeRule_dealloc,
    .tp_traverse = (traverseproc)ScopeRule_traverse,
    .tp_clear = (inquiry)ScopeRule_clear,
    .tp_methods = ScopeRule_methods,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(ScopeRule, vectorcall),
};

static PyObject *
ScopeRule_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *header, *identity, *extract, *prefix, *fallback, *rates, *cost, *policy, *state,
        *window;
    static char *kwlist[] = {"header", "identity", "extract", "prefix", "fallback", "rates",
                             "cost", "policy", "state", "window", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOUUO!O!O!SU:ScopeRule", kwlist, &header,
                                     &identity, &extract, &prefix, &fallback, &PyTuple_Type,
                                     &rates, &PyLong_Type, &cost, &PyTuple_Type, &policy,
                                     &state, &window)) {
        return NULL;
    }
    if (header != Py_None && !PyBytes_CheckExact(header)) {
        PyErr_SetString(PyExc_TypeError, "ScopeRule header must be bytes or None");
        return NULL;
    }
    if (!PyCallable_Check(identity) || !PyCallable_Check(extract)) {
        PyErr_SetString(PyExc_TypeError, "ScopeRule identity and extract must be callable");
        return NULL;
    }
    if (PyTuple_GET_SIZE(rates) != 1 || PyTuple_GET_SIZE(policy) != 2) {
        PyErr_SetString(PyExc_ValueError, "ScopeRule takes one rate and one policy pair");
        return NULL;
    }
    ScopeRule *self = (ScopeRule *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = ScopeRule_vectorcall;
    self->header = Py_NewRef(header);
    self->identity = Py_NewRef(identity);
    self->extract = Py_NewRef(extract);
    self->prefix = Py_NewRef(prefix);
    self->fallback = Py_NewRef(fallback);
    self->rates = Py_NewRef(rates);
    self->cost = Py_NewRef(cost);
    self->rate = Py_NewRef(PyTuple_GET_ITEM(rates, 0));
    self->policy = Py_NewRef(policy);
    self->state = Py_NewRef(state);
    self->window = Py_NewRef(window);
    self->keys = PyDict_New();
    if (self->keys == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* ------------------------------------------------------------------------------------------
 * AddHeaders(send, extra): the ASGI middleware's send wrapper (middleware/asgi.py, _adding).
 *
 * Called with a message: a response start goes on as a new dict whose "headers" are the
 * message's followed by extra; any other message goes on as it is. It returns what send
 * returns (the awaitable), making no coroutine of its own. A twin of _adding's closure;
 * tests/middleware/test_scope_rule.py compares the two.
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *send;
    PyObject *extra;  /* a list of (bytes, bytes) */
    vectorcallfunc vectorcall;
} AddHeaders;

static PyObject *S_type, *S_start, *S_get, *EMPTY_TUPLE;

static PyObject *
started(AddHeaders *self, PyObject *message)
{
    PyObject *copy = PyDict_New();
    if (copy == NULL) {
        return NULL;
    }
    PyObject *headers = NULL, *joined = NULL;
    if (PyDict_Merge(copy, message, 1) < 0) goto fail;
    if (PyDict_CheckExact(message)) {
        headers = PyDict_GetItemWithError(message, S_headers);
        if (headers == NULL && PyErr_Occurred()) goto fail;
        headers = Py_NewRef(headers != NULL ? headers : EMPTY_TUPLE);
    }
    else {
        headers = PyObject_CallMethodObjArgs(message, S_get, S_headers, EMPTY_TUPLE, NULL);
        if (headers == NULL) goto fail;
    }
    joined = PySequence_List(headers);
    if (joined == NULL) goto fail;
    Py_ssize_t end = PyList_GET_SIZE(joined);
    if (PyList_SetSlice(joined, end, end, self->extra) < 0) goto fail;
    if (PyDict_SetItem(copy, S_headers, joined) < 0) goto fail;
    Py_DECREF(headers);
    Py_DECREF(joined);
    return copy;
fail:
    Py_XDECREF(headers);
    Py_XDECREF(joined);
    Py_DECREF(copy);
    return NULL;
}

static PyObject *
AddHeaders_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                      PyObject *kwnames)
{
    AddHeaders *self = (AddHeaders *)callable;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "send(message) takes one positional argument");
        return NULL;
    }
    PyObject *message = args[0];
    PyObject *type = PyObject_GetItem(message, S_type);
    if (type == NULL) {
        return NULL;
    }
    int start = PyObject_RichCompareBool(type, S_start, Py_EQ);
    Py_DECREF(type);
    if (start < 0) {
        return NULL;
    }
    if (!start) {
        return PyObject_CallOneArg(self->send, message);
    }
    PyObject *copy = started(self, message);
    if (copy == NULL) {
        return NULL;
    }
    PyObject *result = PyObject_CallOneArg(self->send, copy);
    Py_DECREF(copy);
    return result;
}

static int
AddHeaders_traverse(AddHeaders *self, visitproc visit, void *arg)
{
    Py_VISIT(self->send);
    Py_VISIT(self->extra);
    return 0;
}

static int
AddHeaders_clear(AddHeaders *self)
{
    Py_CLEAR(self->send);
    Py_CLEAR(self->extra);
    return 0;
}

static void
AddHeaders_dealloc(AddHeaders *self)
{
    PyObject_GC_UnTrack(self);
    AddHeaders_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *AddHeaders_new(PyTypeObject *type, PyObject *args, PyObject *kwds);

static PyTypeObject AddHeadersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ratewarden._speedups.AddHeaders",
    .tp_doc = PyDoc_STR(
        "AddHeaders(send, extra): send, with extra appended to a response start's headers."),
    .tp_basicsize = sizeof(AddHeaders),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = AddHeaders_new,
    .tp_dealloc = (destructor)AddHeaders_dealloc,
    .tp_traverse = (traverseproc)AddHeaders_traverse,
    .tp_clear = (inquiry)AddHeaders_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(AddHeaders, vectorcall),
};

static PyObject *
AddHeaders_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *send, *extra;
    static char *kwlist[] = {"send", "extra", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!:AddHeaders", kwlist, &send,
                                     &PyList_Type, &extra)) {
        return NULL;
    }
    AddHeaders *self = (AddHeaders *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = AddHeaders_vectorcall;
    self->send = Py_NewRef(send);
    self->extra = Py_NewRef(extra);
    return (PyObject *)self;
}

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ratewarden._speedups",
    .m_doc = "C twins of the memory store's one-rate GCRA decision (storage/memory.py) and of "
             "the ASGI middleware's one-rule path (middleware/_core.py, middleware/asgi.py).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    S_evict = PyUnicode_InternFromString("_evict");
    S_max_keys = PyUnicode_InternFromString("max_keys");
    S_single = PyUnicode_InternFromString("single");
    S_suffixes = PyUnicode_InternFromString("suffixes");
    S_params = PyUnicode_InternFromString("params");
    S_rates = PyUnicode_InternFromString("rates");
    S_cost = PyUnicode_InternFromString("cost");
    S_limit = PyUnicode_InternFromString("limit");
    S_now_us = PyUnicode_InternFromString("now_us");
    S_clock = PyUnicode_InternFromString("clock");
    if (!S_clock || !S_evict || !S_max_keys || !S_single || !S_suffixes || !S_params
        || !S_rates || !S_cost || !S_limit || !S_now_us) {
        return NULL;
    }
    S_key = PyUnicode_InternFromString("key");
    S_shadow = PyUnicode_InternFromString("shadow");
    if (!S_key || !S_shadow || PyType_Ready(&MemoryGcraType) < 0
        || PyType_Ready(&LimiterHitType) < 0) {
        return NULL;
    }
    S_headers = PyUnicode_InternFromString("headers");
    S_allowed = PyUnicode_InternFromString("allowed");
    S_layers = PyUnicode_InternFromString("layers");
    S_rate = PyUnicode_InternFromString("rate");
    S_remaining = PyUnicode_InternFromString("remaining");
    B_ratelimit = PyBytes_FromString("ratelimit");
    if (!S_headers || !S_allowed || !S_layers || !S_rate || !S_remaining || !B_ratelimit
        || PyType_Ready(&ScopeRuleType) < 0) {
        return NULL;
    }
    S_type = PyUnicode_InternFromString("type");
    S_start = PyUnicode_InternFromString("http.response.start");
    S_get = PyUnicode_InternFromString("get");
    EMPTY_TUPLE = PyTuple_New(0);
    if (!S_type || !S_start || !S_get || !EMPTY_TUPLE || PyType_Ready(&AddHeadersType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "MemoryGcra", (PyObject *)&MemoryGcraType) < 0
        || PyModule_AddObjectRef(module, "LimiterHit", (PyObject *)&LimiterHitType) < 0
        || PyModule_AddObjectRef(module, "ScopeRule", (PyObject *)&ScopeRuleType) < 0
        || PyModule_AddObjectRef(module, "AddHeaders", (PyObject *)&AddHeadersType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
