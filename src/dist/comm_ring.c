/* comm_ring.c: the non-blocking ring all-reduce (see comm_ring.h). */
#include "dist/comm_ring.h"

#include <stdlib.h>

static int mod(int a, int k) { return ((a % k) + k) % k; }
static int64_t lo(const mg_ring *r, int c) { return (int64_t)c * r->n / r->size; }
static int len(const mg_ring *r, int c) { return (int)(lo(r, c + 1) - lo(r, c)); }
static int last_step(const mg_ring *r) { return 2 * (r->size - 1); }

/* Step s < k-1 (reduce-scatter): send chunk me-s, take chunk me-s-1 into
 * scratch. Step k-1+t (all-gather): send chunk me+1-t, take chunk me-t into
 * place. */
static void chunks(const mg_ring *r, int *send, int *recv) {
    int k = r->size, me = r->rank, s = r->step;
    if (s < k - 1) {
        *send = mod(me - s, k);
        *recv = mod(me - s - 1, k);
    } else {
        int t = s - (k - 1);
        *send = mod(me + 1 - t, k);
        *recv = mod(me - t, k);
    }
}

static int post(mg_ring *r) {
    int k = r->size, send, recv;
    chunks(r, &send, &recv);
    float *to = r->step < k - 1 ? r->scratch : r->buf + lo(r, recv);
    int err = MPI_Irecv(to, len(r, recv), MPI_FLOAT, mod(r->rank - 1, k), r->tag, r->comm, &r->req[0]);
    if (err == MPI_SUCCESS)
        err = MPI_Isend(r->buf + lo(r, send), len(r, send), MPI_FLOAT, mod(r->rank + 1, k), r->tag,
                        r->comm, &r->req[1]);
    return err;
}

/* Both messages of the current step arrived: add (reduce-scatter) and post the next. */
static int advance(mg_ring *r) {
    if (r->step < r->size - 1) {
        int send, recv;
        chunks(r, &send, &recv);
        float *restrict dst = r->buf + lo(r, recv);
        const float *restrict src = r->scratch;
        for (int i = 0, m = len(r, recv); i < m; i++) dst[i] += src[i];
    }
    r->step++;
    return r->step < last_step(r) ? post(r) : MPI_SUCCESS;
}

int mg_ring_start(mg_ring *r, MPI_Comm comm, float *buf, int64_t n, int tag) {
    r->comm = comm;
    r->tag = tag;
    r->buf = buf;
    r->n = n;
    r->step = 0;
    int err = MPI_Comm_size(comm, &r->size);
    if (err == MPI_SUCCESS) err = MPI_Comm_rank(comm, &r->rank);
    if (err != MPI_SUCCESS) return err;
    if (r->size == 1 || n == 0) {
        r->step = last_step(r);
        return MPI_SUCCESS;
    }
    int64_t chunk = n / r->size + 1;
    if (chunk > r->scratch_cap) {
        float *s = realloc(r->scratch, (size_t)chunk * sizeof(float));
        if (!s) return MPI_ERR_NO_MEM;
        r->scratch = s;
        r->scratch_cap = chunk;
    }
    r->busy = true;
    return post(r);
}

int mg_ring_progress(mg_ring *r, int *done) {
    while (r->step < last_step(r)) {
        int flag = 0, err = MPI_Testall(2, r->req, &flag, MPI_STATUSES_IGNORE);
        if (err != MPI_SUCCESS) return err;
        if (!flag) break;
        if ((err = advance(r)) != MPI_SUCCESS) return err;
    }
    *done = r->step >= last_step(r);
    if (*done) r->busy = false;
    return MPI_SUCCESS;
}

int mg_ring_wait(mg_ring *r) {
    while (r->step < last_step(r)) {
        int err = MPI_Waitall(2, r->req, MPI_STATUSES_IGNORE);
        if (err == MPI_SUCCESS) err = advance(r);
        if (err != MPI_SUCCESS) return err;
    }
    r->busy = false;
    return MPI_SUCCESS;
}

void mg_ring_free(mg_ring *r) {
    free(r->scratch);
    r->scratch = NULL;
    r->scratch_cap = 0;
}
