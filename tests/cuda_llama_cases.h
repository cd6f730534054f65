/* cuda_llama_cases.h: the CUDA kernels of the Llama family's ops (RMS norm,
 * whole and split rows; the rotary embedding, forward, inverse and in place;
 * attention with fewer k, v heads than query heads) against the CPU backend.
 * Included by test_cuda.c after its helpers (host, host_rand, to_gpu,
 * junk_on, expect, expect_synced, CPU, GPU and the tolerances), which it
 * uses; llama_kernel_tests() adds its tests to that suite. */
#ifndef MG_CUDA_LLAMA_CASES_H
#define MG_CUDA_LLAMA_CASES_H

static void rms_norm_case(int64_t rows, int64_t c, bool weighted) {
    int64_t shape[2] = {rows, c};
    mg_tensor *x = host_rand(2, shape, 40), *dy = host_rand(2, shape, 41);
    for (int64_t i = 0; i < x->numel; i++) x->data[i] = 2 * x->data[i] + 0.5f;
    mg_tensor *w = weighted ? host_rand(1, &c, 42) : NULL;
    mg_tensor *dx = to_gpu(x), *ddy = to_gpu(dy), *dw = w ? to_gpu(w) : NULL;
    mg_tensor *y = host(2, shape), *gy = junk_on(MG_DEVICE_CUDA, 2, shape);
    mg_tensor *st = host(1, &rows), *gst = junk_on(MG_DEVICE_CUDA, 1, &rows);
    CPU->iface->rms_norm(CPU->context, x, w, 1e-5f, NULL, c, st, y);
    GPU->iface->rms_norm(GPU->context, dx, dw, 1e-5f, NULL, c, gst, gy);
    expect("rms_norm", gy, y, TOL_MATH);
    expect("rms_norm rstd", gst, st, TOL_SUM);
    /* the squares of whole rows, and the forward from them */
    mg_tensor *sq = host(1, &rows), *gsq = junk_on(MG_DEVICE_CUDA, 1, &rows);
    CPU->iface->rms_norm_squares(CPU->context, x, sq);
    GPU->iface->rms_norm_squares(GPU->context, dx, gsq);
    expect("rms_norm_squares", gsq, sq, TOL_SUM);
    CPU->iface->rms_norm(CPU->context, x, w, 1e-5f, sq, c, st, y);
    GPU->iface->rms_norm(GPU->context, dx, dw, 1e-5f, gsq, c, gst, gy);
    expect("rms_norm (squares)", gy, y, TOL_MATH);
    /* backward: the row sums, then dx from them, and dx, dw from the rows */
    mg_tensor *sums = host(1, &rows), *gsums = junk_on(MG_DEVICE_CUDA, 1, &rows);
    CPU->iface->rms_norm_backward_sums(CPU->context, x, w, dy, st, sums);
    GPU->iface->rms_norm_backward_sums(GPU->context, dx, dw, ddy, gst, gsums);
    expect("rms_norm_backward_sums", gsums, sums, TOL_SUM);
    mg_tensor *g = host(2, shape), *gg = junk_on(MG_DEVICE_CUDA, 2, shape);
    mg_tensor *gw = host(1, &c), *ggw = junk_on(MG_DEVICE_CUDA, 1, &c);
    CPU->iface->rms_norm_backward(CPU->context, x, w, dy, st, NULL, c, g, gw);
    GPU->iface->rms_norm_backward(GPU->context, dx, dw, ddy, gst, NULL, c, gg, ggw);
    expect("rms_norm_backward dx", gg, g, TOL_MATH);
    expect("rms_norm_backward dw", ggw, gw, TOL_SUM);
    CPU->iface->rms_norm_backward(CPU->context, x, w, dy, st, sums, c, g, NULL);
    GPU->iface->rms_norm_backward(GPU->context, dx, dw, ddy, gst, gsums, c, gg, NULL);
    expect("rms_norm_backward dx (sums)", gg, g, TOL_MATH);
    mg_tensor *all[] = {x,  dy,  w,   dx,   ddy,   dw, y,  gy,  st, gst,
                        sq, gsq, sums, gsums, g,  gg, gw, ggw};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mg_tensor_free(all[i]);
}

START_TEST(test_rms_norm) {
    rms_norm_case(64, 48, true);
    rms_norm_case(5, 700, false);
    rms_norm_case(3000, 64, true); /* many rows: the weight's gradient splits the rows */
    rms_norm_case(0, 8, true);
    expect_synced();
}
END_TEST

static void rope_case(int64_t b, int64_t t, int64_t h, int64_t d, int64_t pos0, float theta) {
    int64_t shape[4] = {b, t, h, d};
    mg_tensor *x = host_rand(4, shape, 50), *dx = to_gpu(x);
    mg_tensor *y = host(4, shape), *gy = junk_on(MG_DEVICE_CUDA, 4, shape);
    CPU->iface->rope(CPU->context, x, pos0, theta, false, y);
    GPU->iface->rope(GPU->context, dx, pos0, theta, false, gy);
    expect("rope", gy, y, TOL_MATH);
    CPU->iface->rope(CPU->context, y, pos0, theta, true, y); /* back, in place */
    GPU->iface->rope(GPU->context, gy, pos0, theta, true, gy);
    expect("rope (inverse, in place)", gy, y, TOL_MATH);
    mg_tensor *all[] = {x, dx, y, gy};
    for (int i = 0; i < 4; i++) mg_tensor_free(all[i]);
}

START_TEST(test_rope) {
    rope_case(2, 17, 3, 8, 0, 10000.0f);
    rope_case(2, 17, 3, 64, 300, 10000.0f); /* later positions */
    rope_case(1, 9, 2, 300, 5, 50.0f);
    rope_case(0, 4, 2, 4, 0, 10000.0f);
    expect_synced();
}
END_TEST

/* attention with kv of h heads on both devices, forward and backward */
static void gqa_case(int64_t b, int64_t h, int64_t kv, int64_t tq, int64_t tk, int64_t d,
                     int64_t q0, bool causal) {
    int64_t qs[4] = {b, h, tq, d}, ks[4] = {b, kv, tk, d}, ls[3] = {b, h, tq};
    mg_tensor *q = host_rand(4, qs, 64), *k = host_rand(4, ks, 65), *v = host_rand(4, ks, 66);
    mg_tensor *g = host_rand(4, qs, 67);
    mg_tensor *dq_ = to_gpu(q), *dk_ = to_gpu(k), *dv_ = to_gpu(v), *dg = to_gpu(g);
    mg_tensor *o = host(4, qs), *go = junk_on(MG_DEVICE_CUDA, 4, qs);
    mg_tensor *l = host(3, ls), *gl = junk_on(MG_DEVICE_CUDA, 3, ls);
    float scale = 1.0f / sqrtf((float)d);
    CPU->iface->attention(CPU->context, q, k, v, scale, causal, q0, 0, o, l);
    GPU->iface->attention(GPU->context, dq_, dk_, dv_, scale, causal, q0, 0, go, gl);
    expect("attention (gqa)", go, o, TOL_SUM);
    expect("attention (gqa) lse", gl, l, TOL_SUM);
    mg_tensor *rq = host(4, qs), *rk = host(4, ks), *rv = host(4, ks);
    mg_tensor *gq = junk_on(MG_DEVICE_CUDA, 4, qs), *gk = junk_on(MG_DEVICE_CUDA, 4, ks),
              *gv = junk_on(MG_DEVICE_CUDA, 4, ks);
    CPU->iface->attention_backward(CPU->context, q, k, v, o, l, g, scale, causal, q0, 0, rq, rk,
                                   rv);
    GPU->iface->attention_backward(GPU->context, dq_, dk_, dv_, go, gl, dg, scale, causal, q0, 0,
                                   gq, gk, gv);
    expect("attention_backward (gqa) dq", gq, rq, 1e-4);
    expect("attention_backward (gqa) dk", gk, rk, 1e-4);
    expect("attention_backward (gqa) dv", gv, rv, 1e-4);
    mg_tensor *all[] = {q, k, v, g, dq_, dk_, dv_, dg, o, go, l, gl, rq, rk, rv, gq, gk, gv};
    for (int i = 0; i < 18; i++) mg_tensor_free(all[i]);
}

START_TEST(test_attention_gqa) {
    gqa_case(2, 4, 2, 17, 17, 8, 0, false);
    gqa_case(2, 4, 2, 17, 17, 8, 0, true);
    gqa_case(1, 8, 1, 100, 300, 64, 200, true); /* one k, v head; a query slice */
    gqa_case(2, 6, 3, 40, 40, 16, 0, true);
    gqa_case(1, 4, 2, 0, 5, 4, 0, true); /* no queries: dk, dv zero */
    expect_synced();
}
END_TEST

static void llama_kernel_tests(TCase *k) {
    tcase_add_test(k, test_rms_norm);
    tcase_add_test(k, test_rope);
    tcase_add_test(k, test_attention_gqa);
}

#endif
