/* A small irregular OpenMP program: sparse matrix-vector products over a matrix whose row lengths
 * follow a power law (a few rows thousands of times longer than most), as in graph and circuit
 * matrices.  Every worksharing loop says schedule(runtime), so OMP_SCHEDULE picks its schedule.
 *
 *   cc -O2 -g -fopenmp spmv.c -o spmv && OMP_NUM_THREADS=2 ./spmv [rows] [products]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned long long state = 88172645463325252ull;

static double uniform(void)  /* xorshift64: the same matrix on every run */
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (double)(state >> 11) / 9007199254740992.0;
}

int main(int argc, char **argv)
{
    long rows = argc > 1 ? atol(argv[1]) : 20000;
    int products = argc > 2 ? atoi(argv[2]) : 3;
    if (rows < 1 || products < 1) {
        fprintf(stderr, "usage: spmv [rows >= 1] [products >= 1]\n");
        return 2;
    }
    long *start = malloc((rows + 1) * sizeof *start);
    start[0] = 0;
    for (long i = 0; i < rows; i++) {  /* serial: row lengths from a Pareto law, 1 to rows/4 */
        long length = (long)(2.0 / pow(1.0 - uniform(), 1.0 / 1.2));
        if (length > rows / 4 + 1)
            length = rows / 4 + 1;
        start[i + 1] = start[i] + length;
    }
    long nonzeros = start[rows];
    long *column = malloc(nonzeros * sizeof *column);
    double *value = malloc(nonzeros * sizeof *value), *x = malloc(rows * sizeof *x), *y = malloc(rows * sizeof *y);

#pragma omp parallel for schedule(runtime)
    for (long i = 0; i < rows; i++) {  /* parallel first touch of the matrix */
        unsigned long long s = 0x9E3779B97F4A7C15ull * (unsigned long long)(i + 1);
        for (long k = start[i]; k < start[i + 1]; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            column[k] = (long)(s % (unsigned long long)rows);
            value[k] = 1.0 / (double)(k - start[i] + 1);
        }
        x[i] = 1.0;
    }
    for (int p = 0; p < products; p++) {
#pragma omp parallel for schedule(runtime)
        for (long i = 0; i < rows; i++) {
            double sum = 0.0;
            for (long k = start[i]; k < start[i + 1]; k++)
                sum += value[k] * x[column[k]];
            y[i] = sum;
        }
        double norm = 0.0;  /* serial between the products */
        for (long i = 0; i < rows; i++)
            norm += y[i] * y[i];
        norm = sqrt(norm);
        for (long i = 0; i < rows; i++)
            x[i] = y[i] / norm;
    }
    printf("rows %ld nonzeros %ld x[0] %.6f\n", rows, nonzeros, x[0]);
    free(start), free(column), free(value), free(x), free(y);
    return 0;
}
