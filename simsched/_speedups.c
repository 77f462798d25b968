/* The simulator's hottest loops in C: the self-scheduling claim (``claims``, one chunk per step), and the
 * chunked-stealing loop (``steals``: the owner's takes and chunks, with iCh's policy compiled in). A chunk's
 * time is its compute where the loop is plain; with data or noise they call Simulation.chunk_time for it.
 *
 * Their Python loops are the reference (simsched.schedulers.selfsched.index_claim_steps and
 * simsched.schedulers.stealing.Stealing.python_steps, with simsched.schedulers.ich.ICh's hooks): these
 * iterators take the same steps with the same floating-point operations in the same order, so a run gives
 * the same result bit for bit with or without them (tests/test_memory.py runs both). They are used only
 * where those Python loops issue their line operations inline (see simsched.memory.INLINE), and the module
 * is optional: without a C compiler the Python loops run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <structmember.h>
#include <limits.h>
#include <stdint.h>

/* The simulation clock: a slot of the run's environment (simsched.simpy_access.Environment), which
 * simsched.memory hands to ``bind_clock`` as the module is imported. */
static PyTypeObject *env_type;
static Py_ssize_t clock_offset;

/* A modeled line's fields (simsched.memory.Line), read and written in its __slots__ directly, as
 * their member descriptors do it, without an attribute look-up each. */
enum field { VALUE, HOLDER, FREE_AT, WRITTEN_AT, SHARERS, SPINNERS, FIELDS };
static const char *field_names[FIELDS] = {"value", "holder", "free_at", "written_at", "sharers", "spinners"};
static PyTypeObject *line_type;
static Py_ssize_t field_offset[FIELDS];

/* Check that ``line`` is a Line, finding the fields' offsets the first time; -1 with an error set. */
static int bind_line(PyObject *line) {
    if (line_type != NULL) {
        if (Py_TYPE(line) == line_type) return 0;
        PyErr_Format(PyExc_TypeError, "expected a %s, got %s", line_type->tp_name, Py_TYPE(line)->tp_name);
        return -1;
    }
    PyTypeObject *type = Py_TYPE(line);
    for (int f = 0; f < FIELDS; f++) {
        PyObject *descr = PyObject_GetAttrString((PyObject *)type, field_names[f]);
        if (descr == NULL) PyErr_Clear();
        int ok = descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)
                 && ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
        if (ok) field_offset[f] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_XDECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "expected a line: %s has no slot %s", type->tp_name, field_names[f]);
            return -1;
        }
    }
    Py_INCREF(type);
    line_type = type;
    return 0;
}

static PyObject *field(PyObject *line, enum field f) {  /* a borrowed reference, or NULL with an error */
    PyObject *value = *(PyObject **)((char *)line + field_offset[f]);
    if (value == NULL) PyErr_Format(PyExc_AttributeError, "line has no %s", field_names[f]);
    return value;
}

static int set_field(PyObject *line, enum field f, PyObject *value) {  /* takes over the reference */
    if (value == NULL) return -1;
    PyObject **slot = (PyObject **)((char *)line + field_offset[f]);
    PyObject *old = *slot;
    *slot = value;
    Py_XDECREF(old);
    return 0;
}

static int set_field_ref(PyObject *line, enum field f, PyObject *value) {  /* a new reference of its own */
    Py_INCREF(value);
    return set_field(line, f, value);
}

/* -1 with an error set on failure. */
static int as_double(PyObject *v, double *out) {
    if (v == NULL) return -1;
    *out = PyFloat_CheckExact(v) ? PyFloat_AS_DOUBLE(v) : PyFloat_AsDouble(v);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static int as_long(PyObject *v, long long *out) {
    if (v == NULL) return -1;
    *out = PyLong_AsLongLong(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int field_double(PyObject *line, enum field f, double *out) { return as_double(field(line, f), out); }
static int field_long(PyObject *line, enum field f, long long *out) { return as_long(field(line, f), out); }

/* The environment's slot at ``offset`` (its clock, heap or event numbering). */
static PyObject **slot_of(PyObject *env, Py_ssize_t offset) { return (PyObject **)((char *)env + offset); }

/* Where the member descriptor ``slot`` of an object slot keeps it; -1 with an error set. */
static Py_ssize_t member_offset(PyObject *slot, const char *who) {
    if (!Py_IS_TYPE(slot, &PyMemberDescr_Type) || ((PyMemberDescrObject *)slot)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%s: expected the member descriptor of an object slot", who);
        return -1;
    }
    return ((PyMemberDescrObject *)slot)->d_member->offset;
}

/* bind_clock(slot): read the clock through ``slot``, the member descriptor of the environment's clock
 * (simsched.simpy_access.clock_slot()). */
static PyObject *bind_clock(PyObject *module, PyObject *slot) {
    Py_ssize_t offset = member_offset(slot, "bind_clock");
    if (offset < 0) return NULL;
    PyTypeObject *type = ((PyMemberDescrObject *)slot)->d_common.d_type;
    Py_INCREF(type);
    Py_XSETREF(env_type, type);
    clock_offset = offset;
    Py_RETURN_NONE;
}

/* Check that ``env`` is of the type whose clock is bound; -1 with an error set. */
static int check_env(PyObject *env) {
    if (env_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "simsched._speedups: no clock bound (bind_clock)");
        return -1;
    }
    if (PyObject_TypeCheck(env, env_type)) return 0;
    PyErr_Format(PyExc_TypeError, "expected a %s, got %s", env_type->tp_name, Py_TYPE(env)->tp_name);
    return -1;
}

/* The simulation clock, read from its slot in the environment. */
static int clock_now(PyObject *env, double *out) {
    PyObject *now = *slot_of(env, clock_offset);
    if (now == NULL) PyErr_SetString(PyExc_AttributeError, "the environment has no clock");
    return as_double(now, out);
}

/* A set holding ``item`` alone (new reference, or NULL). */
static PyObject *set_of(PyObject *item) {
    PyObject *set = PySet_New(NULL);
    if (set != NULL && PySet_Add(set, item) < 0) Py_CLEAR(set);
    return set;
}

/* line.sharers = {worker}: the line's own set emptied and refilled where nothing else holds it (no set to
 * allocate, and nothing can tell), else a new one. */
static int only_sharer(PyObject *line, PyObject *worker) {
    PyObject *sharers = field(line, SHARERS);
    if (sharers == NULL) return -1;
    if (PySet_CheckExact(sharers) && Py_REFCNT(sharers) == 1)
        return PySet_Clear(sharers) < 0 || PySet_Add(sharers, worker) < 0 ? -1 : 0;
    return set_field(line, SHARERS, set_of(worker));
}

/* Store ``t`` as when the line's last write is done and visible. */
static int written(PyObject *line, double t) {
    PyObject *tf = PyFloat_FromDouble(t);
    if (tf == NULL) return -1;
    Py_INCREF(tf);
    set_field(line, FREE_AT, tf);
    return set_field(line, WRITTEN_AT, tf);
}

/* Tell the line's spinners, if any, of the write just made visible (Memory._notify). */
static int notify_spinners(PyObject *line, PyObject *worker, PyObject *notify) {
    PyObject *spinners = field(line, SPINNERS);
    if (spinners == NULL) return -1;
    int spinning = PyObject_IsTrue(spinners);
    if (spinning < 0) return -1;
    if (spinning) {
        PyObject *r = PyObject_CallFunctionObjArgs(notify, line, worker, field(line, FREE_AT), NULL);
        if (r == NULL) return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* What both loops record a chunk with, as Simulation.inline_chunks hands it to the Python loops. */
typedef struct {
    PyObject *worker, *index, *pending, *flush, *mark;
    PyObject *chunk_time; /* Simulation.chunk_time for chunks that are not plain (data, noise); NULL: plain */
    Py_buffer prefix;
    int has_prefix;
    long long full, w, loop;
    double dispatch, slow;
} Sink;

static int Sink_init(Sink *sink, long long w, long long index, PyObject *prefix, double dispatch,
                     PyObject *pending, double slow, PyObject *flush, long long full, PyObject *mark,
                     PyObject *chunk_time) {
    if (!PyByteArray_Check(pending)) {
        PyErr_SetString(PyExc_TypeError, "pending must be a bytearray");
        return -1;
    }
    if (PyObject_GetBuffer(prefix, &sink->prefix, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    sink->has_prefix = 1;
    if (sink->prefix.format == NULL || strcmp(sink->prefix.format, "d") != 0) {
        PyErr_SetString(PyExc_TypeError, "the prefix sums must be float64");
        return -1;
    }
    if ((sink->worker = PyLong_FromLongLong(w)) == NULL || (sink->index = PyLong_FromLongLong(index)) == NULL)
        return -1;
    Py_INCREF(pending); sink->pending = pending;
    Py_INCREF(flush); sink->flush = flush;
    Py_INCREF(mark); sink->mark = mark;
    if (chunk_time != NULL && chunk_time != Py_None) {
        Py_INCREF(chunk_time);
        sink->chunk_time = chunk_time;
    }
    sink->full = full; sink->dispatch = dispatch; sink->slow = slow;
    sink->w = w; sink->loop = index;
    return 0;
}

static void Sink_clear(Sink *sink) {
    Py_XDECREF(sink->worker); Py_XDECREF(sink->index); Py_XDECREF(sink->pending); Py_XDECREF(sink->flush);
    Py_XDECREF(sink->mark); Py_XDECREF(sink->chunk_time);
    if (sink->has_prefix) PyBuffer_Release(&sink->prefix);
}

/* Log chunk [lo, hi), claimed at t while the clock reads now, as the Python loops log it: its start
 * and compute time go to *start and *work; -1 with an error set on failure. */
static int Sink_record(Sink *sink, long long lo, long long hi, double t, double now, double *start, double *work) {
    const double *prefix = (const double *)sink->prefix.buf;
    Py_ssize_t size = sink->prefix.len / (Py_ssize_t)sizeof(double);
    if (lo < 0 || hi >= size || lo > hi) {
        PyErr_SetString(PyExc_IndexError, "chunk bounds outside the loop's prefix sums");
        return -1;
    }
    *start = t + sink->dispatch;
    if (sink->chunk_time == NULL) {
        *work = (prefix[hi] - prefix[lo]) * sink->slow;
    } else {
        PyObject *r = PyObject_CallFunction(sink->chunk_time, "OOLLd", sink->worker, sink->index, lo, hi, *start);
        if (r == NULL) return -1;
        *work = PyFloat_AsDouble(r);
        Py_DECREF(r);
        if (*work == -1.0 && PyErr_Occurred()) return -1;
    }
    /* The record as simsched.chunklog.pack_record packs it: six native doubles. */
    double record[6] = {(double)sink->w, (double)sink->loop, (double)lo, (double)hi, *start, *start + *work};
    Py_ssize_t filled = PyByteArray_GET_SIZE(sink->pending);
    if (PyByteArray_Resize(sink->pending, filled + (Py_ssize_t)sizeof(record)) < 0) return -1;
    memcpy(PyByteArray_AS_STRING(sink->pending) + filled, record, sizeof(record));
    if (PyByteArray_GET_SIZE(sink->pending) >= sink->full) {
        PyObject *r = PyObject_CallNoArgs(sink->flush);
        if (r == NULL) return -1;
        Py_DECREF(r);
    }
    if (sink->mark != Py_None && *start > now) {
        PyObject *r = PyObject_CallFunction(sink->mark, "((OsNN))", sink->worker, "schedule",
                                            PyFloat_FromDouble(now), PyFloat_FromDouble(*start));
        if (r == NULL) return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* Raise StopIteration carrying ``value`` (a tuple would otherwise be taken for its arguments). */
static PyObject *stop_with(PyObject *value) {
    if (value == NULL) return NULL;
    PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, value);
    Py_DECREF(value);
    if (stop == NULL) return NULL;
    PyErr_SetObject(PyExc_StopIteration, stop);
    Py_DECREF(stop);
    return NULL;
}

typedef struct {
    PyObject_HEAD
    Sink sink;
    PyObject *env, *line, *into, *ranges, *notify, *finish;
    long long w, k, count, n;
    double atomic_ns;
    long long chunks, transfers;
    double scheduling, busy;
    int done;
} Claims;

static void Claims_dealloc(Claims *self) {
    Py_XDECREF(self->env); Py_XDECREF(self->line); Py_XDECREF(self->into); Py_XDECREF(self->ranges);
    Py_XDECREF(self->notify); Py_XDECREF(self->finish);
    Sink_clear(&self->sink);
    Py_TYPE(self)->tp_free((PyObject *)self);
}


/* A column of latencies (or transfer times) to one core of a run too large for a table of every pair
 * (Memory.TABLE_CORES): column[a] is the latency from core a to the column's core times ``fraction``, worked
 * out as simsched.machine.latencies.Latencies.value works it out, from a few small tables. Latencies.compiled
 * gives them, its hop counts and core numbers in range of its tables (not checked again here). */
enum { CROSSBAR = 0, RING = 1, MATRIX = 2 };

typedef struct {
    PyObject_HEAD
    PyObject *spec;            /* the tuple whose bytes the pointers below read */
    int kind;
    long long w, per, sockets, levels, gateways, steps, table_n;
    Py_ssize_t n;
    double fraction, inside;
    const long long *core, *hops, *sizes;
    const double *level_lat, *across, *around, *cross, *table;
} Column;

static double column_value(const Column *c, long long a) {
    long long b = c->w, ca = c->core[a], cb = c->core[b];
    if (c->kind == MATRIX) return c->table[ca * c->table_n + cb];
    if (a == b) return 0.0;
    long long sa = ca / c->per, sb = cb / c->per, pa = ca % c->per, pb = cb % c->per;
    if (c->kind == RING) {
        if (sa == sb) {
            long long steps = pa > pb ? pa - pb : pb - pa;
            return c->around[steps < c->per - steps ? steps : c->per - steps];
        }
        long long ga = pa < c->per - pa ? pa : c->per - pa, gb = pb < c->per - pb ? pb : c->per - pb;
        return c->cross[(ga * c->steps + c->hops[sa * c->sockets + sb]) * c->gateways + gb];
    }
    if (sa != sb) return c->across[c->hops[sa * c->sockets + sb]];
    for (long long i = 0; i < c->levels; i++)
        if (pa / c->sizes[i] == pb / c->sizes[i]) return c->level_lat[i];
    return c->inside;
}

/* The bytes of item i of ``spec`` holding at least ``count`` items of ``size`` bytes each. */
static const void *spec_bytes(PyObject *spec, Py_ssize_t i, long long count, size_t size) {
    PyObject *item = PyTuple_GET_ITEM(spec, i);
    if (!PyBytes_Check(item) || count < 0 || (size_t)PyBytes_GET_SIZE(item) < (size_t)count * size) {
        PyErr_Format(PyExc_ValueError, "column: item %zd of the latencies is too short", i);
        return NULL;
    }
    return PyBytes_AS_STRING(item);
}

static PyObject *Column_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *spec;
    long long w;
    double fraction;
    if (!PyArg_ParseTuple(args, "O!Ld:column", &PyTuple_Type, &spec, &w, &fraction)) return NULL;
    Column *c = (Column *)type->tp_alloc(type, 0);
    if (c == NULL) return NULL;
    c->spec = Py_NewRef(spec);
    c->w = w;
    c->fraction = fraction;
    /* (kind, per, sockets, levels, gateways, steps, table_n, n, inside, core, hops, sizes, level_lat, across,
     * around, cross, table) */
    long long kind, n;
    PyObject *head = PyTuple_GetSlice(spec, 0, 9);
    if (head == NULL || !PyArg_ParseTuple(head, "LLLLLLLLd", &kind, &c->per, &c->sockets, &c->levels, &c->gateways,
                                          &c->steps, &c->table_n, &n, &c->inside)
        || PyTuple_GET_SIZE(spec) != 17) {
        Py_XDECREF(head);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "column: latencies of 17 items expected");
        Py_DECREF(c);
        return NULL;
    }
    Py_DECREF(head);
    c->kind = (int)kind;
    c->n = (Py_ssize_t)n;
    if (c->per < 1 || w < 0 || w >= n
        || (c->core = spec_bytes(spec, 9, n, sizeof(long long))) == NULL
        || (c->hops = spec_bytes(spec, 10, c->sockets * c->sockets, sizeof(long long))) == NULL
        || (c->sizes = spec_bytes(spec, 11, c->levels, sizeof(long long))) == NULL
        || (c->level_lat = spec_bytes(spec, 12, c->levels, sizeof(double))) == NULL
        || kind < CROSSBAR || kind > MATRIX
        || (c->across = spec_bytes(spec, 13, kind == CROSSBAR ? c->steps : 0, sizeof(double))) == NULL
        || (c->around = spec_bytes(spec, 14, kind == RING ? c->gateways : 0, sizeof(double))) == NULL
        || (c->cross = spec_bytes(spec, 15, c->gateways * c->steps * c->gateways, sizeof(double))) == NULL
        || (c->table = spec_bytes(spec, 16, c->table_n * c->table_n, sizeof(double))) == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "column: no such kind, or core out of range");
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

static void Column_dealloc(Column *c) {
    Py_XDECREF(c->spec);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static Py_ssize_t Column_length(Column *c) { return c->n; }

static PyObject *Column_item(Column *c, Py_ssize_t a) {
    if (a < 0 || a >= c->n) {
        PyErr_SetString(PyExc_IndexError, "line holder out of range");
        return NULL;
    }
    return PyFloat_FromDouble(column_value(c, a) * c->fraction);
}

static PySequenceMethods Column_sequence = {
    .sq_length = (lenfunc)Column_length,
    .sq_item = (ssizeargfunc)Column_item,
};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "simsched._speedups.Column",
    .tp_basicsize = sizeof(Column),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("A column of latencies to one core, worked out from the topology (Memory's Column)."),
    .tp_new = Column_new,
    .tp_dealloc = (destructor)Column_dealloc,
    .tp_as_sequence = &Column_sequence,
};

/* Item ``i`` of a column of floats (the transfer time or latency from each core to one core: a list, or on a
 * machine too large for a table of every pair, a sequence that works each out), as a double; -1 with an error set. */
static int row_double(PyObject *row, long long i, double *out) {
    if (PyList_CheckExact(row)) {
        if (i < 0 || i >= PyList_GET_SIZE(row)) {
            PyErr_SetString(PyExc_IndexError, "line holder out of range");
            return -1;
        }
        return as_double(PyList_GET_ITEM(row, i), out);
    }
    if (Py_TYPE(row) == &ColumnType) {
        const Column *c = (const Column *)row;
        if (i < 0 || i >= c->n) {
            PyErr_SetString(PyExc_IndexError, "line holder out of range");
            return -1;
        }
        *out = column_value(c, i) * c->fraction;
        return 0;
    }
    PyObject *item = PySequence_GetItem(row, (Py_ssize_t)i);
    if (item == NULL) return -1;
    int failed = as_double(item, out);
    Py_DECREF(item);
    return failed;
}

/* What every exclusive operation of Memory.exchange does first (no lost reservations: the callers leave
 * machines with reservation atomics to the Python methods): bring ``line`` to core w from ``at`` on, a
 * transfer from its holder counted in *transfers. *start is when the core has it. ``into`` is the transfer
 * time of a line from each core to w. */
static int acquire(PyObject *line, long long w, PyObject *worker, double at, PyObject *into, double *start,
                   long long *transfers) {
    double free, t;
    long long holder;
    if (field_double(line, FREE_AT, &free) < 0 || field_long(line, HOLDER, &holder) < 0) return -1;
    t = free > at ? free : at;
    if (holder != w) {
        *transfers += 1;
        double transfer;
        if (row_double(into, holder, &transfer) < 0) return -1;
        t += transfer;
        set_field_ref(line, HOLDER, worker);
        if (only_sharer(line, worker) < 0) return -1;
    } else {
        PyObject *sharers = field(line, SHARERS);
        if (sharers == NULL) return -1;
        Py_ssize_t size = PySet_Size(sharers);
        if (size < 0) return -1;
        if (size > 1 && only_sharer(line, worker) < 0) return -1;
    }
    *start = t;
    return 0;
}

/* The rest of Memory.exchange once the core has the line from ``start``: write ``value`` (a new reference,
 * taken over); *done is the completion. */
static int exchanged(PyObject *line, PyObject *worker, PyObject *value, double start, double atomic_ns,
                     PyObject *notify, double *done) {
    double t = start + atomic_ns;
    if (set_field(line, VALUE, value) < 0 || written(line, t) < 0) return -1;
    *done = t;
    return notify_spinners(line, worker, notify);
}

/* Memory.fetch_add of ``add`` on ``line`` by core w at ``now``: the old value to *old, the completion to *done. */
static int fetch_add(PyObject *line, long long w, PyObject *worker, long long add, double now, PyObject *into,
                     double atomic_ns, PyObject *notify, long long *old, double *done, long long *transfers) {
    double start;
    if (acquire(line, w, worker, now, into, &start, transfers) < 0 || field_long(line, VALUE, old) < 0) return -1;
    return exchanged(line, worker, PyLong_FromLongLong(*old + add), start, atomic_ns, notify, done);
}

static PyObject *Claims_next(Claims *self) {
    if (self->done) return NULL;
    double now, t;
    long long i;
    if (clock_now(self->env, &now) < 0
        || fetch_add(self->line, self->w, self->sink.worker, 1, now, self->into, self->atomic_ns, self->notify, &i, &t,
                     &self->transfers) < 0)
        return NULL;
    if (i >= self->count) {
        self->done = 1;
        return stop_with(PyObject_CallFunction(self->finish, "LLddd", self->chunks, self->transfers,
                                               self->scheduling, self->busy, t));
    }
    long long lo, hi;
    if (self->k) {
        lo = i * self->k;
        hi = lo + self->k;
        if (hi > self->n) hi = self->n;
    } else {
        PyObject *bounds = PySequence_GetItem(self->ranges, (Py_ssize_t)i);
        if (bounds == NULL) return NULL;
        int ok = PyArg_ParseTuple(bounds, "LL", &lo, &hi);
        Py_DECREF(bounds);
        if (!ok) return NULL;
    }
    double start, work;
    if (Sink_record(&self->sink, lo, hi, t, now, &start, &work) < 0) return NULL;
    self->scheduling += start - now;
    self->busy += work;
    self->chunks += 1;
    return PyFloat_FromDouble(start + work);
}

static PyObject *Claims_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *env, *line, *into, *ranges, *prefix, *pending, *flush, *mark, *notify, *finish, *chunk_time = NULL;
    long long w, index, k, count, n, full;
    double atomic_ns, dispatch, slow;
    if (!PyArg_ParseTuple(args, "OLLOOdLLOLOdOdOLOOO|O:claims", &env, &w, &index, &line, &into, &atomic_ns,
                          &k, &count, &ranges, &n, &prefix, &dispatch, &pending, &slow, &flush, &full, &mark,
                          &notify, &finish, &chunk_time))
        return NULL;
    if (!PySequence_Check(into)) {
        PyErr_SetString(PyExc_TypeError, "claims: into must be a sequence");
        return NULL;
    }
    Claims *self = (Claims *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    if (Sink_init(&self->sink, w, index, prefix, dispatch, pending, slow, flush, full, mark, chunk_time) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    if (bind_line(line) < 0 || check_env(env) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(env); self->env = env;
    Py_INCREF(line); self->line = line;
    Py_INCREF(into); self->into = into;
    Py_INCREF(ranges); self->ranges = ranges;
    Py_INCREF(notify); self->notify = notify;
    Py_INCREF(finish); self->finish = finish;
    self->w = w; self->k = k; self->count = count; self->n = n;
    self->atomic_ns = atomic_ns;
    return (PyObject *)self;
}

static PyTypeObject ClaimsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "simsched._speedups.claims",
    .tp_doc = PyDoc_STR("The self-scheduling claim loop's steps, as index_claims takes them."),
    .tp_basicsize = sizeof(Claims),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Claims_new,
    .tp_dealloc = (destructor)Claims_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Claims_next,
};

/* iCh's policy (simsched.schedulers.ich.ICh: report, chunk_size, extra), on the scheduler's own lists
 * of every thread's k, d and chunks since its last read of the counters, so that its Python methods (a
 * take after a thief touched the queue, a steal) see what these steps change, and the reverse. */
typedef struct {
    PyObject *counter, *k, *d, *since, *counters, *into, *lat, *notify, *halved, *doubled;
    double eps;
    long long every, n, overlap;
    double *flight;   /* completions of the reads in flight (Memory.read_all's heap, as a plain array) */
} Adaptive;

static void Adaptive_clear(Adaptive *ich) {
    Py_XDECREF(ich->counter); Py_XDECREF(ich->k); Py_XDECREF(ich->d); Py_XDECREF(ich->since);
    Py_XDECREF(ich->counters); Py_XDECREF(ich->into); Py_XDECREF(ich->lat); Py_XDECREF(ich->notify);
    Py_XDECREF(ich->halved); Py_XDECREF(ich->doubled);
    PyMem_Free(ich->flight);
}

static int Adaptive_init(Adaptive *ich, PyObject *spec) {
    PyObject *counter, *k, *d, *since, *counters, *into, *lat, *notify;
    if (!PyArg_ParseTuple(spec, "OOOOOdLLLOOO:adaptive", &counter, &k, &d, &since, &counters, &ich->eps,
                          &ich->every, &ich->n, &ich->overlap, &into, &lat, &notify))
        return -1;
    if (!PyList_Check(counter) || !PyList_Check(k) || !PyList_Check(d) || !PyList_Check(since)
        || !PySequence_Check(into) || !PySequence_Check(lat)) {
        PyErr_SetString(PyExc_TypeError, "adaptive: counter, k, d and since must be lists, into and lat sequences");
        return -1;
    }
    if (ich->every < 1 || ich->overlap < 1) {
        PyErr_SetString(PyExc_ValueError, "adaptive: every and overlap must be at least 1");
        return -1;
    }
    PyObject **fields[] = {&ich->counter, &ich->k, &ich->d, &ich->since, &ich->counters, &ich->into,
                           &ich->lat, &ich->notify};
    PyObject *values[] = {counter, k, d, since, counters, into, lat, notify};
    for (size_t f = 0; f < sizeof(values) / sizeof(values[0]); f++) {
        Py_INCREF(values[f]);
        *fields[f] = values[f];
    }
    if ((ich->halved = PyUnicode_InternFromString("d_halved")) == NULL
        || (ich->doubled = PyUnicode_InternFromString("d_doubled")) == NULL)
        return -1;
    Py_ssize_t lines = PyList_GET_SIZE(counter);
    if (ich->overlap > lines) ich->overlap = lines > 0 ? lines : 1;   /* never more in flight than lines */
    if ((ich->flight = PyMem_Malloc((size_t)ich->overlap * sizeof(double))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < lines; j++)
        if (bind_line(PyList_GET_ITEM(counter, j)) < 0) return -1;
    return 0;
}

static int item_long(PyObject *list, long long w, long long *out) {
    return as_long(PyList_GetItem(list, (Py_ssize_t)w), out);
}

static int set_item_long(PyObject *list, long long w, long long value) {
    PyObject *v = PyLong_FromLongLong(value);
    return v == NULL ? -1 : PyList_SetItem(list, (Py_ssize_t)w, v);
}

static int count(PyObject *counters, PyObject *name) {  /* counters[name] += 1 */
    PyObject *old = PyObject_GetItem(counters, name);
    if (old == NULL) return -1;
    PyObject *one = PyLong_FromLong(1);
    PyObject *sum = one == NULL ? NULL : PyNumber_Add(old, one);
    Py_DECREF(old);
    Py_XDECREF(one);
    if (sum == NULL) return -1;
    int rc = PyObject_SetItem(counters, name, sum);
    Py_DECREF(sum);
    return rc;
}

/* Memory.store of ``value`` (a new reference, taken over) on ``line`` by core w at ``now``: *done is the
 * writer's completion. */
static int store_line(PyObject *line, long long w, PyObject *worker, PyObject *value, double now,
                      double store_ns, PyObject *notify, double *done) {
    double free;
    long long holder;
    if (value == NULL || field_double(line, FREE_AT, &free) < 0 || field_long(line, HOLDER, &holder) < 0) {
        Py_XDECREF(value);
        return -1;
    }
    double start = free > now ? free : now;
    if (set_field(line, VALUE, value) < 0) return -1;
    PyObject *sharers = field(line, SHARERS);
    if (sharers == NULL) return -1;
    Py_ssize_t size = PySet_Size(sharers);
    if (size < 0) return -1;
    if (holder != w || size > 1) {
        set_field_ref(line, HOLDER, worker);
        if (only_sharer(line, worker) < 0) return -1;
    }
    if (written(line, start) < 0) return -1;
    if (notify_spinners(line, worker, notify) < 0) return -1;
    *done = start + store_ns;
    return 0;
}

/* Memory.read of ``line`` by core w issued at ``at``: its value to *value (borrowed), its completion to
 * *done; a transfer counts in *transfers. ``into`` and ``lat``: the transfer time and latency from each core
 * to w. */
static int read_value(PyObject *line, long long w, PyObject *worker, double at, PyObject *into, PyObject *lat,
                      PyObject **value, double *done, long long *transfers) {
    double free;
    if (field_double(line, FREE_AT, &free) < 0 || (*value = field(line, VALUE)) == NULL) return -1;
    double start = free > at ? free : at;
    PyObject *sharers = field(line, SHARERS);
    if (sharers == NULL) return -1;
    if (!PySet_Check(sharers)) {
        PyErr_SetString(PyExc_TypeError, "a line's sharers must be a set");
        return -1;
    }
    Py_ssize_t before_add = PySet_GET_SIZE(sharers);   /* one look-up: the add tells whether it had the core */
    if (PySet_Add(sharers, worker) < 0) return -1;
    if (PySet_GET_SIZE(sharers) == before_add) {
        *done = start;
        return 0;
    }
    *transfers += 1;
    long long holder;
    double transfer, latency, seen;
    if (field_long(line, HOLDER, &holder) < 0 || row_double(into, holder, &transfer) < 0
        || row_double(lat, holder, &latency) < 0 || field_double(line, WRITTEN_AT, &seen) < 0)
        return -1;
    double got = start + transfer;
    seen += latency;
    *done = got > seen ? got : seen;
    return 0;
}

/* read_value of a line holding an int. */
static int read_line(PyObject *line, long long w, PyObject *worker, double at, PyObject *into, PyObject *lat,
                     long long *value, double *done, long long *transfers) {
    PyObject *found;
    if (read_value(line, w, worker, at, into, lat, &found, done, transfers) < 0) return -1;
    return as_long(found, value);
}

/* ICh.report: worker w finished a chunk of ``size``; store its k on its own counter line at the current
 * time and, every ``every`` chunks, read every counter (Memory.read_all) and adapt d against the mean.
 * Sets *t to when it is done. */
static int Adaptive_report(Adaptive *ich, PyObject *env, long long w, PyObject *worker, long long threads,
                           double store_ns, long long size, double *t, long long *transfers) {
    long long k, d, since;
    double now;
    if (clock_now(env, &now) < 0 || item_long(ich->k, w, &k) < 0) return -1;
    k += size;
    if (set_item_long(ich->k, w, k) < 0) return -1;
    PyObject *line = PyList_GetItem(ich->counter, (Py_ssize_t)w);
    if (line == NULL
        || store_line(line, w, worker, PyLong_FromLongLong(k), now, store_ns, ich->notify, t) < 0)
        return -1;
    if (item_long(ich->since, w, &since) < 0) return -1;
    if (++since < ich->every) return set_item_long(ich->since, w, since);
    if (set_item_long(ich->since, w, 0) < 0) return -1;
    double at = *t, done = at;
    long long total = 0, flying = 0;
    Py_ssize_t lines = PyList_GET_SIZE(ich->counter);
    double *flight = ich->flight;   /* a min-heap of the completions in flight, as read_all's */
    for (Py_ssize_t j = 0; j < lines; j++) {
        long long value;
        double issue = flying == ich->overlap ? flight[0] : at, got;   /* full: when the earliest is done */
        if (read_line(PyList_GET_ITEM(ich->counter, j), w, worker, issue, ich->into, ich->lat, &value, &got,
                      transfers) < 0)
            return -1;
        long long pos;
        if (flying < ich->overlap) {   /* heappush */
            for (pos = flying++; pos > 0 && got < flight[(pos - 1) / 2]; pos = (pos - 1) / 2)
                flight[pos] = flight[(pos - 1) / 2];
        } else {                       /* heapreplace */
            pos = 0;
            for (long long child = 1; child < flying; child = 2 * pos + 1) {
                if (child + 1 < flying && flight[child + 1] < flight[child]) child += 1;
                if (!(flight[child] < got)) break;
                flight[pos] = flight[child];
                pos = child;
            }
        }
        flight[pos] = got;
        total += value;
        if (got > done) done = got;
    }
    *t = done;
    double mu = (double)total / (double)threads;   /* exact as Python's int / int below 2**53 */
    double delta = ich->eps * mu;
    if (item_long(ich->d, w, &d) < 0) return -1;
    if ((double)k < mu - delta) {
        if (set_item_long(ich->d, w, d / 2 > 1 ? d / 2 : 1) < 0 || count(ich->counters, ich->halved) < 0) return -1;
    } else if ((double)k > mu + delta) {
        if (set_item_long(ich->d, w, 2 * d < ich->n ? 2 * d : ich->n) < 0 || count(ich->counters, ich->doubled) < 0)
            return -1;
    }
    return 0;
}

/* ICh.chunk_size: max(1, left // d). */
static int Adaptive_chunk(Adaptive *ich, long long w, long long left, long long *size) {
    long long d;
    if (item_long(ich->d, w, &d) < 0) return -1;
    if (d < 1) {
        PyErr_SetString(PyExc_ValueError, "iCh's divisor must be at least 1");
        return -1;
    }
    *size = left / d > 1 ? left / d : 1;
    return 0;
}

/* The queue line's value: (begin, end, k, d). */
static PyObject *Adaptive_bounds(Adaptive *ich, long long w, long long begin, long long end) {
    PyObject *k = PyList_GetItem(ich->k, (Py_ssize_t)w), *d = PyList_GetItem(ich->d, (Py_ssize_t)w);
    if (k == NULL || d == NULL) return NULL;
    return Py_BuildValue("(LLOO)", begin, end, k, d);
}

/* The chunked-stealing loop (simsched.schedulers.stealing.Stealing.steps): the owner's take from its own
 * queue and its chunks in C; the rest (a take after a thief touched the queue, a steal attempt,
 * the policy's hooks) calls back into the scheduler's Python. */
/* numpy.random's bit generators, as numpy/random/bitgen.h declares them (their C interface: a bit
 * generator's ``capsule``). */
typedef struct {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} bitgen_t;

/* Generator.integers(n) for 1 <= n < 2**32, drawn as numpy draws it (Lemire's method on the bit generator's
 * 32-bit draws), so the run's stream is the same whichever side draws. */
static long long draw_below(bitgen_t *bitgen, uint32_t n) {
    if (n == 1) return 0;   /* a range of one value: numpy returns it without a draw */
    uint64_t m = (uint64_t)bitgen->next_uint32(bitgen->state) * n;
    uint32_t leftover = (uint32_t)m;
    if (leftover < n) {
        uint32_t threshold = (UINT32_MAX - (n - 1)) % n;
        while (leftover < threshold) {
            m = (uint64_t)bitgen->next_uint32(bitgen->state) * n;
            leftover = (uint32_t)m;
        }
    }
    return (long long)(m >> 32);
}

/* The bit generator's C interface (its ``capsule``); NULL with an error set. */
static bitgen_t *bitgen_of(PyObject *generator) {
    PyObject *capsule = PyObject_GetAttrString(generator, "capsule");
    if (capsule == NULL) return NULL;
    bitgen_t *bitgen = PyCapsule_GetPointer(capsule, "BitGenerator");
    Py_DECREF(capsule);
    return bitgen;
}

/* draws(bit_generator, n, count): ``count`` victims drawn below n as a thief draws them, for their check
 * against Generator.integers. */
static PyObject *draws(PyObject *module, PyObject *args) {
    PyObject *generator;
    long long n, count;
    if (!PyArg_ParseTuple(args, "OLL", &generator, &n, &count)) return NULL;
    if (n < 1 || n > (long long)UINT32_MAX || count < 0) {
        PyErr_SetString(PyExc_ValueError, "draws: n must lie in [1, 2**32) and count be >= 0");
        return NULL;
    }
    bitgen_t *bitgen = bitgen_of(generator);
    if (bitgen == NULL) return NULL;
    PyObject *out = PyList_New((Py_ssize_t)count);
    for (long long i = 0; out != NULL && i < count; i++) {
        PyObject *v = PyLong_FromLongLong(draw_below(bitgen, (uint32_t)n));
        if (v == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    return out;
}

/* What a thief needs to take its steal attempts itself (Stealing.attempt and Stealing.steal): the run's bit
 * generator, every queue's lock and bounds lines, the transfer time and latency of a line from each core to
 * this one, the smallest half worth stealing (``least``: a number, or ``least(w)`` to call), what a
 * successful attempt calls to finish the steal (``split(v, value, half, t)``: (stolen, when done)), and how
 * many failed attempts in a row draw their victims at random before the others sweep the queues in turn. */
typedef struct {
    PyObject *generator, *locks, *queues, *into, *lat, *least, *split, *notify, *one;
    bitgen_t *bitgen;
    long long least_value;   /* -1: call least */
    long long patience;
} Thief;

static void Thief_clear(Thief *thief) {
    Py_XDECREF(thief->generator); Py_XDECREF(thief->locks); Py_XDECREF(thief->queues); Py_XDECREF(thief->into);
    Py_XDECREF(thief->lat); Py_XDECREF(thief->least); Py_XDECREF(thief->split); Py_XDECREF(thief->notify);
    Py_XDECREF(thief->one);
}

static int Thief_init(Thief *thief, PyObject *spec, long long threads) {
    PyObject *generator, *locks, *queues, *into, *lat, *least, *split, *notify;
    if (!PyArg_ParseTuple(spec, "OOOOOOOOL:thief", &generator, &locks, &queues, &into, &lat, &least, &split, &notify,
                          &thief->patience))
        return -1;
    if (!PyList_Check(locks) || !PyList_Check(queues) || !PySequence_Check(into) || !PySequence_Check(lat)
        || PyList_GET_SIZE(locks) != threads || PyList_GET_SIZE(queues) != threads) {
        PyErr_SetString(PyExc_TypeError,
                        "thief: locks and queues must be lists, a lock and queue a thread; into and lat sequences");
        return -1;
    }
    if (thief->patience < 0) {
        PyErr_SetString(PyExc_ValueError, "thief: patience must be at least 0");
        return -1;
    }
    if (threads < 1 || threads - 1 > (long long)UINT32_MAX) {   /* one thread alone never steals */
        PyErr_SetString(PyExc_ValueError, "thief: victims are drawn among 1 to 2**32 - 1 other threads");
        return -1;
    }
    if ((thief->bitgen = bitgen_of(generator)) == NULL) return -1;
    thief->least_value = -1;
    if (PyLong_Check(least) && as_long(least, &thief->least_value) < 0) return -1;
    if ((thief->one = PyLong_FromLong(1)) == NULL) return -1;
    PyObject **fields[] = {&thief->generator, &thief->locks, &thief->queues, &thief->into, &thief->lat, &thief->least,
                           &thief->split, &thief->notify};
    PyObject *values[] = {generator, locks, queues, into, lat, least, split, notify};
    for (size_t f = 0; f < sizeof(values) / sizeof(values[0]); f++) {
        Py_INCREF(values[f]);
        *fields[f] = values[f];
    }
    for (long long v = 0; v < threads; v++)
        if (bind_line(PyList_GET_ITEM(locks, v)) < 0 || bind_line(PyList_GET_ITEM(queues, v)) < 0) return -1;
    return 0;
}

typedef struct {
    PyObject_HEAD
    Sink sink;
    PyObject *env, *lock, *queue, *zero, *chunk_size, *extra, *report, *take, *attempt, *charged, *finish;
    PyObject *steal_times, *last, *steal;   /* Simulation.charged's tables for an attempt's time (NULL: call it) */
    PyObject *scheduling, *computing;
    Adaptive ich;
    int adaptive;
    Thief thief;
    int thieving;   /* whether the attempts are taken here (thief), or by calling attempt */
    long long w, threads, fixed, give_up;
    double atomic_ns, store_ns;
    long long size, failures, chunks, attempts, steals, atomics, transfers;
    double t;
    int empty, after_attempt, done;
} Steals;

static void Steals_dealloc(Steals *self) {
    Py_XDECREF(self->env); Py_XDECREF(self->lock); Py_XDECREF(self->queue); Py_XDECREF(self->zero);
    Py_XDECREF(self->chunk_size); Py_XDECREF(self->extra); Py_XDECREF(self->report); Py_XDECREF(self->take);
    Py_XDECREF(self->attempt); Py_XDECREF(self->charged); Py_XDECREF(self->finish);
    Py_XDECREF(self->scheduling); Py_XDECREF(self->computing);
    Py_XDECREF(self->steal_times); Py_XDECREF(self->last); Py_XDECREF(self->steal);
    Adaptive_clear(&self->ich);
    Thief_clear(&self->thief);
    Sink_clear(&self->sink);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Whether worker w alone holds ``line``, with no one spinning on it: 1, 0, or -1 with an error set. */
static int held_alone(PyObject *line, long long w) {
    long long holder;
    if (field_long(line, HOLDER, &holder) < 0) return -1;
    if (holder != w) return 0;
    PyObject *sharers = field(line, SHARERS);
    if (sharers == NULL) return -1;
    Py_ssize_t size = PySet_Size(sharers);
    if (size < 0) return -1;
    if (size != 1) return 0;
    PyObject *spinners = field(line, SPINNERS);
    if (spinners == NULL) return -1;
    int spinning = PyObject_IsTrue(spinners);
    return spinning < 0 ? -1 : !spinning;
}

/* Add ``x`` to item w of a list of floats, as ``times[w] += x`` does. */
static int add_to(PyObject *times, long long w, double x) {
    PyObject *old = PyList_GetItem(times, (Py_ssize_t)w);
    if (old == NULL) return -1;
    double value = PyFloat_AsDouble(old);
    if (value == -1.0 && PyErr_Occurred()) return -1;
    PyObject *sum = PyFloat_FromDouble(value + x);
    if (sum == NULL) return -1;
    return PyList_SetItem(times, (Py_ssize_t)w, sum);
}

static double call_double(PyObject *callable, PyObject *args) {  /* -1.0 with an error set on failure */
    if (args == NULL) return -1.0;
    PyObject *r = PyObject_Call(callable, args, NULL);
    Py_DECREF(args);
    if (r == NULL) return -1.0;
    double value = PyFloat_AsDouble(r);
    Py_DECREF(r);
    return value;
}

static PyObject *Steals_finish(Steals *self) {
    self->done = 1;
    return stop_with(PyObject_CallFunction(self->finish, "LLLLLd", self->atomics, self->transfers, self->chunks,
                                           self->attempts, self->steals, self->t));
}

/* The owner's take, issued inline while it alone holds its lock and queue lines (nothing moves or
 * waits): lock, read the bounds, store the new ones, unlock. Sets *lo, *hi and self->t. */
static int own_take(Steals *self, long long *lo, long long *hi) {
    double t = self->t, free;
    self->atomics += 1;
    if (field_double(self->lock, FREE_AT, &free) < 0) return -1;
    t = (free > t ? free : t) + self->atomic_ns;
    if (field_double(self->queue, FREE_AT, &free) < 0) return -1;
    if (free > t) t = free;
    PyObject *value = field(self->queue, VALUE);
    if (value == NULL) return -1;
    if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) < 2) {
        PyErr_SetString(PyExc_TypeError, "a queue line's value must be a tuple (begin, end, ...)");
        return -1;
    }
    long long begin, end;
    if (as_long(PyTuple_GET_ITEM(value, 0), &begin) < 0 || as_long(PyTuple_GET_ITEM(value, 1), &end) < 0)
        return -1;
    *lo = *hi = begin;
    if (begin < end) {
        long long size = self->fixed;
        if (self->adaptive) {
            if (Adaptive_chunk(&self->ich, self->w, end - begin, &size) < 0) return -1;
        } else if (!size) {
            PyObject *r = PyObject_CallFunction(self->chunk_size, "LL", self->w, end - begin);
            int failed = as_long(r, &size);
            Py_XDECREF(r);
            if (failed) return -1;
        }
        *hi = begin + size;
        if (*hi > end) *hi = end;
        PyObject *bounds = self->adaptive ? Adaptive_bounds(&self->ich, self->w, *hi, end)
                                          : Py_BuildValue("(LL)", *hi, end);
        if (bounds == NULL) return -1;
        if (!self->adaptive && self->extra != Py_None) {
            PyObject *more = PyObject_CallOneArg(self->extra, self->sink.worker);
            PyObject *joined = more == NULL ? NULL : PySequence_Concat(bounds, more);
            Py_DECREF(bounds);
            Py_XDECREF(more);
            if (joined == NULL) return -1;
            bounds = joined;
        }
        if (set_field(self->queue, VALUE, bounds) < 0 || written(self->queue, t) < 0) return -1;
        t += self->store_ns;
    }
    set_field_ref(self->lock, VALUE, self->zero);
    if (written(self->lock, t) < 0) return -1;
    self->t = t + self->store_ns;
    return 0;
}

/* One steal attempt at self->t after self->failures failed ones in a row, as Stealing.attempt takes it: the
 * first ``patience`` victims drawn at random among the P - 1 others, then each other queue in turn. *got: the
 * iterations stolen; self->t: when the thief is done. A failed attempt is taken here whole; a successful one
 * calls split to finish. */
static int Steals_attempt(Steals *self, long long *got) {
    Thief *thief = &self->thief;
    long long w = self->w, patience = thief->patience, v, begin, end;
    if (self->failures < patience) {
        v = draw_below(thief->bitgen, (uint32_t)(self->threads - 1));
        v += v >= w;
    } else {
        v = (w + 1 + self->failures - patience) % self->threads;
    }
    PyObject *lock = PyList_GET_ITEM(thief->locks, v), *queue = PyList_GET_ITEM(thief->queues, v), *value;
    PyObject *worker = self->sink.worker;
    double t;
    self->atomics += 1;
    if (acquire(lock, w, worker, self->t, thief->into, &t, &self->transfers) < 0
        || exchanged(lock, worker, Py_NewRef(thief->one), t, self->atomic_ns, thief->notify, &t) < 0
        || read_value(queue, w, worker, t, thief->into, thief->lat, &value, &t, &self->transfers) < 0)
        return -1;
    if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) < 2) {
        PyErr_SetString(PyExc_TypeError, "a queue line's value must be a tuple (begin, end, ...)");
        return -1;
    }
    if (as_long(PyTuple_GET_ITEM(value, 0), &begin) < 0 || as_long(PyTuple_GET_ITEM(value, 1), &end) < 0) return -1;
    long long span = end - begin, half = span / 2 - (span % 2 < 0), least = thief->least_value;   /* floor, as // */
    if (least < 0) {
        PyObject *r = PyObject_CallOneArg(thief->least, worker);
        int failed = as_long(r, &least);
        Py_XDECREF(r);
        if (failed) return -1;
    }
    if (half < least) {
        *got = 0;
        return store_line(lock, w, worker, Py_NewRef(self->zero), t, self->store_ns, thief->notify, &self->t);
    }
    PyObject *r = PyObject_CallFunction(thief->split, "LOLd", v, value, half, t);
    if (r == NULL) return -1;
    int ok = PyArg_ParseTuple(r, "Ld", got, &self->t);
    Py_DECREF(r);
    return ok ? 0 : -1;
}

static PyObject *Steals_next(Steals *self) {
    if (self->done) return NULL;
    if (self->after_attempt) {
        self->after_attempt = 0;
        if (self->failures == self->give_up) return Steals_finish(self);
    }
    for (;;) {
        if (self->size && self->adaptive) {
            if (Adaptive_report(&self->ich, self->env, self->w, self->sink.worker, self->threads,
                                self->store_ns, self->size, &self->t, &self->transfers) < 0)
                return NULL;
        } else if (self->size && self->report != Py_None) {
            self->t = call_double(self->report, Py_BuildValue("(L)", self->size));
            if (self->t == -1.0 && PyErr_Occurred()) return NULL;
        } else if (clock_now(self->env, &self->t) < 0) {
            return NULL;
        }
        self->size = 0;
        if (!self->empty) {
            long long lo, hi;
            int alone = held_alone(self->lock, self->w);
            if (alone > 0) alone = held_alone(self->queue, self->w);
            if (alone < 0) return NULL;
            if (alone) {
                if (own_take(self, &lo, &hi) < 0) return NULL;
            } else {
                PyObject *r = PyObject_CallFunction(self->take, "d", self->t);
                if (r == NULL) return NULL;
                int ok = PyArg_ParseTuple(r, "LLd", &lo, &hi, &self->t);
                Py_DECREF(r);
                if (!ok) return NULL;
            }
            if (hi > lo) {
                double now, start, work;
                self->chunks += 1;
                self->size = hi - lo;
                if (clock_now(self->env, &now) < 0) return NULL;
                if (Sink_record(&self->sink, lo, hi, self->t, now, &start, &work) < 0) return NULL;
                if (add_to(self->scheduling, self->w, start - now) < 0 || add_to(self->computing, self->w, work) < 0)
                    return NULL;
                return PyFloat_FromDouble(start + work);
            }
            self->empty = 1;
        }
        if (self->threads == 1) return Steals_finish(self);
        /* One steal attempt, folded into the same wait as the failed take before it, if any. */
        self->attempts += 1;
        long long got;
        if (self->thieving) {
            if (Steals_attempt(self, &got) < 0) return NULL;
        } else {
            PyObject *r = PyObject_CallFunction(self->attempt, "Ld", self->failures, self->t);
            if (r == NULL) return NULL;
            int ok = PyArg_ParseTuple(r, "Ld", &got, &self->t);
            Py_DECREF(r);
            if (!ok) return NULL;
        }
        if (got) {
            self->steals += 1;
            self->failures = 0;
            self->empty = 0;
        } else {
            self->failures += 1;
        }
        self->after_attempt = 1;
        if (self->steal_times == NULL)
            return PyObject_CallFunction(self->charged, "Osd", self->sink.worker, "steal", self->t);
        /* Simulation.charged(w, "steal", t), on its tables */
        double now;
        if (clock_now(self->env, &now) < 0) return NULL;
        if (self->t > now) {
            if (add_to(self->steal_times, self->w, self->t - now) < 0
                || PyList_SetItem(self->last, (Py_ssize_t)self->w, Py_BuildValue("((Odd))", self->steal, now, self->t)) < 0)
                return NULL;
        }
        return PyFloat_FromDouble(self->t);
    }
}

static PyObject *Steals_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *env, *lock, *queue, *chunk_size, *extra, *report, *take, *attempt, *charged, *finish;
    PyObject *scheduling, *computing, *prefix, *pending, *flush, *mark, *adaptive, *thief, *charge;
    PyObject *chunk_time = NULL;
    long long w, index, threads, give_up, fixed, full;
    double atomic_ns, store_ns, dispatch, slow;
    if (!PyArg_ParseTuple(args, "OLLLLOOddLOOOOOOOOOOdOdOLOOOO|O:steals", &env, &w, &index, &threads, &give_up, &lock,
                          &queue,
                          &atomic_ns, &store_ns, &fixed, &chunk_size, &extra, &report, &take, &attempt, &charged,
                          &finish, &scheduling, &computing, &prefix, &dispatch, &pending, &slow, &flush, &full,
                          &mark, &adaptive, &thief, &charge, &chunk_time))
        return NULL;
    if (!PyList_Check(scheduling) || !PyList_Check(computing)) {
        PyErr_SetString(PyExc_TypeError, "steals: the state times must be lists");
        return NULL;
    }
    Steals *self = (Steals *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    if (Sink_init(&self->sink, w, index, prefix, dispatch, pending, slow, flush, full, mark, chunk_time) < 0
        || (self->zero = PyLong_FromLong(0)) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->adaptive = adaptive != Py_None;
    self->thieving = thief != Py_None;
    if ((self->adaptive && Adaptive_init(&self->ich, adaptive) < 0)
        || (self->thieving && Thief_init(&self->thief, thief, threads) < 0) || bind_line(lock) < 0 || bind_line(queue) < 0
        || check_env(env) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(env); self->env = env;
    PyObject **fields[] = {&self->lock, &self->queue, &self->chunk_size, &self->extra, &self->report,
                           &self->take, &self->attempt, &self->charged, &self->finish, &self->scheduling,
                           &self->computing};
    PyObject *values[] = {lock, queue, chunk_size, extra, report, take, attempt, charged, finish, scheduling,
                          computing};
    for (size_t f = 0; f < sizeof(values) / sizeof(values[0]); f++) {
        Py_INCREF(values[f]);
        *fields[f] = values[f];
    }
    if (charge != Py_None) {
        PyObject *steal_times, *last;
        if (!PyArg_ParseTuple(charge, "O!O!:charge", &PyList_Type, &steal_times, &PyList_Type, &last)
            || PyList_GET_SIZE(steal_times) < threads || PyList_GET_SIZE(last) < threads
            || (self->steal = PyUnicode_InternFromString("steal")) == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "charge: a time and a last wait for every thread");
            Py_DECREF(self);
            return NULL;
        }
        Py_INCREF(steal_times); self->steal_times = steal_times;
        Py_INCREF(last); self->last = last;
    }
    self->w = w; self->threads = threads; self->fixed = fixed; self->give_up = give_up;
    self->atomic_ns = atomic_ns; self->store_ns = store_ns;
    return (PyObject *)self;
}

static PyTypeObject StealsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "simsched._speedups.steals",
    .tp_doc = PyDoc_STR("The chunked-stealing loop's steps, as Stealing.steps takes them."),
    .tp_basicsize = sizeof(Steals),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Steals_new,
    .tp_dealloc = (destructor)Steals_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Steals_next,
};

/* ---- The event loop ------------------------------------------------------------------------------------
 * SimPy's Environment.run and step, and Simulation.drive's stepping, compiled: the same heap (the
 * environment's list of (time, priority, event number, event)), the same event numbers, the same callbacks
 * in the same order; a scheduler written as SimPy generators runs in it as it does in SimPy, and the
 * steps ``drive`` runs (the claim and stealing iterators above, or Python generators) are stepped here
 * without a Python frame between them. Their Python versions (simsched.engine.Simulation.drive,
 * simpy.Environment.run) are the reference: a run gives the same result, event count included. */

static Py_ssize_t heap_offset, eid_offset;
static PyObject *normal_priority, *stop_simulation;
static PyObject *str_callbacks, *str_ok, *str_value, *str_defused, *str_args;

/* bind_events(heap_slot, eid_slot, normal, stop_simulation): where the environment keeps its heap and its
 * event numbering, SimPy's NORMAL priority and its StopSimulation (after bind_clock). */
static PyObject *bind_events(PyObject *module, PyObject *args) {
    PyObject *heap, *eid, *normal, *stop;
    if (!PyArg_ParseTuple(args, "OOOO", &heap, &eid, &normal, &stop)) return NULL;
    Py_ssize_t h = member_offset(heap, "bind_events"), e = member_offset(eid, "bind_events");
    if (h < 0 || e < 0) return NULL;
    heap_offset = h;
    eid_offset = e;
    Py_INCREF(normal);
    Py_XSETREF(normal_priority, normal);
    Py_INCREF(stop);
    Py_XSETREF(stop_simulation, stop);
    Py_RETURN_NONE;
}

/* Whether heap entry a comes before b, as Python compares the tuples; -1 with an error set. Entries are
 * (time, priority, number, event) and the numbers differ, so the event itself is never compared. */
static int before(PyObject *a, PyObject *b) {
    if (PyTuple_CheckExact(a) && PyTuple_CheckExact(b) && PyTuple_GET_SIZE(a) == 4 && PyTuple_GET_SIZE(b) == 4) {
        PyObject *ta = PyTuple_GET_ITEM(a, 0), *tb = PyTuple_GET_ITEM(b, 0);
        PyObject *pa = PyTuple_GET_ITEM(a, 1), *pb = PyTuple_GET_ITEM(b, 1);
        PyObject *ea = PyTuple_GET_ITEM(a, 2), *eb = PyTuple_GET_ITEM(b, 2);
        if (PyFloat_CheckExact(ta) && PyFloat_CheckExact(tb) && PyLong_CheckExact(pa) && PyLong_CheckExact(pb)
            && PyLong_CheckExact(ea) && PyLong_CheckExact(eb)) {
            double x = PyFloat_AS_DOUBLE(ta), y = PyFloat_AS_DOUBLE(tb);
            if (x < y) return 1;
            if (x > y) return 0;
            if (x == y) {
                int overflow;
                long p = PyLong_AsLongAndOverflow(pa, &overflow), q;
                if (!overflow) {
                    q = PyLong_AsLongAndOverflow(pb, &overflow);
                    if (!overflow && p != q) return p < q;
                    if (!overflow) {
                        long long m = PyLong_AsLongLongAndOverflow(ea, &overflow), n;
                        if (!overflow) {
                            n = PyLong_AsLongLongAndOverflow(eb, &overflow);
                            if (!overflow) return m < n;
                        }
                    }
                }
            }
        }
    }
    return PyObject_RichCompareBool(a, b, Py_LT);   /* anything else (an int time, a NaN): as Python does */
}

/* heapq's _siftdown and _siftup on the list, with ``before`` for its comparisons. */
static int sift_down(PyObject *heap, Py_ssize_t start, Py_ssize_t pos) {
    PyObject **items = ((PyListObject *)heap)->ob_item, *item = items[pos];
    Py_ssize_t size = PyList_GET_SIZE(heap);
    while (pos > start) {
        Py_ssize_t parent = (pos - 1) >> 1;
        int less = before(item, items[parent]);
        if (less < 0) return -1;
        if (size != PyList_GET_SIZE(heap)) {
            PyErr_SetString(PyExc_RuntimeError, "the event heap changed while it was being ordered");
            return -1;
        }
        items = ((PyListObject *)heap)->ob_item;
        if (!less) break;
        items[pos] = items[parent];
        pos = parent;
    }
    items[pos] = item;
    return 0;
}

static int sift_up(PyObject *heap, Py_ssize_t pos) {
    Py_ssize_t end = PyList_GET_SIZE(heap), start = pos, child = 2 * pos + 1;
    PyObject **items = ((PyListObject *)heap)->ob_item, *item = items[pos];
    while (child < end) {
        Py_ssize_t right = child + 1;
        if (right < end) {
            int less = before(items[child], items[right]);
            if (less < 0) return -1;
            if (end != PyList_GET_SIZE(heap)) {
                PyErr_SetString(PyExc_RuntimeError, "the event heap changed while it was being ordered");
                return -1;
            }
            items = ((PyListObject *)heap)->ob_item;
            if (!less) child = right;
        }
        items[pos] = items[child];
        pos = child;
        child = 2 * pos + 1;
    }
    items[pos] = item;
    return sift_down(heap, start, pos);
}

/* Check that ``env`` is of the bound type and its event heap is bound too (bind_events); -1 with an error set. */
static int check_events(PyObject *env) {
    if (check_env(env) < 0) return -1;
    if (normal_priority != NULL && stop_simulation != NULL) return 0;
    PyErr_SetString(PyExc_RuntimeError, "simsched._speedups: no event heap bound (bind_events)");
    return -1;
}

/* The event numbers of a simulation's environment (its _eid): itertools.count() with the count in C, so that
 * the compiled loop numbers a wait without making a Python int. */
typedef struct {
    PyObject_HEAD
    long long next;
} Numbers;

static PyObject *Numbers_next(Numbers *self) {
    if (self->next == LLONG_MAX) {
        PyErr_SetString(PyExc_OverflowError, "the event numbering ran out");
        return NULL;
    }
    return PyLong_FromLongLong(self->next++);
}

static PyObject *Numbers_repr(Numbers *self) { return PyUnicode_FromFormat("Numbers(%lld)", self->next); }

static PyTypeObject NumbersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "simsched._speedups.Numbers",
    .tp_basicsize = sizeof(Numbers),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("Event numbers from 0, as itertools.count() gives them, counted in C."),
    .tp_new = PyType_GenericNew,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Numbers_next,
    .tp_repr = (reprfunc)Numbers_repr,
};

/* next(the environment's event numbers) as a C number; -1 with an error set. */
static long long next_number_value(PyObject *env) {
    PyObject *eids = *slot_of(env, eid_offset);
    if (eids != NULL && Py_IS_TYPE(eids, &NumbersType)) {
        Numbers *numbers = (Numbers *)eids;
        if (numbers->next == LLONG_MAX) {
            PyErr_SetString(PyExc_OverflowError, "the event numbering ran out");
            return -1;
        }
        return numbers->next++;
    }
    if (eids == NULL || !PyIter_Check(eids)) {
        PyErr_SetString(PyExc_TypeError, "the environment has no event numbering");
        return -1;
    }
    PyObject *number = Py_TYPE(eids)->tp_iternext(eids);
    if (number == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the event numbering ran out");
        return -1;
    }
    long long value = PyLong_AsLongLong(number);
    Py_DECREF(number);
    if (value < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a negative event number");
    return value;
}

/* next(the environment's event numbers): a new reference, or NULL with an error set. */
static PyObject *next_number(PyObject *env) {
    PyObject *eids = *slot_of(env, eid_offset), *number;
    if (eids == NULL || !PyIter_Check(eids)) {
        PyErr_SetString(PyExc_TypeError, "the environment has no event numbering");
        return NULL;
    }
    if ((number = Py_TYPE(eids)->tp_iternext(eids)) == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "the event numbering ran out");
    return number;
}

/* heappush(heap, (when, priority, next(event numbers), event)); steals the reference to ``when``. */
static int schedule(PyObject *env, PyObject *when, PyObject *priority, PyObject *event) {
    if (when == NULL) return -1;
    PyObject *heap = *slot_of(env, heap_offset);
    if (heap == NULL || !PyList_CheckExact(heap)) {
        Py_DECREF(when);
        PyErr_SetString(PyExc_TypeError, "the environment has no event heap");
        return -1;
    }
    PyObject *number = next_number(env);
    if (number == NULL) {
        Py_DECREF(when);
        return -1;
    }
    PyObject *entry = PyTuple_Pack(4, when, priority, number, event);
    Py_DECREF(when);
    Py_DECREF(number);
    if (entry == NULL) return -1;
    int failed = PyList_Append(heap, entry);
    Py_DECREF(entry);
    if (failed) return -1;
    return sift_down(heap, 0, PyList_GET_SIZE(heap) - 1);
}

/* heappop(heap): a new reference, or NULL with an error set (IndexError when it is empty). */
static PyObject *pop(PyObject *heap) {
    Py_ssize_t size = PyList_GET_SIZE(heap);
    if (size == 0) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return NULL;
    }
    PyObject **items = ((PyListObject *)heap)->ob_item, *last = items[size - 1];
    Py_INCREF(last);
    if (PyList_SetSlice(heap, size - 1, size, NULL) < 0) {
        Py_DECREF(last);
        return NULL;
    }
    if (size == 1) return last;
    items = ((PyListObject *)heap)->ob_item;
    PyObject *first = items[0];
    items[0] = last;   /* the list's reference to the first entry passes to the caller, ours to the last to the list */
    if (sift_up(heap, 0) < 0) {
        Py_DECREF(first);
        return NULL;
    }
    return first;
}

/* The time a wait until ``when`` is scheduled at, as Simulation.drive and fire_at compute it:
 * now + (when - now), or now if that is not later. A new reference. */
static PyObject *wait_time(PyObject *env, PyObject *when) {
    PyObject *now = *slot_of(env, clock_offset);
    if (now == NULL) {
        PyErr_SetString(PyExc_AttributeError, "the environment has no clock");
        return NULL;
    }
    if (PyFloat_CheckExact(now) && PyFloat_CheckExact(when)) {
        double n = PyFloat_AS_DOUBLE(now), delay = PyFloat_AS_DOUBLE(when) - n;
        if (delay > 0) return PyFloat_FromDouble(n + delay);
        Py_INCREF(now);
        return now;
    }
    PyObject *delay = PyNumber_Subtract(when, now);
    if (delay == NULL) return NULL;
    PyObject *zero = PyLong_FromLong(0);
    int later = zero == NULL ? -1 : PyObject_RichCompareBool(delay, zero, Py_GT);
    Py_XDECREF(zero);
    PyObject *at = later < 0 ? NULL : later ? PyNumber_Add(now, delay) : (Py_INCREF(now), now);
    Py_DECREF(delay);
    return at;
}

/* The waits of a compiled run's drivers: a heap of (time, event number, driver) structs beside the
 * environment's list, so that a worker's wait costs no tuple, no float and no comparison through objects.
 * Every such wait has SimPy's NORMAL priority; the run pops whichever of the two heaps' tops comes first as
 * SimPy orders (time, priority, number), so the order is the one heap's. The environment keeps it (as
 * _simsched_waits); it is used only while run() runs (``active``), which moves what is left into the list
 * when it returns, so SimPy's own loop finds every wait there. */
typedef struct {
    double t;
    long long number;
    PyObject *driver;
} WaitEntry;

typedef struct {
    PyObject_HEAD
    WaitEntry *items;
    Py_ssize_t size, capacity;
    int active;
} Waits;

static int Waits_traverse(Waits *self, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < self->size; i++) Py_VISIT(self->items[i].driver);
    return 0;
}

static int Waits_clear(Waits *self) {
    Py_ssize_t size = self->size;
    self->size = 0;
    for (Py_ssize_t i = 0; i < size; i++) Py_CLEAR(self->items[i].driver);
    return 0;
}

static void Waits_dealloc(Waits *self) {
    PyObject_GC_UnTrack(self);
    Waits_clear(self);
    PyMem_Free(self->items);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* When the first of the waits ends (inf with none): what a wait passed without the queue must end before. */
static PyObject *Waits_first(Waits *self, void *closure) {
    return PyFloat_FromDouble(self->size ? self->items[0].t : Py_HUGE_VAL);
}

static PyGetSetDef Waits_getset[] = {
    {"first", (getter)Waits_first, NULL, NULL, NULL},
    {NULL},
};

static PyTypeObject WaitsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "simsched._speedups.Waits",
    .tp_basicsize = sizeof(Waits),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = PyDoc_STR("The heap of a compiled run's driver waits."),
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)Waits_dealloc,
    .tp_traverse = (traverseproc)Waits_traverse,
    .tp_clear = (inquiry)Waits_clear,
    .tp_getset = Waits_getset,
};

static PyObject *str_waits;

/* The environment's Waits, made the first time: a new reference, or NULL with an error set. */
static Waits *waits_of(PyObject *env) {
    PyObject *found = PyObject_GetAttr(env, str_waits);
    if (found != NULL) {
        if (Py_IS_TYPE(found, &WaitsType)) return (Waits *)found;
        Py_DECREF(found);
        PyErr_SetString(PyExc_TypeError, "the environment's _simsched_waits is not a Waits");
        return NULL;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
    PyErr_Clear();
    PyObject *made = PyObject_CallNoArgs((PyObject *)&WaitsType);
    if (made == NULL || PyObject_SetAttr(env, str_waits, made) < 0) {
        Py_XDECREF(made);
        return NULL;
    }
    return (Waits *)made;
}

/* waits(env): the environment's Waits (made the first time). */
static PyObject *waits(PyObject *module, PyObject *env) { return (PyObject *)waits_of(env); }

static inline int wait_before(const WaitEntry *a, const WaitEntry *b) {
    return a->t < b->t || (a->t == b->t && a->number < b->number);
}

/* Push ``driver``'s wait until t, numbered ``number``. */
static int waits_push(Waits *w, double t, long long number, PyObject *driver) {
    if (w->size == w->capacity) {
        Py_ssize_t capacity = w->capacity ? 2 * w->capacity : 64;
        WaitEntry *items = PyMem_Realloc(w->items, (size_t)capacity * sizeof(WaitEntry));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        w->items = items;
        w->capacity = capacity;
    }
    WaitEntry item = {t, number, Py_NewRef(driver)};
    Py_ssize_t pos = w->size++;
    while (pos > 0) {
        Py_ssize_t parent = (pos - 1) >> 1;
        if (!wait_before(&item, &w->items[parent])) break;
        w->items[pos] = w->items[parent];
        pos = parent;
    }
    w->items[pos] = item;
    return 0;
}

/* Pop the first wait into *out (its driver reference passes to the caller); the heap is not empty. */
static void waits_pop(Waits *w, WaitEntry *out) {
    *out = w->items[0];
    WaitEntry last = w->items[--w->size];
    Py_ssize_t pos = 0, size = w->size;
    for (;;) {
        Py_ssize_t child = 2 * pos + 1;
        if (child >= size) break;
        if (child + 1 < size && wait_before(&w->items[child + 1], &w->items[child])) child++;
        if (!wait_before(&w->items[child], &last)) break;
        w->items[pos] = w->items[child];
        pos = child;
    }
    if (size) w->items[pos] = last;
}

/* Driver(env, steps, done): Simulation.drive's stepping of ``steps``. Called with no argument from the
 * process that drives, then by the event loop as the event of each of its waits: it is its own event on the
 * heap (its one callback itself, never failed), so a wait costs no event object and no attribute look-up.
 * Fires ``done`` when the steps return. */
typedef struct {
    PyObject_HEAD
    PyObject *env, *steps, *done;
    Waits *waits;   /* its environment's */
} Driver;

static int Driver_traverse(Driver *self, visitproc visit, void *arg) {
    Py_VISIT(self->env); Py_VISIT(self->steps); Py_VISIT(self->done); Py_VISIT(self->waits);
    return 0;
}

static int Driver_clear(Driver *self) {
    Py_CLEAR(self->env); Py_CLEAR(self->steps); Py_CLEAR(self->done); Py_CLEAR(self->waits);
    return 0;
}

static void Driver_dealloc(Driver *self) {
    PyObject_GC_UnTrack(self);
    Driver_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Driver_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *env, *steps, *done;
    if (!PyArg_ParseTuple(args, "OOO", &env, &steps, &done) || check_events(env) < 0) return NULL;
    if (!PyIter_Check(steps)) {
        PyErr_SetString(PyExc_TypeError, "Driver: the steps must be an iterator");
        return NULL;
    }
    Waits *waits = waits_of(env);
    if (waits == NULL) return NULL;
    Driver *self = (Driver *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(waits);
        return NULL;
    }
    Py_INCREF(env); Py_INCREF(steps); Py_INCREF(done);
    self->env = env; self->steps = steps; self->done = done; self->waits = waits;
    return (PyObject *)self;
}

/* The steps returned (when, value): fire ``done`` with value at when, as fire_at does. */
static int Driver_finish(Driver *self) {
    PyObject *value = NULL;
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_StopIteration)) return -1;
        PyObject *type, *exc, *tb;
        PyErr_Fetch(&type, &exc, &tb);
        PyErr_NormalizeException(&type, &exc, &tb);
        if (exc != NULL) {
            value = ((PyStopIterationObject *)exc)->value;
            Py_XINCREF(value);
        }
        Py_XDECREF(type); Py_XDECREF(exc); Py_XDECREF(tb);
    }
    if (value == NULL || !PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2) {
        PyErr_Format(PyExc_TypeError, "drive: the steps must return (when, value), not %R", value ? value : Py_None);
        Py_XDECREF(value);
        return -1;
    }
    PyObject *when = PyTuple_GET_ITEM(value, 0), *result = PyTuple_GET_ITEM(value, 1);
    int failed = PyObject_SetAttr(self->done, str_ok, Py_True) < 0
                 || PyObject_SetAttr(self->done, str_value, result) < 0
                 || schedule(self->env, wait_time(self->env, when), normal_priority, self->done) < 0;
    Py_DECREF(value);
    return failed ? -1 : 0;
}

/* One call: take steps until one waits behind a queued event (scheduled with this driver as its event) or
 * they return. A wait that ends before every queued event is passed without the queue, numbered as if
 * scheduled, but only when called by the event loop (``passed``): from the process, the event that resumed
 * it may have other callbacks still to run. */
static unsigned long passes;   /* waits passed without the queue, for the check for signals */

/* Whether a wait until *at (or at_value, while *at is NULL and the time is an exact float) ends before the
 * first event of the environment's list and of its waits; -1 with an error set. Makes *at where a time of
 * another kind has to be compared as Python compares it. */
static int ends_first(PyObject *heap, Waits *waits, PyObject **at, double at_value, int exact) {
    int sooner = 1;
    if (PyList_GET_SIZE(heap)) {
        PyObject *first = PyList_GET_ITEM(heap, 0), *t;
        if (!PyTuple_Check(first) || PyTuple_GET_SIZE(first) < 1) {
            PyErr_SetString(PyExc_TypeError, "an event heap entry is not a tuple");
            return -1;
        }
        t = PyTuple_GET_ITEM(first, 0);
        if (exact && PyFloat_CheckExact(t)) {
            sooner = at_value < PyFloat_AS_DOUBLE(t);
        } else {
            if (*at == NULL && (*at = PyFloat_FromDouble(at_value)) == NULL) return -1;
            sooner = PyObject_RichCompareBool(*at, t, Py_LT);
        }
        if (sooner <= 0) return sooner;
    }
    if (waits->size) {   /* only floats are in the waits */
        if (exact) return at_value < waits->items[0].t;
        PyObject *t = PyFloat_FromDouble(waits->items[0].t);
        sooner = t == NULL ? -1 : PyObject_RichCompareBool(*at, t, Py_LT);
        Py_XDECREF(t);
    }
    return sooner;
}

static int Driver_step(Driver *self, int passed) {
    PyObject *env = self->env;
    Waits *waits = self->waits;
    iternextfunc advance = Py_TYPE(self->steps)->tp_iternext;
    for (;;) {
        PyObject *when = advance(self->steps);
        if (when == NULL) return Driver_finish(self);
        PyObject *heap = *slot_of(env, heap_offset), *now = *slot_of(env, clock_offset), *at = NULL;
        if (heap == NULL || !PyList_CheckExact(heap)) {
            Py_DECREF(when);
            PyErr_SetString(PyExc_TypeError, "the environment has no event heap");
            return -1;
        }
        double at_value = 0.0;
        int exact = now != NULL && PyFloat_CheckExact(now) && PyFloat_CheckExact(when);
        if (exact) {   /* wait_time's arithmetic, without a float object until one is needed */
            double n = PyFloat_AS_DOUBLE(now), delay = PyFloat_AS_DOUBLE(when) - n;
            at_value = delay > 0 ? n + delay : n;
        } else if ((at = wait_time(env, when)) == NULL) {
            Py_DECREF(when);
            return -1;
        }
        Py_DECREF(when);
        if (passed) {
            int sooner = ends_first(heap, waits, &at, at_value, exact);
            if (sooner < 0) {
                Py_XDECREF(at);
                return -1;
            }
            if (sooner) {
                if (next_number_value(env) < 0) {   /* numbered as if scheduled */
                    Py_XDECREF(at);
                    return -1;
                }
                if (at == NULL && (at = PyFloat_FromDouble(at_value)) == NULL) return -1;
                Py_XSETREF(*slot_of(env, clock_offset), at);
                if ((++passes & 1023) == 0 && PyErr_CheckSignals() < 0) return -1;   /* a worker alone, for long */
                continue;
            }
        }
        if (waits->active && exact) {
            Py_XDECREF(at);   /* made only to compare with a time of another kind */
            long long n = next_number_value(env);
            if (n < 0) return -1;
            return waits_push(waits, at_value, n, (PyObject *)self);
        }
        if (at == NULL && (at = PyFloat_FromDouble(at_value)) == NULL) return -1;
        return schedule(env, at, normal_priority, (PyObject *)self);
    }
}

static PyObject *Driver_call(Driver *self, PyObject *args, PyObject *kwargs) {
    if ((kwargs != NULL && PyDict_GET_SIZE(kwargs)) || PyTuple_GET_SIZE(args) > 1) {
        PyErr_SetString(PyExc_TypeError, "Driver takes at most the event that resumes it");
        return NULL;
    }
    if (Driver_step(self, PyTuple_GET_SIZE(args) == 1) < 0) return NULL;
    Py_RETURN_NONE;
}

/* What SimPy's own step reads of an event, should a driver's wait be popped there: its one callback
 * (itself), which it keeps, and that it never fails. */
static PyObject *Driver_callbacks(Driver *self, void *closure) { return Py_BuildValue("[O]", (PyObject *)self); }
static int Driver_keep_callbacks(Driver *self, PyObject *value, void *closure) { return 0; }
static PyObject *Driver_ok(Driver *self, void *closure) { Py_RETURN_TRUE; }

static PyGetSetDef Driver_getset[] = {
    {"callbacks", (getter)Driver_callbacks, (setter)Driver_keep_callbacks, NULL, NULL},
    {"_ok", (getter)Driver_ok, NULL, NULL, NULL},
    {NULL},
};

static PyTypeObject DriverType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "simsched._speedups.Driver",
    .tp_basicsize = sizeof(Driver),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = PyDoc_STR("Simulation.drive's stepping of a worker's steps, compiled."),
    .tp_new = Driver_new,
    .tp_dealloc = (destructor)Driver_dealloc,
    .tp_traverse = (traverseproc)Driver_traverse,
    .tp_clear = (inquiry)Driver_clear,
    .tp_call = (ternaryfunc)Driver_call,
    .tp_getset = Driver_getset,
};

/* SimPy's check after an event's callbacks: a failure nobody defused crashes the run, as a copy of it. */
static int check_failure(PyObject *event) {
    PyObject *ok = PyObject_GetAttr(event, str_ok);
    if (ok == NULL) return -1;
    int good = PyObject_IsTrue(ok);
    Py_DECREF(ok);
    if (good) return good < 0 ? -1 : 0;
    int defused = PyObject_HasAttr(event, str_defused);
    if (defused) return 0;
    PyObject *value = PyObject_GetAttr(event, str_value);
    if (value == NULL) return -1;
    PyObject *copy = NULL, *arguments = PyObject_GetAttr(value, str_args);
    if (arguments != NULL) copy = PyObject_Call((PyObject *)Py_TYPE(value), arguments, NULL);
    Py_XDECREF(arguments);
    if (copy != NULL) {
        PyException_SetCause(copy, value);   /* steals the reference to value */
        PyErr_SetObject((PyObject *)Py_TYPE(copy), copy);
        Py_DECREF(copy);
    } else {
        Py_DECREF(value);
    }
    return -1;
}

/* Whether the waits' first entry comes before the list's first, as SimPy orders (time, priority, number);
 * both heaps hold something. -1 with an error set. */
static int waits_first(Waits *waits, PyObject *heap) {
    PyObject *top = PyList_GET_ITEM(heap, 0);
    if (!PyTuple_Check(top) || PyTuple_GET_SIZE(top) != 4) {
        PyErr_SetString(PyExc_TypeError, "an event heap entry is not (time, priority, number, event)");
        return -1;
    }
    const WaitEntry *w = &waits->items[0];
    PyObject *t = PyTuple_GET_ITEM(top, 0);
    if (PyFloat_CheckExact(t)) {
        if (w->t < PyFloat_AS_DOUBLE(t)) return 1;
        if (w->t > PyFloat_AS_DOUBLE(t)) return 0;
    } else {   /* another kind of time: compared as Python compares it */
        PyObject *mine = PyFloat_FromDouble(w->t);
        if (mine == NULL) return -1;
        int less = PyObject_RichCompareBool(mine, t, Py_LT), more = less ? 0 : PyObject_RichCompareBool(t, mine, Py_LT);
        Py_DECREF(mine);
        if (less < 0 || more < 0) return -1;
        if (less) return 1;
        if (more) return 0;
    }
    long mine = PyLong_AsLong(normal_priority), theirs = PyLong_AsLong(PyTuple_GET_ITEM(top, 1));
    if ((mine == -1 || theirs == -1) && PyErr_Occurred()) return -1;
    if (mine != theirs) return mine < theirs;
    long long number = PyLong_AsLongLong(PyTuple_GET_ITEM(top, 2));
    if (number == -1 && PyErr_Occurred()) return -1;
    return w->number < number;
}

/* Move the waits left into the environment's list, as scheduled there with their numbers; keeps an error set. */
static int waits_return(Waits *waits, PyObject *env) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int failed = 0;
    PyObject *heap = *slot_of(env, heap_offset);
    while (waits->size) {
        WaitEntry entry;
        waits_pop(waits, &entry);
        PyObject *t = PyFloat_FromDouble(entry.t), *number = PyLong_FromLongLong(entry.number), *item = NULL;
        if (!failed && t != NULL && number != NULL && heap != NULL && PyList_CheckExact(heap))
            item = PyTuple_Pack(4, t, normal_priority, number, entry.driver);
        Py_XDECREF(t); Py_XDECREF(number); Py_DECREF(entry.driver);
        if (item == NULL || PyList_Append(heap, item) < 0 || sift_down(heap, 0, PyList_GET_SIZE(heap) - 1) < 0)
            failed = 1;
        Py_XDECREF(item);
    }
    waits->active = 0;
    if (type != NULL) {
        PyErr_Restore(type, value, tb);
    } else if (failed && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_RuntimeError, "the compiled run's waits could not be returned to the event heap");
    }
    return failed ? -1 : 0;
}

static PyObject *run_events(PyObject *env, PyObject *until, Waits *waits);

/* run(env, until): Environment.run(until=event), the loop and its steps compiled. */
static PyObject *run(PyObject *module, PyObject *args) {
    PyObject *env, *until;
    if (!PyArg_ParseTuple(args, "OO", &env, &until) || check_events(env) < 0) return NULL;
    Waits *waits = waits_of(env);
    if (waits == NULL) return NULL;
    if (waits->active) {
        Py_DECREF(waits);
        PyErr_SetString(PyExc_RuntimeError, "a compiled run of this environment is under way");
        return NULL;
    }
    waits->active = 1;
    PyObject *result = run_events(env, until, waits);
    if (waits_return(waits, env) < 0) Py_CLEAR(result);
    Py_DECREF(waits);
    return result;
}

static PyObject *run_events(PyObject *env, PyObject *until, Waits *waits) {
    PyObject *callbacks = PyObject_GetAttr(until, str_callbacks);
    if (callbacks == NULL) return NULL;
    if (callbacks == Py_None) {   /* already processed */
        Py_DECREF(callbacks);
        return PyObject_GetAttr(until, str_value);
    }
    PyObject *stop = PyObject_GetAttrString(stop_simulation, "callback");
    int failed = stop == NULL || PyList_Append(callbacks, stop) < 0;
    Py_XDECREF(stop);
    Py_DECREF(callbacks);
    if (failed) return NULL;
    for (unsigned long count = 1;; count++) {
        if ((count & 1023) == 0 && PyErr_CheckSignals() < 0) return NULL;   /* Ctrl-C and SIGTERM reach the run */
        PyObject *heap = *slot_of(env, heap_offset);
        if (heap == NULL || !PyList_CheckExact(heap)) {
            PyErr_SetString(PyExc_TypeError, "the environment has no event heap");
            return NULL;
        }
        if (PyList_GET_SIZE(heap) == 0 && waits->size == 0) {
            PyErr_Format(PyExc_RuntimeError, "No scheduled events left but \"until\" event was not triggered: %R",
                         until);
            return NULL;
        }
        int wait = waits->size == 0 ? 0 : PyList_GET_SIZE(heap) == 0 ? 1 : waits_first(waits, heap);
        if (wait < 0) return NULL;
        if (wait) {   /* a driven worker's wait, from the waits */
            WaitEntry entry;
            waits_pop(waits, &entry);
            PyObject *now = PyFloat_FromDouble(entry.t);
            if (now == NULL) {
                Py_DECREF(entry.driver);
                return NULL;
            }
            Py_XSETREF(*slot_of(env, clock_offset), now);
            failed = Driver_step((Driver *)entry.driver, 1) < 0;
            Py_DECREF(entry.driver);
            if (failed) return NULL;
            continue;
        }
        PyObject *entry = pop(heap);
        if (entry == NULL) return NULL;
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 4) {
            Py_DECREF(entry);
            PyErr_SetString(PyExc_TypeError, "an event heap entry is not (time, priority, number, event)");
            return NULL;
        }
        PyObject *now = PyTuple_GET_ITEM(entry, 0), *event = PyTuple_GET_ITEM(entry, 3);
        Py_INCREF(now);
        Py_XSETREF(*slot_of(env, clock_offset), now);
        Py_INCREF(event);
        Py_DECREF(entry);
        if (Py_IS_TYPE(event, &DriverType)) {   /* a driven worker's wait */
            failed = Driver_step((Driver *)event, 1) < 0;
            Py_DECREF(event);
            if (failed) return NULL;
            continue;
        }
        callbacks = PyObject_GetAttr(event, str_callbacks);
        if (callbacks == NULL || PyObject_SetAttr(event, str_callbacks, Py_None) < 0) {
            Py_XDECREF(callbacks);
            Py_DECREF(event);
            return NULL;
        }
        if (!PyList_Check(callbacks)) {
            PyErr_Format(PyExc_TypeError, "the callbacks of %R are not a list", event);
            Py_DECREF(callbacks);
            Py_DECREF(event);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(callbacks); i++) {
            PyObject *callback = PyList_GET_ITEM(callbacks, i), *r;
            Py_INCREF(callback);
            r = PyObject_CallOneArg(callback, event);
            Py_DECREF(callback);
            if (r != NULL) {
                Py_DECREF(r);
                continue;
            }
            if (!PyErr_ExceptionMatches(stop_simulation)) {
                Py_DECREF(callbacks);
                Py_DECREF(event);
                return NULL;
            }
            /* The run is over: the rest of the callbacks wait on the event, scheduled again first, as SimPy
             * does; the value is StopSimulation's. */
            PyObject *type, *exc, *tb, *value = NULL;
            PyErr_Fetch(&type, &exc, &tb);
            PyErr_NormalizeException(&type, &exc, &tb);
            PyObject *rest = PyList_GetSlice(callbacks, i + 1, PyList_GET_SIZE(callbacks));
            PyObject *urgent = PyLong_FromLong(-1);
            PyObject *now_again = *slot_of(env, clock_offset);
            Py_XINCREF(now_again);
            failed = rest == NULL || urgent == NULL || PyObject_SetAttr(event, str_callbacks, rest) < 0
                     || schedule(env, now_again, urgent, event) < 0;
            if (!failed && exc != NULL) {
                PyObject *arguments = PyObject_GetAttr(exc, str_args);
                if (arguments != NULL && PyTuple_Check(arguments) && PyTuple_GET_SIZE(arguments) > 0) {
                    value = Py_NewRef(PyTuple_GET_ITEM(arguments, 0));
                } else if (arguments != NULL) {
                    PyErr_SetString(PyExc_IndexError, "tuple index out of range");
                }
                Py_XDECREF(arguments);
            }
            Py_XDECREF(rest); Py_XDECREF(urgent);
            Py_XDECREF(type); Py_XDECREF(exc); Py_XDECREF(tb);
            Py_DECREF(callbacks);
            Py_DECREF(event);
            return value;
        }
        Py_DECREF(callbacks);
        failed = check_failure(event) < 0;
        Py_DECREF(event);
        if (failed) return NULL;
    }
}

static PyMethodDef methods[] = {
    {"bind_clock", bind_clock, METH_O, PyDoc_STR("Read the clock through this slot of the run's environment.")},
    {"bind_events", bind_events, METH_VARARGS,
     PyDoc_STR("Use these slots for the event heap and numbering, this NORMAL priority and StopSimulation.")},
    {"run", run, METH_VARARGS, PyDoc_STR("Environment.run(until=event), compiled.")},
    {"draws", draws, METH_VARARGS, PyDoc_STR("Victims drawn below n as a compiled thief draws them.")},
    {"waits", waits, METH_O, PyDoc_STR("The environment's heap of driver waits in a compiled run.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "simsched._speedups",
    "The simulator's hottest loops in C (optional; the Python loops are the reference).", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    if (PyType_Ready(&ClaimsType) < 0 || PyType_Ready(&StealsType) < 0 || PyType_Ready(&DriverType) < 0
        || PyType_Ready(&ColumnType) < 0 || PyType_Ready(&WaitsType) < 0 || PyType_Ready(&NumbersType) < 0)
        return NULL;
    if ((str_callbacks = PyUnicode_InternFromString("callbacks")) == NULL
        || (str_ok = PyUnicode_InternFromString("_ok")) == NULL
        || (str_value = PyUnicode_InternFromString("_value")) == NULL
        || (str_defused = PyUnicode_InternFromString("_defused")) == NULL
        || (str_args = PyUnicode_InternFromString("args")) == NULL
        || (str_waits = PyUnicode_InternFromString("_simsched_waits")) == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "claims", (PyObject *)&ClaimsType) < 0
        || PyModule_AddObjectRef(m, "steals", (PyObject *)&StealsType) < 0
        || PyModule_AddObjectRef(m, "Driver", (PyObject *)&DriverType) < 0
        || PyModule_AddObjectRef(m, "Column", (PyObject *)&ColumnType) < 0
        || PyModule_AddObjectRef(m, "Numbers", (PyObject *)&NumbersType) < 0
        || PyModule_AddIntConstant(m, "INTERFACE", 6) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
