/* The host OpenMP runtime's per-loop overhead, measured the way EPCC's schedbench measures it.
 *
 * Build: cc -O2 -fopenmp simsched/native/omp_schedbench.c -o omp_schedbench
 * Run:   OMP_WAIT_POLICY=active OMP_PROC_BIND=close OMP_PLACES=threads \
 *        ./omp_schedbench ITERS_PER_THREAD DELAY_NS OUTER TEST_TIME_US static|dynamic|guided CHUNK
 *        CHUNK 0 is the schedule's default (static: one block per thread).
 * Prints OUTER lines "reference US" (ITERS_PER_THREAD iterations run by one thread, no runtime involved),
 * then OUTER lines "test US" (one loop of ITERS_PER_THREAD x threads iterations under the schedule, inside
 * a parallel region that runs many such loops back to back): each the mean time of one repetition over a
 * block of repetitions long enough to last TEST_TIME_US, after one untimed block. The overhead is the
 * difference. An iteration busy-waits DELAY_NS on the monotonic clock, as simsched's native runtime does.
 */
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long iters, reps;
static double delay;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void body(void)
{
    double end = now_ns() + delay;
    while (now_ns() < end) {}
}

static void reference(void)
{
    for (long r = 0; r < reps; r++)
        for (long i = 0; i < iters; i++) body();
}

static void test(void)
{
    #pragma omp parallel
    {
        long n = iters * omp_get_num_threads();
        for (long r = 0; r < reps; r++) {
            #pragma omp for schedule(runtime)
            for (long i = 0; i < n; i++) body();
        }
    }
}

/* Repetitions per block: doubled until a block lasts the target time; one untimed block; then OUTER timed. */
static void measure(const char *name, void (*run)(void), long outer, double target_ns)
{
    double took = 0;
    for (reps = 1; took < target_ns && reps < (1L << 40); reps *= 2) {
        double start = now_ns();
        run();
        took = now_ns() - start;
    }
    run();
    for (long k = 0; k < outer; k++) {
        double start = now_ns();
        run();
        printf("%s %.6f\n", name, (now_ns() - start) / 1e3 / (double)reps);
    }
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s ITERS_PER_THREAD DELAY_NS OUTER TEST_TIME_US static|dynamic|guided CHUNK\n",
                argv[0]);
        return 2;
    }
    iters = atol(argv[1]);
    delay = atof(argv[2]);
    long outer = atol(argv[3]), chunk = atol(argv[6]);
    double target = atof(argv[4]) * 1e3;
    omp_sched_t kind = strcmp(argv[5], "dynamic") == 0 ? omp_sched_dynamic
                     : strcmp(argv[5], "guided") == 0 ? omp_sched_guided : omp_sched_static;
    if (iters < 1 || delay < 0 || outer < 1 || target <= 0 || chunk < 0) {
        fprintf(stderr, "ITERS_PER_THREAD and OUTER must be >= 1, DELAY_NS and CHUNK >= 0, TEST_TIME_US > 0\n");
        return 2;
    }
    omp_set_schedule(kind, (int)chunk);
    #pragma omp parallel
    { }  /* start the team before timing */
    measure("reference", reference, outer, target);
    measure("test", test, outer, target);
    return 0;
}
