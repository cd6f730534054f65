/* comm_shm.c: all-reduce through shared memory (see comm_shm.h). */
#include "dist/comm_shm.h"

#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "status.h"

int mg_shm_init(mg_shm *shm, MPI_Comm comm) {
    memset(shm, 0, sizeof *shm);
    shm->comm = MPI_COMM_NULL;
    MPI_Comm node;
    int size, node_size, err = MPI_Comm_size(comm, &size);
    if (err == MPI_SUCCESS) err = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    if (err != MPI_SUCCESS) return err;
    MPI_Comm_size(node, &node_size);
    /* every rank must agree: one node for all, or shared memory for none */
    int all = node_size == size, agreed = 0;
    err = MPI_Allreduce(&all, &agreed, 1, MPI_INT, MPI_MIN, comm);
    for (int i = 0; i < MG_SHM_OPS; i++) shm->slot_comm[i] = MPI_COMM_NULL;
    if (err == MPI_SUCCESS && agreed && size > 1) {
        for (int i = 0; i < MG_SHM_OPS && err == MPI_SUCCESS; i++)
            err = MPI_Comm_dup(node, &shm->slot_comm[i]);
        if (err == MPI_SUCCESS) {
            shm->comm = node; /* same members, same order: keys were all 0 */
            MPI_Comm_rank(node, &shm->rank);
            shm->size = size;
            return MPI_SUCCESS;
        }
        for (int i = 0; i < MG_SHM_OPS; i++)
            if (shm->slot_comm[i] != MPI_COMM_NULL) MPI_Comm_free(&shm->slot_comm[i]);
    }
    MPI_Comm_free(&node);
    return err;
}

static float *alloc(mg_shm *shm, int64_t n, bool one, int *err) {
    *err = MPI_SUCCESS;
    if (shm->comm == MPI_COMM_NULL || n <= 0) return NULL;
    if (mg_array_grow((void **)&shm->bufs, &shm->cap, shm->nbufs + 1, sizeof *shm->bufs,
                      "shared memory") != MG_OK) {
        *err = MPI_ERR_NO_MEM;
        return NULL;
    }
    mg_shm_buffer *b = &shm->bufs[shm->nbufs];
    b->n = n;
    b->one = one;
    b->seg = calloc((size_t)shm->size, sizeof *b->seg);
    float *mine = NULL;
    if (!b->seg) {
        *err = MPI_ERR_NO_MEM;
        return NULL;
    }
    int64_t here = one && shm->rank != 0 ? 0 : n; /* one copy: rank 0 holds it */
    *err = MPI_Win_allocate_shared((MPI_Aint)here * (MPI_Aint)sizeof(float), sizeof(float),
                                   MPI_INFO_NULL, shm->comm, &mine, &b->win);
    for (int r = 0; r < shm->size && *err == MPI_SUCCESS; r++) {
        MPI_Aint bytes;
        int unit;
        *err = MPI_Win_shared_query(b->win, one ? 0 : r, &bytes, &unit, &b->seg[r]);
    }
    mine = b->seg[shm->rank];
    if (*err == MPI_SUCCESS) *err = MPI_Win_lock_all(MPI_MODE_NOCHECK, b->win);
    if (*err != MPI_SUCCESS) {
        free(b->seg);
        return NULL;
    }
    shm->nbufs++;
    return mine;
}

float *mg_shm_alloc(mg_shm *shm, int64_t n, int *err) { return alloc(shm, n, false, err); }
float *mg_shm_alloc_one(mg_shm *shm, int64_t n, int *err) { return alloc(shm, n, true, err); }

const mg_shm_buffer *mg_shm_find(const mg_shm *shm, const float *p, int64_t n, int64_t *offset) {
    for (int i = 0; i < shm->nbufs; i++) {
        const mg_shm_buffer *b = &shm->bufs[i];
        const float *mine = b->seg[shm->rank];
        if (p >= mine && p + n <= mine + b->n) {
            *offset = p - mine;
            return b;
        }
    }
    return NULL;
}

float *mg_shm_peer(const mg_shm *shm, const float *p, int64_t n, int rank) {
    int64_t offset;
    const mg_shm_buffer *b = mg_shm_find(shm, p, n, &offset);
    if (!b || rank < 0 || rank >= shm->size) return NULL;
    return b->seg[rank] + offset;
}

int mg_shm_fence(mg_shm *shm) {
    for (int i = 0; i < shm->nbufs; i++) {
        int err = MPI_Win_sync(shm->bufs[i].win);
        if (err != MPI_SUCCESS) return err;
    }
    return MPI_SUCCESS;
}

void mg_shm_sum(float *restrict out, const float *const *seg, int k, int64_t offset, int64_t m) {
    const float *restrict s0 = seg[0] + offset;
    for (int64_t j = 0; j < m; j++) out[j] = s0[j];
    for (int r = 1; r < k; r++) {
        const float *restrict s = seg[r] + offset;
        for (int64_t j = 0; j < m; j++) out[j] += s[j];
    }
}

/* This rank's chunk: summed over every rank's copy, written into all of them. */
static void reduce_chunk(const mg_shm *shm, const mg_shm_op *op) {
    int k = shm->size;
    const mg_shm_buffer *b = &shm->bufs[op->buf];
    int64_t lo = op->offset + (int64_t)shm->rank * op->n / k;
    int64_t hi = op->offset + (int64_t)(shm->rank + 1) * op->n / k;
    float sum[2048];
    for (int64_t i = lo; i < hi; i += 2048) {
        int64_t m = hi - i < 2048 ? hi - i : 2048;
        mg_shm_sum(sum, (const float *const *)b->seg, k, i, m);
        for (int r = 0; r < k; r++) memcpy(b->seg[r] + i, sum, (size_t)m * sizeof(float));
    }
}

static MPI_Comm slot_comm(const mg_shm *shm, const mg_shm_op *op) {
    return shm->slot_comm[op - shm->ops];
}

mg_shm_op *mg_shm_start(mg_shm *shm, const mg_shm_buffer *b, int64_t offset, int64_t n, int *err) {
    mg_shm_op *op = &shm->ops[shm->started % MG_SHM_OPS];
    *err = op->busy ? mg_shm_wait(shm, op) : MPI_SUCCESS; /* the slot's last sum, first */
    if (*err != MPI_SUCCESS) return NULL;
    *op = (mg_shm_op){.id = shm->started++, .buf = (int)(b - shm->bufs), .offset = offset, .n = n,
                      .phase = 0, .busy = true};
    /* this rank's part is final: publish it, then wait for the others' */
    *err = MPI_Win_sync(b->win);
    if (*err == MPI_SUCCESS) *err = MPI_Ibarrier(slot_comm(shm, op), &op->req);
    if (*err != MPI_SUCCESS) op->busy = false;
    return *err == MPI_SUCCESS ? op : NULL;
}

static int step(mg_shm *shm, mg_shm_op *op) {
    MPI_Win win = shm->bufs[op->buf].win;
    int err = MPI_Win_sync(win);
    if (err != MPI_SUCCESS) return err;
    if (op->phase == 0) { /* everyone's part is in: add up ours, then say so */
        reduce_chunk(shm, op);
        err = MPI_Win_sync(win);
        if (err == MPI_SUCCESS) err = MPI_Ibarrier(slot_comm(shm, op), &op->req);
    }
    op->phase++;
    if (op->phase == 2) op->busy = false;
    return err;
}

int mg_shm_progress(mg_shm *shm, mg_shm_op *op, int *done) {
    while (op->phase < 2) {
        int flag = 0, err = MPI_Test(&op->req, &flag, MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS) return err;
        if (!flag) break;
        if ((err = step(shm, op)) != MPI_SUCCESS) return err;
    }
    *done = op->phase >= 2;
    return MPI_SUCCESS;
}

int mg_shm_wait(mg_shm *shm, mg_shm_op *op) {
    while (op->phase < 2) {
        int err = MPI_Wait(&op->req, MPI_STATUS_IGNORE);
        if (err == MPI_SUCCESS) err = step(shm, op);
        if (err != MPI_SUCCESS) return err;
    }
    return MPI_SUCCESS;
}

void mg_shm_free(mg_shm *shm) {
    for (int i = 0; i < shm->nbufs; i++) {
        MPI_Win_unlock_all(shm->bufs[i].win);
        MPI_Win_free(&shm->bufs[i].win);
        free(shm->bufs[i].seg);
    }
    free(shm->bufs);
    shm->bufs = NULL;
    shm->nbufs = shm->cap = 0;
    for (int i = 0; i < MG_SHM_OPS; i++)
        if (shm->slot_comm[i] != MPI_COMM_NULL) MPI_Comm_free(&shm->slot_comm[i]);
    if (shm->comm != MPI_COMM_NULL) MPI_Comm_free(&shm->comm);
}
