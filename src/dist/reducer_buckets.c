/* reducer_buckets.c: bucketed, non-blocking gradient all-reduce (see
 * reducer_buckets.h). A bucket is either one large gradient summed in place,
 * or a packing buffer of small ones (copied in when added, copied back at
 * finish). */
#include "dist/reducer_buckets.h"

#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "status.h"

struct mg_bucket_item {
    float *buf;
    int64_t n;
    int bucket; /* the packing bucket it was copied into, or -1 (in place) */
    int64_t offset;
};

struct mg_bucket {
    mg_comm *comm;
    float *data; /* the gradient itself, or the packing buffer */
    int64_t used;
    bool packing; /* data is a packing buffer (owned, in `packs`) */
    bool started;
    mg_comm_request req;
};

static int start(mg_bucket *k) {
    k->started = true;
    return mg_comm_iall_reduce(k->comm, k->data, k->used, &k->req);
}

static float *next_pack(mg_buckets *b) {
    if (b->n_packs_used < b->n_packs) return b->packs[b->n_packs_used++];
    if (mg_array_grow((void **)&b->packs, &b->cap_packs, b->n_packs + 1, sizeof *b->packs,
                      "gradient buckets") != MG_OK)
        return NULL;
    float *p = malloc((size_t)MG_GRAD_BUCKET_FLOATS * sizeof(float));
    if (!p) return mg_error_null(MG_ENOMEM, "gradient sync: out of memory for a bucket");
    b->packs[b->n_packs++] = p;
    b->n_packs_used++;
    return p;
}

static int new_bucket(mg_buckets *b, mg_comm *comm, float *data, bool packing) {
    if (mg_array_grow((void **)&b->buckets, &b->cap_buckets, b->n_buckets + 1, sizeof *b->buckets,
                      "gradient buckets") != MG_OK)
        return -1;
    b->buckets[b->n_buckets] = (mg_bucket){.comm = comm, .data = data, .packing = packing};
    b->buckets[b->n_buckets].req.done = 1;
    return b->n_buckets++;
}

int mg_buckets_add(mg_buckets *b, mg_comm *comm, float *buf, int64_t n, bool on_host) {
    if (n <= 0 || comm->size == 1) return MG_OK;
    if (mg_array_grow((void **)&b->items, &b->cap_items, b->n_items + 1, sizeof *b->items,
                      "gradient buckets") != MG_OK)
        return MG_ENOMEM;
    mg_bucket_item *it = &b->items[b->n_items];
    *it = (mg_bucket_item){.buf = buf, .n = n, .bucket = -1};
    if (n >= MG_GRAD_LARGE_FLOATS || !on_host) { /* large, or device memory: in place */
        int k = new_bucket(b, comm, buf, false);
        if (k < 0) return mg_last_code();
        b->buckets[k].used = n;
        b->n_items++;
        return start(&b->buckets[k]);
    }
    /* small: pack. A bucket serves one communicator; a full one is started. */
    int open = b->open_pack - 1;
    if (open >= 0 && (b->buckets[open].comm != comm ||
                      b->buckets[open].used + n > MG_GRAD_BUCKET_FLOATS)) {
        int rc = start(&b->buckets[open]);
        b->open_pack = 0;
        open = -1;
        if (rc != MG_OK) return rc;
    }
    if (open < 0) {
        float *p = next_pack(b);
        if (!p) return mg_last_code();
        open = new_bucket(b, comm, p, true);
        if (open < 0) return mg_last_code();
        b->open_pack = open + 1;
    }
    mg_bucket *k = &b->buckets[open];
    memcpy(k->data + k->used, buf, (size_t)n * sizeof(float));
    it->bucket = open;
    it->offset = k->used;
    k->used += n;
    b->n_items++;
    return MG_OK;
}

int mg_buckets_poll(mg_buckets *b) {
    for (int i = 0; i < b->n_buckets; i++) {
        mg_bucket *k = &b->buckets[i];
        if (!k->started || k->req.done) continue;
        int rc = mg_comm_test(k->comm, &k->req);
        if (rc != MG_OK) return rc;
        if (!k->req.done) break; /* later ones were started later: no need to look */
    }
    return MG_OK;
}

int mg_buckets_finish(mg_buckets *b) {
    int rc = MG_OK;
    if (b->open_pack > 0) rc = start(&b->buckets[b->open_pack - 1]);
    b->open_pack = 0;
    /* wait for every started one, even after a failure, so none is left in flight */
    for (int i = 0; i < b->n_buckets; i++)
        if (b->buckets[i].started) {
            int r = mg_comm_wait(b->buckets[i].comm, &b->buckets[i].req);
            if (rc == MG_OK) rc = r;
        }
    for (int i = 0; i < b->n_items && rc == MG_OK; i++) {
        const mg_bucket_item *it = &b->items[i];
        if (it->bucket >= 0)
            memcpy(it->buf, b->buckets[it->bucket].data + it->offset, (size_t)it->n * sizeof(float));
    }
    b->n_items = b->n_buckets = b->n_packs_used = 0;
    return rc;
}

bool mg_buckets_pending(const mg_buckets *b, const float *buf) {
    for (int i = 0; i < b->n_items; i++)
        if (b->items[i].buf == buf) return true;
    return false;
}

void mg_buckets_free(mg_buckets *b) {
    for (int i = 0; i < b->n_packs; i++) free(b->packs[i]);
    free(b->packs);
    free(b->items);
    free(b->buckets);
    memset(b, 0, sizeof *b);
}
