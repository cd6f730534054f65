/* comm_tree.c: the deterministic mode's sums over a communicator. A rank's
 * part is summed with the others in one binary tree over the ranks' order
 * (the comm's rank is the mesh coordinate): ((p0 + p1) + (p2 + p3)), a size
 * that is not a power of two split at the largest power of two below it. Every
 * rank gets the same bits, and a rank holding an aligned range of a sum's
 * blocks (DESIGN.md, "Determinism") adds its part where that range's subtree
 * is. The parts travel by all-gather (all-reduce) or all-to-all (reduce-
 * scatter): for two ranks the same bytes as a ring, (k - 1)/k more beyond.
 * And the exact sums' (exact.h) over a comm: integers, added in any order.
 * Exports: mg_comm_tree_all_reduce, mg_comm_tree_reduce_scatter, mg_comm_sum_exact
 * (comm.h). */
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "exact.h"
#include "status.h"

/* parts[0 .. k) of n floats each, summed into parts[0] in the tree. */
static void tree_sum(float *parts, int k, int64_t n) {
    for (int w = 1; w < k; w *= 2)
        for (int i = 0; i + w < k; i += 2 * w) {
            float *a = parts + (int64_t)i * n;
            const float *b = parts + (int64_t)(i + w) * n;
            for (int64_t j = 0; j < n; j++) a[j] += b[j];
        }
}

static float *scratch(const mg_comm *c, int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * (size_t)c->size * sizeof(float));
    if (!p)
        mg_error(MG_ENOMEM, "deterministic sum of %lld floats over %d ranks: out of memory for "
                 "the parts", (long long)n, c->size);
    return p;
}

int mg_comm_tree_all_reduce(mg_comm *c, float *buf, int64_t n) {
    if (c->size == 1 || n == 0) return MG_OK;
    float *parts = scratch(c, n);
    if (!parts) return MG_ENOMEM;
    int rc = mg_comm_all_gather(c, buf, n, parts);
    if (rc == MG_OK && !c->meta) {
        tree_sum(parts, c->size, n);
        memcpy(buf, parts, (size_t)n * sizeof(float));
    }
    free(parts);
    return rc;
}

int mg_comm_tree_reduce_scatter(mg_comm *c, const float *send, float *recv, int64_t n) {
    if (c->size == 1) {
        if (recv != send && n > 0 && !c->meta) memmove(recv, send, (size_t)n * sizeof(float));
        return MG_OK;
    }
    float *parts = scratch(c, n);
    if (!parts) return MG_ENOMEM;
    int rc = mg_comm_all_to_all(c, send, n, parts);
    if (rc == MG_OK && !c->meta) {
        tree_sum(parts, c->size, n);
        memcpy(recv, parts, (size_t)n * sizeof(float));
    }
    free(parts);
    return rc;
}

int mg_comm_sum_exact(mg_comm *c, mg_exact *a) {
    mg_exact_normalize(a); /* digits below 2^32: the ranks' sum cannot overflow */
    int64_t w[MG_EXACT_WORDS];
    memcpy(w, a->d, sizeof a->d);
    w[MG_EXACT_DIGITS] = a->nan, w[MG_EXACT_DIGITS + 1] = a->pos_inf;
    w[MG_EXACT_DIGITS + 2] = a->neg_inf, w[MG_EXACT_DIGITS + 3] = 0;
    int rc = mg_comm_sum_i64(c, w, MG_EXACT_WORDS);
    if (rc != MG_OK) return rc;
    memcpy(a->d, w, sizeof a->d);
    a->nan = w[MG_EXACT_DIGITS], a->pos_inf = w[MG_EXACT_DIGITS + 1];
    a->neg_inf = w[MG_EXACT_DIGITS + 2], a->pending = 0;
    return MG_OK;
}
