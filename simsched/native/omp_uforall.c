/* The host OpenMP runtime on the uforall micro-benchmark: the reference native mode is compared with.
 *
 * Build: cc -O2 -fopenmp simsched/native/omp_uforall.c -o omp_uforall
 * Run:   OMP_WAIT_POLICY=active OMP_PROC_BIND=close OMP_PLACES=cores ./omp_uforall N COST_NS REPEAT SCHEDULE
 *        SCHEDULE is static, dynamic or guided.
 * Prints one line per loop: its time in ns. Each iteration busy-waits COST_NS on the monotonic
 * clock, as simsched's native runtime does, so the two measure the same loop.
 */
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void work(double cost)
{
    double end = now_ns() + cost;
    while (now_ns() < end) {}
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s N COST_NS REPEAT static|dynamic|guided\n", argv[0]);
        return 2;
    }
    long n = atol(argv[1]), repeat = atol(argv[3]);
    double cost = atof(argv[2]);
    omp_sched_t kind = strcmp(argv[4], "dynamic") == 0 ? omp_sched_dynamic
                     : strcmp(argv[4], "guided") == 0 ? omp_sched_guided : omp_sched_static;
    omp_set_schedule(kind, kind == omp_sched_static ? 0 : 1);
    if (n < 1 || repeat < 1) {
        fprintf(stderr, "N and REPEAT must be >= 1\n");
        return 2;
    }
    #pragma omp parallel
    { }  /* start the team before timing */
    for (long r = 0; r < repeat; r++) {
        double start = now_ns();
        #pragma omp parallel for schedule(runtime)
        for (long i = 0; i < n; i++) work(cost);
        printf("%.0f\n", now_ns() - start);
    }
    return 0;
}
