/* reducer_buckets.h: data-parallel gradient sums overlapped with backward, the
 * reducer's part that talks to the comms (dist/reducer.h).
 *
 * When a gradient is final during mg_backward (all of it computed, still
 * Partial over a data-parallel mesh dim), the reducer hands it here instead of
 * all-reducing it on the spot. Gradients of at least MG_GRAD_LARGE_FLOATS
 * (1 MiB) are summed in place as one non-blocking all-reduce each (through
 * shared memory when the reducer moved the buffer there, else a ring:
 * dist/comm_shm.h, dist/comm_ring.h); smaller ones are packed into a bucket
 * buffer that is all-reduced when it is full (and at the end). Started sums
 * make progress whenever the engine polls between nodes, and
 * mg_buckets_finish waits for all of them (and unpacks the buckets) before
 * mg_backward returns. Every rank walks the same graph, so every rank starts
 * the same sums in the same order. Packing buffers and the lists keep their
 * memory between steps: a steady training step allocates nothing here.
 *
 * Exports: mg_buckets, mg_buckets_add, mg_buckets_poll, mg_buckets_finish,
 * mg_buckets_pending, mg_buckets_free, MG_GRAD_BUCKET_FLOATS,
 * MG_GRAD_LARGE_FLOATS. */
#ifndef MG_DIST_REDUCER_BUCKETS_H
#define MG_DIST_REDUCER_BUCKETS_H

#include <stdbool.h>
#include <stdint.h>

#include "dist/comm.h"

#define MG_GRAD_BUCKET_FLOATS ((int64_t)1 << 20) /* 4 MiB */
/* A gradient this large is summed on its own, in place (in shared memory when
 * the ranks share a node), and its parameter's optimizer step may be split. */
#define MG_GRAD_LARGE_FLOATS (MG_GRAD_BUCKET_FLOATS / 4)

typedef struct mg_bucket_item mg_bucket_item;
typedef struct mg_bucket mg_bucket;

/* The sums of one backward (the reducer's). Zero-initialized is empty. */
typedef struct {
    mg_bucket_item *items; /* gradients handed in */
    int n_items, cap_items;
    mg_bucket *buckets;
    int n_buckets, cap_buckets;
    int open_pack; /* 1 + the packing bucket still taking gradients; 0: none */
    float **packs; /* packing buffers, reused step after step in order */
    int n_packs_used, n_packs, cap_packs;
} mg_buckets;

/* Sums buf (n floats, host memory unless `on_host` is false) over comm: started
 * now or packed into the open bucket. buf must stay untouched until finish. */
int mg_buckets_add(mg_buckets *b, mg_comm *comm, float *buf, int64_t n, bool on_host);
/* Lets started sums progress (cheap; call between nodes). */
int mg_buckets_poll(mg_buckets *b);
/* Starts what is still packed, waits for everything, unpacks. */
int mg_buckets_finish(mg_buckets *b);
/* True while a sum of buf is started or packed but not finished. */
bool mg_buckets_pending(const mg_buckets *b, const float *buf);
void mg_buckets_free(mg_buckets *b);

#endif
