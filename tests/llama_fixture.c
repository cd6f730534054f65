/* llama_fixture.c: writes a checkpoint of a llama as `meshgrad train --model
 * llama` will save one (a helper of tests/test_ckpt_convert.sh and
 * tests/test_convert_torch.sh, not a test by itself), through the training
 * API alone (meshgrad_train.h): the parameters under llama2.c model.py's
 * state_dict names with PyTorch's (out, in) shapes, and the attributes
 * model.kind = llama, model.layers, .heads, .kv_heads, .embd, .ctx, .hidden,
 * .vocab, .rope_theta, .norm_eps, .tied.
 *
 *   llama_fixture OUT.h5 LAYERS HEADS KV_HEADS EMBD CTX HIDDEN VOCAB TIED [THETA EPS]
 *
 * Values are N(0, 0.02)-sized and deterministic (xorshift of the seed and the
 * parameter's index), the norms' weights around 1 (not all ones), so every
 * weight's layout shows in a forward. Exit 0 on success, 1 with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshgrad.h"
#include "meshgrad_train.h"

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A tensor (rows, cols) (cols 0: 1-d), replicated on the mesh: a norm's
 * weight 1 + U(-0.2, 0.2), else U(-0.035, 0.035) (std 0.02). */
static mg_dtensor *make(mg_mesh *mesh, int64_t rows, int64_t cols, int norm, uint64_t seed) {
    int64_t shape[2] = {rows, cols};
    mg_tensor *t = mg_tensor_new(cols ? 2 : 1, shape);
    if (!t) return NULL;
    float *x = mg_tensor_data(t);
    uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (int64_t i = 0; i < mg_tensor_numel(t); i++) {
        double u = (double)(next(&s) >> 11) / 9007199254740992.0 * 2 - 1;
        x[i] = (float)(norm ? 1 + 0.2 * u : 0.0346 * u);
    }
    mg_placement rep = MG_REPLICATE;
    mg_dtensor *d = mg_distribute(mesh, t, &rep, 1);
    mg_tensor_free(t);
    return d;
}

int main(int argc, char **argv) {
    if (argc != 10 && argc != 12) {
        fprintf(stderr, "usage: llama_fixture OUT.h5 LAYERS HEADS KV_HEADS EMBD CTX HIDDEN VOCAB "
                        "TIED [THETA EPS]\n");
        return 2;
    }
    long long L = atoll(argv[2]), H = atoll(argv[3]), KV = atoll(argv[4]), C = atoll(argv[5]),
              F = atoll(argv[7]), V = atoll(argv[8]);
    int tied = atoi(argv[9]);
    if (mg_init(&argc, &argv) != MG_OK) return 1;
    int size = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &size);
    mg_ckpt *ck = mg_ckpt_new();
    int rc = mesh && ck ? MG_OK : MG_ENOMEM;
    long long D = C / H;
    char name[128];
    uint64_t k = 0;
    mg_dtensor *all[1024];
    int n = 0;
#define ADD(nm, r, c, norm)                                                                        \
    do {                                                                                           \
        mg_dtensor *t_ = rc == MG_OK && n < 1024 ? make(mesh, r, c, norm, k++) : NULL;            \
        if (!t_) rc = MG_ENOMEM;                                                                   \
        if (rc == MG_OK) rc = mg_ckpt_add(ck, nm, t_);                                             \
        if (t_) all[n++] = t_;                                                                     \
    } while (0)
    ADD("tok_embeddings.weight", V, C, 0);
    for (long long l = 0; l < L; l++) {
        static const struct {
            const char *name;
            char rows, cols;
        } p[9] = {{"attention_norm.weight", 'C', 0}, {"attention.wq.weight", 'q', 'C'},
                  {"attention.wk.weight", 'k', 'C'},  {"attention.wv.weight", 'k', 'C'},
                  {"attention.wo.weight", 'C', 'q'},  {"ffn_norm.weight", 'C', 0},
                  {"feed_forward.w1.weight", 'F', 'C'}, {"feed_forward.w2.weight", 'C', 'F'},
                  {"feed_forward.w3.weight", 'F', 'C'}};
        for (int j = 0; j < 9; j++) {
#define SZ(ch) ((ch) == 'C' ? C : (ch) == 'q' ? H * D : (ch) == 'k' ? KV * D : (ch) == 'F' ? F : 0)
            snprintf(name, sizeof name, "layers.%lld.%s", l, p[j].name);
            ADD(name, SZ(p[j].rows), SZ(p[j].cols), p[j].cols == 0);
        }
    }
    ADD("norm.weight", C, 0, 1);
    if (!tied) ADD("output.weight", V, C, 0);
    const char *attrs[][2] = {{"model.kind", "llama"}, {"model.layers", argv[2]},
                              {"model.heads", argv[3]}, {"model.kv_heads", argv[4]},
                              {"model.embd", argv[5]}, {"model.ctx", argv[6]},
                              {"model.hidden", argv[7]}, {"model.vocab", argv[8]},
                              {"model.rope_theta", argc == 12 ? argv[10] : "10000"},
                              {"model.norm_eps", argc == 12 ? argv[11] : "1e-05"},
                              {"model.tied", tied ? "1" : "0"}};
    for (size_t i = 0; rc == MG_OK && i < sizeof attrs / sizeof attrs[0]; i++)
        rc = mg_ckpt_set_attr(ck, attrs[i][0], attrs[i][1]);
    if (rc == MG_OK) rc = mg_ckpt_save(ck, argv[1]);
    if (rc != MG_OK) fprintf(stderr, "llama_fixture: %s\n", mg_last_error());
    mg_ckpt_free(ck);
    for (int i = 0; i < n; i++) mg_dtensor_free(all[i]);
    if (mesh) mg_mesh_free(mesh);
    mg_finalize();
    return rc == MG_OK ? 0 : 1;
}
