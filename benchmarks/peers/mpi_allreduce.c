/* The Open MPI peer of allreduce_bench: MPI_Allreduce (in place, float, sum) over the same sizes,
 * timed the same way: per size, warm-up, then the median of the iterations on each rank,
 * averaged over ranks. Prints one line per size: "bytes time_us".
 *
 *   mpirun -np 4 mpi_allreduce <min bytes> <max bytes> <factor> <iterations> <warm-up>
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>

static int compare(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* values, int count) {
  qsort(values, (size_t)count, sizeof(double), compare);
  return count % 2 == 1 ? values[count / 2] : (values[count / 2 - 1] + values[count / 2]) / 2.0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 6) {
    if (rank == 0) {
      fprintf(stderr, "usage: mpi_allreduce <min bytes> <max bytes> <factor> <iterations> "
                      "<warm-up>\n");
    }
    MPI_Finalize();
    return 2;
  }
  const long min_bytes = atol(argv[1]), max_bytes = atol(argv[2]);
  const double factor = atof(argv[3]);
  const int iterations = atoi(argv[4]), warmup = atoi(argv[5]);
  if (min_bytes < 4 || max_bytes < min_bytes || factor <= 1.0 || iterations < 1 || warmup < 0) {
    if (rank == 0) fprintf(stderr, "mpi_allreduce: bad arguments\n");
    MPI_Finalize();
    return 2;
  }
  float* data = malloc((size_t)max_bytes);
  double* times = malloc(sizeof(double) * (size_t)iterations);
  if (data == NULL || times == NULL) {
    fprintf(stderr, "mpi_allreduce: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (long bytes = min_bytes; bytes <= max_bytes; bytes = (long)((double)bytes * factor)) {
    const int count = (int)(bytes / (long)sizeof(float));
    for (int i = 0; i < count; ++i) data[i] = (float)((rank + i) % 5 + 1);
    for (int i = 0; i < warmup; ++i) {
      MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    for (int i = 0; i < iterations; ++i) {
      const double start = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times[i] = (MPI_Wtime() - start) * 1e6;
    }
    const double mine = median(times, iterations);
    double sum = 0.0;
    MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      printf("%ld %.3f\n", (long)count * (long)sizeof(float), sum / size);
      fflush(stdout);
    }
  }
  free(times);
  free(data);
  MPI_Finalize();
  return 0;
}
