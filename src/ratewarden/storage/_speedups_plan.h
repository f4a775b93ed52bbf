/* ratewarden.storage._speedups, part 8 of 9 (included by _speedups.c): BatchPlanner, the Redis
 * store's plan of a hit_all of one-rate calls (RedisBase._hit_all_call) in C.
 *
 * BatchPlanner(*, shapes, prefix, script, now_us, clustered, rate_type).plan(algorithm, calls)
 * takes a plainly valid batch of one-rate calls of any algorithm (what _plan.batch passes
 * unchanged: a list or tuple of (key, rates, cost) tuples, ASCII str keys, whole costs, no key
 * and rate twice, at most PLAN_MAX calls; on a Cluster every key on one slot, CRC16 of the
 * escaped key as redis.crc.key_slot) and answers ((script, route key, EVALSHA bytes), found):
 * the bytes BatchTemplate.pack gives, keys escaped as _keys.escape does, now_us() asked after
 * the validation as the Python path asks it, found the list of (key, shape) _plan.batch gives.
 * Anything else answers None. Shapes come from shapes.get (the store's cache, which validates)
 * and are kept here by the identity of the rates and algorithm arguments (a Rate or a tuple). */

/* ---- BatchPlanner: a plainly valid one-rate hit_all as its EVALSHA ---- */

/* A shape the planner keeps: (shape, script, sha as bytes, "}" + suffix as bytes, the call's
 * arguments packed (cost, 1, params) as bytes, how many arguments). */
enum { P_SHAPE, P_SCRIPT, P_SHA, P_ENDING, P_ARGS, P_COUNT, P_SIZE };

typedef struct {
    PyObject *rates, *algorithm;
    long long cost_v;
    PyObject *entry;  /* the tuple above, or NULL */
} Planned;

typedef struct {
    PyObject_HEAD
    PyObject *shapes_get;  /* the store's shapes.get(algorithm, rates, cost) */
    PyObject *script;      /* script(name) -> the algorithm's Script (its public sha) */
    PyObject *now_us;      /* the clock's now_us, or None: "" and the script reads Redis TIME */
    PyObject *head;        /* bytes: prefix + ":{" */
    PyObject *rate_type;   /* ratewarden.rate.Rate: one is found by identity, as a tuple */
    int clustered;
    Planned kept[KEPT_SHAPES];
    int kept_next;
} BatchPlanner;

static unsigned short CRC16_TABLE[256];

static void
crc16_init(void)
{
    for (int i = 0; i < 256; i++) {
        unsigned int crc = (unsigned int)i << 8;
        for (int bit = 0; bit < 8; bit++) {
            crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
        }
        CRC16_TABLE[i] = (unsigned short)crc;
    }
}

/* Append "$<len>\r\n<data>\r\n". */
static char *
put_bulk(char *at, const char *data, Py_ssize_t size)
{
    at += sprintf(at, "$%zd\r\n", size);
    memcpy(at, data, (size_t)size);
    at += size;
    *at++ = '\r';
    *at++ = '\n';
    return at;
}

static char *
put_int(char *at, long long value)
{
    char digits[24];
    int size = snprintf(digits, sizeof digits, "%lld", value);
    return put_bulk(at, digits, size);
}

/* The entry of a shape shapes.get gave: 1 (*entry a new tuple), 0 when the planner does not
 * take it (layered, a cost or number it does not read), -1 on error. */
static int
plan_entry(BatchPlanner *self, PyObject *shape, long long cost_v, PyObject **entry)
{
    int result = 0;
    PyObject *single = NULL, *name = NULL, *suffixes = NULL, *params = NULL, *cost = NULL,
             *script = NULL, *sha = NULL, *ending = NULL, *packed = NULL;
    long long shape_cost;
    if ((single = PyObject_GetAttr(shape, S_single)) == NULL) goto error;
    if (single != Py_True) goto done;
    if ((name = PyObject_GetAttr(shape, S_name)) == NULL
        || (suffixes = PyObject_GetAttr(shape, S_suffixes)) == NULL
        || (params = PyObject_GetAttr(shape, S_params)) == NULL
        || (cost = PyObject_GetAttr(shape, S_cost)) == NULL) goto error;
    if (!PyUnicode_CheckExact(name) || !PyTuple_CheckExact(suffixes)
        || PyTuple_GET_SIZE(suffixes) != 1 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(suffixes, 0))
        || !PyUnicode_IS_ASCII(PyTuple_GET_ITEM(suffixes, 0)) || !PyTuple_CheckExact(params)
        || PyTuple_GET_SIZE(params) != 1 || !PyTuple_CheckExact(PyTuple_GET_ITEM(params, 0))
        || !as_i64(cost, &shape_cost) || shape_cost != cost_v) goto done;
    PyObject *layer = PyTuple_GET_ITEM(params, 0), *suffix = PyTuple_GET_ITEM(suffixes, 0);
    Py_ssize_t n = PyTuple_GET_SIZE(layer);
    if (n > 16) goto done;
    char buffer[64 * 18];
    char *at = put_int(buffer, cost_v);
    at = put_int(at, 1);  /* one layer */
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v;
        if (!as_i64(PyTuple_GET_ITEM(layer, i), &v)) goto done;
        at = put_int(at, v);
    }
    if ((packed = PyBytes_FromStringAndSize(buffer, at - buffer)) == NULL) goto error;
    PyObject *args[1] = {name};
    if ((script = PyObject_Vectorcall(self->script, args, 1, NULL)) == NULL) goto error;
    if ((sha = PyObject_GetAttrString(script, "sha")) == NULL) goto error;
    if (!PyUnicode_CheckExact(sha) || !PyUnicode_IS_ASCII(sha)) goto done;
    Py_ssize_t size = PyUnicode_GET_LENGTH(suffix);
    if ((ending = PyBytes_FromStringAndSize(NULL, size + 1)) == NULL) goto error;
    PyBytes_AS_STRING(ending)[0] = '}';
    memcpy(PyBytes_AS_STRING(ending) + 1, PyUnicode_1BYTE_DATA(suffix), (size_t)size);
    PyObject *sha_bytes = PyBytes_FromStringAndSize((const char *)PyUnicode_1BYTE_DATA(sha),
                                                    PyUnicode_GET_LENGTH(sha));
    *entry = sha_bytes == NULL ? NULL
             : Py_BuildValue("(OONNNn)", shape, script, sha_bytes, ending, packed, 2 + n);
    ending = packed = NULL;  /* stolen (released on failure) */
    result = *entry == NULL ? -1 : 1;
    goto done;
error:
    result = -1;
done:
    Py_XDECREF(single);
    Py_XDECREF(name);
    Py_XDECREF(suffixes);
    Py_XDECREF(params);
    Py_XDECREF(cost);
    Py_XDECREF(script);
    Py_XDECREF(sha);
    Py_XDECREF(ending);
    Py_XDECREF(packed);
    return result;
}

/* The entry of (algorithm, rates, cost): from the planner's cache (by identity), else from
 * shapes.get (an error it raises: 0, the Python path raises it again in its own order). */
static int
find_entry(BatchPlanner *self, PyObject *algorithm, PyObject *rates, PyObject *cost,
           long long cost_v, PyObject **entry)
{
    for (int i = 0; i < KEPT_SHAPES; i++) {
        const Planned *kept = &self->kept[i];
        if (kept->rates == rates && kept->algorithm == algorithm && kept->cost_v == cost_v
            && kept->entry != NULL) {
            *entry = Py_NewRef(kept->entry);
            return 1;
        }
    }
    PyObject *args[3] = {algorithm, rates, cost};
    PyObject *shape = PyObject_Vectorcall(self->shapes_get, args, 3, NULL);
    if (shape == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) {
            return -1;
        }
        PyErr_Clear();
        return 0;
    }
    int result = plan_entry(self, shape, cost_v, entry);
    Py_DECREF(shape);
    if (result <= 0
        || !(PyTuple_CheckExact(rates) || Py_IS_TYPE(rates, (PyTypeObject *)self->rate_type))) {
        return result;  /* a list (any other sequence) is looked up by value each time */
    }
    Planned old = self->kept[self->kept_next];
    Planned *slot = &self->kept[self->kept_next];
    slot->rates = Py_NewRef(rates);
    slot->algorithm = Py_NewRef(algorithm);
    slot->cost_v = cost_v;
    slot->entry = Py_NewRef(*entry);
    self->kept_next = (self->kept_next + 1) % KEPT_SHAPES;
    Py_XDECREF(old.rates);
    Py_XDECREF(old.algorithm);
    Py_XDECREF(old.entry);
    return 1;
}

/* Calls a batch planned here may have (more go to the Python path). */
#define PLAN_MAX 64

/* The escaped size of an ASCII key (_keys.escape: "%", "{" and "}" become three bytes). */
static Py_ssize_t
escaped_size(const unsigned char *key, Py_ssize_t size)
{
    Py_ssize_t out = size;
    for (Py_ssize_t i = 0; i < size; i++) {
        out += (key[i] == '%' || key[i] == '{' || key[i] == '}') * 2;
    }
    return out;
}

static char *
put_escaped(char *at, const unsigned char *key, Py_ssize_t size)
{
    for (Py_ssize_t i = 0; i < size; i++) {
        unsigned char c = key[i];
        if (c == '%' || c == '{' || c == '}') {
            *at++ = '%';
            *at++ = c == '%' ? '2' : '7';
            *at++ = c == '%' ? '5' : c == '{' ? 'B' : 'D';
        }
        else {
            *at++ = (char)c;
        }
    }
    return at;
}

/* ((script, route key, packed EVALSHA), found) for the tuple of calls given (count of them),
 * entries[0:count] NULL;
 * NULL without an error when the Python path plans them. */
static PyObject *
plan_calls(BatchPlanner *self, PyObject *algorithm, PyObject *given, PyObject **entries,
           Py_ssize_t count)
{
    Py_ssize_t sizes[PLAN_MAX], total = 64, n_args = 2;
    int slot = -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *call = PyTuple_GET_ITEM(given, i);
        if (!PyTuple_CheckExact(call) || PyTuple_GET_SIZE(call) != 3) return NULL;
        PyObject *key = PyTuple_GET_ITEM(call, 0), *cost = PyTuple_GET_ITEM(call, 2);
        long long cost_v;
        if (!PyUnicode_CheckExact(key) || PyUnicode_GET_LENGTH(key) == 0
            || !PyUnicode_IS_ASCII(key) || !as_i64(cost, &cost_v) || cost_v < 0) return NULL;
        Py_INCREF(call);  /* held across shapes.get, which is Python */
        int ours = find_entry(self, algorithm, PyTuple_GET_ITEM(call, 1), cost, cost_v,
                              &entries[i]);
        Py_DECREF(call);
        if (ours <= 0) return NULL;
        PyObject *ending = PyTuple_GET_ITEM(entries[i], P_ENDING);
        const unsigned char *data = PyUnicode_1BYTE_DATA(key);
        Py_ssize_t size = PyUnicode_GET_LENGTH(key);
        for (Py_ssize_t j = 0; j < i; j++) {
            PyObject *other = PyTuple_GET_ITEM(PyTuple_GET_ITEM(given, j), 0);
            PyObject *its = PyTuple_GET_ITEM(entries[j], P_ENDING);
            if (PyUnicode_GET_LENGTH(other) == size
                && memcmp(PyUnicode_1BYTE_DATA(other), data, (size_t)size) == 0
                && PyBytes_GET_SIZE(its) == PyBytes_GET_SIZE(ending)
                && memcmp(PyBytes_AS_STRING(its), PyBytes_AS_STRING(ending),
                          (size_t)PyBytes_GET_SIZE(ending)) == 0) {
                return NULL;  /* a key and rate twice: the Python path says so */
            }
        }
        sizes[i] = escaped_size(data, size);
        if (self->clustered) {
            unsigned int crc = 0;
            char tag[3];
            for (Py_ssize_t k = 0; k < size; k++) {
                Py_ssize_t m = put_escaped(tag, data + k, 1) - tag;
                for (Py_ssize_t t = 0; t < m; t++) {
                    crc = ((crc << 8) ^ CRC16_TABLE[((crc >> 8) ^ (unsigned char)tag[t]) & 0xff])
                          & 0xffff;
                }
            }
            if (slot >= 0 && (int)(crc & 16383) != slot) return NULL;  /* the Python path */
            slot = (int)(crc & 16383);
        }
        total += 24 + PyBytes_GET_SIZE(self->head) + sizes[i] + PyBytes_GET_SIZE(ending)
                 + PyBytes_GET_SIZE(PyTuple_GET_ITEM(entries[i], P_ARGS));
        n_args += PyLong_AsSsize_t(PyTuple_GET_ITEM(entries[i], P_COUNT));
    }
    /* ARGV[1], asked of the clock only now, as the Python path does: "" or str(now). */
    PyObject *now = NULL;
    if (self->now_us != Py_None) {
        PyObject *value = PyObject_CallNoArgs(self->now_us);
        if (value == NULL) return NULL;
        now = PyBytes_Check(value) ? Py_NewRef(value) : NULL;  /* _bulk's isinstance */
        if (now == NULL) {
            PyObject *text = PyObject_Str(value);
            now = text == NULL ? NULL : PyUnicode_AsUTF8String(text);
            Py_XDECREF(text);
        }
        Py_DECREF(value);
        if (now == NULL) return NULL;
        total += 24 + PyBytes_GET_SIZE(now);
    }
    PyObject *script = PyTuple_GET_ITEM(entries[0], P_SCRIPT);
    PyObject *sha = PyTuple_GET_ITEM(entries[0], P_SHA);
    total += PyBytes_GET_SIZE(sha) + 48 * 3;
    char *buffer = PyMem_Malloc((size_t)total), *at = buffer;
    if (buffer == NULL) {
        Py_XDECREF(now);
        return PyErr_NoMemory();
    }
    at += sprintf(at, "*%zd\r\n$7\r\nEVALSHA\r\n", 3 + count + 1 + n_args);
    at = put_bulk(at, PyBytes_AS_STRING(sha), PyBytes_GET_SIZE(sha));
    at = put_int(at, count);
    const char *head = PyBytes_AS_STRING(self->head);
    Py_ssize_t head_size = PyBytes_GET_SIZE(self->head);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyTuple_GET_ITEM(PyTuple_GET_ITEM(given, i), 0);
        PyObject *ending = PyTuple_GET_ITEM(entries[i], P_ENDING);
        at += sprintf(at, "$%zd\r\n", head_size + sizes[i] + PyBytes_GET_SIZE(ending));
        memcpy(at, head, (size_t)head_size);
        at = put_escaped(at + head_size, PyUnicode_1BYTE_DATA(key), PyUnicode_GET_LENGTH(key));
        memcpy(at, PyBytes_AS_STRING(ending), (size_t)PyBytes_GET_SIZE(ending));
        at += PyBytes_GET_SIZE(ending);
        *at++ = '\r';
        *at++ = '\n';
    }
    at = now == NULL ? put_bulk(at, "", 0) : put_bulk(at, PyBytes_AS_STRING(now),
                                                     PyBytes_GET_SIZE(now));
    Py_XDECREF(now);
    at = put_bulk(at, "all", 3);
    at = put_int(at, count);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *args = PyTuple_GET_ITEM(entries[i], P_ARGS);
        memcpy(at, PyBytes_AS_STRING(args), (size_t)PyBytes_GET_SIZE(args));
        at += PyBytes_GET_SIZE(args);
    }
    PyObject *packed = PyBytes_FromStringAndSize(buffer, at - buffer);
    PyMem_Free(buffer);
    /* The route key: "{" + the first escaped key + "}". */
    PyObject *key0 = PyTuple_GET_ITEM(PyTuple_GET_ITEM(given, 0), 0);
    PyObject *route = PyUnicode_New(sizes[0] + 2, 127);
    PyObject *found = PyList_New(count);
    if (packed == NULL || route == NULL || found == NULL) goto fail;
    char *r = (char *)PyUnicode_1BYTE_DATA(route);
    r[0] = '{';
    put_escaped(r + 1, PyUnicode_1BYTE_DATA(key0), PyUnicode_GET_LENGTH(key0));
    r[sizes[0] + 1] = '}';
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyTuple_GET_ITEM(PyTuple_GET_ITEM(given, i), 0);
        PyObject *pair_ = PyTuple_Pack(2, key, PyTuple_GET_ITEM(entries[i], P_SHAPE));
        if (pair_ == NULL) goto fail;
        PyList_SET_ITEM(found, i, pair_);
    }
    return Py_BuildValue("((ONN)N)", script, route, packed, found);
fail:
    Py_XDECREF(packed);
    Py_XDECREF(route);
    Py_XDECREF(found);
    return NULL;
}
