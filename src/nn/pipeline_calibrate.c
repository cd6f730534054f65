/* pipeline_calibrate.c: the two figures a pipeline plan's times come from, measured
 * on this machine: a FLOP rate (the three matrix products of a Linear layer
 * through the CPU backend) and a link (point-to-point round trips through the
 * comm layer). The ranks measure the FLOP rate at once, as a step's stages
 * compute, so ranks that share memory bandwidth measure the rate they will
 * get; the plan takes their mean. When the ranks outnumber the cores, only as
 * many ranks as there are cores measure: the plan wants a whole core's rate
 * and shares the cores out itself (pipeline_sim.h). Rank 0 measures the
 * link; every rank gets the same figures, so every rank plans the same. See
 * pipeline_cost.h.
 * Exports: mg_pp_measure_flops, mg_pp_measure_link. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "dist/watchdog.h"
#include "nn/pipeline_cost.h"
#include "status.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { REPEATS = 15 };
#define BUDGET_S 0.05 /* stop repeating after this long */

/* Rank 0's values to every rank of c (as floats: the figures need no more). */
static int share(mg_comm *c, double *a, double *b) {
    float v[2] = {(float)*a, (float)*b};
    int rc = mg_comm_broadcast(c, v, 2, 0);
    *a = v[0];
    *b = v[1];
    return rc;
}

/* This rank's rate on the three products of a (rows, in) -> (rows, out)
 * Linear layer: the median of up to REPEATS runs; 0 when out of memory. */
static double measure_here(int64_t rows, int64_t in, int64_t out) {
    mg_backend *be = mg_backend_cpu();
    // x: (R, I), w: (O, I), y: (R, O); dx like x, dw like w
    size_t nx = (size_t)(rows * in), nw = (size_t)(out * in), ny = (size_t)(rows * out);
    float *x = calloc(nx, sizeof(float)), *w = calloc(nw, sizeof(float));
    float *y = calloc(ny, sizeof(float)), *dx = calloc(nx, sizeof(float));
    float *dw = calloc(nw, sizeof(float));
    double t[REPEATS], rate = 0;
    int n = 0;
    if (x && w && y && dx && dw) {
        for (size_t i = 0; i < nx; i++) x[i] = (float)(i % 7) * 0.1f;
        for (size_t i = 0; i < nw; i++) w[i] = (float)(i % 5) * 0.1f;
        double start = now_s();
        for (int k = -1; k < REPEATS && (k < 2 || now_s() - start < BUDGET_S); k++) {
            double t0 = now_s();
            be->iface->gemm(be->context, false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y,
                            out);
            be->iface->gemm(be->context, false, false, rows, in, out, 1.0f, y, out, w, in, 0.0f, dx,
                            in);
            be->iface->gemm(be->context, true, false, out, in, rows, 1.0f, y, out, x, in, 0.0f, dw,
                            in);
            if (k >= 0) t[n++] = now_s() - t0; /* the first one warms up */
        }
        qsort(t, (size_t)n, sizeof *t, cmp_double);
        double median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
        rate = 3 * 2.0 * (double)rows * (double)in * (double)out / median;
    }
    free(x);
    free(w);
    free(y);
    free(dx);
    free(dw);
    return rate;
}

/* mg_comm_all_reduce (a sum), waited for in naps: a rank that does not
 * measure must not spin on a core that a measuring rank shares. The naps are
 * under the collective watchdog, as a blocking wait is: a measuring rank that
 * stalls ends the job instead of leaving the others napping for ever. */
static int sum_sleeping(mg_comm *c, float *v, int64_t n) {
    mg_comm_request req;
    int rc = mg_comm_iall_reduce(c, v, n, &req);
    if (rc != MG_OK || req.done) return rc;
    mg_watchdog_begin_comm("all_reduce", c->mpi);
    while (rc == MG_OK && !req.done) {
        struct timespec pause = {0, 200000}; /* 0.2 ms */
        nanosleep(&pause, NULL);
        rc = mg_comm_test(c, &req);
    }
    mg_watchdog_end();
    return rc;
}

int mg_pp_measure_flops(mg_comm *c, int at_once, int64_t rows, int64_t in, int64_t out,
                        double *flops) {
    float ready = 1;
    int rc = mg_comm_all_reduce(c, &ready, 1, MG_REDUCE_MAX); /* the ranks start together */
    bool measures = at_once <= 0 || c->rank < at_once;
    double here = rc == MG_OK && measures ? measure_here(rows, in, out) : 0;
    /* the mean rate, in GFLOP/s, over the ranks that measured; none if one of
     * them could not */
    float v[3] = {(float)(here * 1e-9), measures && !(here > 0) ? 1.0f : 0.0f, measures};
    if (rc == MG_OK) rc = sum_sleeping(c, v, 3);
    *flops = rc == MG_OK && v[1] == 0 && v[2] > 0 ? (double)v[0] / v[2] * 1e9 : 0;
    if (rc == MG_OK && !(*flops > 0))
        rc = mg_error(MG_ENOMEM, "measuring the FLOP rate: out of memory for a %lld x %lld x %lld "
                                 "product", (long long)rows, (long long)in, (long long)out);
    return rc;
}

/* Half the shortest round trip of an n-float message between ranks 0 and 1
 * (or rank 0 with itself), on rank 0; others in c wait. */
static int round_trip(mg_comm *c, float *buf, int64_t n, double *half) {
    int me = c->rank, peer = c->size > 1 ? 1 - me : 0;
    double t[REPEATS];
    int k = 0, rc = MG_OK;
    *half = 0;
    if (me > 1) return MG_OK;
    for (int i = -1; i < REPEATS && rc == MG_OK; i++) {
        mg_p2p_request s, r;
        double t0 = now_s();
        if (me == 0) { /* rank 0 sends first; rank 1 answers */
            rc = mg_comm_isend(c, buf, n, peer, &s);
            if (rc == MG_OK) rc = mg_comm_irecv(c, buf + n, n, peer, &r);
        } else {
            rc = mg_comm_irecv(c, buf + n, n, peer, &r);
            if (rc == MG_OK) rc = mg_comm_p2p_wait(c, &r);
            if (rc == MG_OK) rc = mg_comm_isend(c, buf, n, peer, &s);
        }
        if (rc == MG_OK) rc = mg_comm_p2p_wait(c, &r);
        if (rc == MG_OK) rc = mg_comm_p2p_wait(c, &s);
        if (i >= 0) t[k++] = (now_s() - t0) / (peer == me ? 1 : 2);
    }
    if (rc != MG_OK || me != 0) return rc;
    qsort(t, (size_t)k, sizeof *t, cmp_double);
    *half = t[0]; /* the best: a busy machine only ever adds to a round trip */
    return MG_OK;
}

int mg_pp_measure_link(mg_comm *c, int64_t n, double *latency, double *bandwidth) {
    if (n < 2) n = 2;
    float *buf = calloc((size_t)(2 * n), sizeof(float)), failed = buf ? 0.0f : 1.0f;
    double small = 0, big = 0;
    int rc = mg_comm_all_reduce(c, &failed, 1, MG_REDUCE_MAX); /* nobody waits for a rank that failed */
    if (rc == MG_OK && failed > 0) rc = mg_error(MG_ENOMEM, "measuring the link: out of memory");
    if (rc == MG_OK) rc = round_trip(c, buf, 1, &small);
    if (rc == MG_OK) rc = round_trip(c, buf, n, &big);
    free(buf);
    *latency = small;
    double extra = big - small, bytes = 4.0 * (double)(n - 1);
    *bandwidth = extra > 0 ? bytes / extra : (big > 0 ? 4.0 * (double)n / big : 0);
    if (rc == MG_OK) rc = share(c, latency, bandwidth);
    return rc;
}
