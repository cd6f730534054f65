/* grad_sync.h: data-parallel gradient reduction overlapped with backward.
 *
 * When a parameter's gradient is final during mg_backward (all of it computed,
 * still Partial over a data-parallel mesh dim), the engine hands it here
 * instead of all-reducing it on the spot. Gradients of at least
 * MG_GRAD_LARGE_FLOATS (1 MiB) are reduced in place as one non-blocking all-reduce
 * each (through shared memory when the engine moved the buffer there, else a
 * ring: dist/comm_shm.h, dist/comm_ring.h); smaller ones are packed into a
 * bucket buffer that is all-reduced when it is full (and at the end). Each
 * started reduction makes progress whenever the engine polls between nodes,
 * and mg_grad_sync_finish waits for all of them (and unpacks the buckets)
 * before mg_backward returns, so the optimizer sees only reduced gradients. Every rank walks the same tape, so every rank starts
 * the same reductions in the same order.
 *
 * Exports: mg_grad_sync_add, mg_grad_sync_poll, mg_grad_sync_finish,
 * mg_grad_sync_pending. */
#ifndef MG_GRAD_SYNC_H
#define MG_GRAD_SYNC_H

#include <stdbool.h>
#include <stdint.h>

#include "dist/comm.h"

#define MG_GRAD_BUCKET_FLOATS ((int64_t)1 << 20) /* 4 MiB */
/* A gradient this large is summed on its own, in place (in shared memory when
 * the ranks share a node), and its parameter's optimizer step may be split. */
#define MG_GRAD_LARGE_FLOATS (MG_GRAD_BUCKET_FLOATS / 4)

/* Sums buf (n floats, host memory unless `on_host` is false) over comm: started
 * now or packed into the open bucket. buf must stay untouched until finish. */
int mg_grad_sync_add(mg_comm *comm, float *buf, int64_t n, bool on_host);
/* Lets started reductions progress (cheap; call between nodes). */
int mg_grad_sync_poll(void);
/* Starts what is still packed, waits for everything, unpacks. */
int mg_grad_sync_finish(void);
/* True while a reduction of buf is started or packed but not finished. */
bool mg_grad_sync_pending(const float *buf);

#endif
