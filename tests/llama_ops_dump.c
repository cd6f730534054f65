/* llama_ops_dump.c: a helper of tests/test_llama_torch.sh (no test by itself).
 * `llama_ops_dump FILE`, under mpirun at 1, 2 or 4 ranks, runs meshgrad's
 * mg_rms_norm, mg_rope and mg_attention_gqa on fixed random inputs, each
 * followed by L = sum(out * r) and backward, sharded as the Llama family is
 * (1 rank: whole; 2: a 1-D mesh; 4: a 2x2 mesh, data parallel on its first
 * dim):
 *   rms_norm   x (2, 5, 16) sharded on B and C, the weight on C
 *   rope       x (2, 6, 4, 8) on B and T (sequence parallel), pos0 3,
 *              theta 10000; x (1, 7, 2, 6) on T, pos0 11, theta 500
 *   gqa        causal, q (2, 4, 6, 8): kv_heads 2 and 4 sharded on B and
 *              the heads (tensor parallel), kv_heads 1 on B and q's T
 * Rank 0 writes FILE: for each case its inputs, r, the output and each
 * input's gradient, whole, as records of a 64-byte name ("case/what"), an
 * int32 ndim, ndim int64 sizes and the float32 data, little-endian. */
#include <stdio.h>

#include "testutil.h"

static mg_mesh *mesh;
static FILE *out;

/* a placement on the data-parallel and on the other mesh dim */
typedef struct {
    mg_placement dp, tp;
} place;

static void record(const char *name, const mg_tensor *t) {
    if (mg_rank() == 0) mg_test_dump_record(out, name, t);
}

/* full test data (seed), its record, and the tensor at placements p */
static mg_dtensor *input(const char *name, int nd, const int64_t *shape, uint64_t seed,
                         float scale, float offset, place p) {
    mg_tensor *full = mg_tensor_new(nd, shape);
    float *x = mg_tensor_data(full);
    mg_test_fill(x, mg_tensor_numel(full), seed);
    for (int64_t i = 0; i < mg_tensor_numel(full); i++) x[i] = x[i] * scale + offset;
    record(name, full);
    mg_placement pl[2] = {p.dp, p.tp};
    mg_dtensor *t = mg_mesh_ndim(mesh) == 2 ? mg_distribute(mesh, full, pl, 2)
                                            : mg_distribute(mesh, full, &p.tp, 1);
    mg_tensor_free(full);
    if (!t) {
        fprintf(stderr, "llama_ops_dump: %s: %s\n", name, mg_last_error());
        return NULL;
    }
    mg_set_requires_grad(t, 1);
    return t;
}

/* L = sum(y * r), backward, and the records of r, y and the inputs' gradients */
static int finish(const char *c, mg_dtensor *y, mg_dtensor **in, int n) {
    char name[64];
    if (!y) {
        fprintf(stderr, "llama_ops_dump: %s: %s\n", c, mg_last_error());
        return 1;
    }
    place rep = {MG_REPLICATE, MG_REPLICATE};
    snprintf(name, sizeof name, "%s/r", c);
    mg_dtensor *r = input(name, mg_dtensor_ndim(y), mg_dtensor_shape(y), 7, 1.0f, 0.0f, rep);
    mg_tensor *full = mg_full_tensor(y);
    snprintf(name, sizeof name, "%s/out", c);
    record(name, full);
    mg_tensor_free(full);
    int rc = mg_backward(mg_sum(mg_mul(y, r)));
    if (rc != MG_OK) {
        fprintf(stderr, "llama_ops_dump: %s backward: %s\n", c, mg_last_error());
        return 1;
    }
    for (int i = 0; i < n; i++) {
        mg_tensor *g = mg_full_tensor(mg_grad(in[i]));
        snprintf(name, sizeof name, "%s/grad%d", c, i);
        record(name, g);
        mg_tensor_free(g);
    }
    mg_step_end();
    for (int i = 0; i < n; i++) mg_dtensor_free(in[i]);
    mg_dtensor_free(r);
    return 0;
}

static int rms_norm_case(void) {
    const place x_at = {MG_SHARD(0), MG_SHARD(2)}, w_at = {MG_REPLICATE, MG_SHARD(0)};
    mg_dtensor *in[2] = {input("rms_norm/x", 3, (int64_t[]){2, 5, 16}, 1, 3.0f, 0.5f, x_at),
                         input("rms_norm/w", 1, (int64_t[]){16}, 2, 0.5f, 1.0f, w_at)};
    if (!in[0] || !in[1]) return 1;
    return finish("rms_norm", mg_rms_norm(in[0], in[1], 1e-5f), in, 2);
}

static int rope_case(const char *c, const int64_t *shape, int64_t pos0, float theta, place at) {
    char name[64];
    snprintf(name, sizeof name, "%s/x", c);
    mg_dtensor *x = input(name, 4, shape, 3, 1.0f, 0.0f, at);
    if (!x) return 1;
    return finish(c, mg_rope(x, pos0, theta), &x, 1);
}

static int gqa_case(const char *c, int64_t kv, place q_at, place kv_at) {
    char name[64];
    mg_dtensor *in[3];
    const char *what[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s/%s", c, what[i]);
        in[i] = input(name, 4, (int64_t[]){2, i ? kv : 4, 6, 8}, 4 + (uint64_t)i,
                      i ? 1.0f : 2.0f, 0.0f, i ? kv_at : q_at);
        if (!in[i]) return 1;
    }
    return finish(c, mg_attention_gqa(in[0], in[1], in[2], 1), in, 3);
}

int main(int argc, char **argv) {
    if (mg_init(&argc, &argv) != MG_OK) return 1;
    int world = mg_world_size(), rc = 1;
    if (argc != 2) {
        if (mg_rank() == 0) fprintf(stderr, "usage: llama_ops_dump FILE\n");
        goto end;
    }
    mesh = world == 4 ? mg_mesh_new(2, (int[]){2, 2}) : mg_mesh_new(1, &world);
    if (!mesh || (mg_rank() == 0 && !(out = fopen(argv[1], "wb")))) {
        fprintf(stderr, "llama_ops_dump: %s\n", mesh ? argv[1] : mg_last_error());
        goto end;
    }
    const place b_t = {MG_SHARD(0), MG_SHARD(1)}, t_only = {MG_REPLICATE, MG_SHARD(1)};
    const place heads = {MG_SHARD(0), MG_SHARD(1)}, seq = {MG_SHARD(0), MG_SHARD(2)};
    const place batch = {MG_SHARD(0), MG_REPLICATE};
    rc = rms_norm_case();
    rc = rc ? rc : rope_case("rope", (int64_t[]){2, 6, 4, 8}, 3, 10000.0f, b_t);
    rc = rc ? rc : rope_case("rope_far", (int64_t[]){1, 7, 2, 6}, 11, 500.0f, t_only);
    rc = rc ? rc : gqa_case("gqa_kv2", 2, heads, heads);
    rc = rc ? rc : gqa_case("gqa_kv4", 4, heads, heads);
    rc = rc ? rc : gqa_case("gqa_kv1", 1, seq, batch);
end:
    return mg_test_dump_finish(out, mesh, rc);
}
