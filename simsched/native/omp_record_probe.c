/* The recorder's probe of an OpenMP runtime: one schedule(runtime) loop of empty iterations, run
 * REPEAT times, each run's time in ns on its own line.  Run with OMP_SCHEDULE=static,1 it measures
 * what a chunk costs beyond its iterations: with simsched's OMPT tool loaded and without it.
 *
 *   omp_record_probe ITERATIONS REPEAT
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    int repeat = argc > 2 ? atoi(argv[2]) : 5;
    if (n < 1 || repeat < 1) {
        fprintf(stderr, "usage: omp_record_probe ITERATIONS REPEAT\n");
        return 2;
    }
    for (int r = 0; r < repeat; r++) {
        double start = omp_get_wtime();
#pragma omp parallel for schedule(runtime)
        for (long i = 0; i < n; i++)
            __asm__ volatile("" ::: "memory");  /* an iteration the compiler cannot remove */
        printf("%.1f\n", (omp_get_wtime() - start) * 1e9);
    }
    return 0;
}
