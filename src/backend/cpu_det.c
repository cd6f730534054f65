/* cpu_det.c: the deterministic mode's sums on the CPU (DESIGN.md,
 * "Determinism"). A sum of n terms is the halving tree: while the length is
 * even and above 64 it is split into halves, each summed the same way; a leaf
 * (64 terms or fewer, or an odd count) is added in order from +0. So the
 * leaves of n terms all have the same length, mg_det_leaf(n); a rank, thread
 * or micro-batch holding n / 2^j consecutive terms (2^j dividing n, every
 * length on the way down above 32) holds one subtree, and its sum added to
 * the others' in a tree gives the bits of the whole sum. The leaves are added
 * by a binary counter of partial sums: after leaf i, merge while bit l of i is
 * 1, which for a power-of-two leaf count is the perfect tree. The sums here
 * (reductions and the norms' weight gradients) halve down to
 * leaves of one term, the odd part of n (a pairwise tree: n split into any
 * power-of-two count of equal parts gives subtrees); the GEMM's leaves are of
 * 64 (cpu_gemm_det.c; the embedding's too, cpu_nn.c), where the tree's adds
 * would cost.
 * Exports: mg_cpu_det_colsum, mg_cpu_det_scratch (cpu_kernels.h). */
#include <stdlib.h>
#include <string.h>

#include "backend/backend_state.h"
#include "backend/cpu_kernels.h"
#include "context.h"
#include "parallel.h"

float *mg_cpu_det_scratch(int64_t n) {
    mg_staging *s = &mg_backend_ctx()->det_scratch;
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    if (bytes > s->bytes) {
        void *p = malloc(bytes + bytes / 4);
        if (!p) return NULL;
        free(s->p);
        s->p = p;
        s->bytes = bytes + bytes / 4;
    }
    return s->p;
}

#define TILE 256
#define LEVELS 40

/* out[j] (j < w) = the tree sum over r < rows of t[r ld + j], leaves of `leaf` */
static void colsum_tile(const float *t, int64_t rows, int64_t leaf, int64_t ld, int64_t w,
                        float *out) {
    float stack[LEVELS][TILE], cur[TILE];
    int64_t blocks = rows / leaf;
    for (int64_t b = 0; b < blocks; b++) {
        for (int64_t j = 0; j < w; j++) cur[j] = 0.0f;
        for (int64_t r = b * leaf; r < (b + 1) * leaf; r++) {
            const float *row = t + r * ld;
            for (int64_t j = 0; j < w; j++) cur[j] += row[j];
        }
        int l = 0;
        for (; b >> l & 1; l++)
            for (int64_t j = 0; j < w; j++) cur[j] += stack[l][j];
        memcpy(stack[l], cur, (size_t)w * sizeof(float));
    }
    /* blocks is a power of two: the whole sum sits at its level */
    int top = 0;
    while ((1LL << top) < blocks) top++;
    memcpy(out, stack[top], (size_t)w * sizeof(float));
}

void mg_cpu_det_colsum(const float *t, int64_t rows, int64_t cols, int64_t ld, float *out) {
    if (cols <= 0) return;
    int64_t leaf = rows;
    while (leaf > 1 && leaf % 2 == 0) leaf /= 2; /* a pairwise tree: any even split holds */
    if (rows <= 0) {
        memset(out, 0, (size_t)cols * sizeof(float));
        return;
    }
    int64_t tiles = (cols + TILE - 1) / TILE;
    MG_PAR_FOR(rows * cols > PAR_MIN, for (int64_t k = 0; k < tiles; k++) {
        int64_t j0 = k * TILE, w = cols - j0 < TILE ? cols - j0 : TILE;
        colsum_tile(t + j0, rows, leaf, ld, w, out + j0);
    });
}
