/* grad_sync.c: bucketed, non-blocking gradient all-reduce (see grad_sync.h).
 *
 * State for one backward: a list of gradients handed in (`items`) and a list
 * of buckets. A bucket is either one large gradient reduced in place, or a
 * packing buffer of small ones (copied in when added, copied back at finish).
 * Packing buffers and the lists keep their memory between steps, so a steady
 * training step allocates nothing here. */
#include "autograd/grad_sync.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

typedef struct {
    float *buf;
    int64_t n;
    int bucket; /* the packing bucket it was copied into, or -1 (in place) */
    int64_t offset;
} item;

typedef struct {
    mg_comm *comm;
    float *data;    /* the gradient itself, or the packing buffer */
    int64_t used;
    bool packing;   /* data is a packing buffer (owned, in `packs`) */
    bool started;
    mg_comm_request req;
} bucket;

static item *items;
static int n_items, cap_items;
static bucket *buckets;
static int n_buckets, cap_buckets;
static int open_pack = -1; /* the packing bucket still taking gradients */
/* packing buffers, reused step after step in the order they are needed */
static float **packs;
static int n_packs_used, n_packs, cap_packs;

static int grow(void **p, int *cap, int need, size_t size) {
    if (need <= *cap) return MG_OK;
    int c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return mg_error(MG_ENOMEM, "gradient sync: out of memory");
    *p = q;
    *cap = c;
    return MG_OK;
}

static int start(bucket *b) {
    b->started = true;
    return mg_comm_iall_reduce(b->comm, b->data, b->used, &b->req);
}

static float *next_pack(void) {
    if (n_packs_used < n_packs) return packs[n_packs_used++];
    if (grow((void **)&packs, &cap_packs, n_packs + 1, sizeof *packs) != MG_OK) return NULL;
    float *p = malloc((size_t)MG_GRAD_BUCKET_FLOATS * sizeof(float));
    if (!p) return mg_error_null(MG_ENOMEM, "gradient sync: out of memory for a bucket");
    packs[n_packs++] = p;
    n_packs_used++;
    return p;
}

static int new_bucket(mg_comm *comm, float *data, bool packing) {
    if (grow((void **)&buckets, &cap_buckets, n_buckets + 1, sizeof *buckets) != MG_OK) return -1;
    buckets[n_buckets] = (bucket){.comm = comm, .data = data, .packing = packing};
    buckets[n_buckets].req.done = 1;
    return n_buckets++;
}

int mg_grad_sync_add(mg_comm *comm, float *buf, int64_t n, bool on_host) {
    if (n <= 0 || comm->size == 1) return MG_OK;
    if (grow((void **)&items, &cap_items, n_items + 1, sizeof *items) != MG_OK) return MG_ENOMEM;
    item *it = &items[n_items];
    *it = (item){.buf = buf, .n = n, .bucket = -1};
    if (n >= MG_GRAD_LARGE_FLOATS || !on_host) { /* large, or device memory: in place */
        int b = new_bucket(comm, buf, false);
        if (b < 0) return mg_last_code();
        buckets[b].used = n;
        n_items++;
        return start(&buckets[b]);
    }
    /* small: pack. A bucket serves one communicator; a full one is started. */
    if (open_pack >= 0 && (buckets[open_pack].comm != comm ||
                           buckets[open_pack].used + n > MG_GRAD_BUCKET_FLOATS)) {
        int rc = start(&buckets[open_pack]);
        open_pack = -1;
        if (rc != MG_OK) return rc;
    }
    if (open_pack < 0) {
        float *p = next_pack();
        if (!p) return mg_last_code();
        open_pack = new_bucket(comm, p, true);
        if (open_pack < 0) return mg_last_code();
    }
    bucket *b = &buckets[open_pack];
    memcpy(b->data + b->used, buf, (size_t)n * sizeof(float));
    it->bucket = open_pack;
    it->offset = b->used;
    b->used += n;
    n_items++;
    return MG_OK;
}

int mg_grad_sync_poll(void) {
    for (int i = 0; i < n_buckets; i++) {
        bucket *b = &buckets[i];
        if (!b->started || b->req.done) continue;
        int rc = mg_comm_test(b->comm, &b->req);
        if (rc != MG_OK) return rc;
        if (!b->req.done) break; /* later ones were started later: no need to look */
    }
    return MG_OK;
}

int mg_grad_sync_finish(void) {
    int rc = MG_OK;
    if (open_pack >= 0) rc = start(&buckets[open_pack]);
    open_pack = -1;
    /* wait for every started one, even after a failure, so none is left in flight */
    for (int i = 0; i < n_buckets; i++)
        if (buckets[i].started) {
            int r = mg_comm_wait(buckets[i].comm, &buckets[i].req);
            if (rc == MG_OK) rc = r;
        }
    for (int i = 0; i < n_items && rc == MG_OK; i++)
        if (items[i].bucket >= 0)
            memcpy(items[i].buf, buckets[items[i].bucket].data + items[i].offset,
                   (size_t)items[i].n * sizeof(float));
    n_items = n_buckets = n_packs_used = 0;
    return rc;
}

bool mg_grad_sync_pending(const float *buf) {
    for (int i = 0; i < n_items; i++)
        if (items[i].buf == buf) return true;
    return false;
}
