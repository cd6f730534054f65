/* comm_ring.h: a non-blocking ring all-reduce (sum, in place) over MPI
 * point-to-point, for the MPI comm's iall_reduce.
 *
 * Why not MPI_Iallreduce: Open MPI 4.1's (libnbc) copies the whole buffer
 * into a temporary it allocates on every call, so each gradient bucket paid a
 * fresh allocation, page faults and a copy. The ring needs one chunk of scratch
 * per reduction in flight, kept from step to step.
 *
 * The buffer of n floats is cut into k chunks (k ranks). Reduce-scatter: in
 * k-1 steps each rank sends one chunk to its right neighbour and adds the one
 * from its left; then every rank owns one fully summed chunk. All-gather: k-1
 * more steps pass the summed chunks around. Each chunk is summed on one rank
 * and copied to the others, so every rank ends with the same bits. A step is
 * one Isend and one Irecv; mg_ring_progress moves on as far as the messages
 * that arrived allow, and never blocks.
 *
 * Exports: mg_ring, mg_ring_start, mg_ring_progress, mg_ring_wait, mg_ring_free. */
#ifndef MG_COMM_RING_H
#define MG_COMM_RING_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct mg_ring {
    MPI_Comm comm;
    int size, rank, tag;
    float *buf;
    int64_t n;
    int step;          /* 0 .. 2 (size-1); done at 2 (size-1) */
    MPI_Request req[2];
    float *scratch;    /* one chunk: what the left neighbour sent */
    int64_t scratch_cap;
    bool busy;
} mg_ring;

/* Starts the sum of buf (n floats, n / size chunks each < INT_MAX) on comm;
 * `tag` keeps reductions in flight on the same comm apart. MPI error codes. */
int mg_ring_start(mg_ring *r, MPI_Comm comm, float *buf, int64_t n, int tag);
/* Moves on without blocking; *done = 1 when the sum is complete. */
int mg_ring_progress(mg_ring *r, int *done);
/* Blocks until complete. */
int mg_ring_wait(mg_ring *r);
void mg_ring_free(mg_ring *r); /* its scratch */

#endif
