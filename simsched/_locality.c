/* The locality model's per-iteration path in C: ``Chunks.run`` is simsched.locality.DataState.chunk for a
 * chunk of a few iterations (simsched.small_chunks.SmallChunks._few with the parts of
 * simsched.contention it calls), and ``Readers`` is simsched.contention.Readers.
 *
 * The Python code is the reference: this takes the same steps with the same floating-point operations in
 * the same order (sums in NumPy's pairwise order, as ``_sum``; no fused multiply-adds, see pyproject.toml),
 * so every chunk's time, counter, block and reader comes out the same bit for bit
 * (tests/test_locality_speed.py replays chunks on every path). It calls back into Python for what is rare,
 * worked out once, or needs the run's generator: a stride's misses in flight by block size, where a
 * footprint's blocks start, a gather's plan, the jitter, and a measured loaded-latency curve. The module is optional: without a C compiler the Python path runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------------
 * Readers: the chunks reading one shared resource, each from its start to its end, with its demand. */

typedef struct {
    double start, end, gbs, in_flight;
} Span;

typedef struct {
    PyObject_HEAD
    Span *spans;
    Py_ssize_t n, cap;
    double soonest; /* the earliest end of a span: until the clock reaches it, none is dropped */
} Readers;

static PyTypeObject ReadersType;

static void readers_forget(Readers *r, double now) {
    if (!(r->soonest <= now)) return;
    Py_ssize_t kept = 0;
    double soonest = INFINITY;
    for (Py_ssize_t i = 0; i < r->n; i++) {
        if (r->spans[i].end > now) {
            if (kept == 0 || r->spans[i].end < soonest) soonest = r->spans[i].end;
            r->spans[kept++] = r->spans[i];
        }
    }
    r->n = kept;
    r->soonest = soonest;
}

static long readers_count(const Readers *r, double at) {
    long count = 0;
    for (Py_ssize_t i = 0; i < r->n; i++) count += r->spans[i].start <= at && at < r->spans[i].end;
    return count;
}

static void readers_load(const Readers *r, double at, double *gbs, double *in_flight) {
    double rate = 0.0, misses = 0.0;
    for (Py_ssize_t i = 0; i < r->n; i++) {
        if (r->spans[i].start <= at && at < r->spans[i].end) {
            rate += r->spans[i].gbs;
            misses += r->spans[i].in_flight;
        }
    }
    *gbs = rate;
    *in_flight = misses;
}

static int readers_add(Readers *r, double start, double end, double gbs, double in_flight) {
    if (r->n == r->cap) {
        Py_ssize_t cap = r->cap ? 2 * r->cap : 8;
        Span *spans = PyMem_Realloc(r->spans, cap * sizeof(Span));
        if (spans == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        r->spans = spans;
        r->cap = cap;
    }
    r->spans[r->n++] = (Span){start, end, gbs, in_flight};
    if (end < r->soonest) r->soonest = end;
    return 0;
}

static PyObject *Readers_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (!PyArg_ParseTuple(args, ":Readers")) return NULL;
    Readers *self = (Readers *)type->tp_alloc(type, 0);
    if (self != NULL) self->soonest = INFINITY;
    return (PyObject *)self;
}

static void Readers_dealloc(Readers *self) {
    PyMem_Free(self->spans);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Readers_forget(Readers *self, PyObject *arg) {
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    readers_forget(self, now);
    Py_RETURN_NONE;
}

static PyObject *Readers_count(Readers *self, PyObject *arg) {
    double at = PyFloat_AsDouble(arg);
    if (at == -1.0 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(readers_count(self, at));
}

static PyObject *Readers_load(Readers *self, PyObject *arg) {
    double at = PyFloat_AsDouble(arg), gbs, in_flight;
    if (at == -1.0 && PyErr_Occurred()) return NULL;
    readers_load(self, at, &gbs, &in_flight);
    return Py_BuildValue("(dd)", gbs, in_flight);
}

static PyObject *Readers_add(Readers *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"start", "end", "gbs", "in_flight", NULL};
    double start, end, gbs = 0.0, in_flight = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "dd|dd:add", keywords, &start, &end, &gbs, &in_flight))
        return NULL;
    if (readers_add(self, start, end, gbs, in_flight) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Readers_spans(Readers *self, void *closure) {
    PyObject *list = PyList_New(self->n);
    for (Py_ssize_t i = 0; list != NULL && i < self->n; i++) {
        Span s = self->spans[i];
        PyObject *span = Py_BuildValue("(dddd)", s.start, s.end, s.gbs, s.in_flight);
        if (span == NULL) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, span);
    }
    return list;
}

static PyMethodDef Readers_methods[] = {
    {"forget", (PyCFunction)Readers_forget, METH_O, PyDoc_STR("Drop the readers that ended by ``now``.")},
    {"count", (PyCFunction)Readers_count, METH_O, PyDoc_STR("The readers at ``at``.")},
    {"load", (PyCFunction)Readers_load, METH_O,
     PyDoc_STR("The GB/s and the misses in flight that the readers at ``at`` demand together.")},
    {"add", (PyCFunction)(void (*)(void))Readers_add, METH_VARARGS | METH_KEYWORDS,
     PyDoc_STR("Add a reader from ``start`` to ``end`` demanding ``gbs`` and ``in_flight``.")},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Readers_getset[] = {
    {"spans", (getter)Readers_spans, NULL, PyDoc_STR("(start, end, gbs, in_flight) of each reader, in order."),
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ReadersType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "simsched._locality.Readers",
    .tp_doc = PyDoc_STR("The chunks reading one shared resource (simsched.contention.Readers, compiled)."),
    .tp_basicsize = sizeof(Readers),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Readers_new,
    .tp_dealloc = (destructor)Readers_dealloc,
    .tp_methods = Readers_methods,
    .tp_getset = Readers_getset,
};

/* ------------------------------------------------------------------------------------------------------
 * Calendar: what a node's DRAM has promised the chunks reading it, over time (simsched.contention.Calendar). */

typedef struct {
    PyObject_HEAD
    double shared;
    double *times, *committed; /* breakpoints, ascending; GB/s committed from each to the next (0 after the last) */
    Py_ssize_t n, cap;
} Calendar;

static PyTypeObject CalendarType;

static PyObject *Calendar_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    double shared;
    if (!PyArg_ParseTuple(args, "d:Calendar", &shared)) return NULL;
    Calendar *self = (Calendar *)type->tp_alloc(type, 0);
    if (self != NULL) self->shared = shared;
    return (PyObject *)self;
}

static void Calendar_dealloc(Calendar *self) {
    PyMem_Free(self->times);
    PyMem_Free(self->committed);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void calendar_forget(Calendar *c, double now) {
    Py_ssize_t keep = 0;
    while (keep + 1 < c->n && c->times[keep + 1] <= now) keep++;
    if (keep) {
        memmove(c->times, c->times + keep, (c->n - keep) * sizeof(double));
        memmove(c->committed, c->committed + keep, (c->n - keep) * sizeof(double));
        c->n -= keep;
    }
}

/* The index of a breakpoint at ``at``, made if there is none; -1 with an error set. */
static Py_ssize_t calendar_split(Calendar *c, double at) {
    Py_ssize_t lo = 0, hi = c->n;
    while (lo < hi) { /* bisect_left */
        Py_ssize_t mid = (lo + hi) / 2;
        if (c->times[mid] < at) lo = mid + 1;
        else hi = mid;
    }
    if (lo < c->n && c->times[lo] == at) return lo;
    if (c->n == c->cap) {
        Py_ssize_t cap = c->cap ? 2 * c->cap : 16;
        double *times = PyMem_Realloc(c->times, cap * sizeof(double));
        if (times == NULL) return PyErr_NoMemory(), -1;
        c->times = times;
        double *committed = PyMem_Realloc(c->committed, cap * sizeof(double));
        if (committed == NULL) return PyErr_NoMemory(), -1;
        c->committed = committed;
        c->cap = cap;
    }
    memmove(c->times + lo + 1, c->times + lo, (c->n - lo) * sizeof(double));
    memmove(c->committed + lo + 1, c->committed + lo, (c->n - lo) * sizeof(double));
    c->times[lo] = at;
    c->committed[lo] = lo > 0 ? c->committed[lo - 1] : 0.0;
    c->n++;
    return lo;
}

/* Serve ``nbytes`` from ``start`` at what the node has left, at most ``cap``: the ns they take in *out. */
static int calendar_take(Calendar *c, double start, double nbytes, double cap, double *out) {
    Py_ssize_t i = calendar_split(c, start);
    if (i < 0) return -1;
    double left = nbytes;
    for (;;) {
        double free = c->shared - c->committed[i];
        free = 0.0 > free ? 0.0 : free;
        double rate = free < cap ? free : cap; /* min(cap, max(free, 0.0)) as Python picks */
        int last = i + 1 == c->n;              /* nothing is committed beyond the last breakpoint */
        double span = last ? INFINITY : c->times[i + 1] - c->times[i];
        if (rate > 0.0 && left <= rate * span) {
            double end = c->times[i] + left / rate;
            Py_ssize_t j = calendar_split(c, end);
            if (j < 0) return -1;
            for (Py_ssize_t k = i; k < j; k++) c->committed[k] += rate;
            *out = end - start;
            return 0;
        }
        if (last) { /* a node of no bandwidth: never served */
            PyErr_SetString(PyExc_ValueError, "a node of no bandwidth");
            return -1;
        }
        if (rate > 0.0) {
            left -= rate * span;
            c->committed[i] += rate;
        }
        i++;
    }
}

static PyObject *Calendar_forget(Calendar *self, PyObject *arg) {
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    calendar_forget(self, now);
    Py_RETURN_NONE;
}

static PyObject *Calendar_take(Calendar *self, PyObject *args) {
    double start, nbytes, cap, taken;
    if (!PyArg_ParseTuple(args, "ddd:take", &start, &nbytes, &cap) || calendar_take(self, start, nbytes, cap, &taken) < 0)
        return NULL;
    return PyFloat_FromDouble(taken);
}

static PyObject *doubles_list(const double *values, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        PyObject *v = PyFloat_FromDouble(values[i]);
        if (v == NULL) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, v);
    }
    return list;
}

static PyObject *Calendar_times(Calendar *self, void *closure) { return doubles_list(self->times, self->n); }
static PyObject *Calendar_committed(Calendar *self, void *closure) { return doubles_list(self->committed, self->n); }

static PyMethodDef Calendar_methods[] = {
    {"forget", (PyCFunction)Calendar_forget, METH_O, PyDoc_STR("Drop the commitments that ended by ``now``.")},
    {"take", (PyCFunction)Calendar_take, METH_VARARGS,
     PyDoc_STR("take(start, nbytes, cap_gbs): serve the bytes from start at what is left; the ns they take.")},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Calendar_getset[] = {
    {"times", (getter)Calendar_times, NULL, PyDoc_STR("The breakpoints, ascending."), NULL},
    {"committed", (getter)Calendar_committed, NULL, PyDoc_STR("GB/s committed from each breakpoint on."), NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CalendarType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "simsched._locality.Calendar",
    .tp_doc = PyDoc_STR("What a node's DRAM has promised, over time (simsched.contention.Calendar, compiled)."),
    .tp_basicsize = sizeof(Calendar),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Calendar_new,
    .tp_dealloc = (destructor)Calendar_dealloc,
    .tp_methods = Calendar_methods,
    .tp_getset = Calendar_getset,
};

/* ------------------------------------------------------------------------------------------------------
 * Sums and costs, as simsched.small_chunks adds and prices them. */

/* NumPy's pairwise summation order (simsched.small_chunks._sum). */
static double pairwise(const double *v, Py_ssize_t n) {
    if (n < 8) {
        double total = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) total += v[i];
        return total;
    }
    if (n <= 128) {
        double s[8];
        memcpy(s, v, sizeof s);
        Py_ssize_t whole = n - n % 8;
        for (Py_ssize_t i = 8; i < whole; i += 8)
            for (int k = 0; k < 8; k++) s[k] += v[i + k];
        double total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
        for (Py_ssize_t i = whole; i < n; i++) total += v[i];
        return total;
    }
    Py_ssize_t half = n / 2;
    half -= half % 8;
    return pairwise(v, half) + pairwise(v + half, n - half);
}

enum pattern { STREAM, STRIDE, RANDOM };

/* ns to fetch ``nbytes`` from a level of this latency and bandwidth (simsched.small_chunks._access). */
static double access_ns(double latency, double bandwidth, enum pattern pattern, double nbytes, double overlap) {
    double transfer = nbytes / bandwidth;
    if (pattern == STREAM) return transfer;
    double waiting = pattern == STRIDE ? latency / overlap : latency / 1.0;
    return transfer > waiting ? transfer : waiting; /* Python's max(waiting, transfer) */
}

/* ------------------------------------------------------------------------------------------------------
 * Chunks: one run's locality model, its tables held as C arrays and its state as the Python objects the
 * NumPy path shares (the bytes through each cache, the counters and the blocks, looked up on the state at
 * each chunk, and the readers). */

enum kind { SHARED, PRIVATE, ALONE };
enum { MAX_LEVELS = 8, DRAM = -1, LINK = -2 };

typedef struct {
    double size, latency, bandwidth, shared_bandwidth, random_read; /* random_read 0: none measured */
    enum kind kind;
    double *far; /* latency by socket hops */
    Py_ssize_t hops;
    PyObject *here, *there, *far_name; /* the counters its lines go to (far_name may be None) */
    long *instance;                    /* the instance each worker uses */
    PyObject *shares;                  /* readers of each instance sharing its bandwidth; NULL: none share it */
} Level;

typedef struct {
    PyObject_HEAD
    PyObject *every_reader, *queue; /* not the state itself: it holds this object (run takes it) */
    Level levels[MAX_LEVELS];
    int nlevels, shared, stride_misses, jitter, gathers_added, queueing, controller, curve;
    long line, sockets, workers;
    double outstanding;
    long *socket_of, *hops; /* by worker; sockets x sockets */
    double dram_latency, dram_bandwidth, dram_shared_bandwidth, dram_random_read, *remote, controller_gbs, link_gbs;
    Py_ssize_t nremote;
    PyObject *dram_readers, *dram_shares, *link_readers; /* dram_shares NULL where DRAM bandwidth is not shared */
    PyObject *calendars; /* each node's Calendar where its bandwidth is conserved; NULL: shared at each start */
} Chunks;

static PyObject *str_through, *str_counters, *str_blocks, *str_data, *str_bytes, *str_pattern, *str_gather,
    *str_reads, *str_holder, *str_stamp, *str_home, *str_offsets, *str_overlap, *str_local_dram, *str_remote_dram,
    *str_dram;

/* A sequence's items as a C array (PyMem_Malloc'd; doubles, or longs), its length in *n; -1 with an error set. */
static int to_array(PyObject *seq, void **out, Py_ssize_t *n, int doubles, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL) return -1;
    *n = PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Malloc((*n ? *n : 1) * (doubles ? sizeof(double) : sizeof(long)));
    int rc = 0;
    if (*out == NULL) {
        PyErr_NoMemory();
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < *n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (doubles) {
            double value = ((double *)*out)[i] = PyFloat_AsDouble(item);
            rc = value == -1.0 && PyErr_Occurred() ? -1 : 0;
        } else {
            long value = ((long *)*out)[i] = PyLong_AsLong(item);
            rc = value == -1 && PyErr_Occurred() ? -1 : 0;
        }
    }
    Py_DECREF(fast);
    return rc;
}

static int to_doubles(PyObject *seq, double **out, Py_ssize_t *n, const char *what) {
    return to_array(seq, (void **)out, n, 1, what);
}

static int to_longs(PyObject *seq, long **out, Py_ssize_t *n, const char *what) {
    return to_array(seq, (void **)out, n, 0, what);
}

/* A list of Readers, or None (NULL); -1 with an error set for anything else. */
static int readers_list(PyObject *obj, PyObject **out) {
    *out = NULL;
    if (obj == Py_None) return 0;
    if (!PyList_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "expected a list of Readers or None");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(obj); i++) {
        if (!Py_IS_TYPE(PyList_GET_ITEM(obj, i), &ReadersType)) {
            PyErr_SetString(PyExc_TypeError, "expected compiled Readers");
            return -1;
        }
    }
    Py_INCREF(obj);
    *out = obj;
    return 0;
}

static void Chunks_dealloc(Chunks *self) {
    for (int i = 0; i < self->nlevels; i++) {
        Level *lv = &self->levels[i];
        PyMem_Free(lv->far);
        PyMem_Free(lv->instance);
        Py_XDECREF(lv->here);
        Py_XDECREF(lv->there);
        Py_XDECREF(lv->far_name);
        Py_XDECREF(lv->shares);
    }
    PyMem_Free(self->socket_of);
    PyMem_Free(self->hops);
    PyMem_Free(self->remote);
    Py_XDECREF(self->every_reader);
    Py_XDECREF(self->queue);
    Py_XDECREF(self->dram_readers);
    Py_XDECREF(self->dram_shares);
    Py_XDECREF(self->link_readers);
    Py_XDECREF(self->calendars);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Chunks(state, levels, shared, dram, queue, link_readers, socket_of, hops, line, outstanding, stride_misses,
 * jitter, calendars): see simsched.locality.DataState._compiled_path for what each holds. */
static PyObject *Chunks_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *state, *levels, *dram, *queue, *link, *socket_of, *hops, *calendars;
    int shared, stride_misses, jitter;
    long line;
    double outstanding;
    if (!PyArg_ParseTuple(args, "OO!iO!OOOOldppO:Chunks", &state, &PyList_Type, &levels, &shared, &PyTuple_Type,
                          &dram, &queue, &link, &socket_of, &hops, &line, &outstanding, &stride_misses, &jitter,
                          &calendars))
        return NULL;
    Chunks *self = (Chunks *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    PyObject *every = PyObject_GetAttrString(state, "every_reader");
    if (every == NULL) goto fail;
    int held = readers_list(every, &self->every_reader);
    Py_DECREF(every);
    if (held < 0) goto fail;
    self->line = line;
    self->outstanding = outstanding;
    self->stride_misses = stride_misses;
    self->jitter = jitter;
    self->shared = shared;
    Py_ssize_t n;
    if (to_longs(socket_of, &self->socket_of, &n, "the socket of each worker") < 0) goto fail;
    self->workers = (long)n;
    if (PyList_GET_SIZE(levels) > MAX_LEVELS) {
        PyErr_SetString(PyExc_ValueError, "too many cache levels");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(levels); i++) {
        Level *lv = &self->levels[i];
        PyObject *far, *instance, *shares, *here, *there, *far_name;
        int kind;
        self->nlevels = (int)i + 1;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(levels, i), "dddddiOUUOOO:level", &lv->size, &lv->latency,
                              &lv->bandwidth, &lv->shared_bandwidth, &lv->random_read, &kind, &far, &here, &there,
                              &far_name, &instance, &shares))
            goto fail;
        Py_INCREF(here);
        Py_INCREF(there);
        Py_INCREF(far_name);
        lv->here = here;
        lv->there = there;
        lv->far_name = far_name;
        lv->kind = (enum kind)kind;
        if (to_doubles(far, &lv->far, &lv->hops, "a level's latencies by hops") < 0
            || to_longs(instance, &lv->instance, &n, "a level's instance per worker") < 0
            || readers_list(shares, &lv->shares) < 0)
            goto fail;
        if (n != self->workers || kind < SHARED || kind > ALONE) {
            PyErr_SetString(PyExc_ValueError, "a level needs an instance for each worker and a known kind");
            goto fail;
        }
    }
    int private_level = 0;
    for (int i = 0; i < self->nlevels; i++) private_level |= self->levels[i].kind == PRIVATE;
    if (shared < -1 || shared >= self->nlevels || (private_level && shared < 0) || line < 1) {
        PyErr_SetString(PyExc_ValueError, "no such shared level (a private level reads through one), or no line");
        goto fail;
    }
    PyObject *remote, *dram_readers, *dram_shares;
    if (!PyArg_ParseTuple(dram, "dOdddOOp:dram", &self->dram_latency, &remote, &self->dram_bandwidth,
                          &self->dram_shared_bandwidth, &self->dram_random_read, &dram_readers, &dram_shares,
                          &self->gathers_added)
        || to_doubles(remote, &self->remote, &self->nremote, "DRAM's remote latencies") < 0
        || readers_list(dram_readers, &self->dram_readers) < 0 || readers_list(dram_shares, &self->dram_shares) < 0
        || readers_list(link, &self->link_readers) < 0)
        goto fail;
    if (self->dram_readers == NULL) {
        PyErr_SetString(PyExc_ValueError, "DRAM needs its readers");
        goto fail;
    }
    if (queue != Py_None) {
        PyObject *queueing;
        if (!PyArg_ParseTuple(queue, "Oppdd:queue", &queueing, &self->controller, &self->curve,
                              &self->controller_gbs, &self->link_gbs))
            goto fail;
        Py_INCREF(queueing);
        self->queue = queueing;
        self->queueing = 1;
        if (self->link_gbs && self->link_readers == NULL) {
            PyErr_SetString(PyExc_ValueError, "socket links need their readers");
            goto fail;
        }
    }
    Py_ssize_t cells;
    PyObject *rows = PySequence_Fast(hops, "socket hops");
    if (rows == NULL) goto fail;
    self->sockets = (long)PySequence_Fast_GET_SIZE(rows);
    cells = (Py_ssize_t)self->sockets * self->sockets;
    self->hops = PyMem_Malloc(sizeof(long) * (cells + 1));
    int ok = self->hops != NULL;
    if (!ok) PyErr_NoMemory();
    for (long r = 0; ok && r < self->sockets; r++) {
        long *row = NULL;
        Py_ssize_t length;
        ok = to_longs(PySequence_Fast_GET_ITEM(rows, r), &row, &length, "socket hops") == 0;
        if (ok && length != self->sockets) {
            PyErr_SetString(PyExc_ValueError, "socket hops must be sockets x sockets");
            ok = 0;
        }
        if (ok) memcpy(self->hops + r * self->sockets, row, sizeof(long) * self->sockets);
        PyMem_Free(row);
    }
    Py_DECREF(rows);
    if (!ok) goto fail;
    for (Py_ssize_t k = 0; k < cells; k++) {
        if (self->hops[k] < 0) {
            PyErr_SetString(PyExc_ValueError, "socket hops must be >= 0");
            goto fail;
        }
    }
    for (long w = 0; w < self->workers; w++) {
        if (self->socket_of[w] < 0 || self->socket_of[w] >= self->sockets) {
            PyErr_SetString(PyExc_ValueError, "a worker's socket out of range");
            goto fail;
        }
    }
    /* Readers for every instance their indices reach. */
    int short_list = PyList_GET_SIZE(self->dram_readers) < self->sockets
                     || (self->dram_shares != NULL && PyList_GET_SIZE(self->dram_shares) < self->sockets)
                     || (self->link_readers != NULL
                         && PyList_GET_SIZE(self->link_readers) < self->sockets * self->sockets);
    for (int i = 0; i < self->nlevels; i++)
        short_list |= self->levels[i].shares != NULL && PyList_GET_SIZE(self->levels[i].shares) < self->sockets;
    if (short_list) {
        PyErr_SetString(PyExc_ValueError, "readers for every socket (and socket link) are needed");
        goto fail;
    }
    if (calendars != Py_None) {
        int good = PyList_Check(calendars) && PyList_GET_SIZE(calendars) >= self->sockets;
        for (Py_ssize_t k = 0; good && k < PyList_GET_SIZE(calendars); k++)
            good = Py_IS_TYPE(PyList_GET_ITEM(calendars, k), &CalendarType);
        if (!good) {
            PyErr_SetString(PyExc_TypeError, "a compiled Calendar for every node, or None");
            goto fail;
        }
        Py_INCREF(calendars);
        self->calendars = calendars;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* A C-contiguous buffer of 8-byte items: integers ('i') or doubles ('d'). */
static int get_buffer(PyObject *obj, Py_buffer *view, char kind, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    const char *format = view->format;
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') format++;
    int good = view->itemsize == 8 && format[1] == '\0'
               && (kind == 'd' ? format[0] == 'd' : (format[0] == 'l' || format[0] == 'q'));
    if (!good) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "expected an array of 8-byte %s", kind == 'd' ? "floats" : "integers");
        return -1;
    }
    return 0;
}

static int list_double(PyObject *list, long i, double *out) {
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "expected a list of floats");
        return -1;
    }
    if (i < 0 || i >= PyList_GET_SIZE(list)) {
        PyErr_SetString(PyExc_IndexError, "cache instance out of range");
        return -1;
    }
    *out = PyFloat_AsDouble(PyList_GET_ITEM(list, i));
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static int list_set_double(PyObject *list, long i, double value) {
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "expected a list of floats");
        return -1;
    }
    PyObject *v = PyFloat_FromDouble(value);
    return v == NULL ? -1 : PyList_SetItem(list, i, v);
}

static int add_counter(PyObject *counters, PyObject *name, double value) { /* counters[name] += value */
    PyObject *old = PyDict_GetItemWithError(counters, name);
    if (old == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, name);
        return -1;
    }
    double total = PyFloat_AsDouble(old);
    if (total == -1.0 && PyErr_Occurred()) return -1;
    PyObject *v = PyFloat_FromDouble(total + value);
    if (v == NULL) return -1;
    int rc = PyDict_SetItem(counters, name, v);
    Py_DECREF(v);
    return rc;
}

static Readers *member(PyObject *group, long instance) {
    return (Readers *)PyList_GET_ITEM(group, instance);
}

/* The per-core bandwidth from an instance of a shared resource, one more reader being added (_share). */
static double share(PyObject *group, double shared_bandwidth, double bandwidth, long instance, double start) {
    if (group == NULL) return bandwidth;
    double parted = shared_bandwidth / (double)(readers_count(member(group, instance), start) + 1);
    return parted < bandwidth ? parted : bandwidth;
}

/* ``share`` through a chunk's table of the shares worked out so far (negative: not yet): its readers do not
 * change while the chunk is worked out. */
static double known_share(double *known, PyObject *group, double shared_bandwidth, double bandwidth, long instance,
                          double start) {
    if (known[instance] < 0) known[instance] = share(group, shared_bandwidth, bandwidth, instance, start);
    return known[instance];
}

/* What a chunk reads until it ends: (resource, instance), in the order _note adds them. */
typedef struct {
    int resource; /* a level's index, or DRAM */
    long instance;
} Reading;

typedef struct {
    Reading *items;
    Py_ssize_t n, cap;
} Readings;

static int note_one(Readings *r, int resource, long instance) {
    if (r->n == r->cap) {
        Py_ssize_t cap = r->cap ? 2 * r->cap : 16;
        Reading *items = PyMem_Realloc(r->items, cap * sizeof(Reading));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        r->items = items;
        r->cap = cap;
    }
    r->items[r->n++] = (Reading){resource, instance};
    return 0;
}

static int by_value(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* _note: hold a reader of each instance used (sorted, once each) until the chunk ends. */
static int note(Readings *r, int resource, long *used, Py_ssize_t n) {
    if (n == 0) return 0;
    qsort(used, n, sizeof(long), by_value);
    for (Py_ssize_t i = 0; i < n; i++)
        if ((i == 0 || used[i] != used[i - 1]) && note_one(r, resource, used[i]) < 0) return -1;
    return 0;
}

/* The C library's pow, called as Python's ``x ** 2`` calls it: a compiler would make pow(x, 2.0) x * x, which
 * the library's pow does not always round alike. */
static double (*volatile library_pow)(double, double) = pow;

/* simsched.loaded.closed_latency and queue_wait. */
static double closed_latency(double in_flight, double latency, double service) {
    double load = in_flight * service;
    double root = sqrt(library_pow(load - latency, 2.0) + 2.0 * service * latency - library_pow(service, 2.0));
    return (load + latency - service + root) / 2.0;
}

static double queue_wait(double others, double own, double latency, double line, double bandwidth) {
    double service = line / bandwidth;
    service = latency < service ? latency : service;
    double wait = closed_latency(others + own, latency, service) - closed_latency(own, latency, service);
    return 0.0 > wait ? 0.0 : wait;
}

/* Queueing.controller_wait: the measured curve in Python, the closed queue here. */
static int controller_wait(Chunks *self, double gbs, double in_flight, double own, double latency, double *out) {
    *out = 0.0;
    if (gbs <= 0.0) return 0;
    if (self->curve) {
        PyObject *r = PyObject_CallMethod(self->queue, "controller_wait", "dddd", gbs, in_flight, own, latency);
        if (r == NULL) return -1;
        *out = PyFloat_AsDouble(r);
        Py_DECREF(r);
        return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
    }
    if (self->controller_gbs) *out = queue_wait(in_flight, own, latency, (double)self->line, self->controller_gbs);
    return 0;
}

/* Contention._waits: the wait per DRAM line at each node (and the link from it). */
static int waits(Chunks *self, double start, long socket, const double *lines, const double *own, double *out) {
    for (long node = 0; node < self->sockets; node++) {
        out[node] = 0.0;
        if (lines[node] == 0.0) continue;
        long hops = self->hops[socket * self->sockets + node];
        if (hops > self->nremote) {
            PyErr_SetString(PyExc_IndexError, "no remote DRAM latency for so many socket hops");
            return -1;
        }
        double latency = hops ? self->remote[hops - 1] : self->dram_latency;
        double mine = own[node] / lines[node], wait = 0.0, gbs, in_flight, part;
        if (self->controller) {
            readers_load(member(self->dram_readers, node), start, &gbs, &in_flight);
            if (controller_wait(self, gbs, in_flight, mine, latency, &part) < 0) return -1;
            wait += part;
        }
        if (self->link_gbs && hops) {
            readers_load(member(self->link_readers, node * self->sockets + socket), start, &gbs, &in_flight);
            part = 0.0;
            if (gbs > 0.0) part = queue_wait(in_flight, mine, latency, (double)self->line, self->link_gbs);
            wait += part;
        }
        out[node] = wait;
    }
    return 0;
}

static PyObject *attr(PyObject *obj, PyObject *name) { return PyObject_GetAttr(obj, name); }

/* DataState._gather: the time of one read of the footprint's shared array by ``worker``, its chunk reading
 * ``count``; the plan (what each level and node serves) comes from DataState._gather_plan. */
static int gather_ns(Chunks *self, PyObject *state, PyObject *through_all, PyObject *counters, PyObject *fp,
                     long worker, double count, double start, Readings *reading, double *out) {
    const long socket = self->socket_of[worker], S = self->sockets;
    const double line = (double)self->line;
    double per_read = 0.0, *costs = NULL;
    int rc = -1;
    PyObject *plan = PyObject_CallMethod(state, "_gather_plan", "Ol", fp, socket);
    if (plan == NULL) return -1;
    PyObject *levels = PyDict_GetItemString(plan, "levels"), *dram = PyDict_GetItemString(plan, "dram");
    PyObject *shares = PyDict_GetItemString(plan, "share"), *latencies = PyDict_GetItemString(plan, "latency");
    PyObject *nodes = PyDict_GetItemString(plan, "nodes");
    if (levels == NULL || dram == NULL || shares == NULL || latencies == NULL || nodes == NULL
        || !PyList_Check(levels) || !PyList_Check(shares) || !PyList_Check(latencies) || !PyList_Check(nodes)
        || PyList_GET_SIZE(shares) != S || PyList_GET_SIZE(latencies) != S) {
        PyErr_SetString(PyExc_TypeError, "a gather plan as DataState._gather_plan makes it");
        goto done;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(levels); k++) {
        int i;
        double part, missed, nbytes, moved;
        PyObject *level, *name;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(levels, k), "iOdddO", &i, &level, &part, &missed, &nbytes, &name))
            goto done;
        if (i < 0 || i >= self->nlevels) {
            PyErr_SetString(PyExc_IndexError, "a gather plan's level");
            goto done;
        }
        Level *lv = &self->levels[i];
        PyObject *through = PyList_GET_ITEM(through_all, i);
        if (list_double(through, lv->instance[worker], &moved) < 0
            || list_set_double(through, lv->instance[worker], moved + missed * count * line) < 0)
            goto done;
        if (part <= 0) continue;
        double bandwidth = lv->bandwidth;
        if (lv->kind == SHARED) {
            bandwidth = share(lv->shares, lv->shared_bandwidth, lv->bandwidth, socket, start);
            if (lv->shares != NULL && note_one(reading, i, socket) < 0) goto done;
        }
        double latency = lv->random_read ? lv->random_read : lv->latency / self->outstanding;
        double transfer = nbytes / bandwidth;
        per_read += part * (transfer > latency ? transfer : latency);
        if (add_counter(counters, name, part * count) < 0) goto done;
    }
    double missed = PyFloat_AsDouble(dram);
    if (missed == -1.0 && PyErr_Occurred()) goto done;
    if (missed > 0) {
        if (self->dram_shares != NULL) {
            for (Py_ssize_t k = 0; k < PyList_GET_SIZE(nodes); k++) {
                long node = PyLong_AsLong(PyList_GET_ITEM(nodes, k));
                if ((node == -1 && PyErr_Occurred()) || note_one(reading, DRAM, node) < 0) goto done;
            }
        }
        /* A measured read costs as much more from another node as that node's latency is more. */
        double scale = self->dram_random_read ? self->dram_random_read / self->dram_latency : 1.0 / self->outstanding;
        costs = PyMem_Malloc(sizeof(double) * (S + 1));
        if (costs == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        double mine = 0.0;
        for (long node = 0; node < S; node++) {
            double part, latency;
            if (list_double(shares, node, &part) < 0 || list_double(latencies, node, &latency) < 0) goto done;
            if (node == socket) mine = part;
            double waiting = latency * scale;
            double transfer = line / share(self->dram_shares, self->dram_shared_bandwidth, self->dram_bandwidth,
                                           node, start);
            costs[node] = part * (transfer > waiting ? transfer : waiting);
        }
        per_read += missed * pairwise(costs, S);
        if (add_counter(counters, str_local_dram, missed * count * mine) < 0
            || add_counter(counters, str_remote_dram, missed * count * (1.0 - mine)) < 0)
            goto done;
    }
    *out = per_read;
    rc = 0;
done:
    PyMem_Free(costs);
    Py_DECREF(plan);
    return rc;
}

typedef struct {
    int resource; /* DRAM or LINK */
    long instance;
    double gbs, in_flight;
    int taken;
} Demand;

static PyObject *group_of(Chunks *self, int resource) {
    if (resource == DRAM) return self->dram_readers;
    if (resource == LINK) return self->link_readers;
    return self->levels[resource].shares;
}

/* run(state, worker, fp, lo, hi, start, now, work): DataState.chunk for iterations [lo, hi) (``state``: the
 * DataState this was made for). */
static PyObject *Chunks_run(Chunks *self, PyObject *args) {
    long worker;
    Py_ssize_t lo, hi;
    PyObject *state, *fp;
    double start, now, work;
    if (!PyArg_ParseTuple(args, "OlOnnddd:run", &state, &worker, &fp, &lo, &hi, &start, &now, &work)) return NULL;
    if (worker < 0 || worker >= self->workers || lo < 0 || hi < lo) {
        PyErr_SetString(PyExc_ValueError, "no such worker, or a chunk that ends before it starts");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(self->every_reader); i++)
        readers_forget(member(self->every_reader, i), now);
    for (Py_ssize_t i = 0; self->calendars != NULL && i < PyList_GET_SIZE(self->calendars); i++)
        calendar_forget((Calendar *)PyList_GET_ITEM(self->calendars, i), now);

    PyObject *result = NULL, *through_all = NULL, *counters = NULL, *blocks_all = NULL, *data = NULL, *blocks = NULL, *bytes = NULL, *pattern_name = NULL, *gather = NULL,
             *reads_obj = NULL, *holder_obj = NULL, *stamp_obj = NULL, *home_obj = NULL, *offsets_obj = NULL;
    Py_buffer holder_v = {0}, stamp_v = {0}, home_v = {0}, bytes_v = {0}, offsets_v = {0}, reads_v = {0};
    double *scratch = NULL;
    long *lscratch = NULL;
    Readings reading = {0};
    Demand *demand = NULL;
    const Py_ssize_t n = hi - lo;
    const int L = self->nlevels;
    const long S = self->sockets;

    through_all = attr(state, str_through);
    counters = attr(state, str_counters);
    blocks_all = attr(state, str_blocks);
    if (through_all == NULL || counters == NULL || blocks_all == NULL) goto done;
    if (!PyList_Check(through_all) || PyList_GET_SIZE(through_all) != L || !PyDict_Check(counters)
        || !PyDict_Check(blocks_all)) {
        PyErr_SetString(PyExc_TypeError, "a locality state needs bytes through each level, counters and blocks");
        goto done;
    }
    data = attr(fp, str_data);
    if (data == NULL) goto done;
    blocks = PyDict_GetItemWithError(blocks_all, data);
    if (blocks == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, data);
        goto done;
    }
    Py_INCREF(blocks);
    if ((bytes = attr(fp, str_bytes)) == NULL || (pattern_name = attr(fp, str_pattern)) == NULL
        || (gather = attr(fp, str_gather)) == NULL || (holder_obj = attr(blocks, str_holder)) == NULL
        || (stamp_obj = attr(blocks, str_stamp)) == NULL || (home_obj = attr(blocks, str_home)) == NULL
        || (offsets_obj = PyObject_CallMethodOneArg(state, str_offsets, fp)) == NULL)
        goto done;
    if (get_buffer(holder_obj, &holder_v, 'i', 1) < 0 || get_buffer(stamp_obj, &stamp_v, 'd', 1) < 0
        || get_buffer(home_obj, &home_v, 'i', 1) < 0 || get_buffer(bytes, &bytes_v, 'i', 0) < 0
        || get_buffer(offsets_obj, &offsets_v, 'i', 0) < 0)
        goto done;
    const Py_ssize_t blocks_n = holder_v.len / 8;
    if (hi > blocks_n || bytes_v.len / 8 < hi || offsets_v.len / 8 < hi + 1 || home_v.len / 8 != blocks_n
        || stamp_v.len / 8 != (Py_ssize_t)L * blocks_n) {
        PyErr_SetString(PyExc_ValueError, "a chunk beyond its data's blocks");
        goto done;
    }
    enum pattern pattern;
    if (PyUnicode_CompareWithASCIIString(pattern_name, "stream") == 0) pattern = STREAM;
    else if (PyUnicode_CompareWithASCIIString(pattern_name, "stride") == 0) pattern = STRIDE;
    else if (PyUnicode_CompareWithASCIIString(pattern_name, "random") == 0) pattern = RANDOM;
    else {
        PyErr_SetString(PyExc_ValueError, "unknown access pattern");
        goto done;
    }
    long long *holder = (long long *)holder_v.buf + lo, *home_all = (long long *)home_v.buf;
    long long *nbytes = (long long *)bytes_v.buf, *offsets = (long long *)offsets_v.buf;
    double *stamp = stamp_v.buf;
    const double line = (double)self->line;

    /* Per iteration: sizes, lines, overlap, before, DRAM latency, lines from DRAM, time, bandwidth; per level
     * the three served lists; per node two sums each. */
    const Py_ssize_t rows = n ? n : 1;
    scratch = PyMem_Malloc(sizeof(double) * (rows * (10 + 3 * L) + (5 + L) * S + 1));
    lscratch = PyMem_Malloc(sizeof(long) * (rows * (2 + L) + 1));
    demand = PyMem_Malloc(sizeof(Demand) * (2 * S + 1));
    if (scratch == NULL || lscratch == NULL || demand == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    double *sizes = scratch, *lines_of = sizes + rows, *overlap_of = lines_of + rows, *before_of = overlap_of + rows,
           *latency = before_of + rows, *from_dram = latency + rows, *time = from_dram + rows,
           *bandwidth = time + rows, *local_dram = bandwidth + rows, *remote_dram = local_dram + rows,
           *served = remote_dram + rows, *by_node = served + 3 * L * rows,
           *own = by_node + S, *wait = own + S, *known = wait + S, /* known: the shares, by level (DRAM last) */
           *node_share = known + (L + 1) * S;
    for (long k = 0; k < (L + 1) * S; k++) known[k] = -1.0;
    long *home = lscratch, *used = home + rows;
    Py_ssize_t served_n[MAX_LEVELS][3] = {{0}}, used_n[MAX_LEVELS] = {0};
#define SERVED(i, k) (served + ((i) * 3 + (k)) * rows)

    const long socket = self->socket_of[worker];
    const long *hops_from = self->hops + socket * S;
    long mine[MAX_LEVELS];
    for (int i = 0; i < L; i++) mine[i] = self->levels[i].instance[worker];
    int untouched = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        sizes[j] = (double)nbytes[lo + j];
        home[j] = (long)home_all[lo + j];
        untouched |= home[j] < 0;
    }
    if (untouched) { /* first touch: a page lands on the node of the core that writes it first */
        for (Py_ssize_t j = 0; j < n; j++) {
            if (home[j] < 0) home[j] = socket;
            home_all[lo + j] = home[j];
        }
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        if (home[j] >= S || holder[j] >= self->workers) {
            PyErr_SetString(PyExc_ValueError, "a block's home or holder out of range");
            goto done;
        }
    }

    const long long first = offsets[lo];
    long long reached = first / self->line;
    double ahead = 0.0;
    for (Py_ssize_t j = 0; j < n; j++) {
        const double size = sizes[j];
        const long long end = offsets[lo + j + 1];
        const long long upto = end > first ? (end + self->line - 1) / self->line : reached;
        const double lines = (double)(upto - reached);
        reached = upto;
        double overlap = self->outstanding;
        if (self->stride_misses) {
            PyObject *bytes_of = PyFloat_FromDouble(size);
            PyObject *r = bytes_of == NULL ? NULL : PyObject_CallMethodOneArg(state, str_overlap, bytes_of);
            Py_XDECREF(bytes_of);
            if (r == NULL) goto done;
            overlap = PyFloat_AsDouble(r);
            Py_DECREF(r);
            if (overlap == -1.0 && PyErr_Occurred()) goto done;
        }
        ahead += size;
        const double before = ahead - size; /* this chunk's bytes ahead of the iteration */
        const int seen = holder[j] >= 0 && size > 0;
        const long who = seen ? (long)holder[j] : worker;
        const long holder_socket = self->socket_of[who];
        const int same_socket = holder_socket == socket;
        const long hops = hops_from[holder_socket];
        double t = 0.0, inner = 0.0;
        for (int i = 0; i < L; i++) {
            Level *lv = &self->levels[i];
            const long theirs = lv->instance[who];
            const int local = theirs == mine[i];
            double held = 0.0;
            if (seen) {
                double through;
                if (list_double(PyList_GET_ITEM(through_all, i), theirs, &through) < 0) goto done;
                const double distance = through - stamp[i * blocks_n + lo + j] + (local ? before : 0.0);
                const double x = (lv->size - distance) / size;
                const double floor0 = 0.0 > x ? 0.0 : x; /* min(max(x, 0.0), 1.0) as Python picks */
                held = 1.0 < floor0 ? 1.0 : floor0;
            }
            held = inner > held ? inner : held;
            const double part = (held - inner) * lines;
            inner = held;
            double level_latency, level_bandwidth;
            if (lv->kind == SHARED) {
                SERVED(i, local ? 0 : 1)[served_n[i][local ? 0 : 1]++] = part;
                if (part == 0.0) continue;
                if (!local && hops >= lv->hops) goto too_far;
                level_latency = local ? lv->latency : lv->far[hops];
                level_bandwidth = known_share(known + i * S, lv->shares, lv->shared_bandwidth, lv->bandwidth,
                                              holder_socket, start);
                if (part > 0) used[i * rows + used_n[i]++] = holder_socket;
            } else if (lv->kind == PRIVATE) {
                if (local) SERVED(i, 0)[served_n[i][0]++] = part;
                SERVED(i, same_socket ? 1 : 2)[served_n[i][same_socket ? 1 : 2]++] = local ? 0.0 : part;
                if (part == 0.0) continue;
                if (local) {
                    level_latency = lv->latency;
                    level_bandwidth = lv->bandwidth;
                } else {
                    Level *source = &self->levels[self->shared];
                    if (!same_socket && hops >= source->hops) goto too_far;
                    level_latency = same_socket ? source->latency : source->far[hops];
                    level_bandwidth = known_share(known + self->shared * S, source->shares,
                                                  source->shared_bandwidth, source->bandwidth, holder_socket, start);
                    if (part > 0) used[i * rows + used_n[i]++] = holder_socket;
                }
            } else {
                SERVED(i, local ? 0 : 1)[served_n[i][local ? 0 : 1]++] = part;
                if (part == 0.0) continue;
                level_latency = local ? lv->latency : self->dram_latency;
                level_bandwidth = local ? lv->bandwidth : self->dram_bandwidth;
            }
            t += part * access_ns(level_latency, level_bandwidth, pattern, line, overlap);
        }
        time[j] = t;
        lines_of[j] = lines;
        overlap_of[j] = overlap;
        before_of[j] = before;
        const long far = hops_from[home[j]];
        if (far > self->nremote && self->nremote) goto too_far;
        latency[j] = far == 0 ? self->dram_latency : self->nremote ? self->remote[far - 1] : 0.0;
        from_dram[j] = (1.0 - inner) * lines;
    }

    for (int i = 0; i < L; i++) {
        Level *lv = &self->levels[i];
        PyObject *names[3] = {lv->here, lv->there, lv->far_name};
        for (int k = 0; k < 3; k++) {
            if (served_n[i][k] && add_counter(counters, names[k], pairwise(SERVED(i, k), served_n[i][k])) < 0)
                goto done;
        }
        if (used_n[i]) {
            int resource = lv->kind == SHARED ? i : self->shared;
            if (self->levels[resource].shares != NULL && note(&reading, resource, used + i * rows, used_n[i]) < 0)
                goto done;
        }
    }
    Py_ssize_t from_dram_n = 0;
    if (self->calendars != NULL) { /* Contention._conserved_shares */
        for (long node = 0; node < S; node++) by_node[node] = 0.0;
        for (Py_ssize_t j = 0; j < n; j++)
            if (from_dram[j] > 0) by_node[home[j]] += from_dram[j];
        for (long node = 0; node < S; node++) {
            if (by_node[node] != 0.0) {
                double nbytes = by_node[node] * line, taken;
                if (calendar_take((Calendar *)PyList_GET_ITEM(self->calendars, node), start, nbytes,
                                  self->dram_bandwidth, &taken) < 0)
                    goto done;
                node_share[node] = nbytes / taken;
            } else {
                node_share[node] = known_share(known + L * S, self->dram_shares, self->dram_shared_bandwidth,
                                               self->dram_bandwidth, node, start);
            }
        }
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        bandwidth[j] = self->calendars != NULL
                           ? node_share[home[j]]
                           : known_share(known + L * S, self->dram_shares, self->dram_shared_bandwidth,
                                         self->dram_bandwidth, home[j], start);
        if (from_dram[j] > 0) used[L * rows + from_dram_n++] = home[j];
    }
    if (self->dram_shares != NULL && note(&reading, DRAM, used + L * rows, from_dram_n) < 0) goto done;
    if (self->queueing) {
        for (long node = 0; node < S; node++) by_node[node] = own[node] = 0.0;
        for (Py_ssize_t j = 0; j < n; j++) {
            double in_flight = latency[j] / access_ns(latency[j], self->dram_bandwidth, pattern, line, overlap_of[j]);
            by_node[home[j]] += from_dram[j];
            own[home[j]] += from_dram[j] * in_flight;
        }
        if (waits(self, start, socket, by_node, own, wait) < 0) goto done;
        for (Py_ssize_t j = 0; j < n; j++) latency[j] = latency[j] + wait[home[j]];
    }
    Py_ssize_t local_n = 0, remote_n = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        time[j] += from_dram[j] * access_ns(latency[j], bandwidth[j], pattern, line, overlap_of[j]);
        if (hops_from[home[j]] == 0) local_dram[local_n++] = from_dram[j];
        else remote_dram[remote_n++] = from_dram[j];
    }
    if (add_counter(counters, str_local_dram, pairwise(local_dram, local_n)) < 0
        || add_counter(counters, str_remote_dram, pairwise(remote_dram, remote_n)) < 0)
        goto done;
    if (pattern != STREAM) { /* the accesses beyond one per line, at the level the block fits in */
        for (Py_ssize_t j = 0; j < n; j++) {
            double extra = ceil(sizes[j] / 8.0) - lines_of[j];
            extra = 0.0 > extra ? 0.0 : extra;
            if (extra == 0.0) continue;
            int fits = 0;
            while (fits < L && !(self->levels[fits].size >= sizes[j])) fits++;
            double cost = fits == L ? access_ns(latency[j], bandwidth[j], pattern, 8.0, overlap_of[j])
                                    : access_ns(self->levels[fits].latency, self->levels[fits].bandwidth, pattern,
                                                8.0, overlap_of[j]);
            time[j] += extra * cost;
        }
    }
    int has_gathered = 0;
    double gathered = 0.0;
    if (gather != Py_None) {
        if ((reads_obj = attr(gather, str_reads)) == NULL || get_buffer(reads_obj, &reads_v, 'i', 0) < 0) goto done;
        if (reads_v.len / 8 < hi) {
            PyErr_SetString(PyExc_ValueError, "a chunk beyond its gather's reads");
            goto done;
        }
        const long long *reads = (const long long *)reads_v.buf + lo;
        long long total_reads = 0;
        for (Py_ssize_t j = 0; j < n; j++) total_reads += reads[j];
        const double count = (double)total_reads;
        if (count != 0.0) {
            double per_read;
            if (gather_ns(self, state, through_all, counters, fp, worker, count, start, &reading, &per_read) < 0) goto done;
            if (self->gathers_added) {
                for (Py_ssize_t j = 0; j < n; j++) time[j] += (double)reads[j] * per_read;
            } else {
                gathered = count * per_read;
                has_gathered = 1;
            }
        }
    }
    double total = pairwise(time, n);
    if (has_gathered) { /* DataState.with_gathers */
        double outlasting = gathered - work - total;
        total = total + (0.0 > outlasting ? 0.0 : outlasting);
    }
    if (self->jitter) {
        PyObject *r = PyObject_CallMethod(state, "_jitter", "d", total);
        if (r == NULL) goto done;
        total = PyFloat_AsDouble(r);
        Py_DECREF(r);
        if (total == -1.0 && PyErr_Occurred()) goto done;
    }
    /* The chunk's blocks now live in this core's caches, stamped in the order it touched them. */
    for (Py_ssize_t j = 0; j < n; j++) holder[j] = worker;
    const double moved = pairwise(sizes, n);
    for (int i = 0; i < L; i++) {
        PyObject *through = PyList_GET_ITEM(through_all, i);
        double base;
        if (list_double(through, mine[i], &base) < 0) goto done;
        for (Py_ssize_t j = 0; j < n; j++) stamp[i * blocks_n + lo + j] = base + before_of[j] + sizes[j];
        if (list_set_double(through, mine[i], base + moved) < 0) goto done;
    }
    int demands = 0;
    if (self->queueing) { /* Contention._demand: what the chunk demands of each node (and link) it reads */
        for (long node = 0; node < S; node++) by_node[node] = own[node] = 0.0;
        for (Py_ssize_t j = 0; j < n; j++) {
            if (from_dram[j] > 0) {
                by_node[home[j]] += from_dram[j];
                own[home[j]] += from_dram[j] * latency[j];
            }
        }
        int any = 0;
        for (long node = 0; node < S; node++) any |= by_node[node] != 0.0;
        if (total > 0 && any) {
            for (long node = 0; node < S; node++) {
                if (by_node[node] == 0.0) continue;
                double gbs = by_node[node] * line / total, in_flight = own[node] / total;
                if (self->controller) demand[demands++] = (Demand){DRAM, node, gbs, in_flight, 0};
                if (self->link_gbs && node != socket)
                    demand[demands++] = (Demand){LINK, node * S + socket, gbs, in_flight, 0};
            }
        }
    }
    /* Contention._hold: the chunk among the readers of what it reads, with what it demands, until it ends. */
    const double until = start + total;
    for (Py_ssize_t k = 0; k < reading.n; k++) {
        double gbs = 0.0, in_flight = 0.0;
        for (int d = 0; d < demands; d++) {
            if (!demand[d].taken && demand[d].resource == reading.items[k].resource
                && demand[d].instance == reading.items[k].instance) {
                demand[d].taken = 1;
                gbs = demand[d].gbs;
                in_flight = demand[d].in_flight;
                break;
            }
        }
        PyObject *group = group_of(self, reading.items[k].resource);
        if (group == NULL || reading.items[k].instance < 0 || reading.items[k].instance >= PyList_GET_SIZE(group)) {
            PyErr_SetString(PyExc_ValueError, "a chunk reads a resource that has no readers");
            goto done;
        }
        if (readers_add(member(group, reading.items[k].instance), start, until, gbs, in_flight) < 0) goto done;
    }
    for (int d = 0; d < demands; d++) {
        if (!demand[d].taken
            && readers_add(member(group_of(self, demand[d].resource), demand[d].instance), start, until,
                           demand[d].gbs, demand[d].in_flight) < 0)
            goto done;
    }
    result = PyFloat_FromDouble(total);
    goto done;
too_far:
    PyErr_SetString(PyExc_IndexError, "no remote latency for so many socket hops");
done:
#undef SERVED
    PyBuffer_Release(&holder_v);
    PyBuffer_Release(&stamp_v);
    PyBuffer_Release(&home_v);
    PyBuffer_Release(&bytes_v);
    PyBuffer_Release(&offsets_v);
    PyBuffer_Release(&reads_v);
    PyMem_Free(scratch);
    PyMem_Free(lscratch);
    PyMem_Free(reading.items);
    PyMem_Free(demand);
    Py_XDECREF(through_all);
    Py_XDECREF(counters);
    Py_XDECREF(blocks_all);
    Py_XDECREF(data);
    Py_XDECREF(blocks);
    Py_XDECREF(bytes);
    Py_XDECREF(pattern_name);
    Py_XDECREF(gather);
    Py_XDECREF(reads_obj);
    Py_XDECREF(holder_obj);
    Py_XDECREF(stamp_obj);
    Py_XDECREF(home_obj);
    Py_XDECREF(offsets_obj);
    return result;
}

static PyMethodDef Chunks_methods[] = {
    {"run", (PyCFunction)Chunks_run, METH_VARARGS,
     PyDoc_STR("run(state, worker, footprint, lo, hi, start, now, work): the memory time of a chunk of a few "
               "iterations, moving their data (DataState.chunk).")},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ChunksType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "simsched._locality.Chunks",
    .tp_doc = PyDoc_STR("One run's locality model, for chunks of a few iterations."),
    .tp_basicsize = sizeof(Chunks),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Chunks_new,
    .tp_dealloc = (destructor)Chunks_dealloc,
    .tp_methods = Chunks_methods,
};

static PyObject *closed_latency_py(PyObject *module, PyObject *args) {
    double in_flight, latency, service;
    if (!PyArg_ParseTuple(args, "ddd:closed_latency", &in_flight, &latency, &service)) return NULL;
    return PyFloat_FromDouble(closed_latency(in_flight, latency, service));
}

static PyMethodDef module_methods[] = {
    {"closed_latency", closed_latency_py, METH_VARARGS,
     PyDoc_STR("closed_latency(in_flight, latency_ns, service_ns): simsched.loaded.closed_latency as run here.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "simsched._locality",
    "The locality model's per-iteration path in C (optional; simsched.small_chunks is the reference).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__locality(void) {
    if (PyType_Ready(&ReadersType) < 0 || PyType_Ready(&CalendarType) < 0 || PyType_Ready(&ChunksType) < 0)
        return NULL;
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {{&str_through, "through"}, {&str_counters, "counters"}, {&str_blocks, "blocks"},
                 {&str_data, "data"},         {&str_bytes, "bytes"},         {&str_pattern, "pattern"},
                 {&str_gather, "gather"},     {&str_reads, "reads"},         {&str_holder, "holder"},
                 {&str_stamp, "stamp"},       {&str_home, "home"},           {&str_offsets, "_offsets"},
                 {&str_overlap, "_overlap"},  {&str_local_dram, "local_dram"},
                 {&str_remote_dram, "remote_dram"}, {&str_dram, "dram"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (*names[i].slot == NULL && (*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL)
            return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    /* What simsched.locality checks before it uses the module: an extension built from an older source
     * would take other arguments. */
    if (PyModule_AddObjectRef(m, "Readers", (PyObject *)&ReadersType) < 0
        || PyModule_AddObjectRef(m, "Calendar", (PyObject *)&CalendarType) < 0
        || PyModule_AddObjectRef(m, "Chunks", (PyObject *)&ChunksType) < 0
        || PyModule_AddIntConstant(m, "INTERFACE", 2) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
