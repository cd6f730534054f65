/* cuda_nn_cases.h: the CUDA kernels of the network ops (softmax, layer norm,
 * embedding, cross-entropy over a shard of the classes, attention) against the
 * CPU backend, and the transformer ops with autograd on both devices. Included
 * by test_cuda.c after its helpers (host_rand, to_gpu, to_cpu, junk_on, expect,
 * expect_synced, note, rel_err, leaf, CPU, GPU and the tolerances), which it
 * uses; nn_kernel_tests() adds its tests to that suite (the ops with autograd
 * are in cuda_nn_ops_cases.h, included by test_cuda_ops.c). */
#ifndef MG_CUDA_NN_CASES_H
#define MG_CUDA_NN_CASES_H

/* a (rows) tensor of each row's max and of its sum of exp(x - max), on the CPU */
static void row_stats(const mg_tensor *x, int64_t rows, mg_tensor **max, mg_tensor **sum) {
    int64_t col[2] = {rows, 1};
    *max = host(2, col);
    *sum = host(1, &rows);
    CPU->iface->reduce_max(CPU->context, x, *max);
    CPU->iface->softmax_sum(CPU->context, x, *max, *sum);
}

START_TEST(test_softmax) {
    int64_t shapes[][2] = {{64, 10}, {7, 1000}, {3, 1}, {2000, 33}, {0, 5}};
    for (int s = 0; s < 5; s++)
        for (int as_log = 0; as_log < 2; as_log++) {
            int64_t rows = shapes[s][0];
            mg_tensor *x = host_rand(2, shapes[s], 21), *dy = host_rand(2, shapes[s], 22);
            for (int64_t i = 0; i < x->numel; i++) x->data[i] *= 8; /* spread the classes */
            mg_tensor *dx = to_gpu(x), *ddy = to_gpu(dy), *max, *sum;
            row_stats(x, rows, &max, &sum);
            mg_tensor *dmax = to_gpu(max), *dsum = to_gpu(sum);
            for (int given = 0; given < 2; given++) {
                mg_tensor *y = junk_on(MG_DEVICE_CPU, 2, shapes[s]),
                          *gy = junk_on(MG_DEVICE_CUDA, 2, shapes[s]);
                CPU->iface->softmax(CPU->context, x, given ? max : NULL, given ? sum : NULL, as_log,
                                    y);
                GPU->iface->softmax(GPU->context, dx, given ? dmax : NULL, given ? dsum : NULL,
                                    as_log, gy);
                expect(as_log ? "log_softmax" : "softmax", gy, y, TOL_MATH);
                /* backward from the same y, with the row dots their own or given */
                mg_tensor *dot = host(1, &rows), *ddot = junk_on(MG_DEVICE_CUDA, 1, &rows);
                CPU->iface->softmax_dot(CPU->context, y, dy, as_log, dot);
                GPU->iface->softmax_dot(GPU->context, gy, ddy, as_log, ddot);
                expect("softmax_dot", ddot, dot, TOL_SUM);
                mg_tensor *g = junk_on(MG_DEVICE_CPU, 2, shapes[s]),
                          *gg = junk_on(MG_DEVICE_CUDA, 2, shapes[s]);
                CPU->iface->softmax_backward(CPU->context, y, dy, given ? dot : NULL, as_log, g);
                GPU->iface->softmax_backward(GPU->context, gy, ddy, given ? ddot : NULL, as_log,
                                             gg);
                expect("softmax_backward", gg, g, TOL_MATH);
                mg_tensor *all[] = {y, gy, dot, ddot, g, gg};
                for (int i = 0; i < 6; i++) mg_tensor_free(all[i]);
            }
            mg_tensor *dsum2 = junk_on(MG_DEVICE_CUDA, 1, &rows);
            GPU->iface->softmax_sum(GPU->context, dx, dmax, dsum2);
            expect("softmax_sum", dsum2, sum, TOL_SUM);
            mg_tensor *all[] = {x, dy, dx, ddy, max, sum, dmax, dsum, dsum2};
            for (int i = 0; i < 9; i++) mg_tensor_free(all[i]);
        }
    expect_synced();
}
END_TEST

static void layer_norm_case(int64_t rows, int64_t c, bool affine) {
    int64_t shape[2] = {rows, c}, two = 2 * rows;
    mg_tensor *x = host_rand(2, shape, 30), *dy = host_rand(2, shape, 31);
    for (int64_t i = 0; i < x->numel; i++) x->data[i] = 2 * x->data[i] + 3;
    mg_tensor *w = affine ? host_rand(1, &c, 32) : NULL, *b = affine ? host_rand(1, &c, 33) : NULL;
    mg_tensor *dx = to_gpu(x), *ddy = to_gpu(dy), *dw = w ? to_gpu(w) : NULL,
              *db = b ? to_gpu(b) : NULL;
    mg_tensor *y = host(2, shape), *gy = junk_on(MG_DEVICE_CUDA, 2, shape);
    mg_tensor *st = host(1, &two), *gst = junk_on(MG_DEVICE_CUDA, 1, &two);
    CPU->iface->layer_norm(CPU->context, x, w, b, 1e-5f, NULL, c, st, y);
    GPU->iface->layer_norm(GPU->context, dx, dw, db, 1e-5f, NULL, c, gst, gy);
    expect("layer_norm", gy, y, TOL_MATH);
    expect("layer_norm stats", gst, st, TOL_SUM);
    /* the moments of whole rows, and the forward from them */
    mg_tensor *mom = host(1, &two), *gmom = junk_on(MG_DEVICE_CUDA, 1, &two);
    mg_tensor *mean = mg_tensor_slice(NULL, mom, 0, rows),
              *sq = mg_tensor_slice(NULL, mom, rows, rows);
    mg_tensor *gmean = mg_tensor_slice(NULL, gmom, 0, rows),
              *gsq = mg_tensor_slice(NULL, gmom, rows, rows);
    CPU->iface->layer_norm_moments(CPU->context, x, NULL, mean);
    GPU->iface->layer_norm_moments(GPU->context, dx, NULL, gmean);
    expect("layer_norm_moments", gmean, mean, TOL_SUM);
    CPU->iface->unary(CPU->context, MG_UNARY_SCALE, mean, 1.0f / (float)c, mean);
    GPU->iface->unary(GPU->context, MG_UNARY_SCALE, gmean, 1.0f / (float)c, gmean);
    CPU->iface->layer_norm_moments(CPU->context, x, mean, sq);
    GPU->iface->layer_norm_moments(GPU->context, dx, gmean, gsq);
    expect("layer_norm_moments", gsq, sq, TOL_SUM);
    CPU->iface->layer_norm(CPU->context, x, w, b, 1e-5f, mom, c, st, y);
    GPU->iface->layer_norm(GPU->context, dx, dw, db, 1e-5f, gmom, c, gst, gy);
    expect("layer_norm (moments)", gy, y, TOL_MATH);
    /* backward: the row sums, then dx from them and dx, dw, db from the rows */
    mg_tensor *sums = host(1, &two), *gsums = junk_on(MG_DEVICE_CUDA, 1, &two);
    CPU->iface->layer_norm_backward_sums(CPU->context, x, w, dy, st, sums);
    GPU->iface->layer_norm_backward_sums(GPU->context, dx, dw, ddy, gst, gsums);
    expect("layer_norm_backward_sums", gsums, sums, TOL_SUM);
    mg_tensor *g = host(2, shape), *gg = junk_on(MG_DEVICE_CUDA, 2, shape);
    mg_tensor *gw = host(1, &c), *ggw = junk_on(MG_DEVICE_CUDA, 1, &c);
    mg_tensor *gb = host(1, &c), *ggb = junk_on(MG_DEVICE_CUDA, 1, &c);
    CPU->iface->layer_norm_backward(CPU->context, x, w, dy, st, NULL, c, g, gw, gb);
    GPU->iface->layer_norm_backward(GPU->context, dx, dw, ddy, gst, NULL, c, gg, ggw, ggb);
    expect("layer_norm_backward dx", gg, g, TOL_MATH);
    expect("layer_norm_backward dw", ggw, gw, TOL_SUM);
    expect("layer_norm_backward db", ggb, gb, TOL_SUM);
    CPU->iface->layer_norm_backward(CPU->context, x, w, dy, st, sums, c, g, NULL, NULL);
    GPU->iface->layer_norm_backward(GPU->context, dx, dw, ddy, gst, gsums, c, gg, NULL, NULL);
    expect("layer_norm_backward dx (sums)", gg, g, TOL_MATH);
    mg_tensor *all[] = {x,    dy,   w,  b,     dx,  ddy,  dw,    db, y,  gy, st,  gst, mom,
                        gmom, mean, sq, gmean, gsq, sums, gsums, g,  gg, gw, ggw, gb,  ggb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mg_tensor_free(all[i]);
}

START_TEST(test_layer_norm) {
    layer_norm_case(64, 48, true);
    layer_norm_case(5, 700, false);
    layer_norm_case(3000, 64, true); /* many rows: the weight gradients split the rows */
    layer_norm_case(0, 8, true);
    expect_synced();
}
END_TEST

START_TEST(test_embedding) {
    const int64_t v = 50, c = 33, n = 301, vl = 20, v0 = 15;
    int64_t ts[2] = {vl, c}, os[2] = {n, c};
    mg_tensor *table = host_rand(2, ts, 40), *ids = host(1, &n), *dout = host_rand(2, os, 41);
    for (int64_t i = 0; i < n; i++) ids->data[i] = (float)((i * 13 + 5) % v);
    ids->data[7] = -1; /* bad ids are counted */
    ids->data[9] = 2.5f;
    mg_tensor *dt = to_gpu(table), *di = to_gpu(ids), *dd = to_gpu(dout);
    mg_tensor *out = junk_on(MG_DEVICE_CPU, 2, os), *gout = junk_on(MG_DEVICE_CUDA, 2, os);
    int64_t bad = CPU->iface->embedding(CPU->context, ids, table, v0, v, out);
    int64_t gbad = GPU->iface->embedding(GPU->context, di, dt, v0, v, gout);
    mg_assert_all(bad == 2 && gbad == bad, "embedding: %lld bad ids on the GPU, %lld on the CPU",
                  (long long)gbad, (long long)bad);
    expect("embedding", gout, out, TOL_EXACT);
    mg_tensor *g = junk_on(MG_DEVICE_CPU, 2, ts), *gg = junk_on(MG_DEVICE_CUDA, 2, ts);
    CPU->iface->embedding_backward(CPU->context, ids, dout, v0, g);
    GPU->iface->embedding_backward(GPU->context, di, dd, v0, gg);
    expect("embedding_backward", gg, g, TOL_SUM);
    mg_tensor *all[] = {table, ids, dout, dt, di, dd, out, gout, g, gg};
    for (int i = 0; i < 10; i++) mg_tensor_free(all[i]);
    expect_synced();
}
END_TEST

START_TEST(test_cross_entropy_sharded) {
    const int64_t n = 500, v = 300, v0 = 120, vl = 100;
    int64_t shape[2] = {n, vl}, two = 2 * n;
    mg_tensor *x = host_rand(2, shape, 50), *labels = labels_for(n, v, 3);
    mg_tensor *max, *sum;
    row_stats(x, n, &max, &sum); /* the shard's own max stands in for the global one */
    mg_tensor *dx = to_gpu(x), *dl = to_gpu(labels), *dmax = to_gpu(max);
    mg_tensor *sums = host(1, &two), *gsums = junk_on(MG_DEVICE_CUDA, 1, &two);
    int64_t bad = CPU->iface->cross_entropy_sums(CPU->context, x, labels, max, v0, v, sums);
    int64_t gbad = GPU->iface->cross_entropy_sums(GPU->context, dx, dl, dmax, v0, v, gsums);
    mg_assert_all(gbad == bad, "cross_entropy_sums: %lld bad labels, want %lld", (long long)gbad,
                  (long long)bad);
    expect("cross_entropy_sums", gsums, sums, TOL_SUM);
    mg_tensor *lse = host(1, &n);
    for (int64_t r = 0; r < n; r++) lse->data[r] = max->data[r] + logf(sum->data[r]) + 0.5f;
    mg_tensor *dlse = to_gpu(lse);
    mg_tensor *g = junk_on(MG_DEVICE_CPU, 2, shape), *gg = junk_on(MG_DEVICE_CUDA, 2, shape);
    CPU->iface->cross_entropy_backward(CPU->context, x, labels, lse, v0, v, 0.01f, g);
    GPU->iface->cross_entropy_backward(GPU->context, dx, dl, dlse, v0, v, 0.01f, gg);
    expect("cross_entropy_backward (shard)", gg, g, TOL_MATH);
    mg_tensor *all[] = {x, labels, max, sum, dx, dl, dmax, sums, gsums, lse, dlse, g, gg};
    for (int i = 0; i < 13; i++) mg_tensor_free(all[i]);
    expect_synced();
}
END_TEST

static void attention_case(int64_t b, int64_t h, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                           int64_t q0, int64_t k0, bool causal) {
    int64_t qs[4] = {b, h, tq, d}, ks[4] = {b, h, tk, d}, vs[4] = {b, h, tk, dv},
            os[4] = {b, h, tq, dv};
    int64_t ls[3] = {b, h, tq};
    mg_tensor *q = host_rand(4, qs, 60), *k = host_rand(4, ks, 61), *v = host_rand(4, vs, 62);
    mg_tensor *g = host_rand(4, os, 63);
    mg_tensor *dq_ = to_gpu(q), *dk_ = to_gpu(k), *dv_ = to_gpu(v), *dg = to_gpu(g);
    mg_tensor *o = junk_on(MG_DEVICE_CPU, 4, os), *go = junk_on(MG_DEVICE_CUDA, 4, os);
    mg_tensor *l = junk_on(MG_DEVICE_CPU, 3, ls), *gl = junk_on(MG_DEVICE_CUDA, 3, ls);
    float scale = d ? 1.0f / sqrtf((float)d) : 1.0f;
    CPU->iface->attention(CPU->context, q, k, v, scale, causal, q0, k0, o, l);
    GPU->iface->attention(GPU->context, dq_, dk_, dv_, scale, causal, q0, k0, go, gl);
    expect("attention", go, o, TOL_SUM);
    expect("attention lse", gl, l, TOL_SUM);
    mg_tensor *rq = junk_on(MG_DEVICE_CPU, 4, qs), *rk = junk_on(MG_DEVICE_CPU, 4, ks);
    mg_tensor *rv = junk_on(MG_DEVICE_CPU, 4, vs), *gq = junk_on(MG_DEVICE_CUDA, 4, qs);
    mg_tensor *gk = junk_on(MG_DEVICE_CUDA, 4, ks), *gv = junk_on(MG_DEVICE_CUDA, 4, vs);
    CPU->iface->attention_backward(CPU->context, q, k, v, o, l, g, scale, causal, q0, k0, rq, rk,
                                   rv);
    GPU->iface->attention_backward(GPU->context, dq_, dk_, dv_, go, gl, dg, scale, causal, q0, k0,
                                   gq, gk, gv);
    expect("attention_backward dq", gq, rq, 1e-4);
    expect("attention_backward dk", gk, rk, 1e-4);
    expect("attention_backward dv", gv, rv, 1e-4);
    mg_tensor *all[] = {q, k, v, g, dq_, dk_, dv_, dg, o, go, l, gl, rq, rk, rv, gq, gk, gv};
    for (int i = 0; i < 18; i++) mg_tensor_free(all[i]);
}

START_TEST(test_attention) {
    attention_case(2, 3, 17, 17, 8, 8, 0, 0, false);
    attention_case(2, 3, 17, 17, 8, 8, 0, 0, true);
    attention_case(1, 2, 100, 300, 64, 32, 200, 0, true); /* a query slice against all keys */
    attention_case(1, 1, 40, 40, 16, 16, 0, 10, true);    /* early rows see no key */
    attention_case(1, 1, 9, 33, 300, 300, 0, 0, false);   /* wider than one pass of columns */
    attention_case(1, 2, 0, 5, 4, 4, 0, 0, true);
    attention_case(1, 2, 5, 0, 4, 4, 0, 0, false);
    expect_synced();
}
END_TEST

/* relu passes NaN on, on both devices */
START_TEST(test_relu_nan) {
    int64_t n = 4;
    mg_tensor *x = host(1, &n);
    const float in[4] = {NAN, -1.0f, 0.0f, 2.0f};
    memcpy(x->data, in, sizeof in);
    mg_tensor *dx = to_gpu(x), *y = junk_on(MG_DEVICE_CPU, 1, &n),
              *dy = junk_on(MG_DEVICE_CUDA, 1, &n);
    CPU->iface->unary(CPU->context, MG_UNARY_RELU, x, 0, y);
    GPU->iface->unary(GPU->context, MG_UNARY_RELU, dx, 0, dy);
    mg_assert_all(isnan(y->data[0]), "relu(NaN) on the CPU is %g", y->data[0]);
    expect("relu (NaN)", dy, y, TOL_EXACT); /* NaN must match NaN */
    mg_tensor_free(x), mg_tensor_free(dx), mg_tensor_free(y), mg_tensor_free(dy);
    expect_synced();
}
END_TEST

static void nn_kernel_tests(TCase *k) {
    tcase_add_test(k, test_softmax);
    tcase_add_test(k, test_layer_norm);
    tcase_add_test(k, test_embedding);
    tcase_add_test(k, test_cross_entropy_sharded);
    tcase_add_test(k, test_attention);
    tcase_add_test(k, test_relu_nan);
}


#endif
