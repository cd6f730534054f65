/* llama_model_dump.c: a helper of tests/test_llama_model_torch.sh (no test by
 * itself). `llama_model_dump OUT MESH PLAN KV [untied]`, under mpirun with
 * as many ranks as MESH has, builds a small Llama (nn/llama.h: L 2, H 4, KV
 * kv heads, C 32, F 96, T 16, V 256, B 4) on MESH with PLAN, gives its norms
 * weights other than 1 (1 + 0.3 u, u uniform in [-1, 1) by the parameter's
 * index and the element's: the same on every mesh), runs the forward, the
 * mean cross-entropy and the backward of one batch of fixed ids and targets
 * (with pp in PLAN: the pipeline's step, 2 micro-batches), and writes what it
 * got. Each rank writes OUT.<rank> (possibly empty): records of a 64-byte
 * name, an int32 ndim, ndim int64 sizes and the float32 data, little-endian,
 * as tests/llama_ops_dump writes them:
 *   config   L, H, KV, C, F, T, V, B, tied, rope theta, norm eps
 *   ids, targets (B, T); loss (1); logits (B, T, V) (not with pp)
 *   param/<name>, grad/<name>: every parameter of the whole model and its
 *            gradient, whole, written by rank 0 of the stage mesh holding it
 *            (a pipeline's tied copy of tok_embeddings is not written).
 * Exit 0 on success, 1 with a message on stderr otherwise. */
#include <stdio.h>
#include <string.h>

#include "dist/mesh.h"
#include "dist/placement.h"
#include "dist/redistribute.h"
#include "nn/gpt_pipeline.h"
#include "nn/model.h"
#include "rng.h"
#include "testutil.h"

enum { L = 2, H = 4, C = 32, F = 96, T = 16, V = 256, B = 4 };

static FILE *out;

static void record(const char *name, const mg_tensor *t) { mg_test_dump_record(out, name, t); }

static void record_values(const char *name, int nd, const int64_t *shape, const float *v) {
    mg_tensor *t = mg_tensor_from_data(nd, shape, v);
    if (t) record(name, t);
    mg_tensor_free(t);
}

/* The norms' weights of the model: 1 + 0.3 u by (parameter k, element i),
 * written into each rank's block (no collective: a pipeline's stages hold
 * different parameters). */
static void set_norms(mg_model *m) {
    for (int k = 0; k < mg_model_param_count(m); k++) {
        mg_model_param_info info;
        mg_param *p = mg_model_param(m, k, &info);
        if (!p || info.ndim != 1) continue;
        int64_t shape[MG_MAX_DIMS], off[MG_MAX_DIMS];
        mg_spec_local(&p->value->spec, NULL, shape, off);
        float *x = mg_tensor_data((mg_tensor *)mg_local(p->value));
        for (int64_t j = 0; j < shape[0]; j++)
            x[j] = 1.0f + 0.3f * (2.0f * mg_rng_uniform_at(17, (uint64_t)k, (uint64_t)(off[0] + j)) - 1.0f);
    }
}

/* Every parameter held here and its gradient, whole; written by rank 0 of its mesh. */
static int record_params(mg_model *m) {
    int copy = mg_model_embedding_copy(m);
    for (int k = 0; k < mg_model_param_count(m); k++) {
        mg_model_param_info info;
        mg_param *p = mg_model_param(m, k, &info);
        if (!p || (k == 0 && copy >= 0)) continue;
        mg_dtensor *g = mg_grad(p->value);
        mg_tensor *value = mg_full_tensor(p->value), *grad = g ? mg_full_tensor(g) : NULL;
        if (!value || !grad) {
            fprintf(stderr, "llama_model_dump: %s: %s\n", info.name, mg_last_error());
            return 1;
        }
        if (p->value->spec.mesh->rank == 0) {
            char name[96];
            snprintf(name, sizeof name, "param/%s", info.name);
            record(name, value);
            snprintf(name, sizeof name, "grad/%s", info.name);
            record(name, grad);
        }
        mg_tensor_free(value);
        mg_tensor_free(grad);
    }
    return 0;
}

/* (B, T) at the plan's batch placements */
static mg_dtensor *batch(const mg_mesh *mesh, const mg_plan *plan, const float *v) {
    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(plan, bp);
    mg_tensor *t = mg_tensor_from_data(2, (int64_t[]){B, T}, v);
    mg_dtensor *d = t ? mg_distribute(mesh, t, bp, mg_mesh_ndim(mesh)) : NULL;
    mg_tensor_free(t);
    return d;
}

/* The step of the whole model: logits, loss and gradients. */
static int whole(mg_mesh *mesh, const mg_plan *plan, const mg_lm_config *cfg, const float *ids,
                 const float *targets) {
    mg_model m;
    if (mg_model_build_lm(&m, mesh, plan, cfg, 5, NULL) != MG_OK) return 1;
    set_norms(&m);
    mg_dtensor *x = batch(mesh, plan, ids), *y = x ? batch(mesh, plan, targets) : NULL;
    mg_dtensor *logits = y ? mg_model_forward(&m, x) : NULL; // logits: (B, T, V)
    mg_dtensor *loss = logits ? mg_cross_entropy(logits, y) : NULL;
    mg_tensor *lf = logits ? mg_full_tensor(logits) : NULL;
    if (!loss || !lf || mg_backward(loss) != MG_OK) return 1;
    double l = 0;
    if (mg_dtensor_item(loss, &l) != MG_OK) return 1;
    float lv = (float)l;
    if (mg_rank() == 0) {
        record("logits", lf);
        record_values("loss", 1, (int64_t[]){1}, &lv);
    }
    mg_tensor_free(lf);
    int rc = record_params(&m);
    mg_step_end();
    mg_dtensor_free(x);
    mg_dtensor_free(y);
    mg_model_free(&m);
    return rc;
}

/* The pipeline's step (2 micro-batches, 1f1b): loss and gradients. */
static int pipeline(mg_mesh *mesh, const mg_plan *plan, const mg_lm_config *cfg, const float *ids,
                    const float *targets) {
    mg_pp_options o;
    mg_pp_options_defaults(&o);
    o.microbatches = 2;
    mg_gpt_pp *t = NULL;
    mg_model m;
    double loss = 0;
    if (mg_lm_pp_new(&t, mesh, plan, &o, cfg, 5, B, &m) != MG_OK) return 1;
    set_norms(&m);
    int rc = mg_gpt_pp_step(t, ids, targets, &loss) != MG_OK;
    float lv = (float)loss;
    if (!rc && mg_rank() == 0) record_values("loss", 1, (int64_t[]){1}, &lv);
    if (!rc) rc = record_params(&m);
    mg_step_end();
    mg_model_free(&m);
    mg_gpt_pp_free(t);
    return rc;
}

int main(int argc, char **argv) {
    if (mg_init(&argc, &argv) != MG_OK) return 1;
    int rc = 1, shape[MG_MAX_MESH_DIMS], nd = argc >= 5 ? mg_mesh_parse(argv[2], shape) : -1;
    mg_mesh *mesh = NULL;
    mg_plan plan;
    char path[4096];
    if (nd < 1 || mg_plan_parse(argv[3], &plan) != MG_OK || atoi(argv[4]) < 1) {
        if (mg_rank() == 0)
            fprintf(stderr, "usage: llama_model_dump OUT MESH PLAN KV [untied]%s%s\n",
                    nd < 1 ? "" : ": ", nd < 1 ? "" : mg_last_error());
        goto end;
    }
    snprintf(path, sizeof path, "%s.%d", argv[1], mg_rank());
    if (!(mesh = mg_mesh_new(nd, shape)) || !(out = fopen(path, "wb"))) {
        fprintf(stderr, "llama_model_dump: %s\n", mesh ? path : mg_last_error());
        goto end;
    }
    mg_lm_config cfg = {.kind = MG_MODEL_LLAMA};
    cfg.llama = (mg_llama_config){.layers = L, .heads = H, .kv_heads = atoi(argv[4]), .embd = C,
                                  .ctx = T, .vocab = V, .hidden = F, .rope_theta = 10000,
                                  .norm_eps = 1e-5, .tied = !(argc > 5 && !strcmp(argv[5], "untied"))};
    float ids[B * T], targets[B * T];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (float)(mg_rng_bits_at(3, 1, (uint64_t)i) % V);
        targets[i] = (float)(mg_rng_bits_at(3, 2, (uint64_t)i) % V);
    }
    if (mg_rank() == 0) {
        const mg_llama_config *l = &cfg.llama;
        float c[11] = {L, H, (float)l->kv_heads, C, F, T, V, B, (float)l->tied,
                       (float)l->rope_theta, (float)l->norm_eps};
        record_values("config", 1, (int64_t[]){11}, c);
        record_values("ids", 2, (int64_t[]){B, T}, ids);
        record_values("targets", 2, (int64_t[]){B, T}, targets);
    }
    rc = mg_plan_pp_dim(&plan) >= 0 ? pipeline(mesh, &plan, &cfg, ids, targets)
                                    : whole(mesh, &plan, &cfg, ids, targets);
    if (rc) fprintf(stderr, "llama_model_dump: %s [%s]: %s\n", argv[2], argv[3], mg_last_error());
end:
    return mg_test_dump_finish(out, mesh, rc);
}
