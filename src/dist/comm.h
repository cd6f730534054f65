/* comm.h: collectives behind a vtable, one mg_comm per communicator (the world
 * and each mesh dimension). The MPI implementation (comm_mpi.c) serves host
 * buffers; NCCL (comm_nccl.c) serves device buffers behind the same iface.
 * Every call counts (calls, bytes sent) per collective kind; the counters are
 * summed across communicators by mg_comm_stats_get() (meshgrad.h) and printed as
 * a table at mg_finalize() when MG_COMM_DEBUG=1.
 *
 * Buffers: counts are in floats. all_gather/reduce_scatter/all_to_all use
 * rank-ordered blocks of n floats each (the caller pads uneven shards). Counts
 * above INT_MAX are fine (the MPI iface splits them). A communicator of one rank
 * makes no MPI call at all (a local copy where the output is another buffer).
 *
 * Bytes counted ("bytes this rank sends"): what this rank sends under the
 * bandwidth-optimal ring schedule of the collective, for k ranks and 4-byte floats
 * (mg_coll_bytes below is the one definition; mg_redistribute_cost uses it too):
 *   all_reduce of n          2 (k-1) 4n / k  (ring reduce-scatter + all-gather,
 *                                             rounded down)
 *   all_gather, n per rank   (k-1) 4n        (every other rank's block passes once)
 *   reduce_scatter, n out    (k-1) 4n
 *   all_to_all, n per block  (k-1) 4n        (its own block stays)
 *   broadcast of n           4n on every rank but the last of the chain
 *                            root, root+1, ..., root-1 (mod k); 0 on that one
 *   barrier                  0
 *   send of n (point-to-point, below)  4n; recv 0 (its bytes are the sender's)
 * So gathering a tensor of N floats sharded over k ranks moves (k-1)/k of it per
 * rank, and every collective on a communicator of 1 rank counts 0 bytes (the
 * call itself is still counted). */
#ifndef MG_COMM_H
#define MG_COMM_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "exact.h"
#include "meshgrad.h"

typedef enum { MG_REDUCE_SUM = 0, MG_REDUCE_AVG, MG_REDUCE_MAX } mg_reduce_op;

typedef struct mg_comm mg_comm;
typedef struct mg_p2p_request mg_p2p_request; /* point-to-point, at the end of this file */

/* A non-blocking collective in flight (mg_comm_iall_reduce). */
typedef struct {
    MPI_Request mpi;
    void *state; /* the iface's own (MPI: a ring, comm_ring.h, or a shm op, comm_shm.h) */
    int shm;     /* MPI: state is a shm op */
    int64_t id;  /* MPI shm: which sum of that op's slot (a later one may reuse it) */
    int done;    /* completed (or never needed a message) */
    int64_t flight; /* its flight record (flight.h) */
} mg_comm_request;

struct mg_comm_iface {
    const char *name; /* "mpi", "nccl" */
    int (*all_reduce)(mg_comm *, float *buf, int64_t n, mg_reduce_op op); /* in place */
    int (*all_gather)(mg_comm *, const float *send, int64_t n, float *recv /* size*n */);
    int (*reduce_scatter)(mg_comm *, const float *send /* size*n */, float *recv /* n */,
                          int64_t n); /* sum */
    int (*all_to_all)(mg_comm *, const float *send /* size*n */, int64_t n, float *recv);
    int (*broadcast)(mg_comm *, float *buf, int64_t n, int root);
    int (*barrier)(mg_comm *);
    /* Non-blocking in-place sum; NULL where the iface has none (the call then
     * runs the blocking all_reduce and hands back a completed request). NCCL
     * needs none: its collectives are already asynchronous on the stream. */
    int (*iall_reduce)(mg_comm *, float *buf, int64_t n, mg_comm_request *req);
    int (*test)(mg_comm *, mg_comm_request *req); /* sets req->done when complete */
    int (*wait)(mg_comm *, mg_comm_request *req);
    /* Collective: n floats of memory every rank of the comm can reach, or NULL
     * (no error) where the iface or the machine has none. NULL in the iface: none. */
    float *(*alloc_shared)(mg_comm *, int64_t n, bool one); /* one: a single copy for all */
    /* Rank `rank`'s copy of [p, p + n) when that lies in alloc_shared memory, else NULL. */
    float *(*shared_peer)(mg_comm *, const float *p, int64_t n, int rank);
    /* Collective: one of two one-copy scratch buffers of >= n floats, in turn. */
    float *(*shared_scratch)(mg_comm *, int64_t n);
    void (*destroy)(mg_comm *);
    /* Point-to-point (see the end of this file); NULL where the iface has none.
     * isend/irecv post and return; p2p_test sets req->done when complete;
     * p2p_group(c, 1) / (c, 0) brackets a batch (NULL: nothing to do). */
    int (*isend)(mg_comm *, const float *buf, int64_t n, int peer, mg_p2p_request *req);
    int (*irecv)(mg_comm *, float *buf, int64_t n, int peer, mg_p2p_request *req);
    int (*p2p_test)(mg_comm *, mg_p2p_request *req);
    int (*p2p_wait)(mg_comm *, mg_p2p_request *req);
    int (*p2p_group)(mg_comm *, int begin);
};

struct mg_comm {
    const struct mg_comm_iface *iface;
    void *context;
    MPI_Comm mpi; /* the MPI communicator (control, and data for the MPI iface) */
    int rank, size;
    mg_comm_stats stats[MG_COLL_COUNT];
    /* a meta comm (comm_meta.c): every call is counted as a real one of the
     * same size would be, and none moves anything */
    bool meta;
};

/* Wraps `mpi` (not duplicated, not freed) with MPI_ERRORS_RETURN. */
mg_comm *mg_comm_mpi_new(MPI_Comm mpi);
/* A meta comm (comm_meta.c): rank `rank` of `size` ranks that exist only in
 * count. Collectives and transfers are counted and complete at once; with
 * `node_local` (its ranks would share a node) it hands out shared memory on
 * the meta device, as the MPI iface hands out a shared window. */
mg_comm *mg_comm_meta_new(int size, int rank, bool node_local);
void mg_comm_free(mg_comm *); /* unregisters it too */
/* Largest count the MPI iface passes to one MPI call (default INT_MAX); larger
 * counts are split. Lowered only by tests, to exercise the split paths; n <= 0
 * or above INT_MAX restores the default (comm.c). */
void mg_comm_mpi_set_max_count(int64_t n);
int64_t mg_comm_mpi_max_count(void);

/* Bytes a rank sends for one collective (the table above); `n` as in the calls. */
int64_t mg_coll_bytes(mg_coll_kind kind, int size, int rank, int64_t n, int root);

/* The calls: count, then dispatch. Return MG_OK or MG_ECOMM with a message. */
int mg_comm_all_reduce(mg_comm *, float *buf, int64_t n, mg_reduce_op op);
int mg_comm_all_gather(mg_comm *, const float *send, int64_t n, float *recv);
int mg_comm_reduce_scatter(mg_comm *, const float *send, float *recv, int64_t n);
int mg_comm_all_to_all(mg_comm *, const float *send, int64_t n, float *recv);
int mg_comm_broadcast(mg_comm *, float *buf, int64_t n, int root);
int mg_comm_barrier(mg_comm *);
/* Non-blocking in-place sum of n floats: starts it and returns at once. Every
 * rank of the communicator must start its non-blocking and blocking
 * collectives in the same order. mg_comm_test makes progress and sets
 * req->done when it completed; mg_comm_wait blocks (under the watchdog) until
 * it does. The buffer must not be touched in between. */
int mg_comm_iall_reduce(mg_comm *, float *buf, int64_t n, mg_comm_request *req);
int mg_comm_test(mg_comm *, mg_comm_request *req);
int mg_comm_wait(mg_comm *, mg_comm_request *req);
/* Collective over the comm: memory for n floats that the comm's all-reduce can
 * sum without copies (MPI: a shared window, when every rank is on one node,
 * comm_shm.h); it lives until the comm is freed and must not be passed to
 * free(). NULL without an error where there is none (use ordinary memory);
 * NULL with an error set when allocating failed. */
float *mg_comm_alloc_shared(mg_comm *, int64_t n);
/* Collective over the comm: one buffer of n floats that every rank of the comm
 * maps, so each sees the others' stores (after a barrier); NULL as above.
 * Never summed: it is one value, not one per rank. */
float *mg_comm_alloc_shared_one(mg_comm *, int64_t n);
/* Collective over the comm: t's data (host memory it owns) moves into memory
 * from mg_comm_alloc_shared, or with `one` mg_comm_alloc_shared_one (then
 * rank 0's values are the ones kept: the ranks' copies must be equal). The
 * comm owns the memory from then on. 1: moved; 0: no shared memory here (t
 * is left as it was); negative: an error. */
int mg_comm_share_tensor(mg_comm *, mg_tensor *t, bool one);
/* Collective over the comm: one-copy shared memory (as mg_comm_alloc_shared_one)
 * of at least n floats, kept by the comm for reuse. There are two such buffers
 * and the calls hand them out in turn, so a buffer comes back only every
 * second call: what a rank wrote into the last one stays readable by the
 * others until the call after next. NULL as mg_comm_alloc_shared. */
float *mg_comm_shared_scratch(mg_comm *, int64_t n);
/* Where rank `rank` of the comm holds its copy of [p, p + n), when p points into
 * memory from mg_comm_alloc_shared (every rank's copy is reachable from every
 * rank; for mg_comm_alloc_shared_one memory, p itself), else NULL. mg_comm_barrier orders access to such memory: what a rank
 * stores before the barrier, every rank sees after it. */
float *mg_comm_shared_peer(mg_comm *, const float *p, int64_t n, int rank);

/* Registers a comm so its counters are included in mg_comm_stats_get(). */
void mg_comm_register(mg_comm *);
void mg_comm_unregister(mg_comm *);
void mg_comm_stats_print(FILE *out); /* the MG_COMM_DEBUG table */

/* Agree on a status across the world: returns the most negative status of all
 * ranks (MG_OK if every rank is ok). Used before acting on a rank-local error. */
int mg_status_agree(int status);
/* The same, also giving the lowest world rank whose status is the agreed one
 * (-1 when every rank is ok), so a message can say where it failed. */
int mg_status_agree_rank(int status, int *first_rank);

/* ---- point-to-point (comm_p2p.c): pipeline parallelism -----------------------
 * Non-blocking sends and receives of floats between two ranks of one comm
 * (ranks of the comm, not of the world). Matching is in order: the k-th send
 * from a to b meets the k-th receive on b from a, and the two counts must
 * agree (a receive shorter than its send fails with MG_ECOMM). NCCL has no
 * tags; the MPI iface sends every message with one tag, MG_P2P_TAG, outside
 * the range its rings use (comm_ring.h), so MPI's ordering rule gives the
 * same matching. A pipeline schedule's transfers are proven to meet in this
 * order (dist/pipeline_verify.h).
 * A batch of sends and receives that must start together (one batch of a
 * schedule) goes between mg_comm_p2p_group_begin and _end: NCCL needs it
 * (ncclGroupStart/End; unbatched, a send blocks the stream until its receive
 * is posted), MPI does nothing.
 * Counted in the comm statistics as MG_COLL_SEND (4n bytes) and MG_COLL_RECV
 * (0 bytes). mg_comm_p2p_wait blocks under the collective watchdog, which
 * names the peer when it never answers. The buffer must not be touched until
 * the request is done (req->done: waited for, or tested complete). Messages
 * above the MPI count limit go as several in order (mg_comm_mpi_set_max_count). */
#define MG_P2P_TAG 30500

struct mg_p2p_request {
    MPI_Request mpi;      /* MPI: a message in one piece */
    MPI_Request *pieces;  /* MPI: one request per piece of a longer message */
    int npieces;
    void *event;          /* NCCL: a cudaEvent_t recorded after the transfer */
    int peer, send;       /* the other rank; 1 for a send */
    int64_t n;
    int done;
    int64_t flight;       /* its flight record (flight.h) */
};

int mg_comm_isend(mg_comm *, const float *buf, int64_t n, int peer, mg_p2p_request *req);
int mg_comm_irecv(mg_comm *, float *buf, int64_t n, int peer, mg_p2p_request *req);
int mg_comm_p2p_test(mg_comm *, mg_p2p_request *req);
int mg_comm_p2p_wait(mg_comm *, mg_p2p_request *req);
int mg_comm_p2p_group_begin(mg_comm *);
int mg_comm_p2p_group_end(mg_comm *);
/* The MPI iface's entries (comm_p2p.c). */
int mg_comm_mpi_isend(mg_comm *, const float *buf, int64_t n, int peer, mg_p2p_request *req);
int mg_comm_mpi_irecv(mg_comm *, float *buf, int64_t n, int peer, mg_p2p_request *req);
int mg_comm_mpi_p2p_test(mg_comm *, mg_p2p_request *req);
int mg_comm_mpi_p2p_wait(mg_comm *, mg_p2p_request *req);
/* After an MPI call returned err (not MPI_SUCCESS): MG_ECOMM with the message
 * "WHAT: <MPI's own message>", WHAT printf-style (comm.c). */
int mg_mpi_failed(int err, const char *what, ...) __attribute__((format(printf, 2, 3)));

/* ---- the deterministic mode's sums ------------------------------------------
 * While the mode is on, mg_comm_all_reduce, iall_reduce and reduce_scatter of
 * a comm of several ranks go to comm_tree.c: the ranks' parts added in one
 * binary tree over the ranks' order, the same bits on every rank. comm_tree.c
 * stands above comm.c (it sums what comm.c's all_gather and all_to_all bring),
 * so comm.c calls it through the hook it registers: `fn` sums every rank's n
 * floats of send into recv (all-reduce; recv may be send), or with `scatter`
 * block r of every rank's size * n into rank r's recv (reduce-scatter).
 * mg_comm_tree_start registers it; mg_comm_mpi_new calls that, so that every
 * comm that sums across ranks (one, or one inside an NCCL comm) finds it. */
typedef int (*mg_comm_tree_sum_fn)(mg_comm *, const float *send, float *recv, int64_t n,
                                   int scatter);
void mg_comm_on_tree_sum(mg_comm_tree_sum_fn fn);
void mg_comm_tree_start(void);

/* ---- control messages (comm_control.c) --------------------------------------
 * For the layers above dist/: agreeing on statuses, flags, names and exit codes
 * without raw MPI calls. Host memory, the comm's MPI communicator (also for an
 * NCCL comm), counted in the statistics (broadcast, all_reduce) and run under
 * the collective watchdog. Every rank of the comm must call each of them. */
typedef enum { MG_CONTROL_SUM = 0, MG_CONTROL_MIN, MG_CONTROL_MAX } mg_control_op;

/* An exact sum (exact.h) summed over the comm's ranks, in place: every rank gets
 * the sum of all, exactly. Collective. */
int mg_comm_sum_exact(mg_comm *, mg_exact *a);

/* One mg_comm over MPI_COMM_WORLD, made on first use (after mg_init); NULL
 * with a message before. Not to be freed. */
mg_comm *mg_comm_world(void);
/* Broadcast of n bytes (at most 1 GiB) from root. */
int mg_comm_broadcast_bytes(mg_comm *, void *buf, int64_t n, int root);
/* In-place all-reduce of n (at most 64) int64 or double values. */
int mg_comm_all_reduce_i64(mg_comm *, int64_t *buf, int n, mg_control_op op);
/* In-place sum of n int64 values, any n (integers: exact, in any order; the
 * deterministic mode's fixed-point sums). */
int mg_comm_sum_i64(mg_comm *, int64_t *buf, int64_t n);
int mg_comm_all_reduce_f64(mg_comm *, double *buf, int n, mg_control_op op);
/* In-place all-reduce MAX of n (at most 8) int64 values that may give up: with
 * wait_s < 0 it waits as long as it takes (under the watchdog); else it
 * returns MG_ECOMM after wait_s seconds if some rank has not joined, and the
 * caller must then end the job (mg_comm_abort): the operation is left in
 * flight. Ranks may pass different wait_s. */
int mg_comm_agree_max(mg_comm *, int64_t *vals, int n, double wait_s);
/* Gathers n bytes (at most 1 GiB) from every rank at root: on root, *out gets
 * the parts one after the other in rank order (malloc'd; free it) and
 * counts[r] (c->size entries) the length of rank r's; elsewhere *out is NULL.
 * At most 2 GiB in all. Counted as an all_gather of the bytes this rank sends. */
int mg_comm_gather_bytes(mg_comm *, const void *buf, int64_t n, int root, char **out,
                         int64_t *counts);
/* Ends the whole job with this exit code (MPI_Abort); does not return. */
_Noreturn void mg_comm_abort(mg_comm *, int code);

#endif
