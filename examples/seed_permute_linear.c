/* seed_permute_linear.c: the program of the bug report meshgrad began from,
 * written against the public API.
 *
 *   w (5, 10), b (5), x (2, 10, 40)
 *   loss = linear(x.permute(0, 2, 1), w, b).sum();  loss.backward()
 *
 * on a 1xN mesh (N = number of ranks) with w and b Replicate and x [R, S(0)],
 * then x on every other placement list. Each run's loss and gradients are
 * compared with the same computation done here with plain loops; the report's
 * broken spec (one placement on a 2-D mesh) must be refused with a clear error.
 *
 * Build after `make install` (the rpath: where the library is, at run time):
 *   mpicc seed_permute_linear.c $(pkg-config --cflags --libs meshgrad) \
 *       -Wl,-rpath,$(pkg-config --variable=libdir meshgrad) -o seed
 *   mpirun -np 2 ./seed                                 (exit 0 when all agree) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <meshgrad.h>

enum { B = 2, K = 10, T = 40, N = 5 };

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f;
}

/* reference: loss and gradients with loops. xt[b][t][k] = x[b][k][t] */
static void reference(const float *x, const float *w, const float *b, double *loss, float *gx,
                      float *gw, float *gb) {
    *loss = 0;
    memset(gx, 0, sizeof(float) * B * K * T);
    memset(gw, 0, sizeof(float) * N * K);
    memset(gb, 0, sizeof(float) * N);
    for (int i = 0; i < B; i++)
        for (int t = 0; t < T; t++)
            for (int n = 0; n < N; n++) {
                double y = b[n];
                for (int k = 0; k < K; k++) y += (double)x[(i * K + k) * T + t] * w[n * K + k];
                *loss += y;
                gb[n] += 1; /* d loss / d y = 1 */
                for (int k = 0; k < K; k++) {
                    gw[n * K + k] += x[(i * K + k) * T + t];
                    gx[(i * K + k) * T + t] += w[n * K + k];
                }
            }
}

static double max_diff(const mg_tensor *t, const float *ref, int n) {
    const float *a = mg_tensor_data((mg_tensor *)t);
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(a[i] - ref[i]) / fmax(1.0, fabs(ref[i])));
    return m;
}

static int run(const mg_mesh *mesh, const mg_tensor *xf, const mg_tensor *wf, const mg_tensor *bf,
               mg_placement px[2], const float *ref_g[3], double ref_loss) {
    mg_placement rr[2] = {MG_REPLICATE, MG_REPLICATE};
    mg_dtensor *x = mg_distribute(mesh, xf, px, 2);
    mg_dtensor *w = mg_distribute(mesh, wf, rr, 2);
    mg_dtensor *b = mg_distribute(mesh, bf, rr, 2);
    if (!x || !w || !b) {
        fprintf(stderr, "seed: %s\n", mg_last_error());
        return 1;
    }
    mg_set_requires_grad(x, 1);
    mg_set_requires_grad(w, 1);
    mg_set_requires_grad(b, 1);
    mg_dtensor *xt = mg_permute(x, (int[]){0, 2, 1}); /* (B, T, K) */
    mg_dtensor *y = mg_linear(xt, w, b);             /* (B, T, N) */
    mg_dtensor *loss = mg_sum(y);
    if (!loss || mg_backward(loss) != MG_OK) {
        fprintf(stderr, "seed: %s\n", mg_last_error());
        return 1;
    }
    mg_tensor *l = mg_full_tensor(loss);
    mg_tensor *g[3] = {mg_full_tensor(mg_grad(x)), mg_full_tensor(mg_grad(w)),
                       mg_full_tensor(mg_grad(b))};
    double err_loss = fabs(mg_tensor_data(l)[0] - ref_loss) / fmax(1.0, fabs(ref_loss));
    double err = fmax(fmax(max_diff(g[0], ref_g[0], B * K * T), max_diff(g[1], ref_g[1], N * K)),
                      max_diff(g[2], ref_g[2], N));
    char where[256];
    mg_dtensor_describe(x, where, sizeof where);
    int bad = !(err_loss <= 1e-5 && err <= 1e-5);
    if (mg_rank() == 0)
        printf("x %s: loss %.9g (reference %.9g), max gradient error %.2g: %s\n", where,
               mg_tensor_data(l)[0], ref_loss, err, bad ? "MISMATCH" : "ok");
    mg_tensor_free(l);
    for (int i = 0; i < 3; i++) mg_tensor_free(g[i]);
    mg_step_end();
    mg_dtensor_free(x);
    mg_dtensor_free(w);
    mg_dtensor_free(b);
    return bad;
}

int main(int argc, char **argv) {
    if (mg_init(&argc, &argv) != MG_OK) {
        fprintf(stderr, "seed: %s\n", mg_last_error());
        return 1;
    }
    int mesh_shape[2] = {1, mg_world_size()};
    mg_mesh *mesh = mg_mesh_new(2, mesh_shape);
    if (!mesh) {
        fprintf(stderr, "seed: %s\n", mg_last_error());
        return 1;
    }
    static float x[B * K * T], w[N * K], b[N], gx[B * K * T], gw[N * K], gb[N];
    unsigned s = 5;
    for (int i = 0; i < B * K * T; i++) x[i] = frand(&s) * 2 - 1;
    for (int i = 0; i < N * K; i++) w[i] = frand(&s);
    for (int i = 0; i < N; i++) b[i] = frand(&s);
    double ref_loss;
    reference(x, w, b, &ref_loss, gx, gw, gb);
    const float *ref_g[3] = {gx, gw, gb};
    mg_tensor *xf = mg_tensor_from_data(3, (int64_t[]){B, K, T}, x);
    mg_tensor *wf = mg_tensor_from_data(2, (int64_t[]){N, K}, w);
    mg_tensor *bf = mg_tensor_from_data(1, (int64_t[]){N}, b);

    int failures = 0;
    /* the report's broken spec: one placement on a 2-D mesh */
    mg_dtensor *broken = mg_distribute(mesh, xf, (mg_placement[]){MG_SHARD(0)}, 1);
    if (broken || !strstr(mg_last_error(), "placement")) {
        failures++;
        if (mg_rank() == 0) printf("one placement on a 2-D mesh was not refused\n");
    } else if (mg_rank() == 0) {
        printf("refused as it should be: %s\n", mg_last_error());
    }
    /* the report's placements, then every other one for x */
    mg_placement lists[][2] = {
        {MG_REPLICATE, MG_SHARD(0)}, {MG_REPLICATE, MG_REPLICATE}, {MG_REPLICATE, MG_SHARD(1)},
        {MG_REPLICATE, MG_SHARD(2)}, {MG_SHARD(0), MG_SHARD(0)},    {MG_REPLICATE, MG_PARTIAL_SUM},
    };
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        failures += run(mesh, xf, wf, bf, lists[i], ref_g, ref_loss);

    mg_tensor_free(xf);
    mg_tensor_free(wf);
    mg_tensor_free(bf);
    mg_mesh_free(mesh);
    mg_finalize();
    return failures ? 1 : 0;
}
