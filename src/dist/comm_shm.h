/* comm_shm.h: all-reduce through shared memory, for a communicator whose
 * ranks all run on one node.
 *
 * Buffers come from MPI shared windows (mg_shm_alloc, collective): every rank
 * can read and write every other rank's buffer. A sum of such a buffer is then
 * one pass with no message copies: each rank adds up its 1/k of the buffer
 * across all k ranks and writes the total into all k buffers, between two
 * barriers. Per rank that reads and writes 2n floats whatever k is, where the
 * point-to-point ring (comm_ring.h) moves the data through the kernel twice.
 * It is non-blocking like the ring: the barriers are MPI_Ibarrier and
 * mg_shm_progress does the adding when the first one has completed.
 * Each chunk is summed on one rank in rank order, so every rank ends with the
 * same bits.
 *
 * The autograd engine moves a data-parallel parameter's gradient buffer into
 * shared memory the first time it is reduced (autograd/backward.c), so the
 * GEMM that makes the gradient writes it where the sum reads it. The optimizer
 * moves the parameter's value and state there too, as one copy per node, and
 * splits its update across the ranks, summing the gradient on the way
 * (nn/optim_shard.h).
 *
 * Exports: mg_shm (per communicator), mg_shm_init, mg_shm_alloc(_one), mg_shm_find,
 * mg_shm_peer, mg_shm_fence, mg_shm_sum, mg_shm_start, mg_shm_progress, mg_shm_wait, mg_shm_free. */
#ifndef MG_COMM_SHM_H
#define MG_COMM_SHM_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    MPI_Win win;
    float **seg; /* seg[r]: rank r's buffer, mapped here (one copy: all seg[0]) */
    int64_t n;
    bool one;    /* one buffer for all ranks (mg_shm_alloc_one): never summed */
} mg_shm_buffer;

typedef struct {
    int64_t id;        /* which sum: mg_shm.started when it started */
    int buf;           /* index in mg_shm.bufs (which a later alloc may move) */
    int64_t offset, n; /* the floats [offset, offset + n) of every rank's buffer */
    int phase;         /* 0: first barrier, 1: second barrier, 2: done */
    MPI_Request req;
    bool busy;
} mg_shm_op;

#define MG_SHM_OPS 8

/* Sums in flight take slots in turn (the i-th sum started takes slot i mod
 * MG_SHM_OPS, after waiting for the one before it there), and each slot's
 * barriers go through its own communicator. MPI matches collectives on a
 * communicator by the order they are started, and a sum starts its second
 * barrier whenever this rank sees the first complete: on one communicator for
 * all, rank 0 could start sum A's second barrier before sum B's first while
 * rank 1 does the opposite, and B's "every part is in" would then complete on
 * A's word. In one slot's communicator, barriers alternate first, second,
 * first... on every rank. */
typedef struct {
    MPI_Comm comm; /* a duplicate, or MPI_COMM_NULL when the ranks span nodes */
    MPI_Comm slot_comm[MG_SHM_OPS];
    int size, rank;
    mg_shm_buffer *bufs;
    int nbufs, cap;
    mg_shm_op ops[MG_SHM_OPS];
    int64_t started; /* sums started so far: the next one's slot */
} mg_shm;

/* Collective over comm: sets shm->comm when every rank of comm shares a node
 * (MPI_Comm_split_type). MPI error codes. */
int mg_shm_init(mg_shm *shm, MPI_Comm comm);
/* Collective: n floats per rank in a new shared window; this rank's part, or
 * NULL (with *err set when MPI failed) where shared memory is not available. */
float *mg_shm_alloc(mg_shm *shm, int64_t n, int *err);
/* Collective: n floats in a new shared window, one copy that every rank maps
 * (rank 0 holds it): the same memory on every rank, or NULL as above. */
float *mg_shm_alloc_one(mg_shm *shm, int64_t n, int *err);
/* The shared buffer holding [p, p + n) of this rank, and p's offset in it. */
const mg_shm_buffer *mg_shm_find(const mg_shm *shm, const float *p, int64_t n, int64_t *offset);
/* Rank `rank`'s copy of [p, p + n) of this rank's shared memory, or NULL when
 * that range is not in one shared buffer. */
float *mg_shm_peer(const mg_shm *shm, const float *p, int64_t n, int rank);
/* Orders this rank's loads and stores to every shared buffer (MPI_Win_sync):
 * call it on both sides of a barrier that hands shared data over. */
int mg_shm_fence(mg_shm *shm);
/* out[j] = the sum over ranks r < k of seg[r][offset + j], for j < m, added in
 * rank order. The all-reduce here and the split optimizer step
 * (nn/optim_shard.c) both add this way, so they make the same bits. */
void mg_shm_sum(float *out, const float *const *seg, int k, int64_t offset, int64_t m);
/* Starts the sum of [offset, offset + n) across the ranks' copies of b, in the
 * next slot (waiting first for the sum that still holds it); NULL only with
 * *err set. */
mg_shm_op *mg_shm_start(mg_shm *shm, const mg_shm_buffer *b, int64_t offset, int64_t n, int *err);
int mg_shm_progress(mg_shm *shm, mg_shm_op *op, int *done);
int mg_shm_wait(mg_shm *shm, mg_shm_op *op);
void mg_shm_free(mg_shm *shm); /* collective: frees the windows */

#endif
