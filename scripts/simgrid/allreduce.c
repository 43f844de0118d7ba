/*
 * Times MPI_Allreduce under SimGrid's SMPI: a real MPI program whose messages travel over a simulated network.
 *
 *     smpicc -O2 allreduce.c -o allreduce
 *     smpirun -np 8 -platform platform.xml -hostfile hosts --cfg=smpi/allreduce:lr ./allreduce 104857600 3
 *
 * Arguments: BYTES (the size of the buffer every rank reduces, a multiple of 4: it holds BYTES/4 floats) and
 * REPEATS (how many allreduces are timed). Rank 0 prints one line that utils/simgrid.py reads:
 *
 *     RESULT {"seconds": <best>, "mean": <mean>, "ranks": N, "bytes": BYTES, "times": [<each repeat>]}
 *
 * Each time runs from the moment the last rank calls MPI_Allreduce to the moment the last rank has the result.
 *
 * How it works under SMPI:
 * - Every MPI rank is a thread of one process on this machine; SimGrid decides *when* each MPI call
 *   returns, from the platform (hosts, links, bandwidths, latencies) and the network model.
 * - MPI_Wtime returns the simulated clock, not this machine's clock: the times printed are what the
 *   allreduce would take on the described cluster, however long the simulation itself takes to run.
 * - SMPI_SHARED_MALLOC gives every rank the same physical memory for its buffer (the data are garbage, the
 *   sizes are real): 256 ranks of 100 MB each need 100 MB, not 25 GB. The simulated traffic is unchanged.
 * - With --cfg=smpi/simulate-computation:no, the time this machine spends computing (adding the floats)
 *   is not added to the simulated clock: the result is communication time only.
 */
#include <limits.h>
#include <mpi.h>
#include <smpi/smpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  long long nbytes = argc > 1 ? atoll(argv[1]) : 0;
  int repeats = argc > 2 ? atoi(argv[2]) : 0;
  if (nbytes < 4 || nbytes % 4 != 0 || nbytes / 4 > INT_MAX || repeats < 1) {
    if (rank == 0)
      fprintf(stderr, "usage: %s BYTES REPEATS (BYTES a multiple of 4 from 4 to 4 x %d; REPEATS at least 1)\n",
              argv[0], INT_MAX);
    MPI_Finalize();
    return 2;
  }
  int count = (int)(nbytes / 4); /* floats per rank */

  /* Shared among the ranks (see above): the memory of one buffer each, whatever the number of ranks. */
  float *send = (float *)SMPI_SHARED_MALLOC((size_t)nbytes);
  float *recv = (float *)SMPI_SHARED_MALLOC((size_t)nbytes);
  double *times = (double *)malloc(sizeof(double) * (size_t)repeats);

  /* One untimed allreduce first: SMP-aware algorithms (smp_*) build their per-host communicators on their
   * first call, which costs messages too. A small one (one float per rank) is enough to trigger that. */
  int warmup = count < size ? count : size;
  MPI_Allreduce(send, recv, warmup, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);

  for (int r = 0; r < repeats; r++) {
    /* Everyone starts (nearly) together, whatever the previous repeat left behind. */
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double end = MPI_Wtime();
    /* The allreduce starts when the last rank calls it (no rank can have its result before) and is over when
     * the last rank has its result. Under SMPI every rank reads the same simulated clock, so the starts and
     * ends of different ranks can be compared (on a real cluster they could not). The last start, not each
     * rank's own: ranks leave a barrier up to one message latency apart, and a rank that left early would
     * count its wait for the late one as allreduce time. */
    double mine[2] = {start, end}, last[2] = {0.0, 0.0};
    MPI_Reduce(mine, last, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    times[r] = last[1] - last[0];
  }

  if (rank == 0) {
    double best = times[0], sum = 0.0;
    for (int r = 0; r < repeats; r++) {
      if (times[r] < best)
        best = times[r];
      sum += times[r];
    }
    printf("RESULT {\"seconds\": %.17g, \"mean\": %.17g, \"ranks\": %d, \"bytes\": %lld, \"times\": [", best,
           sum / repeats, size, nbytes);
    for (int r = 0; r < repeats; r++)
      printf("%s%.17g", r ? ", " : "", times[r]);
    printf("]}\n");
    fflush(stdout);
  }

  free(times);
  SMPI_SHARED_FREE(send);
  SMPI_SHARED_FREE(recv);
  MPI_Finalize();
  return 0;
}
