/* Native mode: the scheduler algorithms on pinned pthreads of the host, and the probes that calibrate it.
 *
 * A run executes a program of loops (each of its own size, the program repeated) on P threads
 * (thread 0 is the master). Each iteration runs its kernel (none, the memory kernel, or a CSR
 * row: an SpMV row or a BFS frontier vertex), then busy-waits its cost in ns against
 * CLOCK_MONOTONIC, so a kernel-less chunk takes the sum of its costs. Every shared word (barrier flags and counters, claim counters, ranges)
 * sits on its own cache line. Waits spin; every spin checks an abort flag that the calling
 * thread raises when the run passes its time bound, so a run can never hang the process.
 *
 * The trace has the shape of a simulated Result: one record per chunk (worker, loop, lo,
 * hi, start, end in ns since the run began), per-worker compute / schedule / sync time,
 * counters, and each loop's end time. Executions per iteration are counted from the
 * records after the run.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LINE 128

typedef struct { _Alignas(LINE) atomic_long v; } padded;

static inline double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- runs ------------------------------------------------------------------------------ */

enum { SHARE_STATIC, SHARE_DYNAMIC, SHARE_GUIDED, SHARE_STEALING, SHARE_REPLAY, SHARE_ICH, SHARE_HYBRID,
       SHARE_STATIC_STEAL, SHARE_TBB_SIMPLE };
/* Chunk tables precomputed by the caller, claimed by index; static-table: chunk w of each table is worker w's. */
enum { SHARE_TABLE = SHARE_TBB_SIMPLE + 1, SHARE_STATIC_TABLE };
/* tbb-auto and tbb-affinity: tbb-simple's deques with oneTBB's auto and affinity partitioners. */
enum { SHARE_TBB_AUTO = SHARE_STATIC_TABLE + 1, SHARE_TBB_AFFINITY };
/* omp-guided under runtime=llvm: libomp's guided rule (SHARE_GUIDED is libgomp's). */
enum { SHARE_GUIDED_LLVM = SHARE_TBB_AFFINITY + 1 };
enum { BARRIER_CENTRAL, BARRIER_TREE };

typedef struct { int64_t loop, lo, hi; double start, end; } chunk_rec;

/* One worker's own state, on lines of its own: the workers update theirs at every chunk and loop, and a line
 * shared with a neighbour's would travel between their cores each time (false sharing). */
typedef struct {
    _Alignas(LINE) chunk_rec *recs;
    size_t count, cap;
    double compute, schedule, sync;
    long chunks, claims, failed_claims, steals, steal_attempts, d_halved, d_doubled;
    long max_failed_claims;     /* hybrid: most failed claims in a row within one claiming loop */
    int out_of_memory;
    /* Barrier episodes this worker has been through (all workers go through the same ones). */
    long arrive_epoch, release_epoch;
    int sense;
    int64_t cursor;   /* replay: the worker's next planned chunk */
    uint64_t rng;     /* random victims (xorshift) */
    double exit;      /* when it left the last loop's join */
    long ich_k, ich_d;  /* iCh: iterations done, divisor */
    int victim;       /* static_steal: the next victim to try (libomp's parm4) */
    long tasks;       /* tbb-*: ranges spawned onto its deque */
    double *marks;    /* timeline only: per loop, when the worker reached the fork, left it, reached the
                       * join and left it (ns since the run began); NULL when no timeline is asked for */
} worker_state;

typedef struct run run_t;

typedef struct { run_t *run; int w; } worker_arg;

struct run {
    int threads, loops, n, share, barrier, fork_full, join_full, chunk;
    int late_worker;            /* this worker arrives late_ns after it sees each loop released (-1: none) */
    double late_ns;
    /* The program: loop l of a run is program loop l % program, of sizes[l % program] iterations, whose
     * iteration i is the program's iteration bases[l % program] + i (costs, arrays and rows are indexed by it).
     * The master sets n and base for each loop before releasing it. */
    int program;
    long total;                 /* iterations of the program: the length of costs */
    const int64_t *sizes;
    int64_t *bases, base;
    const double *costs;
    double t0;
    double *loop_end;
    worker_state *ws;
    /* Every spinning worker polls abort_flag: it sits apart from the fields above, which the master rewrites
     * for each loop. */
    _Alignas(LINE) atomic_int abort_flag;
    atomic_int finished;
    padded next;                /* dynamic / guided claim counter */
    padded *ranges;             /* stealing: per-worker [lo, hi) packed as lo << 32 | hi */
    padded *arrived, *released; /* tree barrier flags, one line per worker */
    padded count, sense;        /* central full barrier */
    padded go, done;            /* central half-barriers */
    padded ready, started;      /* the start: every thread up and pinned before the clock starts */
    /* replay: each worker's chunks (loop, lo, hi) in order, worker w's from plan_start[w] to plan_start[w+1] */
    const int64_t *plan, *plan_start;
    int tables;                 /* table / static-table: loop l claims from table l % tables, whose bounds are
                                 * plan[plan_start[t]] .. plan[plan_start[t + 1] - 1] */
    double eps;                 /* iCh: band around the mean progress */
    /* iCh: each thread's divisor and progress, a line each: its thieves read both, and every thread reads all
     * the progress counters for the mean mu = sum_j k_j / P */
    padded *ich_d, *ich_k;
    padded *claimed;            /* hybrid: claim flags of the R partitions */
    padded claims_left;         /* hybrid: partitions not claimed yet */
    int partitions;             /* hybrid: R, the smallest power of two >= P */
    /* The memory kernel: iteration i's array is the doubles [offsets[i], offsets[i] + elems[i]) of ``arrays``
     * or arrays is NULL. */
    double *arrays;
    size_t mapped;              /* bytes mapped at ``arrays`` */
    int64_t *offsets;           /* computed from elems: each array starts on a line of its own */
    const int64_t *elems;
    int pattern;                /* PATTERN_* */
    long line_elems;            /* doubles per cache line (random: one chase step per line) */
    uint64_t chase_seed;        /* random: iteration i's cycle is drawn from this and i */
    /* The CSR-row kernel, or indptr is NULL: iteration i (program iteration g) computes
     * out[row] = sum over k in [indptr[row], indptr[row + 1]) of values[k] (1 where values is NULL) * x[indices[k]],
     * row = rows[g], or i where rows is NULL. SpMV: rows NULL, x the vector; BFS: rows the frontiers, x the levels. */
    const int64_t *indptr, *rows;
    const int32_t *indices;
    const double *values, *x;
    double *out;
    /* Weighted and adaptive factoring: each worker's normalised starting weight (NULL: all 1), its
     * published statistics (one padded slot each) and its private measurements. */
    const double *weights;
    struct stat_slot *stats;
    struct adapt_state *adapt;
    padded *steal_flag;         /* static_steal: each thread's buffer state (STEAL_*) */
    padded steal_done;          /* static_steal: threads done with the loop */
    struct tbb_deque *deques;   /* tbb-*: each thread's deque of tasks */
    padded tbb_left;            /* tbb-*: iterations of the loop not run yet */
    struct tbb_deque *mailboxes;   /* tbb-affinity: each thread's mailbox, oldest first */
    struct tbb_node *nodes;     /* tbb-auto, tbb-affinity: the loop's tasks (tree nodes), by spawn order */
    padded tbb_spawned;         /* ... how many of them the loop has allocated */
    int64_t node_count;         /* ... and how many there are */
    atomic_int *slots;          /* tbb-affinity: the affinity array, 16P slots kept across loops (-1: empty) */
    padded *tbb_busy;           /* tbb-affinity: whether each thread runs a task */
};

/* tbb-*: a start_for task: its range [lo, hi) and partition state (tbb.py's Part). ``self`` is its node, ``node``
 * the one it shares with the task it spawned last (at first its spawner's), ``origin`` the thread that spawned it,
 * ``target`` the thread it is mailed to (-1: none), ``mailed`` whether a copy sits in that thread's mailbox. */
struct tbb_part { long lo, hi; int divisor, depth, delay, head, origin, target, self, node, mailed; };

/* A task's node: whether a thief ran it while its spawner still ran (stolen), whether one of its copies was claimed
 * (taken, the proxy of a mailed task), whether it runs, and its spawner's node. A loop spawns fewer tasks than it
 * has iterations (each spawn splits a range of two or more), so one node per iteration and the root's suffice. */
struct tbb_node { atomic_uchar stolen, taken, running; int parent; };

/* A thread's deque of tasks, its owner pushing and popping at the tail and thieves taking the head, all under
 * the deque's spinlock; a mailbox is one too, its owner taking the head. Every push at least halves the range the
 * pushing thread keeps (or is one of affinity's proportional splits), so a deque rarely holds more than a few
 * dozen; it grows under its lock when it must. */
#define TBB_DEQUE 64
struct tbb_deque { _Alignas(LINE) atomic_int lock; int head, tail, cap; struct tbb_part *items; };

#define CHECK_ABORT(r) do { if (atomic_load_explicit(&(r)->abort_flag, memory_order_relaxed)) pthread_exit(NULL); } while (0)

static void spin_until_at_least(run_t *r, atomic_long *word, long value)
{
    while (atomic_load_explicit(word, memory_order_acquire) < value) {
        CHECK_ABORT(r);
        cpu_relax();
    }
}

static void record(run_t *r, worker_state *s, int loop, long lo, long hi, double start, double end)
{
    if (s->count == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        chunk_rec *grown = realloc(s->recs, cap * sizeof *grown);
        if (!grown) { s->out_of_memory = 1; return; }
        s->recs = grown;
        s->cap = cap;
    }
    s->recs[s->count++] = (chunk_rec){loop, lo, hi, start - r->t0, end - r->t0};
    s->compute += end - start;
    s->chunks++;
}

/* The memory kernels. Iteration i works on its own array of doubles. */
enum { PATTERN_STRIDE, PATTERN_STREAM, PATTERN_RANDOM };

static inline uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* random: make the first word of each line hold the index of the next line of one random cycle over all
 * lines (Sattolo's shuffle). Done by the worker that first runs the iteration, so it is also the first touch. */
static void build_cycle(run_t *r, long i, double *a, long lines)
{
    int64_t *word = (int64_t *)a;
    long le = r->line_elems;
    uint64_t x = r->chase_seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(i + 1));
    for (long k = 0; k < lines; k++) word[k * le] = k;
    for (long k = lines - 1; k > 0; k--) {
        long j = (long)(splitmix64(&x) % (uint64_t)k);
        int64_t t = word[k * le]; word[k * le] = word[j * le]; word[j * le] = t;
    }
}

/* stride: 13 doubles at a time modulo the array, from element 0, elems updates in all, in exactly the order
 * of j = (j + 13) % elems but without a division per element. Short arrays take a compare-and-subtract per
 * update; long ones walk runs j, j + 13, ... below elems, each next run starting where the modulo wraps
 * (j - elems), so the only per-update work is the add and the loop's compare (a short run would cost a
 * mispredicted loop exit per few updates). */
#define STRIDE 13
#define STRIDE_RUNS_FROM (8 * STRIDE)

static void update_stride(double *a, long elems)
{
    long step = elems > STRIDE ? STRIDE : STRIDE % elems, j = 0;
    if (step == 0) {   /* 13 is a multiple of elems: j stays 0 */
        for (long k = 0; k < elems; k++) a[0] += 1.0;
    } else if (elems < STRIDE_RUNS_FROM) {
        for (long k = 0; k < elems; k++) {
            a[j] += 1.0;
            j += step;
            if (j >= elems) j -= elems;
        }
    } else {
        /* The walk returns to 0 only by a wrap, and after elems updates it is back at 0: the runs end there. */
        for (long done = 0; done < elems; j -= elems)
            for (; j < elems; j += step, done++) a[j] += 1.0;
    }
}

/* stream: one pass in order (also the calibration's bandwidth probe: the same loop times what a kernel gets). */
static void update_stream(double *a, long elems)
{
    for (long k = 0; k < elems; k++) a[k] += 1.0;
}

static void touch(run_t *r, int64_t i, int loop)
{
    double *a = r->arrays + r->offsets[i];
    long elems = (long)r->elems[i];
    if (elems <= 0) return;
    switch (r->pattern) {
    case PATTERN_STRIDE:
        update_stride(a, elems);
        break;
    case PATTERN_STREAM:
        update_stream(a, elems);
        break;
    case PATTERN_RANDOM: {
        /* A dependent chase through the cycle: the next line is known only once this one has arrived;
         * the line's other doubles are updated on the way. */
        long le = r->line_elems, lines = (elems + le - 1) / le, cur = 0;
        if (loop < r->program) build_cycle(r, i, a, lines);   /* the program's first pass */
        const int64_t *word = (const int64_t *)a;
        for (long k = 0; k < lines; k++) {
            double *line = a + cur * le;
            long next = (long)word[cur * le];
            long end = elems - cur * le < le ? elems - cur * le : le;
            for (long e = 1; e < end; e++) line[e] += 1.0;
            cur = next;
        }
        break;
    }
    }
}

static void csr_row(run_t *r, long i, int64_t g)
{
    int64_t row = r->rows ? r->rows[g] : i;
    double sum = 0;
    if (r->values)
        for (int64_t k = r->indptr[row]; k < r->indptr[row + 1]; k++) sum += r->values[k] * r->x[r->indices[k]];
    else
        for (int64_t k = r->indptr[row]; k < r->indptr[row + 1]; k++) sum += r->x[r->indices[k]];
    r->out[row] = sum;
}

/* Run iterations [lo, hi): each runs its kernel, then busy-waits its cost; deadlines accumulate,
 * so the chunk takes the sum of its costs however long one clock read is. */
static void run_chunk(run_t *r, worker_state *s, int loop, long lo, long hi)
{
    CHECK_ABORT(r);   /* also where no wait spins: one thread, empty iterations */
    double start = now_ns(), deadline = start;
    for (long i = lo; i < hi; i++) {
        if (((i - lo) & 4095) == 4095) CHECK_ABORT(r);   /* a long chunk of iterations with no cost to wait */
        int64_t g = r->base + i;
        double c = r->costs[g];
        if (r->arrays || r->indptr) {
            if (r->arrays) touch(r, g, loop);
            if (r->indptr) csr_row(r, i, g);
            if (c > 0) deadline = now_ns();   /* the busy-wait of the cost starts after the kernel */
        }
        if (c <= 0) continue;
        deadline += c;
        while (now_ns() < deadline) CHECK_ABORT(r);
    }
    record(r, s, loop, lo, hi, start, now_ns());
}

/* Tree barriers on a binary heap: children of w are 2w+1 and 2w+2. */
static void tree_arrive(run_t *r, int w, long epoch)
{
    for (int c = 2 * w + 1; c <= 2 * w + 2 && c < r->threads; c++)
        spin_until_at_least(r, &r->arrived[c].v, epoch);
    atomic_store_explicit(&r->arrived[w].v, epoch, memory_order_release);
}

static void tree_release(run_t *r, int w, long epoch)
{
    if (w > 0) spin_until_at_least(r, &r->released[(w - 1) / 2].v, epoch);
    atomic_store_explicit(&r->released[w].v, epoch, memory_order_release);
}

static void central_full(run_t *r, worker_state *s)
{
    int sense = !s->sense;
    if (atomic_fetch_add(&r->count.v, 1) == r->threads - 1) {
        atomic_store(&r->count.v, 0);
        atomic_store_explicit(&r->sense.v, sense, memory_order_release);
    } else {
        while (atomic_load_explicit(&r->sense.v, memory_order_acquire) != sense) { CHECK_ABORT(r); cpu_relax(); }
    }
    s->sense = sense;
}

static void full_barrier(run_t *r, int w, worker_state *s)
{
    if (r->barrier == BARRIER_CENTRAL) { central_full(r, s); return; }
    long arrive = ++s->arrive_epoch, release = ++s->release_epoch;
    tree_arrive(r, w, arrive);
    tree_release(r, w, release);
}

/* Half-barriers: the master releases a loop; the workers report its end, only the master waits. */
static void release_half(run_t *r, int w, worker_state *s, long loop)
{
    if (r->barrier == BARRIER_TREE) { tree_release(r, w, ++s->release_epoch); return; }
    if (w == 0) atomic_store_explicit(&r->go.v, loop + 1, memory_order_release);
    else spin_until_at_least(r, &r->go.v, loop + 1);
}

static void join_half(run_t *r, int w, worker_state *s, long loop)
{
    if (r->barrier == BARRIER_TREE) { tree_arrive(r, w, ++s->arrive_epoch); return; }
    if (w == 0) spin_until_at_least(r, &r->done.v, (long)(r->threads - 1) * (loop + 1));
    else atomic_fetch_add_explicit(&r->done.v, 1, memory_order_release);
}

static inline uint64_t pack(long lo, long hi) { return ((uint64_t)lo << 32) | (uint64_t)hi; }

/* ---- weighted and adaptive factoring (wf, awf-b .. awf-e, af) ---------------------------------
 * The same rules as simsched/schedulers/adaptive.py: FAC2 batches, claims by compare-and-swap on the
 * shared next-iteration counter, chunk times read with the runtime's clock, statistics published in
 * one padded slot per worker. */
enum { SHARE_WF = 100, SHARE_AWF_B, SHARE_AWF_C, SHARE_AWF_D, SHARE_AWF_E, SHARE_AF };
static const char *ADAPTIVE_SHARES[] = {"wf", "awf-b", "awf-c", "awf-d", "awf-e", "af", NULL};

/* AWF: a = pi (the weighted average iteration time); AF: a = mu, b = sigma^2; a < 0: nothing published. */
/* a: AWF's pi or AF's mean, b: AF's variance; AF publishes (a, b) under the sequence count seq (odd while
 * it writes), so a reader never pairs one measurement's mean with another's variance. */
struct stat_slot { _Alignas(LINE) _Atomic double a, b; atomic_long seq; };

/* AF's (mean, variance) of worker j, as one pair. */
static void read_pair(run_t *r, int j, double *mu, double *var)
{
    long before, after;
    do {
        before = atomic_load_explicit(&r->stats[j].seq, memory_order_acquire);
        *mu = atomic_load_explicit(&r->stats[j].a, memory_order_acquire);
        *var = atomic_load_explicit(&r->stats[j].b, memory_order_acquire);
        after = atomic_load_explicit(&r->stats[j].seq, memory_order_acquire);
    } while (before != after || (before & 1));
}

struct adapt_state {
    double weight, sum_time, sum_iters, sum_avg, sum_avg2, last;
    long count, size, batch;
};

#define CLOCK_TICK_NS 1.0

static void adaptive_prepare(run_t *r)
{
    for (int w = 0; w < r->threads; w++) {
        atomic_store(&r->stats[w].a, -1.0);
        atomic_store(&r->stats[w].b, 0.0);
        atomic_store(&r->stats[w].seq, 0);
        r->adapt[w] = (struct adapt_state){r->weights ? r->weights[w] : 1.0, 0, 0, 0, 0, -1.0, 0, 0, -1};
    }
}

/* The FAC2 batch a claim at ``lo`` falls in, and the iterations left when it started. */
static long fac2_batch(run_t *r, long lo, long *left)
{
    long n = r->n, P = r->threads, start = 0, j = 0;
    for (;;) {
        long f = (n - start + 2 * P - 1) / (2 * P);
        if (f < r->chunk) f = r->chunk;
        long next = start + P * f;
        if (next > lo || next >= n) { *left = n - start; return j; }
        start = next;
        j++;
    }
}

static void awf_measured(run_t *r, int w, struct adapt_state *a, long size, double elapsed)
{
    long k = ++a->count;
    a->sum_time += (double)k * (elapsed > CLOCK_TICK_NS ? elapsed : CLOCK_TICK_NS);
    a->sum_iters += (double)k * (double)size;
    atomic_store(&r->stats[w].a, a->sum_time / a->sum_iters);
}

static void af_measured(run_t *r, int w, struct adapt_state *a, long size, double elapsed)
{
    long c = ++a->count;
    double sample = (elapsed > CLOCK_TICK_NS ? elapsed : CLOCK_TICK_NS) / (double)size;
    a->sum_avg += sample;
    a->sum_avg2 += sample * sample;
    double mu = a->sum_avg / (double)c, var = 0.0;
    if (c > 1) {
        var = (a->sum_avg2 - (double)c * mu * mu) / (double)(c - 1);
        if (var < 0) var = 0.0;
    }
    atomic_fetch_add_explicit(&r->stats[w].seq, 1, memory_order_acq_rel);
    atomic_store_explicit(&r->stats[w].b, var, memory_order_release);
    atomic_store_explicit(&r->stats[w].a, mu, memory_order_release);
    atomic_fetch_add_explicit(&r->stats[w].seq, 1, memory_order_acq_rel);
}

/* Read every worker's pi and recompute w's weight over those that have published. */
static void awf_update_weight(run_t *r, int w, struct adapt_state *a)
{
    int P = r->threads, m = 0;
    double pis[P], sum = 0, total = 0;
    for (int j = 0; j < P; j++) {
        pis[j] = atomic_load(&r->stats[j].a);
        if (pis[j] >= 0) { sum += pis[j]; m++; }
    }
    double mean = sum / m;
    for (int j = 0; j < P; j++) if (pis[j] >= 0) total += mean / pis[j];
    a->weight = (mean / pis[w]) * m / total;
}

static long adaptive_size(run_t *r, int w, struct adapt_state *a, long lo)
{
    long n = r->n, P = r->threads, left, k = r->chunk, size;
    if (r->share == SHARE_AF) {
        if (!a->count) return k;
        double mine_mu, mine_var;
        read_pair(r, w, &mine_mu, &mine_var);
        double d = 0, t_inv = 0;
        for (int j = 0; j < P; j++) {
            double mu, var;
            read_pair(r, j, &mu, &var);
            if (mu < 0) { mu = mine_mu; var = mine_var; }
            d += var / mu;
            t_inv += 1.0 / mu;
        }
        double t = 1.0 / t_inv, R = (double)(n - lo);
        size = (long)ceil((d + 2.0 * t * R - sqrt(d * d + 4.0 * d * t * R)) / (2.0 * mine_mu));
        return size > k ? size : k;
    }
    long batch = fac2_batch(r, lo, &left);
    int per_chunk = r->share == SHARE_AWF_C || r->share == SHARE_AWF_E;
    if (r->share != SHARE_WF && a->count && (per_chunk || batch != a->batch)) {
        a->batch = batch;
        awf_update_weight(r, w, a);
    }
    if (per_chunk) left = n - lo;
    size = (long)ceil(a->weight * (double)left / (double)(2 * P));
    return size > k ? size : k;
}

static void run_adaptive(run_t *r, int w, worker_state *s, int loop)
{
    struct adapt_state *a = &r->adapt[w];
    long n = r->n;
    int elapsed = r->share == SHARE_AWF_D || r->share == SHARE_AWF_E;
    int timed = r->share != SHARE_WF && !elapsed;
    for (;;) {
        if (elapsed) {   /* one clock read per request: the time since the last one includes scheduling */
            double t = now_ns();
            if (a->last >= 0) awf_measured(r, w, a, a->size, t - a->last);
            a->last = t;
        }
        long lo = atomic_load(&r->next.v), hi = lo;
        s->claims++;
        while (lo < n) {
            long size = adaptive_size(r, w, a, lo);
            hi = lo + size < n ? lo + size : n;
            if (atomic_compare_exchange_strong(&r->next.v, &lo, hi)) break;
            s->failed_claims++;
        }
        if (lo >= n) return;
        double start = timed ? now_ns() : 0;
        run_chunk(r, s, loop, lo, hi);
        a->size = hi - lo;
        if (timed) {
            double took = now_ns() - start;
            if (r->share == SHARE_AF) af_measured(r, w, a, hi - lo, took);
            else awf_measured(r, w, a, hi - lo, took);
        }
    }
}

static void prepare(run_t *r, int loop)
{
    r->n = (int)r->sizes[loop % r->program];
    r->base = r->bases[loop % r->program];
    atomic_store(&r->next.v, r->share == SHARE_STATIC_TABLE ? r->threads : 0);
    int P = r->threads;
    if (r->share == SHARE_STEALING || r->share == SHARE_ICH)
        for (int w = 0; w < P; w++) {
            long lo = (long)w * r->n / P, hi = (long)(w + 1) * r->n / P;
            atomic_store(&r->ranges[w].v, (long)pack(lo, hi));
        }
    if (r->share == SHARE_ICH) {
        for (int w = 0; w < P; w++) {
            r->ws[w].ich_k = 0;
            r->ws[w].ich_d = P;
            atomic_store(&r->ich_d[w].v, P);
            atomic_store(&r->ich_k[w].v, 0);
        }
    }
    if (r->share >= SHARE_WF) adaptive_prepare(r);
    if (r->share == SHARE_STATIC_STEAL) atomic_store(&r->steal_done.v, 0);
    if (r->share == SHARE_TBB_SIMPLE || r->share == SHARE_TBB_AUTO || r->share == SHARE_TBB_AFFINITY) {
        atomic_store(&r->tbb_left.v, r->n);
        atomic_store(&r->tbb_spawned.v, 0);
        /* Copies of mailed tasks that their owner ran stay in mailboxes until collected: the loop before is over. */
        for (int w = 0; w < P; w++) r->deques[w].head = r->deques[w].tail = r->mailboxes[w].head = r->mailboxes[w].tail = 0;
    }
    if (r->share == SHARE_HYBRID) {
        for (int i = 0; i < r->partitions; i++) atomic_store(&r->claimed[i].v, 0);
        for (int w = 0; w < P; w++) atomic_store(&r->ranges[w].v, 0);
        atomic_store(&r->claims_left.v, r->partitions);
    }
}

static inline long range_lo(long packed) { return (long)((uint64_t)packed >> 32); }
static inline long range_hi(long packed) { return (long)((uint64_t)packed & 0xffffffffu); }

/* The owner takes the front of its range: ``chunk`` iterations, or |range| / d for iCh. */
static int take_own(run_t *r, worker_state *s, int w, long *lo, long *hi)
{
    atomic_long *range = &r->ranges[w].v;
    long cur = atomic_load(range);
    for (;;) {
        long a = range_lo(cur), b = range_hi(cur);
        if (a >= b) return 0;
        long take = r->share == SHARE_ICH ? (b - a) / s->ich_d : r->chunk;
        if (take < 1) take = 1;
        if (take > b - a) take = b - a;
        if (atomic_compare_exchange_weak(range, &cur, (long)pack(a + take, b))) { *lo = a; *hi = a + take; return 1; }
    }
}

static inline int random_victim(worker_state *s, int w, int threads)
{
    uint64_t x = s->rng;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    s->rng = x;
    int v = (int)(x % (uint64_t)(threads - 1));
    return v + (v >= w);
}

/* One attempt on ``v``: take the back half of its range. */
static int steal_from(run_t *r, worker_state *s, int v, long *lo, long *hi)
{
    atomic_long *range = &r->ranges[v].v;
    long cur = atomic_load(range);
    s->steal_attempts++;
    for (;;) {
        long a = range_lo(cur), b = range_hi(cur);
        if (b - a < 2) return 0;
        long half = (b - a) / 2;
        if (atomic_compare_exchange_weak(range, &cur, (long)pack(a, b - half))) {
            *lo = b - half; *hi = b;
            s->steals++;
            if (r->share == SHARE_ICH) {   /* average progress and divisor with the victim */
                s->ich_k = (s->ich_k + atomic_load_explicit(&r->ich_k[v].v, memory_order_relaxed)) / 2;
                s->ich_d = (s->ich_d + atomic_load(&r->ich_d[v].v)) / 2;
                if (s->ich_d < 1) s->ich_d = 1;
            }
            return 1;
        }
    }
}

/* Random victims until P - 1 attempts in a row fail, then one sweep over all the others in order. */
static int steal_half(run_t *r, worker_state *s, int w, long *lo, long *hi)
{
    int P = r->threads;
    if (P < 2) return 0;
    for (int k = 1; k < P; k++)
        if (steal_from(r, s, random_victim(s, w, P), lo, hi)) return 1;
    for (int k = 1; k < P; k++)
        if (steal_from(r, s, (w + k) % P, lo, hi)) return 1;
    return 0;
}

/* iCh: after a chunk, publish the progress on the own line, read every thread's for the mean progress,
 * classify against it and adapt the divisor. */
static void ich_adapt(run_t *r, worker_state *s, int w, long done)
{
    s->ich_k += done;
    atomic_store_explicit(&r->ich_k[w].v, s->ich_k, memory_order_relaxed);
    long total = 0;
    for (int j = 0; j < r->threads; j++) total += atomic_load_explicit(&r->ich_k[j].v, memory_order_relaxed);
    double mu = (double)total / r->threads, delta = r->eps * mu;
    if (s->ich_k < mu - delta) {
        if (s->ich_d > 1) s->ich_d /= 2;
        s->d_halved++;
    } else if (s->ich_k > mu + delta) {
        s->ich_d = 2 * s->ich_d < r->n ? 2 * s->ich_d : r->n;   /* beyond n no chunk gets smaller */
        s->d_doubled++;
    }
    atomic_store_explicit(&r->ich_d[w].v, s->ich_d, memory_order_relaxed);
}

/* Own range, then steals, until nothing is left to steal. */
static void run_stealing(run_t *r, int w, worker_state *s, int loop)
{
    long lo, hi;
    for (;;) {
        if (take_own(r, s, w, &lo, &hi)) {
            run_chunk(r, s, loop, lo, hi);
            if (r->share == SHARE_ICH) ich_adapt(r, s, w, hi - lo);
            continue;
        }
        if (!steal_half(r, s, w, &lo, &hi)) return;
        atomic_store(&r->ranges[w].v, (long)pack(lo, hi));
    }
}

/* hybrid: claim partition r by fetch-or; run it from the own range, stealable by halves. */
static int claim_and_run(run_t *r, int w, worker_state *s, int loop, int part)
{
    s->claims++;
    if (atomic_fetch_or(&r->claimed[part].v, 1)) { s->failed_claims++; return 0; }
    atomic_fetch_sub(&r->claims_left.v, 1);
    long lo = (long)part * r->n / r->partitions, hi = (long)(part + 1) * r->n / r->partitions;
    atomic_store(&r->ranges[w].v, (long)pack(lo, hi));
    long a, b;
    while (take_own(r, s, w, &a, &b)) run_chunk(r, s, loop, a, b);
    return 1;
}

/* DoHybridLoop(w): claim partitions in XOR order, skipping by the lowest set bit after a failure. */
static void hybrid_loop(run_t *r, int w, worker_state *s, int loop)
{
    long failed = 0;
    if (!claim_and_run(r, w, s, loop, w)) {
        if (s->max_failed_claims < 1) s->max_failed_claims = 1;
        return;
    }
    for (int i = 1; i < r->partitions;) {
        if (claim_and_run(r, w, s, loop, i ^ w)) { i++; failed = 0; continue; }
        if (++failed > s->max_failed_claims) s->max_failed_claims = failed;
        i += i & -i;
    }
}

static void run_hybrid(run_t *r, int w, worker_state *s, int loop)
{
    long lo, hi;
    hybrid_loop(r, w, s, loop);
    for (;;) {
        /* A thief first starts its own claiming loop if its partition is still unclaimed. */
        if (!atomic_load(&r->claimed[w].v)) { hybrid_loop(r, w, s, loop); continue; }
        if (steal_half(r, s, w, &lo, &hi)) {
            atomic_store(&r->ranges[w].v, (long)pack(lo, hi));
            long a, b;
            while (take_own(r, s, w, &a, &b)) run_chunk(r, s, loop, a, b);
            continue;
        }
        if (atomic_load(&r->claims_left.v) == 0) return;
        CHECK_ABORT(r);
    }
}

/* Claim chunk indices of loop ``loop``'s table by fetch-and-add; static-table: run chunk w first, unclaimed. */
static void run_table(run_t *r, int w, worker_state *s, int loop)
{
    int t = loop % r->tables;
    const int64_t *b = r->plan + r->plan_start[t];
    long count = (long)(r->plan_start[t + 1] - r->plan_start[t]) - 1;
    if (r->share == SHARE_STATIC_TABLE && w < count && b[w + 1] > b[w])
        run_chunk(r, s, loop, (long)b[w], (long)b[w + 1]);
    for (;;) {
        long i = atomic_fetch_add(&r->next.v, 1);
        s->claims++;
        if (i >= count) { s->failed_claims++; break; }
        run_chunk(r, s, loop, (long)b[i], (long)b[i + 1]);
    }
}

/* Fixed chunks claimed by fetch-and-add on one counter. */
static void run_dynamic(run_t *r, worker_state *s, int loop)
{
    long n = r->n, lo;
    for (;;) {
        lo = atomic_fetch_add(&r->next.v, r->chunk);
        s->claims++;
        if (lo >= n) { s->failed_claims++; break; }
        run_chunk(r, s, loop, lo, lo + r->chunk < n ? lo + r->chunk : n);
    }
}

/* static_steal (libomp's kmp_sch_static_steal): each thread's chunk indices [count, ub) packed in its range
 * word, claimed by CAS; a thief takes a quarter of a victim's remaining chunks (one when 7 or fewer remain)
 * off its tail by one CAS on the pair. Buffer states, as libomp's steal_flag: */
enum { STEAL_UNUSED, STEAL_CLAIMED, STEAL_READY, STEAL_THIEF };

static void steal_initial(long chunks, int P, int t, long *count, long *ub)
{
    long small = chunks / P, extras = chunks % P;
    *count = t * small + (t < extras ? t : extras);
    *ub = *count + small + (t < extras ? 1 : 0);
}

/* The thief got chunks [first, ub): it runs ``first`` and makes the rest its own, stealable, range. */
static int steal_took(run_t *r, worker_state *s, int w, int next, long first, long ub, long *init)
{
    s->steals++;
    s->victim = next;
    atomic_store(&r->ranges[w].v, (long)pack(first + 1, ub));
    if (first + 1 < ub) atomic_store_explicit(&r->steal_flag[w].v, STEAL_READY, memory_order_release);
    *init = first;
    return 1;
}

/* At most P - 1 attempts, from the remembered victim on, skipping thieves. */
static int steal_chunks(run_t *r, worker_state *s, int w, long chunks, long *init)
{
    int P = r->threads;
    atomic_store_explicit(&r->steal_flag[w].v, STEAL_THIEF, memory_order_release);
    for (int attempt = 1; attempt < P; attempt++) {
        int v = s->victim, last = v ? v - 1 : P - 1;
        long state = atomic_load_explicit(&r->steal_flag[v].v, memory_order_relaxed);
        while ((v == w || state == STEAL_THIEF) && v != last) {
            v = (v + 1) % P;
            state = atomic_load_explicit(&r->steal_flag[v].v, memory_order_relaxed);
        }
        s->steal_attempts++;
        if (v == w || state == STEAL_THIEF) continue;
        if (state == STEAL_UNUSED) {
            long expect = STEAL_UNUSED;
            if (atomic_compare_exchange_strong(&r->steal_flag[v].v, &expect, STEAL_THIEF)) {
                long count, ub;
                steal_initial(chunks, P, v, &count, &ub);
                return steal_took(r, s, w, (v + 1) % P, count, ub, init);
            }
        }
        for (;;) {
            long cur = atomic_load(&r->ranges[v].v), count = range_lo(cur), ub = range_hi(cur);
            if (atomic_load_explicit(&r->steal_flag[v].v, memory_order_acquire) != STEAL_READY || count >= ub) {
                s->victim = (v + 1) % P;
                break;
            }
            long cut = ub - (ub - count > 7 ? (ub - count) >> 2 : 1);
            if (atomic_compare_exchange_strong(&r->ranges[v].v, &cur, (long)pack(count, cut)))
                return steal_took(r, s, w, v, cut, ub, init);
            cpu_relax();
        }
    }
    return 0;
}

static void run_static_steal(run_t *r, int w, worker_state *s, int loop)
{
    int P = r->threads;
    long n = r->n, k = r->chunk, chunks = (n + k - 1) / k, count, ub, init;
    if (P < 2 || chunks < P) { run_dynamic(r, s, loop); return; }   /* libomp's fallback */
    atomic_long *mine = &r->ranges[w].v;
    steal_initial(chunks, P, w, &count, &ub);
    long expect = STEAL_UNUSED;
    if (atomic_compare_exchange_strong(&r->steal_flag[w].v, &expect, STEAL_CLAIMED)) {
        atomic_store(mine, (long)pack(count, ub));
        atomic_store_explicit(&r->steal_flag[w].v, STEAL_READY, memory_order_release);
    } else {
        atomic_store(mine, (long)pack(count, count));   /* a thief took the whole range */
    }
    s->victim = (w + 1) % P;
    for (;;) {
        int have = 0;
        long cur = atomic_load(mine);
        if (range_lo(cur) < range_hi(cur)) {
            s->claims++;
            while (!atomic_compare_exchange_weak(mine, &cur, (long)pack(range_lo(cur) + 1, range_hi(cur))))
                cpu_relax();
            init = range_lo(cur);
            have = init < range_hi(cur);
            if (!have) s->failed_claims++;
        }
        if (!have && !steal_chunks(r, s, w, chunks, &init)) break;
        run_chunk(r, s, loop, init * k, init * k + k < n ? init * k + k : n);
    }
    /* The last thread done marks every buffer unused for the next loop. */
    if (atomic_fetch_add(&r->steal_done.v, 1) == P - 1)
        for (int v = 0; v < P; v++) atomic_store_explicit(&r->steal_flag[v].v, STEAL_UNUSED, memory_order_relaxed);
}

static void deque_lock(run_t *r, struct tbb_deque *d)
{
    int expect = 0;
    while (!atomic_compare_exchange_weak(&d->lock, &expect, 1)) { expect = 0; CHECK_ABORT(r); cpu_relax(); }
}

static void deque_push(run_t *r, worker_state *s, struct tbb_deque *d, const struct tbb_part *task)
{
    deque_lock(r, d);
    if (d->head == d->tail) d->head = d->tail = 0;
    if (d->tail == d->cap && d->head > 0) {   /* thieves took the oldest: move the rest down */
        memmove(d->items, d->items + d->head, (size_t)(d->tail - d->head) * sizeof *d->items);
        d->tail -= d->head; d->head = 0;
    }
    if (d->tail == d->cap) {
        struct tbb_part *grown = realloc(d->items, 2 * (size_t)d->cap * sizeof *grown);
        if (!grown) {   /* the run cannot go on: stop it, as its time bound would */
            s->out_of_memory = 1;
            atomic_store(&r->abort_flag, 1);
            atomic_store_explicit(&d->lock, 0, memory_order_release);
            pthread_exit(NULL);
        }
        d->items = grown;
        d->cap *= 2;
    }
    d->items[d->tail++] = *task;
    atomic_store_explicit(&d->lock, 0, memory_order_release);
}

/* The owner pops the newest task (``newest``), or a thief or a mailbox's owner the oldest: 1 if there was one. */
static int deque_take(run_t *r, struct tbb_deque *d, int newest, struct tbb_part *task)
{
    deque_lock(r, d);
    int got = d->tail > d->head;
    if (got) *task = d->items[newest ? --d->tail : d->head++];
    atomic_store_explicit(&d->lock, 0, memory_order_release);
    return got;
}

/* oneTBB's partitioner constants (partitioner.h), as in tbb.py. */
#define TBB_INITIAL_CHUNKS 2
#define TBB_RANGE_POOL 8
#define TBB_INIT_DEPTH 5
#define TBB_DEMAND_DEPTH_ADD 1
#define TBB_AFFINITY_POWER 4
enum { TBB_PASS, TBB_BEGIN };

static inline int tbb_factor(run_t *r) { return r->share == SHARE_TBB_AFFINITY ? 1 << TBB_AFFINITY_POWER : 1; }

static int tbb_new_node(run_t *r, int parent)
{
    int id = (int)atomic_fetch_add_explicit(&r->tbb_spawned.v, 1, memory_order_relaxed);
    if (id >= r->node_count) {   /* cannot happen: each split leaves two non-empty ranges, so spawns < n */
        atomic_store(&r->abort_flag, 1);
        pthread_exit(NULL);
    }
    struct tbb_node *node = &r->nodes[id];
    atomic_store_explicit(&node->stolen, 0, memory_order_relaxed);
    atomic_store_explicit(&node->taken, 0, memory_order_relaxed);
    atomic_store_explicit(&node->running, 0, memory_order_relaxed);
    node->parent = parent;
    return id;
}

/* Whether the task may split again: simple always (down to the grainsize), auto above divisor 1 or once more at 1
 * while depth is left, affinity while it stands for more than one thread. */
static int tbb_divisible(run_t *r, struct tbb_part *p)
{
    if (r->share == SHARE_TBB_SIMPLE) return 1;
    if (r->share == SHARE_TBB_AFFINITY) return p->divisor > tbb_factor(r);
    if (p->divisor > 1) return 1;
    if (p->divisor && p->depth) { p->depth--; p->divisor = 0; return 1; }
    return 0;
}

/* adaptive_mode's split: the divisor halves, the child gets the other half. */
static struct tbb_part tbb_child(run_t *r, struct tbb_part *p)
{
    p->divisor /= 2;
    struct tbb_part c = {0, 0, p->divisor, p->depth, TBB_PASS, p->head + p->divisor, -1, -1, -1, -1, 0};
    if (r->share == SHARE_TBB_AFFINITY) c.head %= tbb_factor(r) * r->threads;
    return c;
}

/* An initial split of [lo, hi): the middle, or affinity's proportional split giving the right child floor(t/2)
 * of the task's t threads and as much of the range; *right gets the child's partition state. */
static long tbb_split(run_t *r, struct tbb_part *p, long lo, long hi, struct tbb_part *right)
{
    if (r->share != SHARE_TBB_AFFINITY) {
        *right = tbb_child(r, p);
        return lo + (hi - lo) / 2;
    }
    int factor = tbb_factor(r), threads = p->divisor / factor, share = threads / 2;
    long mid = hi - (long)((double)(hi - lo) * share / threads + 0.5);
    p->divisor -= share * factor;
    *right = (struct tbb_part){0, 0, share * factor, p->depth, TBB_BEGIN, (p->head + p->divisor) % (factor * r->threads),
                               -1, -1, -1, -1, 0};
    return mid;
}

/* check_for_demand: auto splits deeper when a sibling was stolen; affinity first hands out affinitized tasks
 * while its divisor lasts (after its first leaf). */
static int tbb_demand(run_t *r, struct tbb_part *p, int peer_stolen)
{
    if (r->share == SHARE_TBB_AFFINITY) {
        if (p->delay == TBB_BEGIN) { p->delay = TBB_PASS; return 0; }
        if (p->divisor > 1) return 1;
        if (p->divisor && p->depth) { p->divisor = 0; return 1; }
    }
    if (peer_stolen) { p->depth += TBB_DEMAND_DEPTH_ADD; return 1; }
    return 0;
}

/* start_for::offer_work: spawn [lo, hi) as ``right``, sharing a new node with ``p``; under affinity a task with a
 * divisor is mailed to the thread its slot names (when empty, slot / 16) unless that is this one. */
static void tbb_offer(run_t *r, worker_state *s, int w, struct tbb_part *p, struct tbb_part *right, long lo, long hi)
{
    right->lo = lo; right->hi = hi;
    right->origin = w;
    if (r->share != SHARE_TBB_SIMPLE) p->node = right->node = right->self = tbb_new_node(r, p->self);
    if (r->share == SHARE_TBB_AFFINITY && right->divisor) {
        int recorded = atomic_load_explicit(&r->slots[right->head], memory_order_relaxed);
        right->target = recorded >= 0 ? recorded : right->head / tbb_factor(r);
        if (right->target != w) {
            right->mailed = 1;
            deque_push(r, s, &r->mailboxes[right->target], right);
        }
    }
    deque_push(r, s, &r->deques[w], right);
    s->tasks++;
}

static void tbb_leaf(run_t *r, worker_state *s, int loop, long lo, long hi)
{
    run_chunk(r, s, loop, lo, hi);
    atomic_fetch_sub(&r->tbb_left.v, hi - lo);
}

/* start_for::execute, as tbb.py's TbbAuto.run_range: claim a mailed task, note where it runs, check whether it was
 * stolen, split it while divisible, then run it, through a range pool when depth is left. */
static void tbb_execute(run_t *r, worker_state *s, int w, int loop, struct tbb_part *p)
{
    long lo = p->lo, hi = p->hi, grain = r->chunk;
    if (p->mailed && atomic_exchange(&r->nodes[p->self].taken, 1)) return;   /* its other copy ran */
    int factor = tbb_factor(r), tracked = r->share != SHARE_TBB_SIMPLE;
    if (tracked) {
        atomic_store(&r->nodes[p->self].running, 1);
        if (p->target >= 0 && p->target != w && p->divisor)   /* note_affinity */
            atomic_store_explicit(&r->slots[p->head], w, memory_order_relaxed);
        if (p->divisor / factor == 0) {   /* check_being_stolen */
            p->divisor = 1;
            if (p->node >= 0 && w != p->origin
                && atomic_load(&r->nodes[r->nodes[p->node].parent].running)) {
                atomic_store(&r->nodes[p->node].stolen, 1);
                if (!p->depth) p->depth++;
                p->depth += TBB_DEMAND_DEPTH_ADD;
            }
        }
    }
    struct tbb_part right;
    while (hi - lo > grain && tbb_divisible(r, p)) {
        long mid = tbb_split(r, p, lo, hi, &right);
        tbb_offer(r, s, w, p, &right, mid, hi);
        hi = mid;
    }
    if (hi - lo <= grain || !p->depth) {
        tbb_leaf(r, s, loop, lo, hi);
    } else {
        /* The range pool: ranges and their depths, index 0 the oldest and largest. */
        long a[TBB_RANGE_POOL], b[TBB_RANGE_POOL];
        int d[TBB_RANGE_POOL], count = 1;
        a[0] = lo; b[0] = hi; d[0] = 0;
        while (count) {
            while (count < TBB_RANGE_POOL && d[count - 1] < p->depth && b[count - 1] - a[count - 1] > grain) {
                long mid = a[count - 1] + (b[count - 1] - a[count - 1]) / 2;
                a[count] = a[count - 1]; b[count] = mid; d[count] = ++d[count - 1];
                a[count - 1] = mid;
                count++;
            }
            int stolen = p->node >= 0 && atomic_load(&r->nodes[p->node].stolen);
            if (tbb_demand(r, p, stolen)) {
                if (count > 1) {
                    long first_lo = a[0], first_hi = b[0];
                    int first_d = d[0];
                    memmove(a, a + 1, (size_t)(count - 1) * sizeof *a);
                    memmove(b, b + 1, (size_t)(count - 1) * sizeof *b);
                    memmove(d, d + 1, (size_t)(count - 1) * sizeof *d);
                    count--;
                    right = tbb_child(r, p);
                    right.depth -= first_d;
                    tbb_offer(r, s, w, p, &right, first_lo, first_hi);
                    continue;
                }
                if (d[0] < p->depth && b[0] - a[0] > grain) continue;
            }
            count--;
            tbb_leaf(r, s, loop, a[count], b[count]);
        }
    }
    if (tracked) atomic_store(&r->nodes[p->self].running, 0);
}

/* oneTBB's parallel_for: the master runs the root task; a thread pops its newest task, else (affinity) takes the
 * oldest task in its mailbox, else steals the oldest task of a random victim, until every iteration has run. An
 * owner leaves a task it mailed to an idle thread to that thread. */
static void run_tbb(run_t *r, int w, worker_state *s, int loop)
{
    int affinity = r->share == SHARE_TBB_AFFINITY, factor = tbb_factor(r);
    struct tbb_part task = {0, r->n, 0, 0, TBB_PASS, 0, w, -1, -1, -1, 0};
    if (r->share == SHARE_TBB_AUTO) { task.divisor = 4 * r->threads / 4 * TBB_INITIAL_CHUNKS; task.depth = TBB_INIT_DEPTH; }
    if (affinity) { task.divisor = factor * r->threads; task.depth = TBB_AFFINITY_POWER + 1; task.head = w * factor; }
    if (r->share != SHARE_TBB_SIMPLE && w == 0) { task.delay = TBB_BEGIN; task.self = tbb_new_node(r, -1); }
    int got = w == 0;   /* the master runs the root range */
    for (;;) {
        if (!got) got = deque_take(r, &r->deques[w], 1, &task);
        if (got && affinity && task.mailed && task.origin == w
            && !atomic_load_explicit(&r->nodes[task.self].taken, memory_order_relaxed)
            && !atomic_load_explicit(&r->tbb_busy[task.target].v, memory_order_relaxed)) {
            got = 0;   /* left to the idle thread it is mailed to */
            continue;
        }
        if (!got && affinity) got = deque_take(r, &r->mailboxes[w], 0, &task);
        if (!got && r->threads > 1) {
            s->steal_attempts++;
            got = deque_take(r, &r->deques[random_victim(s, w, r->threads)], 0, &task);
            s->steals += got;
        }
        if (got) {
            if (affinity) atomic_store_explicit(&r->tbb_busy[w].v, 1, memory_order_relaxed);
            tbb_execute(r, s, w, loop, &task);
            if (affinity) atomic_store_explicit(&r->tbb_busy[w].v, 0, memory_order_relaxed);
            got = 0;
            continue;
        }
        if (atomic_load(&r->tbb_left.v) == 0) return;
        CHECK_ABORT(r);
        cpu_relax();
    }
}

/* libomp's guided (kmp_sch_guided_iterative_chunked): while at least 2P(k + 1) iterations are left, a chunk of
 * (long)(left * (0.5 / P)) claimed by CAS, the counter read afresh after a failed one; then chunks of k by
 * fetch-and-add on the same counter. A loop with (2k + 1)P >= n is plain dynamic; one thread's loop is one chunk. */
static void run_guided_llvm(run_t *r, worker_state *s, int loop)
{
    long n = r->n, k = r->chunk > 0 ? r->chunk : 1;
    int P = r->threads;
    if (P == 1) {
        if (n > 0) run_chunk(r, s, loop, 0, n);
        return;
    }
    if ((2 * k + 1) * P >= n) { run_dynamic(r, s, loop); return; }
    long below = 2L * P * (k + 1);
    double share = 0.5 / (double)P;
    for (;;) {
        long lo, hi;
        for (;;) {
            lo = atomic_load(&r->next.v);
            long left = n - lo;
            if (left <= 0) return;
            s->claims++;
            if (left < below) {
                lo = atomic_fetch_add(&r->next.v, k);
                if (lo >= n) { s->failed_claims++; return; }
                hi = lo + k < n ? lo + k : n;
                break;
            }
            hi = lo + (long)((double)left * share);
            if (atomic_compare_exchange_strong(&r->next.v, &lo, hi)) break;
            s->failed_claims++;
        }
        run_chunk(r, s, loop, lo, hi);
    }
}

static void share(run_t *r, int w, worker_state *s, int loop)
{
    long n = r->n, lo, hi;
    int P = r->threads;
    switch (r->share) {
    case SHARE_STATIC:
        if (r->chunk <= 0) {
            lo = (long)w * n / P; hi = (long)(w + 1) * n / P;
            if (hi > lo) run_chunk(r, s, loop, lo, hi);
        } else {
            for (lo = (long)w * r->chunk; lo < n; lo += (long)P * r->chunk)
                run_chunk(r, s, loop, lo, lo + r->chunk < n ? lo + r->chunk : n);
        }
        break;
    case SHARE_DYNAMIC:
        run_dynamic(r, s, loop);
        break;
    case SHARE_GUIDED_LLVM:
        run_guided_llvm(r, s, loop);
        break;
    case SHARE_GUIDED:
        for (;;) {
            long cur = atomic_load(&r->next.v), size;
            do {
                if (cur >= n) break;
                size = (n - cur + P - 1) / P;
                if (size < r->chunk) size = r->chunk;
                if (size > n - cur) size = n - cur;
            } while (!atomic_compare_exchange_weak(&r->next.v, &cur, cur + size) && (s->failed_claims++, 1));
            s->claims++;
            if (cur >= n) break;
            run_chunk(r, s, loop, cur, cur + size);
        }
        break;
    case SHARE_REPLAY:
        while (s->cursor < r->plan_start[w + 1] && r->plan[3 * s->cursor] == loop) {
            const int64_t *c = &r->plan[3 * s->cursor++];
            run_chunk(r, s, loop, (long)c[1], (long)c[2]);
        }
        break;
    case SHARE_STEALING:
    case SHARE_ICH:
        run_stealing(r, w, s, loop);
        break;
    case SHARE_HYBRID:
        run_hybrid(r, w, s, loop);
        break;
    case SHARE_TABLE:
    case SHARE_STATIC_TABLE:
        run_table(r, w, s, loop);
        break;
    case SHARE_STATIC_STEAL:
        run_static_steal(r, w, s, loop);
        break;
    case SHARE_TBB_SIMPLE:
    case SHARE_TBB_AUTO:
    case SHARE_TBB_AFFINITY:
        run_tbb(r, w, s, loop);
        break;
    default:
        if (r->share >= SHARE_WF) run_adaptive(r, w, s, loop);
        break;
    }
}

static void *worker_main(void *p)
{
    worker_arg *arg = p;
    run_t *r = arg->run;
    int w = arg->w;
    worker_state *s = &r->ws[w];
    atomic_fetch_add(&r->ready.v, 1);
    if (w == 0) {
        spin_until_at_least(r, &r->ready.v, r->threads);
        r->t0 = now_ns();
        atomic_store_explicit(&r->started.v, 1, memory_order_release);
    } else {
        spin_until_at_least(r, &r->started.v, 1);
    }
    for (int loop = 0; loop < r->loops; loop++) {
        CHECK_ABORT(r);
        double t = now_ns();
        if (w == 0) prepare(r, loop);
        if (r->fork_full) full_barrier(r, w, s); else release_half(r, w, s, loop);
        if (w == r->late_worker) {   /* a late arrival: busy elsewhere for late_ns, then joins the loop */
            double until = now_ns() + r->late_ns;
            while (now_ns() < until) CHECK_ABORT(r);
        }
        double begun = now_ns();
        s->sync += begun - t;
        double compute = s->compute;
        share(r, w, s, loop);
        double ended = now_ns();
        s->schedule += (ended - begun) - (s->compute - compute);
        if (r->join_full) full_barrier(r, w, s); else join_half(r, w, s, loop);
        double joined = now_ns();
        s->sync += joined - ended;
        if (s->marks) {
            double *m = s->marks + 4 * (size_t)loop;
            m[0] = t - r->t0; m[1] = begun - r->t0; m[2] = ended - r->t0; m[3] = joined - r->t0;
        }
        if (w == 0) r->loop_end[loop] = joined - r->t0;
        s->exit = joined - r->t0;
    }
    atomic_fetch_add(&r->finished, 1);
    return NULL;
}

/* Whether a signal's Python handler raised (SIGINT's KeyboardInterrupt, or what the command line installs for
 * SIGTERM), with its exception set. The caller does not hold the GIL: it takes it for the check. Handlers run
 * only in the main thread; elsewhere this is always 0. */
static int signal_raised(void)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    int raised = PyErr_CheckSignals() < 0;
    PyGILState_Release(gil);
    return raised;
}

/* Start P threads pinned to ``cpus`` and wait for them, at most ``timeout_s``; a signal whose handler raises
 * stops them as the time bound does. Called without the GIL. Returns 0, 1 if the time bound passed (threads
 * torn down), 2 if a signal's handler raised (threads torn down, its exception set), or -1 if threads could
 * not start. */
static int run_threads(int threads, const int *cpus, void *(*body)(void *), void *args, size_t arg_size,
                       atomic_int *finished, atomic_int *abort_flag, double timeout_s, int *pinned)
{
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    if (!ids) return -1;
    int started = 0, status = 0;
    *pinned = 1;
    for (; started < threads; started++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpus[started], &set);
        void *arg = (char *)args + (size_t)started * arg_size;
        int rc = -1;
        if (pthread_attr_setaffinity_np(&attr, sizeof set, &set) == 0)
            rc = pthread_create(&ids[started], &attr, body, arg);
        if (rc != 0) {   /* pinning refused: run unpinned, and say so */
            *pinned = 0;
            rc = pthread_create(&ids[started], NULL, body, arg);
        }
        pthread_attr_destroy(&attr);
        if (rc != 0) { status = -1; atomic_store(abort_flag, 1); break; }
        char name[16];   /* so that top -H and ps -L show which threads are the runtime's */
        snprintf(name, sizeof name, "simsched-%d", started);
        pthread_setname_np(ids[started], name);
    }
    double deadline = now_ns() + timeout_s * 1e9;
    while (status == 0 && atomic_load(finished) < threads) {
        if (now_ns() > deadline) { atomic_store(abort_flag, 1); status = 1; break; }
        /* Ctrl-C and SIGTERM: the workers see the abort flag between chunks and in every wait. */
        if (signal_raised()) { atomic_store(abort_flag, 1); status = 2; break; }
        struct timespec nap = {0, 5000000};   /* the watcher wakes rarely: it shares the CPUs */
        nanosleep(&nap, NULL);
    }
    for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
    free(ids);
    return status;
}

static const char *SHARES[] = {"static", "dynamic", "guided", "stealing", "replay", "ich", "hybrid",
                               "static_steal", "tbb_simple", "table", "static-table", "tbb_auto",
                               "tbb_affinity", "guided_llvm", NULL};
static const char *BARRIERS[] = {"central", "tree", NULL};

static int lookup(const char *name, const char **names)
{
    for (int i = 0; names[i]; i++) if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

static PyObject *bytes_of(const void *data, size_t size)
{
    return PyBytes_FromStringAndSize(size ? data : "", (Py_ssize_t)size);
}

static const char *PATTERNS[] = {"stride", "stream", "random", NULL};

/* Map the kernel's arrays without touching them: the worker that first runs an iteration faults its pages in
 * (first touch), unless ``interleave`` names the NUMA nodes to deal the pages over (mbind, MPOL_INTERLEAVE).
 * Iteration i gets elems[i] doubles starting on a line of its own. Returns 0, or -1 with a Python error set. */
static int map_arrays(run_t *r, Py_buffer *elems, const char *pattern, long line_elems, uint64_t chase_seed,
                      uint64_t interleave)
{
    const int64_t *count = elems->buf;
    r->pattern = lookup(pattern, PATTERNS);
    if (r->pattern < 0 || line_elems < 1 || elems->len != (Py_ssize_t)r->total * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "native run: bad memory kernel (pattern, line or one size per iteration)");
        return -1;
    }
    int64_t *off = malloc((size_t)r->total * sizeof *off);
    if (!off) { PyErr_NoMemory(); return -1; }
    r->offsets = off;
    r->elems = count;
    r->line_elems = line_elems;
    r->chase_seed = chase_seed;
    int64_t total = 0;
    for (long i = 0; i < r->total; i++) {
        if (count[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "native run: an iteration's array size is negative");
            return -1;
        }
        off[i] = total;
        total += (count[i] + line_elems - 1) / line_elems * line_elems;
    }
    size_t bytes = (size_t)total * sizeof(double);
    if (bytes == 0) return 0;   /* every iteration touches nothing */
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) { PyErr_NoMemory(); return -1; }
    r->arrays = mem;
    r->mapped = bytes;
    if (interleave) {
        /* MPOL_INTERLEAVE = 3 (linux/mempolicy.h); maxnode counts the mask's bits. */
        unsigned long mask = (unsigned long)interleave;
        if (syscall(SYS_mbind, mem, bytes, 3, &mask, (unsigned long)(8 * sizeof mask), 0) != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
    }
    return 0;
}

/* run(costs: bytes of float64, loops, cpus: list[int], share, barrier, fork_full, join_full, chunk, timeout_s,
 *     plan: bytes of int64 (loop, lo, hi) triples by worker, plan_start: bytes of int64 offsets (P + 1),
 *     eps, timeline: bool, elems: bytes of int64 (doubles per iteration, b"" for no memory kernel),
 *     pattern, line_elems, chase_seed, interleave_nodes: int bit mask (0: first touch),
 *     sizes: bytes of int64 (the program's loop sizes, summing to len(costs); b"" for one loop of them all),
 *     csr: () or (indptr int64, indices int32, values float64 or b"", x float64, rows int64 or b"", n_rows))
 * -> dict(chunks=bytes, workers=bytes, state=bytes (compute, schedule, sync per worker), loop_end=list,
 *         counters=dict, pinned=bool, marks=bytes (with timeline: P x loops x 4 doubles, else empty),
 *         out=bytes (the CSR kernel's n_rows outputs, else empty));
 * the plan is only read by the "replay" share, by "table" and "static-table" as their chunk tables (int64
 * bounds of each table one after another, and the offsets of each table's first bound: tables + 1 of them),
 * and by the weighted shares (wf, awf-*) as P float64 starting weights (b"": all 1); the caller checks the
 * CSR arrays' indices are in range */
/* Point the run at its chunk tables after checking that each is 0 = b0 <= b1 <= ... = its loop's size and that
 * tables are whole programs (so table l % tables belongs to program loop l % program); -1 with an error set. */
static int check_tables(run_t *r, Py_buffer *plan, Py_buffer *plan_start)
{
    Py_ssize_t tables = plan_start->buf ? plan_start->len / (Py_ssize_t)sizeof(int64_t) - 1 : 0;
    const int64_t *b = plan->buf, *start = plan_start->buf;
    int ok = tables >= 1 && tables <= INT32_MAX && plan_start->len % (Py_ssize_t)sizeof(int64_t) == 0
             && tables % r->program == 0 && start[0] == 0
             && start[tables] * (Py_ssize_t)sizeof(int64_t) == plan->len;
    /* Every table holds at least two bounds and lies inside the plan, before any bound is read. */
    for (Py_ssize_t t = 0; ok && t < tables; t++) ok = start[t] >= 0 && start[t + 1] > start[t] + 1
                                                     && start[t + 1] <= start[tables];
    for (Py_ssize_t t = 0; ok && t < tables; t++) {
        int64_t first = start[t], last = start[t + 1] - 1;
        ok = b[first] == 0 && b[last] == r->sizes[t % r->program];
        for (int64_t i = first; ok && i < last; i++) ok = b[i] <= b[i + 1];
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "native run: a chunk table must hold tables of bounds 0 <= ... = n, "
                                          "a whole number of programs, and their offsets");
        return -1;
    }
    r->plan = b;
    r->plan_start = start;
    r->tables = (int)tables;
    return 0;
}

static PyObject *native_run(PyObject *self, PyObject *args)
{
    Py_buffer costs, plan = {0}, plan_start = {0}, elems = {0}, sizes = {0};
    Py_buffer indptr = {0}, indices = {0}, values = {0}, x = {0}, rows = {0};
    PyObject *csr = NULL;
    Py_ssize_t n_rows = 0;
    int64_t one_size = 0;
    int loops, fork_full, join_full, chunk;
    double eps = 0.33;
    int timeline = 0;
    const char *share_name, *barrier_name, *pattern_name = "stride";
    long line_elems = 8;
    unsigned long long chase_seed = 0, interleave = 0;
    PyObject *cpu_list;
    double timeout_s;
    int late_worker = -1;
    double late_ns = 0.0;
    if (!PyArg_ParseTuple(args, "y*iO!sspp" "id|y*y*dpy*slKKy*O!id", &costs, &loops, &PyList_Type, &cpu_list,
                          &share_name, &barrier_name, &fork_full, &join_full, &chunk, &timeout_s, &plan,
                          &plan_start, &eps, &timeline, &elems, &pattern_name, &line_elems, &chase_seed,
                          &interleave, &sizes, &PyTuple_Type, &csr, &late_worker, &late_ns))
        return NULL;
    if (csr && PyTuple_GET_SIZE(csr)
        && !PyArg_ParseTuple(csr, "y*y*y*y*y*n", &indptr, &indices, &values, &x, &rows, &n_rows)) {
        PyBuffer_Release(&costs);
        if (plan.buf) PyBuffer_Release(&plan);
        if (plan_start.buf) PyBuffer_Release(&plan_start);
        if (elems.buf) PyBuffer_Release(&elems);
        if (sizes.buf) PyBuffer_Release(&sizes);
        return NULL;
    }
    PyObject *result = NULL;
    run_t r;
    memset(&r, 0, sizeof r);
    int threads = (int)PyList_Size(cpu_list);
    int *cpus = calloc((size_t)threads, sizeof *cpus);
    worker_arg *wargs = calloc((size_t)threads, sizeof *wargs);
    r.ws = aligned_alloc(LINE, (size_t)threads * sizeof *r.ws);
    if (r.ws) memset(r.ws, 0, (size_t)threads * sizeof *r.ws);
    r.loop_end = calloc((size_t)(loops > 0 ? loops : 1), sizeof *r.loop_end);
    r.ranges = aligned_alloc(LINE, (size_t)threads * sizeof(padded));
    r.arrived = aligned_alloc(LINE, (size_t)threads * sizeof(padded));
    r.released = aligned_alloc(LINE, (size_t)threads * sizeof(padded));
    r.ich_d = aligned_alloc(LINE, (size_t)threads * sizeof(padded));
    r.ich_k = aligned_alloc(LINE, (size_t)threads * sizeof(padded));
    r.partitions = 1;
    while (r.partitions < threads) r.partitions *= 2;
    r.claimed = aligned_alloc(LINE, (size_t)r.partitions * sizeof(padded));
    r.stats = aligned_alloc(LINE, (size_t)threads * sizeof *r.stats);
    r.adapt = calloc((size_t)threads, sizeof *r.adapt);
    r.steal_flag = aligned_alloc(LINE, (size_t)threads * sizeof(padded));
    r.deques = aligned_alloc(LINE, (size_t)threads * sizeof(struct tbb_deque));
    r.mailboxes = aligned_alloc(LINE, (size_t)threads * sizeof(struct tbb_deque));
    r.tbb_busy = aligned_alloc(LINE, (size_t)threads * sizeof(padded));
    r.slots = calloc((size_t)threads << TBB_AFFINITY_POWER, sizeof *r.slots);
    if (r.deques) for (int w = 0; w < threads; w++) r.deques[w].items = NULL;
    if (r.mailboxes) for (int w = 0; w < threads; w++) r.mailboxes[w].items = NULL;
    if (!r.mailboxes || !r.tbb_busy || !r.slots) { PyErr_NoMemory(); goto done; }
    if (!cpus || !wargs || !r.ws || !r.loop_end || !r.ranges || !r.arrived || !r.released || !r.ich_d
        || !r.ich_k || !r.claimed || !r.stats || !r.adapt || !r.steal_flag || !r.deques) {
        PyErr_NoMemory();
        goto done;
    }
    for (int w = 0; w < threads; w++) {
        cpus[w] = (int)PyLong_AsLong(PyList_GetItem(cpu_list, w));
        atomic_init(&r.ranges[w].v, 0);
        atomic_init(&r.arrived[w].v, 0);
        atomic_init(&r.released[w].v, 0);
        atomic_init(&r.ich_d[w].v, threads);
        atomic_init(&r.ich_k[w].v, 0);
        atomic_init(&r.steal_flag[w].v, STEAL_UNUSED);
        struct tbb_deque *boxes[] = {&r.deques[w], &r.mailboxes[w]};
        for (int k = 0; k < 2; k++) {
            atomic_init(&boxes[k]->lock, 0);
            boxes[k]->head = boxes[k]->tail = 0;
            boxes[k]->cap = TBB_DEQUE;
            boxes[k]->items = malloc(TBB_DEQUE * sizeof *boxes[k]->items);
            if (!boxes[k]->items) { PyErr_NoMemory(); goto done; }
        }
        atomic_init(&r.tbb_busy[w].v, 0);
        for (int k = 0; k < 1 << TBB_AFFINITY_POWER; k++) atomic_init(&r.slots[(w << TBB_AFFINITY_POWER) + k], -1);
        r.ws[w].rng = 0x9E3779B97F4A7C15ull * (uint64_t)(w + 1);
        wargs[w] = (worker_arg){&r, w};
    }
    if (PyErr_Occurred()) goto done;
    r.threads = threads;
    r.loops = loops;
    r.late_worker = late_ns > 0 && late_worker >= 0 && late_worker < threads ? late_worker : -1;
    r.late_ns = late_ns;
    r.total = (long)(costs.len / (Py_ssize_t)sizeof(double));
    r.costs = costs.buf;
    one_size = r.total;
    r.program = sizes.buf && sizes.len ? (int)(sizes.len / (Py_ssize_t)sizeof(int64_t)) : 1;
    r.sizes = sizes.buf && sizes.len ? sizes.buf : &one_size;
    r.bases = calloc((size_t)r.program, sizeof *r.bases);
    if (!r.bases) { PyErr_NoMemory(); goto done; }
    int64_t sum = 0;
    for (int l = 0; l < r.program; l++) {
        if (r.sizes[l] < 1 || r.sizes[l] > INT32_MAX) { sum = -1; break; }
        r.bases[l] = sum;
        sum += r.sizes[l];
    }
    if (sum != r.total || (sizes.buf && sizes.len % (Py_ssize_t)sizeof(int64_t))) {
        PyErr_SetString(PyExc_ValueError, "native run: the loop sizes must be >= 1 and add up to the costs");
        goto done;
    }
    r.n = (int)r.sizes[0];
    if (indptr.buf) {
        Py_ssize_t nnz = indices.len / (Py_ssize_t)sizeof(int32_t);
        int64_t biggest = 0;
        for (int l = 0; l < r.program; l++) if (r.sizes[l] > biggest) biggest = r.sizes[l];
        if (n_rows < 1 || indptr.len != (n_rows + 1) * (Py_ssize_t)sizeof(int64_t) || x.len % sizeof(double)
            || (values.len && values.len != nnz * (Py_ssize_t)sizeof(double))
            || (rows.len ? rows.len != (Py_ssize_t)r.total * (Py_ssize_t)sizeof(int64_t) : biggest > n_rows)) {
            PyErr_SetString(PyExc_ValueError, "native run: bad CSR kernel (indptr, values, rows or sizes)");
            goto done;
        }
        r.indptr = indptr.buf;
        r.indices = indices.buf;
        r.values = values.len ? values.buf : NULL;
        r.x = x.buf;
        r.rows = rows.len ? rows.buf : NULL;
        r.out = calloc((size_t)n_rows, sizeof(double));
        if (!r.out) { PyErr_NoMemory(); goto done; }
    }
    r.share = lookup(share_name, SHARES);
    if (r.share == SHARE_TBB_AUTO || r.share == SHARE_TBB_AFFINITY) {
        int64_t biggest = 0;
        for (int l = 0; l < r.program; l++) if (r.sizes[l] > biggest) biggest = r.sizes[l];
        r.node_count = biggest + 1;
        r.nodes = malloc((size_t)r.node_count * sizeof *r.nodes);
        if (!r.nodes) { PyErr_NoMemory(); goto done; }
    }
    if (r.share < 0 && lookup(share_name, ADAPTIVE_SHARES) >= 0) {
        r.share = SHARE_WF + lookup(share_name, ADAPTIVE_SHARES);
        /* The weighted shares take their P starting weights where replay takes its plan. */
        if (plan.buf && plan.len) {
            if (plan.len != (Py_ssize_t)((size_t)threads * sizeof(double))) {
                PyErr_SetString(PyExc_ValueError, "native run: a weighted share needs one float64 weight per thread");
                goto done;
            }
            r.weights = plan.buf;
        }
    }
    r.barrier = lookup(barrier_name, BARRIERS);
    r.fork_full = fork_full;
    r.join_full = join_full;
    r.chunk = chunk > 0 ? chunk : (r.share == SHARE_STATIC ? 0 : 1);
    r.eps = eps;
    if (elems.buf && elems.len) {
        if (map_arrays(&r, &elems, pattern_name, line_elems, chase_seed, interleave) < 0) goto done;
    }
    if (r.share < 0 || r.barrier < 0 || threads < 1 || r.total < 1) {
        PyErr_SetString(PyExc_ValueError, "native run: bad share, barrier, thread count or empty loop");
        goto done;
    }
    if (r.share == SHARE_TABLE || r.share == SHARE_STATIC_TABLE) {
        if (check_tables(&r, &plan, &plan_start) < 0) goto done;
    }
    /* Reserve (and touch) each worker's trace up front, so growing it does not fault pages inside loops. */
    size_t mean_n = (size_t)r.total / (size_t)r.program + 1;
    size_t per_loop = r.share == SHARE_STATIC ? (r.chunk > 0 ? mean_n / r.chunk / threads + 2 : 1)
                    : mean_n / (r.chunk > 0 ? r.chunk : 1) / threads * 2 + 16;
    if (r.tables)   /* a table says how many chunks there are */
        per_loop = (size_t)(r.plan_start[r.tables] / r.tables) / threads * 2 + 16;
    size_t reserve = per_loop * (size_t)loops;
    if (reserve > ((size_t)1 << 22)) reserve = (size_t)1 << 22;
    for (int w = 0; w < threads; w++) {
        r.ws[w].recs = malloc(reserve * sizeof(chunk_rec));
        if (!r.ws[w].recs) { PyErr_NoMemory(); goto done; }
        memset(r.ws[w].recs, 0, reserve * sizeof(chunk_rec));
        r.ws[w].cap = reserve;
        if (timeline) {
            r.ws[w].marks = calloc(4 * (size_t)(loops > 0 ? loops : 1), sizeof(double));
            if (!r.ws[w].marks) { PyErr_NoMemory(); goto done; }
        }
    }
    if (r.share == SHARE_REPLAY) {
        r.plan = plan.buf;
        r.plan_start = plan_start.buf;
        if (!plan.buf || !plan_start.buf || plan_start.len != (Py_ssize_t)((threads + 1) * sizeof(int64_t))
            || r.plan_start[threads] * 3 * (Py_ssize_t)sizeof(int64_t) != plan.len) {
            PyErr_SetString(PyExc_ValueError, "native run: replay needs a plan and P + 1 offsets into it");
            goto done;
        }
        for (int w = 0; w < threads; w++) r.ws[w].cursor = r.plan_start[w];
    }
    int status, pinned;
    Py_BEGIN_ALLOW_THREADS
    status = run_threads(threads, cpus, worker_main, wargs, sizeof *wargs, &r.finished, &r.abort_flag,
                         timeout_s, &pinned);
    Py_END_ALLOW_THREADS
    if (status == 2) goto done;   /* the signal's exception is set */
    if (status != 0) {
        char message[160];
        if (status > 0)
            snprintf(message, sizeof message, "native run passed its time bound of %g s; its threads were stopped",
                     timeout_s);
        else
            snprintf(message, sizeof message, "native run: could not start %d threads", threads);
        PyErr_SetString(PyExc_TimeoutError, message);
        goto done;
    }
    size_t total = 0;
    for (int w = 0; w < threads; w++) {
        if (r.ws[w].out_of_memory) { PyErr_NoMemory(); goto done; }
        total += r.ws[w].count;
    }
    chunk_rec *all = malloc((total ? total : 1) * sizeof *all);
    int64_t *workers = malloc((total ? total : 1) * sizeof *workers);
    double *state = malloc((size_t)threads * 3 * sizeof *state);
    size_t mark_count = timeline ? (size_t)threads * 4 * (size_t)loops : 0;
    double *marks = malloc((mark_count ? mark_count : 1) * sizeof *marks);
    if (!all || !workers || !state || !marks) {
        free(all); free(workers); free(state); free(marks); PyErr_NoMemory(); goto done;
    }
    size_t k = 0;
    long chunks = 0, claims = 0, failed = 0, steals = 0, attempts = 0, halved = 0, doubled = 0, max_failed = 0;
    long tasks = 0;
    for (int w = 0; w < threads; w++) {
        worker_state *s = &r.ws[w];
        for (size_t i = 0; i < s->count; i++, k++) { all[k] = s->recs[i]; workers[k] = w; }
        state[3 * w] = s->compute; state[3 * w + 1] = s->schedule; state[3 * w + 2] = s->sync;
        if (timeline) memcpy(marks + (size_t)w * 4 * (size_t)loops, s->marks, 4 * (size_t)loops * sizeof *marks);
        chunks += s->chunks; claims += s->claims; failed += s->failed_claims;
        steals += s->steals; attempts += s->steal_attempts; halved += s->d_halved; doubled += s->d_doubled;
        if (s->max_failed_claims > max_failed) max_failed = s->max_failed_claims;
        tasks += s->tasks;
    }
    /* With a full join the others leave the last barrier after the master: the run ends with the last. */
    for (int w = 0; w < threads && loops > 0; w++)
        if (r.ws[w].exit > r.loop_end[loops - 1]) r.loop_end[loops - 1] = r.ws[w].exit;
    PyObject *ends = PyList_New(loops);
    for (int i = 0; ends && i < loops; i++) PyList_SET_ITEM(ends, i, PyFloat_FromDouble(r.loop_end[i]));
    long phases = (long)loops * ((fork_full ? 2 : 1) + (join_full ? 2 : 1));
    result = Py_BuildValue("{s:N,s:N,s:N,s:N,s:{s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l},s:O,s:N,s:N}",
                           "chunks", bytes_of(all, total * sizeof *all),
                           "workers", bytes_of(workers, total * sizeof *workers),
                           "state", bytes_of(state, (size_t)threads * 3 * sizeof *state),
                           "loop_end", ends,
                           "counters", "chunks", chunks, "claims", claims, "failed_claims", failed,
                           "steals", steals, "steal_attempts", attempts, "barrier_phases", phases,
                           "d_halved", halved, "d_doubled", doubled, "max_failed_claims", max_failed,
                           "tasks_created", tasks,
                           "pinned", pinned ? Py_True : Py_False,
                           "marks", bytes_of(marks, mark_count * sizeof *marks),
                           "out", bytes_of(r.out, r.out ? (size_t)n_rows * sizeof(double) : 0));
    free(all); free(workers); free(state); free(marks);
done:
    if (r.ws) for (int w = 0; w < threads; w++) { free(r.ws[w].recs); free(r.ws[w].marks); }
    free(cpus); free(wargs); free(r.ws); free(r.loop_end);
    free(r.ranges); free(r.arrived); free(r.released); free(r.ich_d); free(r.ich_k); free(r.claimed);
    free(r.stats); free(r.adapt); free(r.steal_flag);
    for (int w = 0; w < threads && r.deques && r.mailboxes; w++) { free(r.deques[w].items); free(r.mailboxes[w].items); }
    free(r.deques); free(r.mailboxes); free(r.tbb_busy); free(r.slots); free(r.nodes);
    if (r.arrays) munmap(r.arrays, r.mapped);
    free(r.offsets);
    free(r.bases);
    free(r.out);
    PyBuffer_Release(&costs);
    if (sizes.buf) PyBuffer_Release(&sizes);
    Py_buffer *csr_buffers[] = {&indptr, &indices, &values, &x, &rows};
    for (int i = 0; i < 5; i++) if (csr_buffers[i]->buf) PyBuffer_Release(csr_buffers[i]);
    if (elems.buf) PyBuffer_Release(&elems);
    if (plan.buf) PyBuffer_Release(&plan);
    if (plan_start.buf) PyBuffer_Release(&plan_start);
    return result;
}

/* ---- calibration probes ------------------------------------------------------------------- */

typedef struct {
    padded flag;
    int rounds, batch;
    int handoff;   /* 1: each side spins reading the flag and then stores its move; 0: it claims it by CAS */
    double elapsed;
    double *marks; /* side 0: when each batch of ``batch`` round trips ended (marks[0]: the start) */
    atomic_int ready, finished, abort_flag;
} pingpong_t;

typedef struct { pingpong_t *p; int side; } pingpong_arg;

static void *pingpong_side(void *v)
{
    pingpong_arg *a = v;
    pingpong_t *p = a->p;
    /* Both sides up before the clock starts: the first batch must not time the other thread's start. */
    atomic_fetch_add(&p->ready, 1);
    while (atomic_load(&p->ready) < 2) {
        if (atomic_load_explicit(&p->abort_flag, memory_order_relaxed)) goto out;
        cpu_relax();
    }
    /* One round more than asked: side 0 marks the clock right after its move of every batch's first round, so
     * that consecutive marks are exactly ``batch`` round trips apart, the last one included. */
    for (long i = 0; i <= p->rounds; i++) {
        long mine = 2 * i + a->side, next = mine + 1;
        if (p->handoff) {
            /* Wait reading the flag, as a barrier's waiter does, then store our move: a write seen by a spinner. */
            while (atomic_load_explicit(&p->flag.v, memory_order_acquire) != mine) {
                if (atomic_load_explicit(&p->abort_flag, memory_order_relaxed)) goto out;
                cpu_relax();
            }
            atomic_store_explicit(&p->flag.v, next, memory_order_release);
        } else {
            /* Wait for the other side's move, then make ours with a compare-and-swap. */
            long expected = mine;
            while (!atomic_compare_exchange_weak(&p->flag.v, &expected, next)) {
                if (atomic_load_explicit(&p->abort_flag, memory_order_relaxed)) goto out;
                expected = mine;
                cpu_relax();
            }
        }
        if (a->side == 0 && i % p->batch == 0) p->marks[i / p->batch] = now_ns();
    }
    if (a->side == 0) p->elapsed = p->marks[p->rounds / p->batch] - p->marks[0];
out:
    atomic_fetch_add(&p->finished, 1);
    return NULL;
}

/* pingpong(cpu_a, cpu_b, rounds, handoff=0, batch=rounds) -> (one-way latency in ns (round trip / 2), pinned,
 * bytes of float64: the one-way latency of each batch of ``batch`` round trips, in order): with handoff, of a
 * store until the other core, spinning on reads, sees it; without, of a compare-and-swap taking the line
 * over. ``rounds`` is a whole number of batches. */
static PyObject *native_pingpong(PyObject *self, PyObject *args)
{
    int cpus[2], rounds, pinned, status, handoff = 0, batch = 0;
    if (!PyArg_ParseTuple(args, "iii|pi", &cpus[0], &cpus[1], &rounds, &handoff, &batch)) return NULL;
    if (batch == 0) batch = rounds;
    if (rounds < 1 || batch < 1 || rounds % batch) {
        PyErr_SetString(PyExc_ValueError, "pingpong: rounds must be a whole number (>= 1) of batches");
        return NULL;
    }
    int batches = rounds / batch;
    pingpong_t *p = aligned_alloc(LINE, (sizeof *p + LINE - 1) / LINE * LINE);
    double *marks = calloc((size_t)batches + 1, sizeof *marks);
    if (!p || !marks) { free(p); free(marks); return PyErr_NoMemory(); }
    memset(p, 0, sizeof *p);
    p->rounds = rounds;
    p->batch = batch;
    p->handoff = handoff;
    p->marks = marks;
    pingpong_arg sides[2] = {{p, 0}, {p, 1}};
    Py_BEGIN_ALLOW_THREADS
    status = run_threads(2, cpus, pingpong_side, sides, sizeof sides[0], &p->finished, &p->abort_flag, 30.0, &pinned);
    Py_END_ALLOW_THREADS
    double elapsed = p->elapsed;
    free(p);
    if (status != 0) {
        if (status != 2) PyErr_SetString(PyExc_TimeoutError, "ping-pong did not finish in 30 s");
        free(marks);
        return NULL;
    }
    for (int b = 0; b < batches; b++) marks[b] = (marks[b + 1] - marks[b]) / (2.0 * batch);
    PyObject *out = Py_BuildValue("(dOy#)", elapsed / (2.0 * rounds), pinned ? Py_True : Py_False,
                                  (const char *)marks, (Py_ssize_t)((size_t)batches * sizeof *marks));
    free(marks);
    return out;
}

typedef struct {
    padded word;
    int ops;
    atomic_int ready, go, finished, abort_flag;
    int threads;
    double elapsed[256];
} contention_t;

typedef struct { contention_t *c; int w; } contention_arg;

static void *contention_side(void *v)
{
    contention_arg *a = v;
    contention_t *c = a->c;
    atomic_fetch_add(&c->ready, 1);
    while (!atomic_load(&c->go)) {
        if (atomic_load(&c->abort_flag)) return NULL;
        cpu_relax();
    }
    double start = now_ns();
    for (int i = 0; i < c->ops; i++) atomic_fetch_add(&c->word.v, 1);
    c->elapsed[a->w] = now_ns() - start;
    atomic_fetch_add(&c->finished, 1);
    return NULL;
}

static void *contention_master(void *v)
{
    contention_arg *a = v;
    if (a->w == 0) {
        while (atomic_load(&a->c->ready) < a->c->threads - 1) {
            if (atomic_load(&a->c->abort_flag)) return NULL;
            cpu_relax();
        }
        atomic_store(&a->c->go, 1);
    }
    return contention_side(v);
}

/* fetch_add(cpus, ops) -> mean ns per fetch-and-add with len(cpus) threads on one line */
static PyObject *native_fetch_add(PyObject *self, PyObject *args)
{
    PyObject *cpu_list;
    int ops, pinned, status;
    if (!PyArg_ParseTuple(args, "O!i", &PyList_Type, &cpu_list, &ops)) return NULL;
    int threads = (int)PyList_Size(cpu_list);
    if (threads < 1 || threads > 256) { PyErr_SetString(PyExc_ValueError, "fetch_add: 1..256 threads"); return NULL; }
    int cpus[256];
    for (int i = 0; i < threads; i++) cpus[i] = (int)PyLong_AsLong(PyList_GetItem(cpu_list, i));
    if (PyErr_Occurred()) return NULL;
    contention_t *c = aligned_alloc(LINE, sizeof *c);
    if (!c) return PyErr_NoMemory();
    memset(c, 0, sizeof *c);
    c->ops = ops;
    c->threads = threads;
    contention_arg sides[256];
    for (int i = 0; i < threads; i++) sides[i] = (contention_arg){c, i};
    Py_BEGIN_ALLOW_THREADS
    status = run_threads(threads, cpus, contention_master, sides, sizeof sides[0], &c->finished, &c->abort_flag,
                         60.0, &pinned);
    Py_END_ALLOW_THREADS
    double mean = 0;
    for (int i = 0; i < threads; i++) mean += c->elapsed[i] / ops;
    free(c);
    if (status == 2) return NULL;
    if (status != 0) { PyErr_SetString(PyExc_TimeoutError, "fetch-and-add probe did not finish in 60 s"); return NULL; }
    return PyFloat_FromDouble(mean / threads);
}

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int rounds, posted, seen;
    double sent, latency;
    double *each;     /* each round's latency */
    atomic_int finished, abort_flag;
} wakeup_t;

typedef struct { wakeup_t *u; int side; } wakeup_arg;

/* Wait on the condition for at most 100 ms, so an abort is noticed. */
static void timed_wait(wakeup_t *u)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100000000;
    if (until.tv_nsec >= 1000000000) { until.tv_sec++; until.tv_nsec -= 1000000000; }
    pthread_cond_timedwait(&u->cond, &u->lock, &until);
}

static void *wakeup_side(void *v)
{
    wakeup_arg *a = v;
    wakeup_t *u = a->u;
    for (int i = 1; i <= u->rounds; i++) {
        if (a->side == 1) {          /* the sleeper: block until round i is posted */
            pthread_mutex_lock(&u->lock);
            while (u->posted < i) {
                if (atomic_load(&u->abort_flag)) { pthread_mutex_unlock(&u->lock); return NULL; }
                timed_wait(u);
            }
            double latency = now_ns() - u->sent;
            u->latency += latency;
            u->each[i - 1] = latency;
            u->seen = i;
            pthread_cond_signal(&u->cond);
            pthread_mutex_unlock(&u->lock);
        } else {                     /* the waker: let the sleeper block, then post and signal */
            struct timespec nap = {0, 50000};
            nanosleep(&nap, NULL);
            pthread_mutex_lock(&u->lock);
            u->posted = i;
            u->sent = now_ns();
            pthread_cond_signal(&u->cond);
            while (u->seen < i) {
                if (atomic_load(&u->abort_flag)) { pthread_mutex_unlock(&u->lock); return NULL; }
                timed_wait(u);
            }
            pthread_mutex_unlock(&u->lock);
        }
    }
    atomic_fetch_add(&u->finished, 1);
    return NULL;
}

/* wakeup(cpu_a, cpu_b, rounds) -> (mean ns from a condition signal until the sleeping thread runs, bytes of
 * float64: each round's ns) */
static PyObject *native_wakeup(PyObject *self, PyObject *args)
{
    int cpus[2], rounds, pinned, status;
    if (!PyArg_ParseTuple(args, "iii", &cpus[0], &cpus[1], &rounds)) return NULL;
    if (rounds < 1) { PyErr_SetString(PyExc_ValueError, "wakeup: rounds must be >= 1"); return NULL; }
    wakeup_t u;
    memset(&u, 0, sizeof u);
    u.each = calloc((size_t)rounds, sizeof *u.each);
    if (!u.each) return PyErr_NoMemory();
    pthread_mutex_init(&u.lock, NULL);
    pthread_cond_init(&u.cond, NULL);
    u.rounds = rounds;
    wakeup_arg sides[2] = {{&u, 0}, {&u, 1}};
    Py_BEGIN_ALLOW_THREADS
    status = run_threads(2, cpus, wakeup_side, sides, sizeof sides[0], &u.finished, &u.abort_flag, 60.0, &pinned);
    Py_END_ALLOW_THREADS
    pthread_mutex_destroy(&u.lock);
    pthread_cond_destroy(&u.cond);
    if (status != 0) {
        free(u.each);
        if (status != 2) PyErr_SetString(PyExc_TimeoutError, "wake-up probe did not finish in 60 s");
        return NULL;
    }
    PyObject *out = Py_BuildValue("(dy#)", u.latency / rounds, (const char *)u.each,
                                  (Py_ssize_t)((size_t)rounds * sizeof *u.each));
    free(u.each);
    return out;
}

/* clock_read(reads=1000000) -> mean ns one CLOCK_MONOTONIC read takes (the busy-wait's granularity) */
static PyObject *native_clock_read(PyObject *self, PyObject *args)
{
    int reads = 1000000;
    if (!PyArg_ParseTuple(args, "|i", &reads)) return NULL;
    if (reads < 1) { PyErr_SetString(PyExc_ValueError, "clock_read: reads must be >= 1"); return NULL; }
    volatile double sink = 0;
    double start = now_ns();
    for (int i = 0; i < reads; i++) sink = now_ns();
    (void)sink;
    return PyFloat_FromDouble((now_ns() - start) / reads);
}

/* ---- OS noise: fixed work quanta ------------------------------------------------------------ */

typedef struct {
    long iters, samples;
    double *durations;
    atomic_int finished, abort_flag;
} quanta_t;

static double quantum_work(long iters)
{
    volatile double x = 1.0;
    for (long i = 0; i < iters; i++) x = x * 0.999999 + 1e-6;
    return x;
}

static void *quanta_side(void *v)
{
    quanta_t *q = *(quanta_t **)v;
    for (long i = 0; i < q->samples; i++) {
        if (atomic_load_explicit(&q->abort_flag, memory_order_relaxed)) break;
        double start = now_ns();
        quantum_work(q->iters);
        q->durations[i] = now_ns() - start;
    }
    atomic_fetch_add(&q->finished, 1);
    return NULL;
}

/* quanta(cpu, quantum_ns, samples) -> (durations as float64 bytes, pinned): the same fixed work, timed again and
 * again on one pinned thread; whatever makes a quantum longer than the undisturbed ones took the core away. */
static PyObject *native_quanta(PyObject *self, PyObject *args)
{
    int cpu, pinned = 0, status;
    double quantum_ns;
    long samples;
    if (!PyArg_ParseTuple(args, "idl", &cpu, &quantum_ns, &samples)) return NULL;
    if (samples < 1 || quantum_ns <= 0) { PyErr_SetString(PyExc_ValueError, "samples and quantum must be > 0"); return NULL; }
    quanta_t q;
    memset(&q, 0, sizeof q);
    /* Iterations per quantum from a timed warm-up (the fastest of a few, so an interruption cannot inflate it). */
    long probe = 100000;
    double best = 1e300;
    for (int k = 0; k < 5; k++) {
        double start = now_ns();
        quantum_work(probe);
        double t = now_ns() - start;
        if (t < best) best = t;
    }
    q.iters = (long)(quantum_ns * probe / (best > 0 ? best : 1.0));
    if (q.iters < 1) q.iters = 1;
    q.samples = samples;
    q.durations = calloc((size_t)samples, sizeof *q.durations);
    if (!q.durations) return PyErr_NoMemory();
    quanta_t *arg = &q;
    Py_BEGIN_ALLOW_THREADS
    status = run_threads(1, &cpu, quanta_side, &arg, sizeof arg, &q.finished, &q.abort_flag, 60.0, &pinned);
    Py_END_ALLOW_THREADS
    if (status == 2) { free(q.durations); return NULL; }
    if (status != 0) { free(q.durations); PyErr_SetString(PyExc_TimeoutError, "the noise probe did not finish in 60 s"); return NULL; }
    PyObject *out = Py_BuildValue("(y#O)", (const char *)q.durations, (Py_ssize_t)(samples * sizeof(double)),
                                  pinned ? Py_True : Py_False);
    free(q.durations);
    return out;
}

/* ---- memory probes ----------------------------------------------------------------------- */

enum { PROBE_CHASE, PROBE_STREAM, PROBE_INDEPENDENT, PROBE_READ };
#define MAX_PROBE_THREADS 256

typedef struct {
    int kind, threads;
    size_t bytes, line;           /* each thread's buffer, and the line a chase step or random access takes */
    long count;                   /* chase / independent: timed accesses; stream: timed passes */
    uint64_t seed;
    atomic_int ready, go, finished, abort_flag, failed;
    double elapsed[MAX_PROBE_THREADS], units[MAX_PROBE_THREADS];
    double start[MAX_PROBE_THREADS], end[MAX_PROBE_THREADS];
} probe_t;

typedef struct { probe_t *p; int w; } probe_arg;

#define PROBE_ABORTED(p) atomic_load_explicit(&(p)->abort_flag, memory_order_relaxed)

/* One pass reading every word in order into independent sums: what a core's loads get from where the buffer
 * sits, with no stores and no dependent arithmetic to hold them back (integer sums, which the compiler may
 * vectorize without reassociating floating point). */
static double read_words(const uint64_t *w, size_t words)
{
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t k = 0;
    for (; k + 4 <= words; k += 4) { s0 += w[k]; s1 += w[k + 1]; s2 += w[k + 2]; s3 += w[k + 3]; }
    for (; k < words; k++) s0 += w[k];
    return (double)(s0 + s1 + s2 + s3);
}

/* A random cyclic permutation of the buffer's lines (Sattolo), each line's first word pointing at the next. */
static int build_chase(probe_t *p, char *buf, size_t lines, uint64_t seed)
{
    uint32_t *next = malloc(lines * sizeof *next);
    if (!next) return -1;
    for (size_t k = 0; k < lines; k++) next[k] = (uint32_t)k;
    for (size_t k = lines - 1; k > 0; k--) {
        size_t j = (size_t)(splitmix64(&seed) % k);
        uint32_t t = next[k]; next[k] = next[j]; next[j] = t;
        if ((k & 0xffff) == 0 && PROBE_ABORTED(p)) break;
    }
    for (size_t k = 0; k < lines; k++) *(void **)(buf + k * p->line) = buf + (size_t)next[k] * p->line;
    free(next);
    return 0;
}

/* ``steps`` dependent loads from ``*cursor``, checking the abort flag every 4096. */
static void *chase_steps(probe_t *p, void *cursor, long steps)
{
    void **q = cursor;
    for (long k = 0; k < steps; k++) {
        q = *q;
        if ((k & 4095) == 0 && PROBE_ABORTED(p)) break;
    }
    return q;
}

/* At least ``p->count`` loads of random lines over ``buf`` whose addresses do not depend on any load: what one
 * core's independent reads cost each, as many in flight as it keeps. The loop must not bound them itself: the
 * addresses come from an additive lagged Fibonacci generator, y[n] = y[n-7] + y[n-3] mod 2^32 (the lags of the
 * primitive trinomial x^7 + x^3 + 1: period (2^7 - 1) 2^31) held in seven registers, so each costs one add and
 * waits only on the add three addresses back, and the line floor(y lines / 2^32) one multiply (which fits in 64
 * bits: lines < 2^32); a generator that multiplied too would take turns with it on the core's multiplier. The
 * loads go to seven integer sums, unrolled seven at a time. ``pow2``: the line is a power of two. Returns the
 * sum, and the loads done in ``*loads``. */
static inline __attribute__((always_inline)) uint64_t independent_loads(probe_t *p, const char *buf, size_t lines,
                                                                         int pow2, long *loads)
{
    const size_t line = p->line;
    uint64_t seed = p->seed, n = lines, mask = ~((uint64_t)line - 1);
    int down = 32;
    for (size_t bit = 1; pow2 && bit < line; bit <<= 1) down--;
    uint32_t y0 = (uint32_t)splitmix64(&seed) | 1, y1 = (uint32_t)splitmix64(&seed),
             y2 = (uint32_t)splitmix64(&seed), y3 = (uint32_t)splitmix64(&seed), y4 = (uint32_t)splitmix64(&seed),
             y5 = (uint32_t)splitmix64(&seed), y6 = (uint32_t)splitmix64(&seed);
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0;
#define RANDOM_LINE(y) (*(const uint64_t *)(buf + (pow2 ? ((uint64_t)(y) * n) >> down & mask \
                                                        : (((uint64_t)(y) * n) >> 32) * line)))
    long rounds = (p->count + 6) / 7, r;
    for (r = 0; r < rounds; r++) {
        if ((r & 1023) == 0 && PROBE_ABORTED(p)) break;
        y0 += y4; s0 += RANDOM_LINE(y0);
        y1 += y5; s1 += RANDOM_LINE(y1);
        y2 += y6; s2 += RANDOM_LINE(y2);
        y3 += y0; s3 += RANDOM_LINE(y3);
        y4 += y1; s4 += RANDOM_LINE(y4);
        y5 += y2; s5 += RANDOM_LINE(y5);
        y6 += y3; s6 += RANDOM_LINE(y6);
    }
#undef RANDOM_LINE
    *loads = 7 * r;
    return s0 + s1 + s2 + s3 + s4 + s5 + s6;
}

static void *probe_side(void *v)
{
    probe_arg *a = v;
    probe_t *p = a->p;
    int w = a->w;
    char *buf = mmap(NULL, p->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) { atomic_store(&p->failed, 1); buf = NULL; }
#ifdef MADV_HUGEPAGE
    /* Large pages where the kernel has them: the probes time the caches and DRAM, not page walks. */
    if (buf) madvise(buf, p->bytes, MADV_HUGEPAGE);
#endif
    size_t lines = p->bytes / p->line, elems = p->bytes / sizeof(double);
    volatile double sink = 0;
    void *cursor = buf;
    if (buf) {
        if (p->kind == PROBE_CHASE) {
            if (build_chase(p, buf, lines, p->seed) < 0) atomic_store(&p->failed, 1);
            else cursor = chase_steps(p, buf, (long)lines < p->count ? (long)lines : p->count);   /* warm */
        } else {
            double *d = (double *)buf;
            for (size_t k = 0; k < elems; k++) d[k] = 1.0;   /* fault in and warm */
        }
    }
    /* Everyone ready, then all start at once (the shared-bandwidth probe reads concurrently). */
    atomic_fetch_add(&p->ready, 1);
    if (w == 0) {
        while (atomic_load(&p->ready) < p->threads && !PROBE_ABORTED(p)) cpu_relax();
        atomic_store(&p->go, 1);
    } else {
        while (!atomic_load(&p->go) && !PROBE_ABORTED(p)) cpu_relax();
    }
    if (buf && !atomic_load(&p->failed)) {
        double start = now_ns(), units = 0;
        if (p->kind == PROBE_CHASE) {
            cursor = chase_steps(p, cursor, p->count);
            units = (double)p->count;
        } else if (p->kind == PROBE_STREAM) {
            /* The stream kernel itself: each double loaded, incremented and stored back, in order. */
            for (long pass = 0; pass < p->count && !PROBE_ABORTED(p); pass++) {
                update_stream((double *)buf, (long)elems);
                units += (double)elems * sizeof(double);
            }
        } else if (p->kind == PROBE_READ) {
            for (long pass = 0; pass < p->count && !PROBE_ABORTED(p); pass++) {
                sink += read_words((const uint64_t *)buf, elems);
                units += (double)elems * sizeof(uint64_t);
            }
        } else {
            long loads;
            /* A line of a power of two is reached by a shift and a mask, any other by a second multiply. */
            uint64_t s = (p->line & (p->line - 1)) == 0 ? independent_loads(p, buf, lines, 1, &loads)
                                                        : independent_loads(p, buf, lines, 0, &loads);
            sink = (double)s;
            units = (double)loads;
        }
        double end = now_ns();
        p->start[w] = start;
        p->end[w] = end;
        p->elapsed[w] = end - start;
        p->units[w] = units;
    }
    (void)sink;
    if (cursor == (void *)1) p->units[w] = -1;   /* keeps the chase's result alive */
    if (buf) munmap(buf, p->bytes);
    atomic_fetch_add(&p->finished, 1);
    return NULL;
}

/* memory(kind, cpus, bytes, line, count, seed, timeout_s) -> (ns per access or GB/s per thread list, aggregate)
 *   "chase": dependent loads around a random cycle of lines: ns per load (first thread);
 *   "stream": ``count`` passes of the stream kernel over the buffer: GB/s of each thread, and all together;
 *   "independent": random lines whose addresses do not depend on each other: ns per access;
 *   "read": ``count`` passes reading every word in order, nothing stored: GB/s read, as for "stream".
 * Each thread has a buffer of ``bytes`` of its own. */
/* Whether a probe's threads failed, with the Python exception set: interrupted (status 2, the
   signal's exception is already set), past its timeout, or out of memory. */
static int probe_failed(int status, int failed, const char *what, double timeout_s) {
    if (status == 2) return 1;
    if (status != 0) {
        char message[160];
        snprintf(message, sizeof message, "%s did not finish in %g s", what, timeout_s);
        PyErr_SetString(PyExc_TimeoutError, message);
        return 1;
    }
    if (failed) {
        PyErr_NoMemory();
        return 1;
    }
    return 0;
}

static PyObject *native_memory(PyObject *self, PyObject *args)
{
    const char *kind_name;
    PyObject *cpu_list;
    Py_ssize_t bytes, line;
    long count;
    unsigned long long seed;
    double timeout_s;
    int pinned, status;
    static const char *KINDS[] = {"chase", "stream", "independent", "read", NULL};
    if (!PyArg_ParseTuple(args, "sO!nnlKd", &kind_name, &PyList_Type, &cpu_list, &bytes, &line, &count, &seed,
                          &timeout_s))
        return NULL;
    int kind = lookup(kind_name, KINDS), threads = (int)PyList_Size(cpu_list);
    if (kind < 0 || threads < 1 || threads > MAX_PROBE_THREADS || line < (Py_ssize_t)sizeof(void *) + 8
        || bytes < 2 * line || count < 1 || (size_t)bytes / (size_t)line > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "memory: bad kind, thread count, line, size or count");
        return NULL;
    }
    int cpus[MAX_PROBE_THREADS];
    for (int i = 0; i < threads; i++) cpus[i] = (int)PyLong_AsLong(PyList_GetItem(cpu_list, i));
    if (PyErr_Occurred()) return NULL;
    probe_t *p = aligned_alloc(LINE, (sizeof(probe_t) + LINE - 1) / LINE * LINE);
    if (!p) return PyErr_NoMemory();
    memset(p, 0, sizeof *p);
    p->kind = kind; p->threads = threads; p->bytes = (size_t)bytes; p->line = (size_t)line;
    p->count = count; p->seed = seed | 1;
    probe_arg sides[MAX_PROBE_THREADS];
    for (int i = 0; i < threads; i++) sides[i] = (probe_arg){p, i};
    Py_BEGIN_ALLOW_THREADS
    status = run_threads(threads, cpus, probe_side, sides, sizeof sides[0], &p->finished, &p->abort_flag,
                         timeout_s, &pinned);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    char what[64];
    snprintf(what, sizeof what, "the %s memory probe", kind_name);
    if (probe_failed(status, atomic_load(&p->failed), what, timeout_s)) {
        /* the exception is set */
    } else if (kind == PROBE_STREAM || kind == PROBE_READ) {
        PyObject *each = PyList_New(threads);
        double first = p->start[0], last = p->end[0], total = 0;
        for (int i = 0; each && i < threads; i++) {
            PyList_SET_ITEM(each, i, PyFloat_FromDouble(p->units[i] / p->elapsed[i]));
            total += p->units[i];
            if (p->start[i] < first) first = p->start[i];
            if (p->end[i] > last) last = p->end[i];
        }
        result = each ? Py_BuildValue("(Nd)", each, total / (last - first)) : NULL;
    } else {
        result = Py_BuildValue("d", p->elapsed[0] / p->units[0]);
    }
    free(p);
    return result;
}

/* ---- loaded latency --------------------------------------------------------------------- */

/* Thread 0 times a pointer chase while, step by step, 0, 1, ... of the other threads read their own buffers
 * in order: the latency of a dependent miss under the others' load. The buffers are built once for all steps.
 */
typedef struct {
    int threads, steps;
    const long *counts;                /* step s: threads 1 .. counts[s] read */
    size_t chase_bytes, stream_bytes, line;
    long batches, batch_loads;         /* per step: timed batches of dependent loads */
    uint64_t seed;
    atomic_int ready, finished, abort_flag, failed, done;
    padded go, stop, started, stopped; /* go, stop = s + 1: step s began, ended; readers started, stopped */
    double *samples;                   /* steps x batches: ns per load of each batch */
    double *gbs;                       /* steps: what the readers read together, GB/s */
    double bytes[MAX_PROBE_THREADS], ns[MAX_PROBE_THREADS];
} loaded_t;

typedef struct { loaded_t *p; int w; } loaded_arg;

#define LOADED_ABORTED(p) atomic_load_explicit(&(p)->abort_flag, memory_order_relaxed)
#define LOADED_SEGMENT ((size_t)256 << 10)   /* a reader looks for its step's end after this many bytes */

static void *mmap_probe(size_t bytes)
{
    char *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(buf, bytes, MADV_HUGEPAGE);   /* as the other memory probes: time the memory, not page walks */
#endif
    return buf;
}

static void loaded_chaser(loaded_t *p)
{
    probe_t chase = {.line = p->line};   /* build_chase and chase_steps only read its line and abort flag */
    size_t lines = p->chase_bytes / p->line;
    char *buf = mmap_probe(p->chase_bytes);
    void *cursor = buf;
    if (!buf || build_chase(&chase, buf, lines, p->seed) < 0) atomic_store(&p->failed, 1);
    else cursor = chase_steps(&chase, buf, p->batch_loads);   /* warm (the build wrote every line) */
    atomic_fetch_add(&p->ready, 1);
    while (atomic_load(&p->ready) < p->threads && !LOADED_ABORTED(p)) cpu_relax();
    for (int s = 0; s < p->steps && !atomic_load(&p->failed) && !LOADED_ABORTED(p); s++) {
        long readers = p->counts[s];
        atomic_store(&p->started.v, 0);
        atomic_store(&p->stopped.v, 0);
        atomic_store(&p->go.v, s + 1);
        while (atomic_load(&p->started.v) < readers && !LOADED_ABORTED(p)) cpu_relax();
        cursor = chase_steps(&chase, cursor, p->batch_loads);   /* untimed: the readers reach their pace */
        for (long b = 0; b < p->batches && !LOADED_ABORTED(p); b++) {
            double start = now_ns();
            cursor = chase_steps(&chase, cursor, p->batch_loads);
            p->samples[(size_t)s * p->batches + b] = (now_ns() - start) / (double)p->batch_loads;
        }
        atomic_store(&p->stop.v, s + 1);
        while (atomic_load(&p->stopped.v) < readers && !LOADED_ABORTED(p)) cpu_relax();
        double gbs = 0;
        for (int w = 1; w <= readers; w++) gbs += p->ns[w] > 0 ? p->bytes[w] / p->ns[w] : 0;
        p->gbs[s] = gbs;
    }
    atomic_store(&p->done, 1);
    if (cursor == (void *)1) p->gbs[0] = -1;   /* keeps the chase's result alive */
    if (buf) munmap(buf, p->chase_bytes);
}

static void loaded_reader(loaded_t *p, int w)
{
    char *buf = mmap_probe(p->stream_bytes);
    if (!buf) atomic_store(&p->failed, 1);
    else for (size_t k = 0; k < p->stream_bytes / sizeof(double); k++) ((double *)buf)[k] = 1.0;   /* fault */
    atomic_fetch_add(&p->ready, 1);
    volatile double sink = 0;
    size_t at = 0;
    long seen = 0;
    while (!atomic_load(&p->done) && !LOADED_ABORTED(p)) {
        long go = atomic_load(&p->go.v);
        if (go == seen) { cpu_relax(); continue; }
        seen = go;
        if (!buf || w > p->counts[go - 1]) continue;   /* not reading in this step */
        double bytes = 0, start = now_ns();
        atomic_fetch_add(&p->started.v, 1);
        while (atomic_load_explicit(&p->stop.v, memory_order_acquire) < go && !LOADED_ABORTED(p)) {
            size_t n = p->stream_bytes - at < LOADED_SEGMENT ? p->stream_bytes - at : LOADED_SEGMENT;
            sink += read_words((const uint64_t *)(buf + at), n / sizeof(uint64_t));
            bytes += (double)n;
            at = at + n == p->stream_bytes ? 0 : at + n;
        }
        p->bytes[w] = bytes;
        p->ns[w] = now_ns() - start;
        atomic_fetch_add(&p->stopped.v, 1);
    }
    (void)sink;
    if (buf) munmap(buf, p->stream_bytes);
}

static void *loaded_side(void *v)
{
    loaded_arg *a = v;
    if (a->w == 0) loaded_chaser(a->p);
    else loaded_reader(a->p, a->w);
    atomic_fetch_add(&a->p->finished, 1);
    return NULL;
}

/* loaded(cpus, chase_bytes, stream_bytes, line, counts, batches, batch_loads, seed, timeout_s)
 *   -> [(ns per load of each batch as float64 bytes, readers' GB/s together), ...], one per step:
 * a pointer chase over ``chase_bytes`` on cpus[0], timed in ``batches`` batches of ``batch_loads`` loads,
 * while cpus[1 .. counts[step]] each read a buffer of ``stream_bytes`` of their own in order, again and
 * again.
 */
static PyObject *native_loaded(PyObject *self, PyObject *args)
{
    PyObject *cpu_list, *count_list;
    Py_ssize_t chase_bytes, stream_bytes, line;
    long batches, batch_loads;
    unsigned long long seed;
    double timeout_s;
    int pinned, status;
    if (!PyArg_ParseTuple(args, "O!nnnO!llKd", &PyList_Type, &cpu_list, &chase_bytes, &stream_bytes, &line,
                          &PyList_Type, &count_list, &batches, &batch_loads, &seed, &timeout_s))
        return NULL;
    int threads = (int)PyList_Size(cpu_list), steps = (int)PyList_Size(count_list);
    if (threads < 1 || threads > MAX_PROBE_THREADS || steps < 1 || steps > 1024
        || line < (Py_ssize_t)sizeof(void *) + 8 || chase_bytes < 2 * line || stream_bytes < (Py_ssize_t)LINE
        || stream_bytes % (Py_ssize_t)sizeof(uint64_t) || (size_t)chase_bytes / (size_t)line > UINT32_MAX
        || batches < 1 || batch_loads < 1 || batches > 1000000) {
        PyErr_SetString(PyExc_ValueError, "loaded: bad thread count, sizes, line, steps or batches");
        return NULL;
    }
    int cpus[MAX_PROBE_THREADS];
    long counts[1024];
    for (int i = 0; i < threads; i++) cpus[i] = (int)PyLong_AsLong(PyList_GetItem(cpu_list, i));
    for (int s = 0; s < steps; s++) {
        counts[s] = PyLong_AsLong(PyList_GetItem(count_list, s));
        if (!PyErr_Occurred() && (counts[s] < 0 || counts[s] >= threads)) {
            PyErr_SetString(PyExc_ValueError, "loaded: each step's readers must be 0 .. threads - 1");
        }
    }
    if (PyErr_Occurred()) return NULL;
    loaded_t *p = aligned_alloc(LINE, (sizeof(loaded_t) + LINE - 1) / LINE * LINE);
    double *samples = malloc((size_t)steps * (size_t)batches * sizeof *samples);
    double *gbs = calloc((size_t)steps, sizeof *gbs);
    if (!p || !samples || !gbs) { free(p); free(samples); free(gbs); return PyErr_NoMemory(); }
    memset(p, 0, sizeof *p);
    p->threads = threads; p->steps = steps; p->counts = counts;
    p->chase_bytes = (size_t)chase_bytes; p->stream_bytes = (size_t)stream_bytes; p->line = (size_t)line;
    p->batches = batches; p->batch_loads = batch_loads; p->seed = seed | 1;
    p->samples = samples; p->gbs = gbs;
    loaded_arg sides[MAX_PROBE_THREADS];
    for (int i = 0; i < threads; i++) sides[i] = (loaded_arg){p, i};
    Py_BEGIN_ALLOW_THREADS
    status = run_threads(threads, cpus, loaded_side, sides, sizeof sides[0], &p->finished, &p->abort_flag,
                         timeout_s, &pinned);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (probe_failed(status, atomic_load(&p->failed), "the loaded-latency probe", timeout_s)) {
        /* the exception is set */
    } else if ((result = PyList_New(steps))) {
        for (int s = 0; s < steps; s++) {
            PyObject *raw = bytes_of(samples + (size_t)s * batches, (size_t)batches * sizeof *samples);
            PyObject *step = raw ? Py_BuildValue("(Nd)", raw, gbs[s]) : NULL;
            if (!step) { Py_CLEAR(result); break; }
            PyList_SET_ITEM(result, s, step);
        }
    }
    free(samples);
    free(gbs);
    free(p);
    return result;
}

static PyMethodDef methods[] = {
    {"run", native_run, METH_VARARGS, "Run a program of loops on pinned threads and return its trace."},
    {"pingpong", native_pingpong, METH_VARARGS, "One-way latency between two cores by ping-pong, by batch."},
    {"fetch_add", native_fetch_add, METH_VARARGS, "Mean fetch-and-add cost with threads contending."},
    {"wakeup", native_wakeup, METH_VARARGS, "Wake-up latency of a thread blocked on a condition, each too."},
    {"clock_read", native_clock_read, METH_VARARGS, "Cost of one monotonic clock read."},
    {"quanta", native_quanta, METH_VARARGS, "Durations of a fixed work quantum timed again and again (OS noise)."},
    {"memory", native_memory, METH_VARARGS, "Memory probes: chase latency, streaming bandwidth, independent misses."},
    {"loaded", native_loaded, METH_VARARGS, "Pointer-chase latency while other threads read buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "Native runtime of simsched.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
