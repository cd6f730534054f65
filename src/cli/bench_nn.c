/* bench_nn.c: the network kernels' rows of `meshgrad bench ops`, on one thread
 * and on rank 0 only (the other ranks wait), each beside the reference it is
 * held to:
 *   attention fwd+bwd, B=8 H=4 T=256 D=64 (no mask): GFLOP/s of the kernels
 *     against cblas_sgemm running the same FLOPs, as the seven T x T x D GEMMs
 *     an unfused attention does per head (14 B H T^2 D); target >= 0.5x. The
 *     causal kernels are shown too, their FLOPs counted as half;
 *   layer norm (with weight and bias) and softmax fwd+bwd on 8192 rows of 1024:
 *     GB/s of the bytes they must move (forward x in, y out; backward two
 *     tensors in, dx out: five tensors) against a plain copy (one in, one out);
 *     target >= 70%;
 *   a Linear forward (x W^T, W 4096 x 1024) on eight 32-row micro-batches
 *     through the backend's gemm (cpu_gemm_small.c where it runs), beside
 *     cblas_sgemm on the same eight and on the one 256-row batch: GFLOP/s.
 * The backend kernels are timed directly (best of several runs), not the ops:
 * the ops add only dispatch, which the rows above them show.
 * Exports mg_cli_bench_nn (cli.h). */
#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "cli/cli.h"
#include "status.h"

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static mg_tensor *filled(int nd, const int64_t *shape, float scale) {
    mg_tensor *t = mg_tensor_alloc_on(NULL, MG_DEVICE_CPU, nd, shape);
    if (!t) return NULL;
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = scale * sinf(0.37f * (float)i + 0.1f);
    return t;
}

#define REPS 10

enum { ATT_B = 8, ATT_H = 4, ATT_T = 256, ATT_D = 64, ROWS = 8192, COLS = 1024 };

typedef struct {
    double attention, attention_causal, sgemm; /* GFLOP/s */
    double layer_norm, softmax, copy;          /* GB/s, each the best of REPS */
    double layer_norm_ratio, softmax_ratio;    /* against the copy: median of the rounds' */
    double micro, micro_sgemm, batch_sgemm;    /* GFLOP/s: the Linear forward */
} nn_figures;

/* seconds of the best of REPS runs of the attention kernels, forward + backward */
static double time_attention(bool causal, mg_tensor **t) {
    const struct mg_backend_iface *f = mg_backend_cpu()->iface;
    float scale = 1.0f / sqrtf((float)ATT_D);
    double best = INFINITY;
    for (int r = 0; r < REPS; r++) {
        double t0 = seconds();
        f->attention(NULL, t[0], t[1], t[2], scale, causal, 0, 0, t[3], t[4]);
        f->attention_backward(NULL, t[0], t[1], t[2], t[3], t[4], t[5], scale, causal, 0, 0, t[6],
                              t[7], t[8]);
        best = fmin(best, seconds() - t0);
    }
    return best;
}

static int bench_attention(nn_figures *out) {
    int64_t s4[4] = {ATT_B, ATT_H, ATT_T, ATT_D}, s3[3] = {ATT_B, ATT_H, ATT_T};
    mg_tensor *t[9]; /* q k v o lse dout dq dk dv */
    for (int i = 0; i < 9; i++) t[i] = i == 4 ? filled(3, s3, 1) : filled(4, s4, 1);
    for (int i = 0; i < 9; i++)
        if (!t[i]) return mg_error(MG_ENOMEM, "bench ops: out of memory for attention");
    double flops = 14.0 * ATT_B * ATT_H * (double)ATT_T * ATT_T * ATT_D;
    out->attention = flops / time_attention(false, t) * 1e-9;
    out->attention_causal = flops / 2 / time_attention(true, t) * 1e-9;
    /* the reference: the same FLOPs as seven T x T x D GEMMs per head */
    float *s = malloc(sizeof(float) * ATT_T * ATT_T);
    if (!s) return mg_error(MG_ENOMEM, "bench ops: out of memory for attention");
    double best = INFINITY;
    for (int r = 0; r < REPS; r++) {
        double t0 = seconds();
        for (int z = 0; z < ATT_B * ATT_H; z++)
            for (int g = 0; g < 7; g++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ATT_T, ATT_T, ATT_D, 1.0f,
                            t[0]->data + z * ATT_T * ATT_D, ATT_D, t[1]->data + z * ATT_T * ATT_D,
                            ATT_D, 0.0f, s, ATT_T);
        best = fmin(best, seconds() - t0);
    }
    out->sgemm = flops / best * 1e-9;
    free(s);
    for (int i = 0; i < 9; i++) mg_tensor_free(t[i]);
    return MG_OK;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the median of v[0, n), which it sorts */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The copy runs in every round beside the kernels, and each kernel's ratio is
 * the median over the rounds of its bandwidth against that round's copy: the
 * memory bandwidth of a shared machine drifts by a third from one second to
 * the next, and a ratio of two bests taken at different moments carries it. */
static int bench_rows(nn_figures *out) {
    const struct mg_backend_iface *f = mg_backend_cpu()->iface;
    int64_t shape[2] = {ROWS, COLS}, c = COLS, two = 2 * ROWS;
    mg_tensor *x = filled(2, shape, 3), *y = filled(2, shape, 0), *dy = filled(2, shape, 1);
    mg_tensor *dx = filled(2, shape, 0), *w = filled(1, &c, 1), *b = filled(1, &c, 1);
    mg_tensor *dw = filled(1, &c, 0), *db = filled(1, &c, 0), *stats = filled(1, &two, 0);
    mg_tensor *all[] = {x, y, dy, dx, w, b, dw, db, stats};
    for (int i = 0; i < 9; i++)
        if (!all[i]) return mg_error(MG_ENOMEM, "bench ops: out of memory for the row kernels");
    double bytes = 4.0 * ROWS * COLS, best[3] = {INFINITY, INFINITY, INFINITY};
    double ln_ratio[REPS], sm_ratio[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = seconds();
        f->layer_norm(NULL, x, w, b, 1e-5f, NULL, COLS, stats, y);
        f->layer_norm_backward(NULL, x, w, dy, stats, NULL, COLS, dx, dw, db);
        double t1 = seconds();
        f->softmax(NULL, x, NULL, NULL, false, y);
        f->softmax_backward(NULL, y, dy, NULL, false, dx);
        double t2 = seconds();
        memcpy(dx->data, x->data, (size_t)bytes);
        double t3 = seconds();
        best[0] = fmin(best[0], t1 - t0);
        best[1] = fmin(best[1], t2 - t1);
        best[2] = fmin(best[2], t3 - t2);
        ln_ratio[r] = 2 * (t1 - t0) > 0 ? 5 * (t3 - t2) / (2 * (t1 - t0)) : 0;
        sm_ratio[r] = 2 * (t2 - t1) > 0 ? 5 * (t3 - t2) / (2 * (t2 - t1)) : 0;
    }
    out->layer_norm_ratio = median(ln_ratio, REPS);
    out->softmax_ratio = median(sm_ratio, REPS);
    out->layer_norm = 5 * bytes / best[0] * 1e-9;
    out->softmax = 5 * bytes / best[1] * 1e-9;
    out->copy = 2 * bytes / best[2] * 1e-9;
    for (int i = 0; i < 9; i++) mg_tensor_free(all[i]);
    return MG_OK;
}

enum { MB_ROWS = 32, MB_COUNT = 8, LIN_IN = 1024, LIN_OUT = 4096 };

/* y = x W^T on MB_COUNT micro-batches of MB_ROWS rows: the backend's gemm and
 * sgemm on them, and sgemm on all the rows at once (best of REPS each) */
static int bench_micro(nn_figures *out) {
    const mg_backend *be = mg_backend_cpu();
    int64_t rows = MB_ROWS * MB_COUNT, xs[2] = {rows, LIN_IN}, ws[2] = {LIN_OUT, LIN_IN};
    int64_t ys[2] = {rows, LIN_OUT};
    mg_tensor *x = filled(2, xs, 1), *w = filled(2, ws, 1), *y = filled(2, ys, 0);
    if (!x || !w || !y) return mg_error(MG_ENOMEM, "bench ops: out of memory for the Linear");
    double best[3] = {INFINITY, INFINITY, INFINITY};
    for (int r = 0; r < REPS; r++) {
        double t0 = seconds();
        for (int m = 0; m < MB_COUNT; m++)
            be->iface->gemm(be->context, false, true, MB_ROWS, LIN_OUT, LIN_IN, 1.0f,
                            x->data + m * MB_ROWS * LIN_IN, LIN_IN, w->data, LIN_IN, 0.0f,
                            y->data + m * MB_ROWS * LIN_OUT, LIN_OUT);
        double t1 = seconds();
        for (int m = 0; m < MB_COUNT; m++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, MB_ROWS, LIN_OUT, LIN_IN, 1.0f,
                        x->data + m * MB_ROWS * LIN_IN, LIN_IN, w->data, LIN_IN, 0.0f,
                        y->data + m * MB_ROWS * LIN_OUT, LIN_OUT);
        double t2 = seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, LIN_OUT, LIN_IN, 1.0f,
                    x->data, LIN_IN, w->data, LIN_IN, 0.0f, y->data, LIN_OUT);
        double t3 = seconds();
        best[0] = fmin(best[0], t1 - t0);
        best[1] = fmin(best[1], t2 - t1);
        best[2] = fmin(best[2], t3 - t2);
    }
    double flops = 2.0 * (double)rows * LIN_IN * LIN_OUT;
    out->micro = flops / best[0] * 1e-9;
    out->micro_sgemm = flops / best[1] * 1e-9;
    out->batch_sgemm = flops / best[2] * 1e-9;
    mg_tensor_free(x);
    mg_tensor_free(w);
    mg_tensor_free(y);
    return MG_OK;
}

int mg_cli_bench_nn(char *json, size_t len) {
    nn_figures r = {0};
    int rc = MG_OK, threads = mg_backend_cpu_threads();
    if (mg_rank() == 0) {
        mg_backend_cpu_set_threads(1);
        rc = bench_attention(&r);
        if (rc == MG_OK) rc = bench_rows(&r);
        if (rc == MG_OK) rc = bench_micro(&r);
        mg_backend_cpu_set_threads(threads);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc != MG_OK || mg_rank() != 0) return rc;
    printf("network kernels, 1 thread, rank 0, OpenBLAS %s kernels (best of %d)\n", mg_blas_core(),
           REPS);
    printf("  %-44s %8.1f GFLOP/s   cblas_sgemm same FLOPs %6.1f   ratio %.2f (target >= 0.5)\n",
           "attention fwd+bwd B=8 H=4 T=256 D=64", r.attention, r.sgemm, r.attention / r.sgemm);
    printf("  %-44s %8.1f GFLOP/s   (causal FLOPs: half)\n", "attention fwd+bwd, causal",
           r.attention_causal);
    printf("  %-44s %8.1f GB/s      plain copy %6.1f GB/s   ratio %.2f (target >= 0.7)\n",
           "layer norm fwd+bwd 8192 x 1024", r.layer_norm, r.copy, r.layer_norm_ratio);
    printf("  %-44s %8.1f GB/s      plain copy %6.1f GB/s   ratio %.2f (target >= 0.7)\n",
           "softmax fwd+bwd 8192 x 1024", r.softmax, r.copy, r.softmax_ratio);
    printf("  (row kernels' ratio: the median of %d rounds, each against its round's copy)\n",
           REPS);
    printf("  %-44s %8.1f GFLOP/s   sgemm same %6.1f, 256 rows at once %6.1f   ratio %.2f\n",
           "x W^T, 8 micro-batches of 32 x 1024, W 4096", r.micro, r.micro_sgemm, r.batch_sgemm,
           r.micro / r.batch_sgemm);
    snprintf(json, len,
             ",\"attention_gflops\":%.2f,\"attention_causal_gflops\":%.2f,\"sgemm_gflops\":%.2f,"
             "\"attention_vs_sgemm\":%.3f,\"layer_norm_gbs\":%.2f,\"softmax_gbs\":%.2f,"
             "\"copy_gbs\":%.2f,\"layer_norm_vs_copy\":%.3f,\"softmax_vs_copy\":%.3f,"
             "\"micro_gflops\":%.2f,\"micro_sgemm_gflops\":%.2f,\"batch_sgemm_gflops\":%.2f",
             r.attention, r.attention_causal, r.sgemm, r.attention / r.sgemm, r.layer_norm,
             r.softmax, r.copy, r.layer_norm_ratio, r.softmax_ratio, r.micro, r.micro_sgemm,
             r.batch_sgemm);
    return MG_OK;
}
