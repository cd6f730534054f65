/* comm_tree.c: the deterministic mode's sums over a communicator. A rank's
 * part is summed with the others in one binary tree over the ranks' order
 * (the comm's rank is the mesh coordinate): ((p0 + p1) + (p2 + p3)), a size
 * that is not a power of two split at the largest power of two below it. Every
 * rank gets the same bits, and a rank holding an aligned range of a sum's
 * blocks (DESIGN.md, "Determinism") adds its part where that range's subtree
 * is. The parts travel by all-gather (all-reduce) or all-to-all (reduce-
 * scatter): for two ranks the same bytes as a ring, (k - 1)/k more beyond.
 * It stands above comm.c, whose gathers it calls: comm.c's sums reach it
 * through the hook mg_comm_tree_start registers (mg_comm_on_tree_sum).
 * Exports: mg_comm_tree_start (comm.h). */
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
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

/* The ranks' parts summed in the tree: every rank's n floats at send, by
 * all-gather (the all-reduce; recv is send), or block r of every rank's size * n
 * into rank r's recv, by all-to-all (the reduce-scatter, `scatter`). An empty
 * all-reduce moves nothing; an empty reduce-scatter is still its all-to-all,
 * counted as one. */
static int tree_sum_over(mg_comm *c, const float *send, float *recv, int64_t n, int scatter) {
    if (c->size == 1 || (n == 0 && !scatter)) {
        if (recv != send && n > 0 && !c->meta) memmove(recv, send, (size_t)n * sizeof(float));
        return MG_OK;
    }
    float *parts = scratch(c, n);
    if (!parts) return MG_ENOMEM;
    int rc = scatter ? mg_comm_all_to_all(c, send, n, parts)
                     : mg_comm_all_gather(c, send, n, parts);
    if (rc == MG_OK && !c->meta) {
        tree_sum(parts, c->size, n);
        memcpy(recv, parts, (size_t)n * sizeof(float));
    }
    free(parts);
    return rc;
}

void mg_comm_tree_start(void) { mg_comm_on_tree_sum(tree_sum_over); }
