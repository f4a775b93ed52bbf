/* ratewarden.storage._speedups, part 2 of 9 (included by _speedups.c): the clock, Decisions,
 * the two checks (gcra, fixed_window) and the state table (read, write, sweep, the lock). */

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
    else if (a == now / shape->d && (b < 0 || b > (1LL << 41))) {
        /* (window, count): a count beyond any limit the kernel takes (2**40) plus a cost is
         * not ours; one above this limit is, admitted under a higher limit (the key holds
         * none), and keeps count + cost below 2**62. */
        return 0;
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
        /* a count above a lowered limit leaves nothing, as the Python reference says */
        out->remaining = count < limit ? limit - count : 0;
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
     * for KEEP_EXPIRED_US or longer stays out, any other goes back in at the end. Never more
     * than the keys less two, so that the key just written is not left the oldest. */
    Py_ssize_t sweeps = PyDict_GET_SIZE(self->states) - 2;
    if (sweeps > 2) sweeps = 2;
    for (Py_ssize_t i = 0; i < sweeps; i++) {
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
    /* Past max_keys (or a max_keys that is no C number, which the store's checked setter
     * never hands on: its Python method then decides), the store's own method evicts and
     * counts. */
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
