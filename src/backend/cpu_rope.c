/* cpu_rope.c: the CPU rotary embedding (llama's, as llama2.c and Meta's
 * code apply it) on x (B, T, H, D): the pair (2i, 2i + 1) of every row (b,
 * t, h) rotated by the angle (pos0 + t) theta^(-2i / D). Each position's
 * cosines and sines are taken once, in double, for a block of pairs, and
 * serve every batch row and head; the backward rotates by the negative
 * angle. Positions are split among threads.
 * Exports mg_cpu_rope (cpu_kernels.h; its contract in backend.h). */
#include <math.h>

#include "backend/cpu_kernels.h"
#include "parallel.h"

#define PAIRS 128 /* pairs whose cosines and sines are kept at once */

void mg_cpu_rope(void *ctx, const mg_tensor *x, int64_t pos0, float theta, bool inverse,
                 mg_tensor *out) {
    (void)ctx;
    int64_t nb = x->shape[0], nt = x->shape[1], nh = x->shape[2], d = x->shape[3], half = d / 2;
    double sign = inverse ? -1.0 : 1.0;
    MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t t = 0; t < nt; t++) {
        float cs[PAIRS], sn[PAIRS];
        double pos = (double)(pos0 + t);
        for (int64_t i0 = 0; i0 < half; i0 += PAIRS) {
            int64_t np = half - i0 < PAIRS ? half - i0 : PAIRS;
            for (int64_t i = 0; i < np; i++) {
                double angle = pos * pow((double)theta, -2.0 * (double)(i0 + i) / (double)d);
                cs[i] = (float)cos(angle);
                sn[i] = (float)(sign * sin(angle));
            }
            for (int64_t b = 0; b < nb; b++)
                for (int64_t h = 0; h < nh; h++) {
                    int64_t row = ((b * nt + t) * nh + h) * d + 2 * i0;
                    const float *xr = x->data + row;
                    float *yr = out->data + row;
                    for (int64_t i = 0; i < np; i++) {
                        float a = xr[2 * i], e = xr[2 * i + 1];
                        yr[2 * i] = a * cs[i] - e * sn[i];
                        yr[2 * i + 1] = a * sn[i] + e * cs[i];
                    }
                }
        }
    });
}
