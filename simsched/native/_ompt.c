/* simsched's OMPT tool: loaded by an OpenMP runtime through OMP_TOOL_LIBRARIES, it records when each
 * thread enters and leaves each parallel region, worksharing loop, chunk and barrier of a program.
 *
 * Each thread appends fixed-size records to its own buffer (blocks allocated and touched before use,
 * so a record costs a time-stamp read and a few stores); at the runtime's finalize, the tool writes
 * every thread's records to SIMSCHED_OMPT_OUT.PID (binary, read by simsched/native/ompt.py; the pid, so
 * that two OpenMP processes of one program never write one file) and the code addresses the records
 * name, each with the object file it lies in and its offset there, to SIMSCHED_OMPT_OUT.PID.codes, so
 * the reader can resolve them to file:line with the binary's debug info.  Each file is written to a
 * ".partial" name and renamed when whole.
 *
 * The interface below is the OpenMP 5.x tool interface (OMPT), declared here from the specification
 * so that the tool builds without a runtime's omp-tools.h.  It is built as an optional extension
 * module only to ride on the package's C build; Python never imports it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the OMPT interface (OpenMP 5.2, section 19 and 20) ---------------------------------------------- */
typedef union ompt_data_t { uint64_t value; void *ptr; } ompt_data_t;
typedef struct ompt_frame_t { ompt_data_t exit_frame, enter_frame; int exit_frame_flags, enter_frame_flags; }
    ompt_frame_t;
typedef void (*ompt_interface_fn_t)(void);
typedef ompt_interface_fn_t (*ompt_function_lookup_t)(const char *name);
typedef void (*ompt_callback_t)(void);
typedef int (*ompt_set_callback_t)(int event, ompt_callback_t callback);
typedef int (*ompt_initialize_t)(ompt_function_lookup_t lookup, int initial_device_num, ompt_data_t *tool_data);
typedef void (*ompt_finalize_t)(ompt_data_t *tool_data);
typedef struct ompt_start_tool_result_t {
    ompt_initialize_t initialize;
    ompt_finalize_t finalize;
    ompt_data_t tool_data;
} ompt_start_tool_result_t;
typedef struct ompt_dispatch_chunk_t { uint64_t start, iterations; } ompt_dispatch_chunk_t;

enum { OMPT_SET_SOMETIMES = 3 };  /* ompt_set_result_t: 0 error, 1 never, 2 impossible, >= 3 delivered */
enum { CB_PARALLEL_BEGIN = 3, CB_PARALLEL_END = 4, CB_TASK_CREATE = 5, CB_IMPLICIT_TASK = 7, CB_WORK = 20,
       CB_SYNC_REGION = 23, CB_DISPATCH = 32 };
enum { SCOPE_BEGIN = 1, SCOPE_END = 2, SCOPE_BEGINEND = 3 };
enum { TASK_INITIAL = 0x1, TASK_IMPLICIT = 0x2, TASK_EXPLICIT = 0x4 };
enum { DISPATCH_ITERATION = 1, DISPATCH_WS_LOOP_CHUNK = 3 };

/* ---- records ----------------------------------------------------------------------------------------- */
/* kind: what happened; a, b, c: as each kind says.  The reader (ompt.py) knows these numbers. */
enum {
    REC_PARALLEL_BEGIN = 1, /* a: region id, b: requested threads, c: code address */
    REC_PARALLEL_END = 2,   /* a: region id */
    REC_IMPLICIT_BEGIN = 3, /* a: region id, b: thread index << 32 | team size, c: nesting depth */
    REC_IMPLICIT_END = 4,   /* a: region id, b: thread index */
    REC_WORK_BEGIN = 5,     /* a: region id, b: work type << 32 (loops: 1, 10-13), c: code address; then COUNT */
    REC_WORK_END = 6,       /* a: region id, b: work type << 32 */
    REC_CHUNK = 7,          /* a: region id, b: first iteration, c: iterations */
    REC_SYNC_BEGIN = 8,     /* a: region id, b: sync kind */
    REC_SYNC_END = 9,       /* a: region id, b: sync kind */
    REC_TASK_CREATE = 10,   /* a: region id, b: flags, c: code address */
    REC_COUNT = 11,         /* a: region id, b: the loop's count as the runtime reports it */
    REC_ITERATION = 12,     /* a: region id, b: the iteration (runtimes that report iterations, not chunks) */
    REC_TOOL = 13,          /* b: ticks the tool spent making a block of records inside a chunk (subtracted) */
};

typedef struct { uint64_t time, kind, a, b, c; } record_t;  /* 40 bytes; time in ticks of now() */

#define BLOCK_RECORDS 65536

typedef struct block {
    struct block *next;
    size_t used;
    record_t records[BLOCK_RECORDS];
} block_t;

typedef struct buffer {
    struct buffer *next;  /* every thread's buffer, for finalize */
    block_t *first, *last;
    block_t *spare;       /* the next block, made ahead of need */
    uint64_t thread;      /* registration order */
    uint64_t region;      /* the innermost region this thread runs an implicit task of */
    uint64_t depth;       /* nesting depth of the parallel regions it is in */
} buffer_t;

static pthread_mutex_t buffers_lock = PTHREAD_MUTEX_INITIALIZER;
static buffer_t *buffers;
static uint64_t threads;
static atomic_uint_fast64_t regions;
/* initial-exec: one load from the thread pointer, not a call, though the runtime loads the tool with dlopen */
static __thread buffer_t *mine __attribute__((tls_model("initial-exec")));
static int tick_is_tsc;
static uint64_t tick0, ns0;

static inline uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The time stamp counter where it is invariant (it ticks at one rate on every core), else the clock. */
static inline uint64_t now(void)
{
#if defined(__x86_64__)
    if (tick_is_tsc)
        return __builtin_ia32_rdtsc();
#endif
    return monotonic_ns();
}

static int invariant_tsc(void)
{
#if defined(__x86_64__)
    unsigned int a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000000u));
    if (a < 0x80000007u)
        return 0;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000007u));
    return (d >> 8) & 1;
#else
    return 0;
#endif
}

static block_t *new_block(void)
{
    block_t *block = malloc(sizeof *block);
    if (!block)
        return NULL;
    /* Fault the pages in now, not in the middle of a chunk.  The stores are volatile: a compiler may turn
     * malloc and a memset to zero into calloc, which leaves fresh pages untouched. */
    volatile char *page = (volatile char *)block;
    for (size_t at = 0; at < sizeof *block; at += 4096)
        page[at] = 1;
    block->next = NULL;
    block->used = 0;
    return block;
}

static buffer_t *my_buffer(void)
{
    if (mine)
        return mine;
    buffer_t *buffer = calloc(1, sizeof *buffer);
    if (!buffer || !(buffer->first = buffer->last = new_block())) {
        free(buffer);
        return NULL;
    }
    pthread_mutex_lock(&buffers_lock);
    buffer->thread = threads++;
    buffer->next = buffers;
    buffers = buffer;
    pthread_mutex_unlock(&buffers_lock);
    return mine = buffer;
}

static inline void put(uint64_t time, uint64_t kind, uint64_t a, uint64_t b, uint64_t c)
{
    buffer_t *buffer = my_buffer();
    if (!buffer)
        return;
    block_t *block = buffer->last;
    uint64_t made = 0;  /* ticks spent making a block here, inside whatever chunk is running */
    if (block->used == BLOCK_RECORDS) {
        block_t *next = buffer->spare;
        if (!next) {
            uint64_t start = now();
            next = new_block();
            made = now() - start;
        }
        buffer->spare = NULL;
        if (!next)
            return;
        block->next = next;
        buffer->last = block = next;
    }
    record_t *r = &block->records[block->used++];
    r->time = time;
    r->kind = kind;
    r->a = a;
    r->b = b;
    r->c = c;
    if (made && block->used < BLOCK_RECORDS) {
        r = &block->records[block->used++];
        r->time = time;
        r->kind = REC_TOOL;
        r->a = 0;
        r->b = made;
        r->c = 0;
    }
}

/* Between chunks (a loop's or a barrier's end): make the next block now if this one is filling up, so that
 * its page faults do not land inside a chunk's span. */
static void prepare(void)
{
    buffer_t *buffer = mine;
    if (buffer && !buffer->spare && buffer->last->used > BLOCK_RECORDS / 2)
        buffer->spare = new_block();
}

/* ---- callbacks ----------------------------------------------------------------------------------------- */
static void on_parallel_begin(ompt_data_t *task, const ompt_frame_t *frame, ompt_data_t *parallel,
                              unsigned int requested, int flags, const void *code)
{
    uint64_t t = now();
    (void)task, (void)frame, (void)flags;
    parallel->value = atomic_fetch_add(&regions, 1) + 1;
    put(t, REC_PARALLEL_BEGIN, parallel->value, requested, (uint64_t)(uintptr_t)code);
}

static void on_parallel_end(ompt_data_t *parallel, ompt_data_t *task, int flags, const void *code)
{
    (void)task, (void)flags, (void)code;
    put(now(), REC_PARALLEL_END, parallel ? parallel->value : 0, 0, 0);
}

static void on_implicit_task(int endpoint, ompt_data_t *parallel, ompt_data_t *task, unsigned int team,
                             unsigned int index, int flags)
{
    uint64_t t = now();
    if (flags & TASK_INITIAL)
        return;
    buffer_t *buffer = my_buffer();
    if (!buffer)
        return;
    /* At the end the runtime may pass no region: the one this thread began is the one it ends.  The task
     * keeps the region it was begun in, so that after a nested region ends the outer one is current again. */
    if (endpoint == SCOPE_BEGIN) {
        if (task)
            task->value = buffer->region;
        buffer->depth++;
        buffer->region = parallel ? parallel->value : 0;
        put(t, REC_IMPLICIT_BEGIN, buffer->region, (uint64_t)index << 32 | team, buffer->depth);
    } else {
        put(t, REC_IMPLICIT_END, buffer->region, index, buffer->depth);
        if (buffer->depth)
            buffer->depth--;
        buffer->region = task ? task->value : 0;
    }
}

static void on_work(int type, int endpoint, ompt_data_t *parallel, ompt_data_t *task, uint64_t count,
                    const void *code)
{
    uint64_t t = now();
    (void)task;
    uint64_t region = parallel ? parallel->value : 0;
    if (endpoint == SCOPE_BEGIN) {
        put(t, REC_WORK_BEGIN, region, (uint64_t)type << 32, (uint64_t)(uintptr_t)code);
        put(t, REC_COUNT, region, count, 0);
    } else {
        put(t, REC_WORK_END, region, (uint64_t)type << 32, 0);
        prepare();
    }
}

static void on_dispatch(ompt_data_t *parallel, ompt_data_t *task, int kind, ompt_data_t instance)
{
    uint64_t t = now();
    (void)task;
    uint64_t region = parallel ? parallel->value : 0;
    if (kind == DISPATCH_WS_LOOP_CHUNK && instance.ptr) {
        const ompt_dispatch_chunk_t *chunk = instance.ptr;
        put(t, REC_CHUNK, region, chunk->start, chunk->iterations);
    } else if (kind == DISPATCH_ITERATION) {
        put(t, REC_ITERATION, region, instance.value, 0);
    }
}

static void on_sync_region(int kind, int endpoint, ompt_data_t *parallel, ompt_data_t *task, const void *code)
{
    uint64_t t = now();
    (void)task, (void)code;
    put(t, endpoint == SCOPE_BEGIN ? REC_SYNC_BEGIN : REC_SYNC_END, parallel ? parallel->value : 0,
        (uint64_t)kind, 0);
    if (endpoint == SCOPE_BEGIN)
        prepare();
}

static void on_task_create(ompt_data_t *task, const ompt_frame_t *frame, ompt_data_t *new_task, int flags,
                           int dependences, const void *code)
{
    (void)task, (void)frame, (void)new_task, (void)dependences;
    if (!(flags & TASK_EXPLICIT))
        return;
    buffer_t *buffer = my_buffer();
    put(now(), REC_TASK_CREATE, buffer ? buffer->region : 0, (uint64_t)flags, (uint64_t)(uintptr_t)code);
}

/* ---- start and finish ----------------------------------------------------------------------------------- */
static char events_path[4096];
/* Callbacks the runtime could not promise (ompt_set_never or an error), by number, for the reader to report. */
static unsigned int refused[8];
static int refused_count;
static const char *runtime_version = "";

static void enable(ompt_set_callback_t set, int event, ompt_callback_t callback)
{
    int result = set(event, callback);
    if (result < OMPT_SET_SOMETIMES && refused_count < 8)
        refused[refused_count++] = (unsigned int)event;
}

static int initialize(ompt_function_lookup_t lookup, int device, ompt_data_t *data)
{
    (void)device, (void)data;
    ompt_set_callback_t set = (ompt_set_callback_t)lookup("ompt_set_callback");
    if (!set)
        return 0;
    tick_is_tsc = invariant_tsc();
    tick0 = now();
    ns0 = monotonic_ns();
    enable(set, CB_PARALLEL_BEGIN, (ompt_callback_t)on_parallel_begin);
    enable(set, CB_PARALLEL_END, (ompt_callback_t)on_parallel_end);
    enable(set, CB_IMPLICIT_TASK, (ompt_callback_t)on_implicit_task);
    enable(set, CB_WORK, (ompt_callback_t)on_work);
    /* SIMSCHED_OMPT_CHUNKS=0: loops, barriers and regions only, so that timing a loop does not pay a
     * callback per chunk. */
    const char *chunks = getenv("SIMSCHED_OMPT_CHUNKS");
    if (!chunks || strcmp(chunks, "0") != 0)
        enable(set, CB_DISPATCH, (ompt_callback_t)on_dispatch);
    enable(set, CB_SYNC_REGION, (ompt_callback_t)on_sync_region);
    enable(set, CB_TASK_CREATE, (ompt_callback_t)on_task_create);
    my_buffer();
    return 1;  /* keep the tool active */
}

static void write_codes(FILE *out)
{
    /* Every distinct code address, with the object it lies in and its offset from that object's base. */
    uint64_t *seen = NULL;
    size_t count = 0, room = 0;
    for (buffer_t *buffer = buffers; buffer; buffer = buffer->next)
        for (block_t *block = buffer->first; block; block = block->next)
            for (size_t i = 0; i < block->used; i++) {
                const record_t *r = &block->records[i];
                if (r->kind != REC_WORK_BEGIN && r->kind != REC_PARALLEL_BEGIN && r->kind != REC_TASK_CREATE)
                    continue;
                size_t j = 0;
                while (j < count && seen[j] != r->c)
                    j++;
                if (j < count)
                    continue;
                if (count == room) {
                    room = room ? 2 * room : 64;
                    uint64_t *grown = realloc(seen, room * sizeof *seen);
                    if (!grown)
                        goto done;
                    seen = grown;
                }
                seen[count++] = r->c;
                Dl_info info;
                struct link_map *map = NULL;
                /* The object's load bias (0 for an executable not built as PIE), not its mapping's start:
                 * the address less the bias is what the object's debug info (addr2line) speaks of. */
                if (r->c && dladdr1((void *)(uintptr_t)r->c, &info, (void **)&map, RTLD_DL_LINKMAP) &&
                    info.dli_fname && map)
                    fprintf(out, "%llx\t%llx\t%s\n", (unsigned long long)r->c,
                            (unsigned long long)(r->c - (uint64_t)map->l_addr), info.dli_fname);
                else
                    fprintf(out, "%llx\t%llx\t\n", (unsigned long long)r->c, (unsigned long long)r->c);
            }
done:
    free(seen);
}

/* Open PATH.partial for writing; the caller renames it to PATH once it is written whole. */
static FILE *open_partial(const char *path, char *partial, size_t size)
{
    snprintf(partial, size, "%s.partial", path);
    FILE *out = fopen(partial, "wb");
    if (!out)
        fprintf(stderr, "simsched OMPT tool: cannot write %s\n", partial);
    return out;
}

static void close_whole(FILE *out, const char *partial, const char *path)
{
    int failed = ferror(out);
    failed |= fclose(out) != 0;
    if (failed || rename(partial, path) != 0) {
        fprintf(stderr, "simsched OMPT tool: cannot write %s\n", path);
        remove(partial);
    }
}

static void finalize(ompt_data_t *data)
{
    (void)data;
    uint64_t tick1 = now(), ns1 = monotonic_ns();
    if (!events_path[0])
        return;
    char path[4200], partial[4400];
    snprintf(path, sizeof path, "%s.%ld", events_path, (long)getpid());
    pthread_mutex_lock(&buffers_lock);  /* a thread registering late must not change the list being written */
    uint64_t count = 0;
    for (buffer_t *buffer = buffers; buffer; buffer = buffer->next)
        count++;
    FILE *out = open_partial(path, partial, sizeof partial);
    if (out) {
        /* Header: magic, version, the two time points that convert ticks to ns, threads, refused callbacks. */
        uint64_t header[8] = {0x31544d4f53444d53ull /* "SMDSOMT1" */, 1, tick0, ns0, tick1, ns1, count,
                              (uint64_t)refused_count};
        fwrite(header, sizeof header, 1, out);
        for (int i = 0; i < refused_count; i++) {
            uint64_t event = refused[i];
            fwrite(&event, sizeof event, 1, out);
        }
        char version[256] = {0};
        snprintf(version, sizeof version, "%s", runtime_version);
        fwrite(version, sizeof version, 1, out);
        for (buffer_t *buffer = buffers; buffer; buffer = buffer->next) {
            uint64_t n = 0;
            for (block_t *block = buffer->first; block; block = block->next)
                n += block->used;
            uint64_t head[2] = {buffer->thread, n};
            fwrite(head, sizeof head, 1, out);
            for (block_t *block = buffer->first; block; block = block->next)
                fwrite(block->records, sizeof(record_t), block->used, out);
        }
        close_whole(out, partial, path);
    }
    char codes_path[4300];
    snprintf(codes_path, sizeof codes_path, "%s.codes", path);
    FILE *codes = open_partial(codes_path, partial, sizeof partial);
    if (codes) {
        write_codes(codes);
        close_whole(codes, partial, codes_path);
    }
    pthread_mutex_unlock(&buffers_lock);
}

ompt_start_tool_result_t *ompt_start_tool(unsigned int omp_version, const char *version)
{
    static ompt_start_tool_result_t result = {initialize, finalize, {0}};
    (void)omp_version;
    const char *path = getenv("SIMSCHED_OMPT_OUT");
    if (!path || !*path)
        return NULL;  /* not asked to record: stay out of the way */
    snprintf(events_path, sizeof events_path, "%s", path);
    runtime_version = version ? version : "";
    return &result;
}
