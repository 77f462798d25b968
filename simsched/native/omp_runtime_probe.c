/* An OpenMP runtime's own costs, as `simsched native calibrate --openmp` measures them: empty loops under
 * the schedules a program names, timed with omp_get_wtime, on whichever runtime the program is run on.
 *
 * Build: cc -O2 -fopenmp simsched/native/omp_runtime_probe.c -o omp_runtime_probe
 * Run:   OMP_NUM_THREADS=P OMP_PROC_BIND=true OMP_WAIT_POLICY=active ./omp_runtime_probe N SAMPLES FORKS
 *
 * Prints "threads P" (the team a parallel region got), "library PATH" for each OpenMP runtime mapped into
 * the process, then SAMPLES + 1 lines "NAME NS" of each figure (the first of each warms the loop up, and
 * the reader leaves it out):
 *   static1    a schedule(static) loop of N empty iterations on a team of one thread, ns
 *   dynamic1   a schedule(dynamic,1) loop of N empty iterations claimed by one thread of an active team of
 *              two, the other blocked outside the loop until it ends (a runtime may run a team of one's
 *              dynamic loop as a single chunk), ns
 *   forkjoin   one empty `parallel for schedule(static)` of P iterations on P threads, ns: the mean of a
 *              block of FORKS of them, so that a runtime whose clock ticks in microseconds times it closely
 *   static     a schedule(static) loop of N x P empty iterations on the P threads of one parallel region, ns
 *   dynamic    the same under schedule(dynamic,1): every thread claiming on the one counter, ns
 *   dynamic64  the same under schedule(dynamic,64), ns
 *   guided     the same under schedule(guided), ns
 * The loops on P threads end in their implicit barrier, so each time is the whole loop's.
 */
#include <omp.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An iteration the compiler cannot remove, which does nothing else. */
#define EMPTY() __asm__ volatile("" ::: "memory")

static void print_samples(const char *name, const double *seconds, int count, double per)
{
    for (int r = 0; r < count; r++)
        printf("%s %.3f\n", name, seconds[r] * 1e9 / per);
}

/* The OpenMP runtimes this process has mapped, read from the kernel's list of its mappings: the file a
 * runtime was loaded from, whatever name (or link) the program asked for it by. */
static void print_libraries(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096], seen[16][1024];
    int count = 0;
    if (maps == NULL)
        return;
    while (fgets(line, sizeof line, maps) != NULL) {
        char *path = strchr(line, '/');
        if (path == NULL)
            continue;
        path[strcspn(path, "\n")] = '\0';
        const char *base = strrchr(path, '/') + 1;
        if (strncmp(base, "libgomp", 7) != 0 && strncmp(base, "libomp", 6) != 0
            && strncmp(base, "libiomp", 7) != 0)
            continue;
        int known = 0;
        for (int k = 0; k < count; k++)
            known |= strcmp(seen[k], path) == 0;
        if (!known && count < 16 && strlen(path) < sizeof seen[0]) {
            strcpy(seen[count++], path);
            printf("library %s\n", path);
        }
    }
    fclose(maps);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s N SAMPLES FORKS\n", argv[0]);
        return 2;
    }
    long n = atol(argv[1]);
    int samples = atoi(argv[2]), forks = atoi(argv[3]);
    if (n < 1 || samples < 1 || forks < 1) {
        fprintf(stderr, "N, SAMPLES and FORKS must be >= 1\n");
        return 2;
    }
    int count = samples + 1, team = 0;
    double *times = malloc(sizeof(double) * (size_t)count * 4);
    if (times == NULL) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    #pragma omp parallel
    {
        #pragma omp single
        team = omp_get_num_threads();
    }
    printf("threads %d\n", team);
    print_libraries();

    /* One thread: what a claimed chunk costs beyond its iteration. */
    #pragma omp parallel num_threads(1)
    {
        for (int r = 0; r < count; r++) {
            double start = omp_get_wtime();
            #pragma omp for schedule(static)
            for (long i = 0; i < n; i++) EMPTY();
            times[r] = omp_get_wtime() - start;
        }
    }
    /* The partner blocks on a semaphore rather than spin: with one CPU, it shares the timed thread's. */
    sem_t ended;
    if (sem_init(&ended, 0, 0) != 0) {
        fprintf(stderr, "sem_init failed\n");
        return 1;
    }
    long claimed = 0;
    int pair = 0;
    #pragma omp parallel num_threads(2) reduction(+ : claimed)
    {
        int primary = omp_get_thread_num() == 0;
        #pragma omp single
        pair = omp_get_num_threads();
        for (int r = 0; r < count; r++) {
            #pragma omp barrier
            if (!primary)
                while (sem_wait(&ended) != 0) {}
            double start = omp_get_wtime();
            #pragma omp for schedule(dynamic, 1) nowait
            for (long i = 0; i < n; i++) {
                EMPTY();
                claimed += primary;
            }
            if (primary) {
                times[count + r] = omp_get_wtime() - start;
                for (int k = 1; k < pair; k++) sem_post(&ended);
            }
        }
    }
    sem_destroy(&ended);
    if (pair != 2) {
        fprintf(stderr, "a team of two threads was asked for and %d started\n", pair);
        return 1;
    }
    if (claimed != n * count) {
        fprintf(stderr, "the lone thread claimed %ld of the %ld chunks\n", claimed, n * count);
        return 1;
    }
    print_samples("static1", times, count, 1);
    print_samples("dynamic1", times + count, count, 1);

    /* Fork and join: the team started and gathered again at the barrier, one iteration per thread. */
    for (int r = 0; r < count; r++) {
        double start = omp_get_wtime();
        for (int f = 0; f < forks; f++) {
            #pragma omp parallel for schedule(static)
            for (long i = 0; i < team; i++) EMPTY();
        }
        times[r] = omp_get_wtime() - start;
    }
    print_samples("forkjoin", times, count, forks);

    /* The whole team in one parallel region, each loop started together after a barrier. */
    long total = n * team;
    #pragma omp parallel
    {
        int primary = omp_get_thread_num() == 0;
        for (int r = 0; r < count; r++) {
            #pragma omp barrier
            double start = omp_get_wtime();
            #pragma omp for schedule(static)
            for (long i = 0; i < total; i++) EMPTY();
            if (primary) times[r] = omp_get_wtime() - start;
        }
        for (int r = 0; r < count; r++) {
            #pragma omp barrier
            double start = omp_get_wtime();
            #pragma omp for schedule(dynamic, 1)
            for (long i = 0; i < total; i++) EMPTY();
            if (primary) times[count + r] = omp_get_wtime() - start;
        }
        for (int r = 0; r < count; r++) {
            #pragma omp barrier
            double start = omp_get_wtime();
            #pragma omp for schedule(dynamic, 64)
            for (long i = 0; i < total; i++) EMPTY();
            if (primary) times[2 * count + r] = omp_get_wtime() - start;
        }
        for (int r = 0; r < count; r++) {
            #pragma omp barrier
            double start = omp_get_wtime();
            #pragma omp for schedule(guided)
            for (long i = 0; i < total; i++) EMPTY();
            if (primary) times[3 * count + r] = omp_get_wtime() - start;
        }
    }
    print_samples("static", times, count, 1);
    print_samples("dynamic", times + count, count, 1);
    print_samples("dynamic64", times + 2 * count, count, 1);
    print_samples("guided", times + 3 * count, count, 1);
    free(times);
    return 0;
}
