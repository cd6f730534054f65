/* cuda_rope.cu: the CUDA rotary embedding, with the semantics of cpu_rope.c:
 * x (B, T, H, D), the pair (2i, 2i + 1) of every row (b, t, h) rotated by the
 * angle (pos0 + t) theta^(-2i / D) (its negative for the backward). A first
 * kernel takes each (position, pair)'s cosine and sine in double, as the CPU
 * does, into the device scratch (T x D/2 of them, rounded to float); the
 * second rotates every pair from that table, a thread a pair.
 *
 * Exports: mg_cu_rope_iface (cuda_internal.h). */
#include <math.h>
#include <stdint.h>

#include "backend/cuda_internal.h"

/* tab[2 e], tab[2 e + 1] = cos and sign * sin of pair e % half at position e / half */
__global__ void k_rope_table(int64_t nt, int64_t half, int64_t d, int64_t pos0, double theta,
                             double sign, float *tab) {
    FOR_EACH(e, nt * half) {
        int64_t t = e / half, i = e % half;
        double angle = (double)(pos0 + t) * pow(theta, -2.0 * (double)i / (double)d);
        tab[2 * e] = (float)cos(angle);
        tab[2 * e + 1] = (float)(sign * sin(angle));
    }
}

__global__ void k_rope(const float *x, const float *tab, float *out, int64_t pairs, int64_t nt,
                       int64_t nh, int64_t half) {
    FOR_EACH(p, pairs) {
        int64_t i = p % half, t = p / half / nh % nt, e = t * half + i;
        float c = tab[2 * e], s = tab[2 * e + 1], a = x[2 * p], b = x[2 * p + 1];
        out[2 * p] = a * c - b * s;
        out[2 * p + 1] = a * s + b * c;
    }
}

static void cuda_rope(void *ctx, const mg_tensor *x, int64_t pos0, float theta, bool inverse,
                      mg_tensor *out) {
    (void)ctx;
    int64_t nt = x->shape[1], nh = x->shape[2], d = x->shape[3], half = d / 2;
    int64_t pairs = x->numel / 2;
    if (pairs == 0 || half == 0) return;
    /* the table: nt * half pairs of floats, in doubles' room after index 0 */
    double *scratch = mg_cu_scratch(nt * half + 1);
    if (!scratch) return;
    float *tab = (float *)(scratch + 1);
    k_rope_table<<<grid_for(nt * half), THREADS, 0, mg_cu.stream>>>(
        nt, half, d, pos0, (double)theta, inverse ? -1.0 : 1.0, tab);
    if (!LAUNCHED("rope kernel")) return;
    k_rope<<<grid_for(pairs), THREADS, 0, mg_cu.stream>>>(x->data, tab, out->data, pairs, nt, nh,
                                                          half);
    LAUNCHED("rope kernel");
}

void mg_cu_rope_iface(struct mg_backend_iface *f) { f->rope = cuda_rope; }
