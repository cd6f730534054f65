/* test_cuda_ops.c: ops with autograd, NCCL and redistribute on the CUDA backend,
 * against the CPU.
 *
 * Every placement: four small models (linear + cross-entropy; linear, gelu,
 * reshape, matmul + mse; permute, sum, expand, mul, relu + mean; batched
 * matmul, redistribute, sub, scale + sum) run once for every combination of
 * placements of their leaves on a 1-D mesh (Shard(d) for each dim d,
 * Replicate, Partial(sum)): on the CPU, where each must equal the first
 * combination (placements change the sums' order only), and on the GPU, where
 * each must equal the CPU run of the same combination: the loss and every
 * leaf's gradient within 1e-4 relative. Rank 0 prints the worst error per case
 * in the table of test_cuda.h.
 * NCCL collectives give the expected values on device buffers and fall back to
 * MPI on host buffers; device shards survive every redistribute; bad labels
 * fail on the device as on the host.
 *
 * The GPU half needs one GPU per rank (NCCL). Without that (no GPU, a build
 * without CUDA, or ranks sharing a GPU) the CPU half still runs, its failures
 * fail the program, and it exits 77 (skipped) when they pass, saying so. */
#include "test_cuda.h"

#include "dist/comm.h"
#include "dist/dtensor.h"
#include "dist/mesh.h"

/* ---- every placement, on both devices ---------------------------------------------------------- */

enum { NCASES = 4, MAX_LEAVES = 3 };

/* the leaves of each case: dims and shape */
static const struct {
    int nleaves;
    struct {
        int nd;
        int64_t shape[3];
    } leaf[MAX_LEAVES];
} cases[NCASES] = {
    {3, {{2, {8, 16}}, {2, {12, 16}}, {1, {12}}}},
    {3, {{2, {8, 16}}, {2, {12, 16}}, {2, {12, 6}}}},
    {1, {{3, {4, 6, 5}}}},
    {3, {{3, {4, 3, 5}}, {3, {4, 5, 2}}, {3, {4, 3, 2}}}},
};

typedef struct {
    double loss;
    mg_tensor *grad[MAX_LEAVES]; /* host, full */
} op_result;

/* placement number i of a leaf with nd dims: Shard(0..nd-1), Replicate, Partial */
static mg_placement placement_of(int i, int nd) {
    return i < nd ? MG_SHARD(i) : i == nd ? MG_REPLICATE : MG_PARTIAL_SUM;
}

static int combinations(int which) {
    int n = 1;
    for (int i = 0; i < cases[which].nleaves; i++) n *= cases[which].leaf[i].nd + 2;
    return n;
}

/* combination `combo` as text: "S0 R P" */
static void describe(int which, int combo, char *out, size_t len) {
    out[0] = '\0';
    for (int i = 0; i < cases[which].nleaves; i++) {
        int nd = cases[which].leaf[i].nd, k = combo % (nd + 2);
        combo /= nd + 2;
        size_t used = strlen(out);
        if (k < nd) snprintf(out + used, len - used, "%sS%d", i ? " " : "", k);
        else snprintf(out + used, len - used, "%s%s", i ? " " : "", k == nd ? "R" : "P");
    }
}

static mg_dtensor *leaf(const mg_mesh *mesh, int nd, const int64_t *shape, uint64_t seed,
                        mg_placement p, int grad) {
    mg_tensor *h = mg_tensor_new(nd, shape);
    mg_test_fill(mg_tensor_data(h), mg_tensor_numel(h), seed);
    mg_dtensor *t = mg_distribute(mesh, h, &p, 1);
    mg_tensor_free(h);
    ck_assert_msg(t != NULL, "distribute: %s", mg_last_error());
    if (grad) mg_set_requires_grad(t, 1);
    return t;
}

/* One case at one combination of leaf placements, on the current device (the
 * mesh's); loss and full leaf gradients on the host. */
static void run_case(const mg_mesh *mesh, int which, int combo, op_result *r) {
    mg_placement R = MG_REPLICATE, S0 = MG_SHARD(0);
    mg_dtensor *leaves[MAX_LEAVES] = {0}, *extra = NULL, *loss = NULL;
    int n = cases[which].nleaves;
    for (int i = 0, c = combo; i < n; i++) {
        int nd = cases[which].leaf[i].nd;
        leaves[i] = leaf(mesh, nd, cases[which].leaf[i].shape, (uint64_t)(1 + 3 * which + i),
                         placement_of(c % (nd + 2), nd), 1);
        c /= nd + 2;
    }
    if (which == 0) { /* cross_entropy(linear(x, w, b), labels) */
        mg_tensor *lh = mg_tensor_new(1, (int64_t[]){8});
        for (int i = 0; i < 8; i++) mg_tensor_data(lh)[i] = (float)((i * 5) % 12);
        extra = mg_distribute(mesh, lh, &S0, 1);
        mg_tensor_free(lh);
        loss = mg_cross_entropy(mg_linear(leaves[0], leaves[1], leaves[2]), extra);
    } else if (which == 1) { /* mse(matmul(gelu(linear(x, w)) as (2, 4, 12), v), t) */
        extra = leaf(mesh, 3, (int64_t[]){2, 4, 6}, 7, S0, 0);
        mg_dtensor *h = mg_gelu(mg_linear(leaves[0], leaves[1], NULL));
        mg_dtensor *y = mg_matmul(mg_reshape(h, 3, (int64_t[]){2, 4, 12}), leaves[2]);
        loss = mg_mse_loss(y, extra);
    } else if (which == 2) { /* mean(relu(p * expand(sum(p, 2)))), p = permute(a) */
        mg_dtensor *p = mg_permute(leaves[0], (int[]){2, 0, 1}); /* (5, 4, 6) */
        mg_dtensor *s = mg_sum_dims(p, 1, (int[]){2}, 1);          /* (5, 4, 1) */
        mg_dtensor *e = mg_expand(s, 3, (int64_t[]){5, 4, 6});
        loss = mg_mean(mg_relu(mg_mul(p, e)));
    } else { /* sum(scale(matmul(a, b) batched - redistribute(c -> R), 2)) */
        mg_dtensor *c = mg_matmul(leaves[0], leaves[1]);
        mg_dtensor *d = mg_redistribute(leaves[2], &R, 1);
        loss = mg_sum(mg_scale(mg_sub(c, d), 2.0f));
    }
    char where[64];
    describe(which, combo, where, sizeof where);
    ck_assert_msg(loss != NULL, "case %d [%s] forward: %s", which, where, mg_last_error());
    ck_assert_msg(mg_backward(loss) == MG_OK, "case %d [%s] backward: %s", which, where,
                  mg_last_error());
    mg_tensor *lf = mg_full_tensor(loss);
    ck_assert_ptr_nonnull(lf);
    ck_assert_int_eq(lf->device, MG_DEVICE_CPU);
    r->loss = lf->data[0];
    mg_tensor_free(lf);
    for (int i = 0; i < n; i++) {
        mg_dtensor *g = mg_grad(leaves[i]);
        ck_assert_msg(g != NULL, "case %d [%s]: leaf %d has no gradient", which, where, i);
        ck_assert_int_eq(g->local->device, mg_get_device());
        r->grad[i] = mg_full_tensor(g);
        ck_assert_ptr_nonnull(r->grad[i]);
    }
    mg_step_end();
    for (int i = 0; i < n; i++) mg_dtensor_free(leaves[i]);
    mg_dtensor_free(extra);
}

/* got against want: the loss and every gradient within tol, noted under `what` */
static void compare(int which, int combo, const char *what, const op_result *got,
                    const op_result *want, double tol) {
    char name[40], where[64];
    describe(which, combo, where, sizeof where);
    snprintf(name, sizeof name, "%s case %d loss", what, which);
    double e = fabs(got->loss - want->loss) / (fabs(want->loss) > 1e-6 ? fabs(want->loss) : 1.0);
    note(name, e, tol);
    mg_assert_all(e <= tol, "%s [%s]: %.9g, want %.9g", name, where, got->loss, want->loss);
    snprintf(name, sizeof name, "%s case %d grad", what, which);
    for (int i = 0; i < cases[which].nleaves; i++) {
        double ge = rel_err(got->grad[i]->data, want->grad[i]->data, want->grad[i]->numel);
        note(name, ge, tol);
        mg_assert_all(ge <= tol, "%s [%s] leaf %d: max relative error %.3g", name, where, i, ge);
    }
}

static void free_result(int which, op_result *r) {
    for (int i = 0; i < cases[which].nleaves; i++) mg_tensor_free(r->grad[i]);
}

/* with_gpu: GPU is set and every rank has a GPU of its own */
static int with_gpu;

/* A 1-D mesh of every rank on the GPUs (NCCL comms); the device is CUDA after. */
static mg_mesh *gpu_mesh_new(void) {
    mg_assert_all(mg_set_device(MG_DEVICE_CUDA) == MG_OK, "mg_set_device: %s", mg_last_error());
    int world = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    ck_assert_msg(mesh != NULL, "mesh: %s", mg_last_error());
    return mesh;
}

START_TEST(test_ops_every_placement) {
    int world = mg_world_size();
    ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
    mg_mesh *cpu_mesh = mg_mesh_new(1, &world), *gpu_mesh = NULL;
    ck_assert_msg(cpu_mesh != NULL, "mesh: %s", mg_last_error());
    if (with_gpu) {
        gpu_mesh = gpu_mesh_new();
        ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
    }
    for (int which = 0; which < NCASES; which++) {
        int n = combinations(which);
        op_result first;
        for (int combo = 0; combo < n; combo++) {
            op_result cpu, gpu;
            run_case(cpu_mesh, which, combo, &cpu);
            if (combo == 0) first = cpu;
            else compare(which, combo, "cpu placements", &cpu, &first, 1e-4);
            if (with_gpu) {
                mg_assert_all(mg_set_device(MG_DEVICE_CUDA) == MG_OK, "mg_set_device: %s",
                              mg_last_error());
                run_case(gpu_mesh, which, combo, &gpu);
                expect_synced();
                ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
                compare(which, combo, "cuda vs cpu", &gpu, &cpu, 1e-4);
                free_result(which, &gpu);
            }
            if (combo > 0) free_result(which, &cpu);
        }
        free_result(which, &first);
        if (mg_rank() == 0) printf("ops case %d: %d combinations of placements\n", which, n);
    }
    mg_mesh_free(cpu_mesh);
    if (gpu_mesh) mg_mesh_free(gpu_mesh);
}
END_TEST

/* ---- NCCL, redistribute, bad labels ----------------------------------------------------------- */

/* Labels out of range fail on the device too: the bad-label count reaches every
 * rank through the NCCL comm's MPI fallback for host buffers. */
START_TEST(test_bad_labels_on_device) {
    mg_mesh *mesh = gpu_mesh_new();
    ck_assert_str_eq(mesh->world->iface->name, "nccl");
    mg_placement S0 = MG_SHARD(0);
    mg_dtensor *x = leaf(mesh, 2, (int64_t[]){8, 4}, 12, S0, 0);
    mg_tensor *lh = mg_tensor_new(1, (int64_t[]){8});
    mg_tensor_data(lh)[7] = 9; /* one bad row */
    mg_dtensor *labels = mg_distribute(mesh, lh, &S0, 1);
    mg_tensor_free(lh);
    mg_dtensor *loss = mg_cross_entropy(x, labels);
    mg_assert_all(loss == NULL && mg_last_code() == MG_EINVAL, "bad labels accepted: %s",
                  mg_last_error());
    mg_step_end();
    mg_dtensor_free(x), mg_dtensor_free(labels);
    mg_mesh_free(mesh);
    ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
}
END_TEST

/* NCCL collectives on device buffers, and host buffers through MPI. */
START_TEST(test_nccl_collectives) {
    mg_assert_all(mg_set_device(MG_DEVICE_CUDA) == MG_OK, "mg_set_device: %s", mg_last_error());
    int world = mg_world_size(), rank = mg_rank();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    ck_assert_ptr_nonnull(mesh);
    mg_comm *c = mesh->dim_comm[0];
    ck_assert_str_eq(c->iface->name, "nccl");
    int64_t n = 1001, kn = n * world;
    mg_tensor *h = host(1, &kn), *want = host(1, &kn);
    /* all_reduce sum / avg / max */
    for (int op = 0; op < 3; op++) {
        for (int64_t i = 0; i < n; i++) h->data[i] = (float)(rank + 1) * (float)(i % 17);
        mg_tensor *d = to_gpu(h);
        ck_assert_int_eq(mg_comm_all_reduce(c, d->data, n, (mg_reduce_op)op), MG_OK);
        float ranks_sum = world * (world + 1) / 2.0f;
        for (int64_t i = 0; i < n; i++)
            want->data[i] = (float)(i % 17) * (op == MG_REDUCE_SUM   ? ranks_sum
                                               : op == MG_REDUCE_AVG ? ranks_sum / world
                                                                     : (float)world);
        mg_tensor *back = to_cpu(d);
        double e = rel_err(back->data, want->data, n);
        note("nccl all_reduce", e, 1e-6);
        mg_assert_all(e <= 1e-6, "all_reduce op %d: error %.3g", op, e);
        mg_tensor_free(back), mg_tensor_free(d);
    }
    /* all_gather, reduce_scatter, all_to_all, broadcast */
    for (int64_t i = 0; i < kn; i++) h->data[i] = (float)(rank * 100000 + i);
    mg_tensor *d = to_gpu(h), *dr = junk_on(MG_DEVICE_CUDA, 1, &kn);
    ck_assert_int_eq(mg_comm_all_gather(c, d->data, n, dr->data), MG_OK);
    for (int r = 0; r < world; r++)
        for (int64_t i = 0; i < n; i++) want->data[r * n + i] = (float)(r * 100000 + i);
    expect("nccl all_gather", dr, want, 0);
    ck_assert_int_eq(mg_comm_all_to_all(c, d->data, n, dr->data), MG_OK);
    for (int r = 0; r < world; r++)
        for (int64_t i = 0; i < n; i++) want->data[r * n + i] = (float)(r * 100000 + rank * n + i);
    expect("nccl all_to_all", dr, want, 0);
    ck_assert_int_eq(mg_comm_reduce_scatter(c, d->data, dr->data, n), MG_OK);
    mg_tensor *got = to_cpu(dr);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < world; r++) s += (float)(r * 100000 + rank * n + i);
        double e = fabs(got->data[i] - s) / s;
        if (e > worst) worst = e;
    }
    note("nccl reduce_scatter", worst, 1e-6);
    mg_assert_all(worst <= 1e-6, "reduce_scatter: error %.3g", worst);
    mg_tensor_free(got);
    ck_assert_int_eq(mg_comm_broadcast(c, d->data, n, world - 1), MG_OK);
    for (int64_t i = 0; i < n; i++) want->data[i] = (float)((world - 1) * 100000 + i);
    got = to_cpu(d);
    mg_assert_all(memcmp(got->data, want->data, (size_t)n * sizeof(float)) == 0, "broadcast");
    mg_tensor_free(got);
    /* host buffers on an NCCL comm go through MPI */
    float v = (float)(rank + 1);
    ck_assert_int_eq(mg_comm_all_reduce(mesh->world, &v, 1, MG_REDUCE_SUM), MG_OK);
    mg_assert_all(v == world * (world + 1) / 2.0f, "host all_reduce gave %g", v);
    /* one host and one device buffer: refused */
    ck_assert_int_eq(mg_comm_all_gather(c, h->data, n, dr->data), MG_EINVAL);
    ck_assert_int_eq(mg_comm_barrier(c), MG_OK);
    mg_tensor_free(d), mg_tensor_free(dr), mg_tensor_free(h), mg_tensor_free(want);
    mg_mesh_free(mesh);
    ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
    expect_synced();
}
END_TEST

/* Device shards through every redistribute primitive equal the host tensor. */
START_TEST(test_redistribute_on_device) {
    mg_mesh *mesh = gpu_mesh_new();
    int64_t shape[3] = {5, 7, 3}; /* uneven on 2 and 4 ranks */
    mg_tensor *full = host_rand(3, shape, 50);
    mg_placement ps[5] = {MG_SHARD(0), MG_SHARD(1), MG_SHARD(2), MG_REPLICATE, MG_PARTIAL_SUM};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++) {
            mg_dtensor *x = mg_distribute(mesh, full, &ps[a], 1);
            ck_assert_ptr_nonnull(x);
            ck_assert_int_eq(x->local->device, MG_DEVICE_CUDA);
            mg_dtensor *y = mg_redistribute(x, &ps[b], 1);
            ck_assert_msg(y != NULL, "redistribute %d -> %d: %s", a, b, mg_last_error());
            ck_assert_int_eq(y->local->device, MG_DEVICE_CUDA);
            mg_tensor *back = mg_full_tensor(y);
            ck_assert_ptr_nonnull(back);
            ck_assert_int_eq(back->device, MG_DEVICE_CPU);
            double e = rel_err(back->data, full->data, full->numel);
            note("redistribute (device)", e, 1e-6);
            mg_assert_all(e <= 1e-6, "redistribute %d -> %d: error %.3g", a, b, e);
            mg_tensor_free(back);
            mg_step_end();
            mg_dtensor_free(x);
        }
    /* mg_from_local takes a host block and keeps a device copy */
    mg_placement s0 = MG_SHARD(0);
    mg_dtensor *x = mg_distribute(mesh, full, &s0, 1);
    mg_tensor *hl = to_cpu(x->local);
    mg_dtensor *z = mg_from_local(mesh, hl, &s0, 1, 3, shape);
    ck_assert_ptr_nonnull(z);
    ck_assert_int_eq(z->local->device, MG_DEVICE_CUDA);
    mg_tensor *back = mg_full_tensor(z);
    mg_assert_all(rel_err(back->data, full->data, full->numel) == 0, "from_local round trip");
    mg_tensor_free(back), mg_tensor_free(hl), mg_tensor_free(full);
    mg_dtensor_free(x), mg_dtensor_free(z);
    mg_mesh_free(mesh);
    ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
    expect_synced();
}
END_TEST

/* ---- main ----------------------------------------------------------------------------------- */

/* Without the GPU half: the CPU half runs, its failures are printed and fail
 * the program, and its summary is not Check's ("N%: Checks: ..."), so that
 * scripts/test.sh counts no check of a program that skips. 77 when it passed. */
static int run_cpu_half(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_SILENT);
    int run = srunner_ntests_run(sr), failed = srunner_ntests_failed(sr);
    if (mg_rank() == 0) {
        TestResult **bad = srunner_failures(sr);
        for (int i = 0; bad && i < failed; i++)
            printf("%s:%d: %s\n", tr_lfile(bad[i]), tr_lno(bad[i]), tr_msg(bad[i]));
        free(bad);
        printf("CPU half: %d check(s), %d failed\n", run, failed);
    }
    srunner_free(sr);
    return mg_test_agree(failed == 0) ? 77 : 1;
}

#include "cuda_nn_ops_cases.h" /* embedding, layer norm, attention, ... with autograd */

int main(int argc, char **argv) {
    if (mg_init(&argc, &argv) != MG_OK) return 1;
    int one_gpu_each = 0;
    if (cuda_test_gpus() > 0) {
        if (!cuda_test_start(&one_gpu_each)) {
            mg_finalize();
            return 1;
        }
    } else {
        CPU = mg_backend_cpu();
    }
    with_gpu = GPU != NULL && one_gpu_each;
    Suite *s = suite_create("cuda_ops");
    TCase *o = tcase_create("ops");
    tcase_set_timeout(o, 600);
    if (with_gpu) {
        tcase_add_test(o, test_nccl_collectives);
        tcase_add_test(o, test_redistribute_on_device);
        tcase_add_test(o, test_bad_labels_on_device);
        nn_ops_tests(o);
    }
    tcase_add_test(o, test_ops_every_placement);
    suite_add_tcase(s, o);
    int status = with_gpu ? mg_test_run_mpi(s) : run_cpu_half(s);
    print_table();
    if (!with_gpu && mg_rank() == 0)
        printf("%s: only the CPU half ran (every placement against the first, on the CPU); "
               "skipping the GPU half\n",
               GPU ? "ranks share a GPU (NCCL needs one GPU per rank)" : "no CUDA device");
    mg_finalize();
    return status;
}
