/* cuda_nn_ops_cases.h: the transformer ops with autograd on both devices, a
 * part of test_cuda_ops.c (included there, after its helpers leaf, rel_err,
 * note and expect_synced): a GPT-style stack and a Llama-style one (RMS
 * norm, linears without bias, rotary embedding, grouped-query attention,
 * SiLU); nn_ops_tests() adds the tests to its suite. */
#ifndef MG_CUDA_NN_OPS_CASES_H
#define MG_CUDA_NN_OPS_CASES_H

enum { NN_LEAVES = 3 }; /* the table, the layer norm's weight and bias; x, the norm's and
                        * the linear's weights */

/* ---- the transformer ops with autograd, on both devices ---------------------------- */

/* cross_entropy(linear(layer_norm(attention over heads of an embedding) ...)) */
static void nn_case(op_result *r) {
    int world = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    ck_assert_msg(mesh != NULL, "mesh: %s", mg_last_error());
    mg_placement R = MG_REPLICATE, S0 = MG_SHARD(0);
    mg_dtensor *table = leaf(mesh, 2, (int64_t[]){13, 8}, 70, S0, 1); /* vocab parallel */
    mg_dtensor *lw = leaf(mesh, 1, (int64_t[]){8}, 71, R, 1),
               *lb = leaf(mesh, 1, (int64_t[]){8}, 72, R, 1);
    mg_tensor *ih = mg_tensor_new(2, (int64_t[]){2, 6});
    for (int i = 0; i < 12; i++) mg_tensor_data(ih)[i] = (float)((i * 5 + 1) % 13);
    mg_dtensor *ids = mg_distribute(mesh, ih, &S0, 1);
    mg_tensor_free(ih);
    mg_dtensor *x = mg_layer_norm(mg_embedding(ids, table), lw, lb, 1e-5f); /* (2, 6, 8) */
    mg_dtensor *hd = mg_permute(mg_reshape(x, 4, (int64_t[]){2, 6, 2, 4}), (int[]){0, 2, 1, 3});
    mg_dtensor *v = mg_narrow(mg_cat(2, (const mg_dtensor *const[]){hd, hd}, 3), 3, 2, 4);
    mg_dtensor *a = mg_attention(hd, mg_softmax(hd, -1), v, 1);
    a = mg_reshape(mg_permute(a, (int[]){0, 2, 1, 3}), 3, (int64_t[]){2, 6, 8});
    mg_dtensor *logits = mg_log_softmax(mg_linear(a, table, NULL), -1); /* tied head, (2, 6, 13) */
    mg_dtensor *loss = mg_cross_entropy(logits, ids);
    ck_assert_msg(loss != NULL, "nn case forward: %s", mg_last_error());
    ck_assert_int_eq(mg_backward(loss), MG_OK);
    mg_tensor *lf = mg_full_tensor(loss);
    r->loss = lf->data[0];
    mg_tensor_free(lf);
    mg_dtensor *leaves[NN_LEAVES] = {table, lw, lb};
    for (int i = 0; i < NN_LEAVES; i++) r->grad[i] = mg_full_tensor(mg_grad(leaves[i]));
    mg_step_end();
    for (int i = 0; i < NN_LEAVES; i++) mg_dtensor_free(leaves[i]);
    mg_dtensor_free(ids);
    mg_mesh_free(mesh);
}

/* mean(silu(attention_gqa(rope(q), rope(k), v))) of q, k, v from one linear
 * without bias of rms_norm(x): 4 query heads, 2 k, v heads, positions from 3 */
static void llama_case(op_result *r) {
    int world = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    ck_assert_msg(mesh != NULL, "mesh: %s", mg_last_error());
    mg_placement R = MG_REPLICATE, S0 = MG_SHARD(0);
    mg_dtensor *x = leaf(mesh, 3, (int64_t[]){2, 6, 8}, 80, S0, 1);
    mg_dtensor *wn = leaf(mesh, 1, (int64_t[]){8}, 81, R, 1);
    mg_dtensor *w = leaf(mesh, 2, (int64_t[]){16, 8}, 82, S0, 1); /* q 8, k 4, v 4 rows */
    mg_dtensor *qkv = mg_linear(mg_rms_norm(x, wn, 1e-5f), w, NULL); /* (2, 6, 16) */
    mg_dtensor *q = mg_reshape(mg_narrow(qkv, 2, 0, 8), 4, (int64_t[]){2, 6, 4, 2});
    mg_dtensor *k = mg_reshape(mg_narrow(qkv, 2, 8, 4), 4, (int64_t[]){2, 6, 2, 2});
    mg_dtensor *v = mg_reshape(mg_narrow(qkv, 2, 12, 4), 4, (int64_t[]){2, 6, 2, 2});
    const int to_heads[4] = {0, 2, 1, 3};
    q = mg_permute(mg_rope(q, 3, 10000.0f), to_heads);
    k = mg_permute(mg_rope(k, 3, 10000.0f), to_heads);
    v = mg_permute(v, to_heads);
    mg_dtensor *a = mg_attention_gqa(q, k, v, 1); /* (2, 4, 6, 2) */
    mg_dtensor *loss = mg_mean(mg_silu(a));
    ck_assert_msg(loss != NULL, "llama case forward: %s", mg_last_error());
    ck_assert_int_eq(mg_backward(loss), MG_OK);
    mg_tensor *lf = mg_full_tensor(loss);
    r->loss = lf->data[0];
    mg_tensor_free(lf);
    mg_dtensor *leaves[NN_LEAVES] = {x, wn, w};
    for (int i = 0; i < NN_LEAVES; i++) r->grad[i] = mg_full_tensor(mg_grad(leaves[i]));
    mg_step_end();
    for (int i = 0; i < NN_LEAVES; i++) mg_dtensor_free(leaves[i]);
    mg_mesh_free(mesh);
}

/* a case on the CPU, then on the GPU: the loss and the three leaves' gradients */
static void both_devices(void (*run)(op_result *), const char *what) {
    op_result cpu, gpu;
    char name[32]; /* the table's names are shorter than 40 */
    ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
    run(&cpu);
    mg_assert_all(mg_set_device(MG_DEVICE_CUDA) == MG_OK, "mg_set_device: %s", mg_last_error());
    run(&gpu);
    expect_synced();
    ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
    double e = fabs(gpu.loss - cpu.loss) / (fabs(cpu.loss) > 1e-6 ? fabs(cpu.loss) : 1.0);
    snprintf(name, sizeof name, "%s loss", what);
    note(name, e, 1e-4);
    mg_assert_all(e <= 1e-4, "%s: cuda %.9g cpu %.9g", name, gpu.loss, cpu.loss);
    snprintf(name, sizeof name, "%s grad", what);
    for (int i = 0; i < NN_LEAVES; i++) {
        double ge = rel_err(gpu.grad[i]->data, cpu.grad[i]->data, cpu.grad[i]->numel);
        note(name, ge, 1e-4);
        mg_assert_all(ge <= 1e-4, "%s %d: max relative error %.3g", name, i, ge);
        mg_tensor_free(cpu.grad[i]), mg_tensor_free(gpu.grad[i]);
    }
}

START_TEST(test_nn_ops_both_devices) { both_devices(nn_case, "nn ops"); }
END_TEST

START_TEST(test_llama_ops_both_devices) { both_devices(llama_case, "llama ops"); }
END_TEST

static void nn_ops_tests(TCase *o) {
    tcase_add_test(o, test_nn_ops_both_devices);
    tcase_add_test(o, test_llama_ops_both_devices);
}

#endif
