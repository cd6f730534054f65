/* reducer_det.c: a leaf's gradient in the deterministic mode (reducer.h).
 *
 * The batch is cut into micro-batches m-major (micro-batch m is rows
 * [m B/n, (m + 1) B/n) of the global batch, then sharded over the data-parallel
 * ranks), so the fixed tree of a weight gradient's sum over rows (DESIGN.md,
 * "Determinism") has the micro-batches at its top and the ranks below. A
 * contribution is therefore summed over the ranks at once (comm_tree.c), then
 * added to its micro-batch tree: a binary counter of partial sums, one level
 * per power of two, folded lowest first at the end. A leaf used k times in a
 * graph (a tied embedding and head) has k such trees, one per use in graph
 * order, added in that order at the end: each use's sum is then the one a
 * single rank makes, whatever the split.
 * Exports: mg_det_sums_add, mg_det_sums_fold, mg_det_sums_clear, mg_det_sums_bytes,
 * mg_det_sums_free (reducer.h). */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "dist/reducer.h"
#include "status.h"

#define LEVELS 32

typedef struct {
    float *level[LEVELS]; /* level l: the sum of 2^l micro-batches, when count's bit l is set */
    float *spare;         /* a free buffer for the next insertion */
    int64_t count;        /* micro-batches added */
} det_tree;

struct mg_det_sums {
    det_tree *trees; /* one per use of the leaf in a graph */
    int n, cap;
    int64_t numel;
};

static float *buffer(float **p, int64_t numel) {
    if (!*p) *p = malloc((size_t)(numel > 0 ? numel : 1) * sizeof(float));
    if (!*p) mg_error(MG_ENOMEM, "deterministic gradient sums: out of memory");
    return *p;
}

static void add_into(float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) a[i] += b[i];
}

int mg_det_sums_add(mg_det_sums **sp, int use, const float *v, int64_t numel) {
    mg_det_sums *s = *sp;
    if (!s && !(s = *sp = calloc(1, sizeof *s)))
        return mg_error(MG_ENOMEM, "deterministic gradient sums: out of memory");
    if (s->n == 0) s->numel = numel;
    if (numel != s->numel)
        return mg_error(MG_ESTATE, "deterministic gradient sums: a contribution of %lld elements "
                        "for a gradient of %lld", (long long)numel, (long long)s->numel);
    if (use >= s->n) {
        int rc = mg_array_grow((void **)&s->trees, &s->cap, use + 1, sizeof *s->trees,
                               "deterministic gradient sums");
        if (rc != MG_OK) return rc;
        memset(s->trees + s->n, 0, (size_t)(use + 1 - s->n) * sizeof *s->trees);
        s->n = use + 1;
    }
    det_tree *t = &s->trees[use];
    float *cur = buffer(&t->spare, numel);
    if (!cur) return MG_ENOMEM;
    memcpy(cur, v, (size_t)numel * sizeof(float));
    int l = 0;
    for (; l < LEVELS && (t->count >> l & 1); l++) add_into(cur, t->level[l], numel);
    if (l == LEVELS) return mg_error(MG_ESTATE, "deterministic gradient sums: 2^32 micro-batches");
    t->spare = t->level[l]; /* empty now (bit l was 0), or never made */
    t->level[l] = cur;
    t->count++;
    return MG_OK;
}

int mg_det_sums_fold(mg_det_sums *s, float *out, int64_t numel) {
    if (!s || s->n == 0) return 1;
    if (numel != s->numel)
        return mg_error(MG_ESTATE, "deterministic gradient sums: %lld elements for a gradient of "
                        "%lld", (long long)s->numel, (long long)numel);
    float *tmp = NULL;
    int rc = MG_OK, any = 0;
    for (int u = 0; u < s->n && rc == MG_OK; u++) {
        det_tree *t = &s->trees[u];
        if (t->count == 0) continue;
        float *dst = any ? buffer(&tmp, numel) : out;
        if (!dst) {
            rc = MG_ENOMEM;
            break;
        }
        int first = 1;
        for (int l = 0; l < LEVELS; l++) { /* lowest first: (stack[l] + (... + stack[l0])) */
            if (!(t->count >> l & 1)) continue;
            if (first) memcpy(dst, t->level[l], (size_t)numel * sizeof(float));
            else add_into(dst, t->level[l], numel);
            first = 0;
        }
        if (any) add_into(out, dst, numel); /* the uses in graph order */
        any = 1;
    }
    free(tmp);
    return rc == MG_OK ? (any ? MG_OK : 1) : rc;
}

size_t mg_det_sums_bytes(const mg_det_sums *s) {
    if (!s) return 0;
    size_t n = 0;
    for (int u = 0; u < s->n; u++) {
        for (int l = 0; l < LEVELS; l++) n += s->trees[u].level[l] != NULL;
        n += s->trees[u].spare != NULL;
    }
    return n * (size_t)(s->numel > 0 ? s->numel : 1) * sizeof(float);
}

void mg_det_sums_clear(mg_det_sums *s) {
    if (!s) return;
    for (int u = 0; u < s->n; u++) s->trees[u].count = 0;
}

void mg_det_sums_free(mg_det_sums *s) {
    if (!s) return;
    for (int u = 0; u < s->n; u++) {
        for (int l = 0; l < LEVELS; l++) free(s->trees[u].level[l]);
        free(s->trees[u].spare);
    }
    free(s->trees);
    free(s);
}
