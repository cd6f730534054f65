/* test_gpt_pipeline.c (MPI): the GPT cut into pipeline stages
 * (nn/gpt_pipeline.h) against the run it replaces. A tiny GPT (4 blocks) on
 * every pp mesh the world allows (pp; pp,dp, pp,tp, pp,fsdp, pp,sp and
 * pp,tp+sp on 2x2), one
 * step of every schedule (gpipe, 1f1b, interleaved-1f1b with 2 virtual
 * stages where the blocks allow, zb-h1). The reference is the whole GPT on
 * the stage's own mesh with gradient accumulation over the same micro-batches
 * (sums off but for the last). The loss and every gradient this rank holds
 * must agree within 1e-6 relative (a tensor's largest difference over its
 * largest element; the worst is printed): the blocks' are
 * bitwise equal (the same kernels add in the same order: the boundary's
 * activation and gradient only travel), wte's is not (the pipeline adds the
 * embedding's and the head's sums across the two end stages, the reference
 * adds the contributions into one buffer as they come). The last stage's
 * copy of wte must hold the same gradient as the first stage's wte. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "context.h"
#include "dist/mesh.h"
#include "nn/gpt_pipeline.h"
#include "ops/ops.h"
#include "pipeline_testutil.h"
#include "status.h"
#include "testutil.h"

#define BATCH 8
static const mg_gpt_config cfg = {4, 2, 8, 8, 32}; /* L, H, C, T, V */

/* Rows [start, start + r) of a (BATCH, T) token array on `mesh` at the batch's placements. */
static mg_dtensor *tokens(const mg_mesh *mesh, const mg_plan *plan, const float *data,
                          int64_t start, int64_t r) {
    int64_t shape[2] = {r, cfg.ctx};
    mg_placement rep[MG_MAX_MESH_DIMS], bp[MG_MAX_MESH_DIMS];
    for (int d = 0; d < mesh->ndim; d++) rep[d] = MG_REPLICATE;
    mg_plan_batch(plan, bp);
    mg_spec whole, spec;
    if (mg_spec_make(&whole, mesh, rep, mesh->ndim, 2, shape, "ids") != MG_OK ||
        mg_spec_make(&spec, mesh, bp, mesh->ndim, 2, shape, "ids") != MG_OK)
        return NULL;
    mg_tensor *x = mg_tensor_alloc(mg_step_arena(), 2, shape);
    if (!x) return NULL;
    memcpy(x->data, data + start * cfg.ctx, (size_t)x->numel * sizeof(float));
    mg_dtensor *d = mg_dtensor_make(&whole, x, mg_step_arena());
    return d ? mg_op_redistribute(d, &spec) : NULL;
}

/* The reference: the whole GPT on a pipeline's stage mesh, and the tokens. */
typedef struct {
    mg_model *model;
    const mg_pipeline *p;
    const float *ids, *targets;
} reference;

/* Micro-batch mb's loss on the whole GPT: its share (rows / batch) of the
 * batch's mean. */
static mg_dtensor *reference_loss(void *ctx, int mb) {
    const reference *r = ctx;
    const mg_pipeline *p = r->p;
    int64_t start = 0;
    for (int i = 0; i < mb; i++) start += p->rows[i];
    mg_dtensor *x = tokens(p->stage_mesh, &p->stage_plan, r->ids, start, p->rows[mb]);
    mg_dtensor *y = x ? tokens(p->stage_mesh, &p->stage_plan, r->targets, start, p->rows[mb]) : NULL;
    mg_dtensor *logits = y ? mg_model_forward(r->model, x) : NULL;
    mg_dtensor *l = logits ? mg_cross_entropy(logits, y) : NULL;
    return l ? mg_scale(l, (float)((double)p->rows[mb] / (double)BATCH)) : NULL;
}

static int run_config(const mg_test_pp_config *c, char *msg, size_t len) {
    mg_mesh *mesh;
    mg_plan plan;
    mg_pp_options o;
    mg_gpt_pp *t = NULL;
    mg_model stage, ref;
    if (!mg_test_pp_start(c, &mesh, &plan, &o, msg, len)) return 0;
    if (mg_gpt_pp_new(&t, mesh, &plan, &o, &cfg, 5, BATCH, &stage) != MG_OK) {
        snprintf(msg, len, "%s %s: %s", c->plan, mg_pp_kind_name(c->kind), mg_last_error());
        mg_mesh_free(mesh);
        return 0;
    }
    const mg_pipeline *p = mg_gpt_pp_pipeline(t);
    int ok = mg_model_build_gpt(&ref, p->stage_mesh, &p->stage_plan, &cfg, 5, NULL) == MG_OK;
    float ids[BATCH * 8], targets[BATCH * 8];
    for (int i = 0; i < BATCH * cfg.ctx; i++) { /* tokens in [0, V) */
        ids[i] = (float)((i * 7 + 3) % cfg.vocab);
        targets[i] = (float)((i * 11 + 5) % cfg.vocab);
    }
    double loss = 0, ref_loss = 0;
    if (!ok || mg_gpt_pp_step(t, ids, targets, &loss) != MG_OK) {
        snprintf(msg, len, "%s %s: %s", c->plan, mg_pp_kind_name(c->kind), mg_last_error());
        ok = 0;
    }
    reference r = {&ref, p, ids, targets};
    if (ok && !mg_test_accumulate(p->microbatches, reference_loss, &r, &ref_loss)) {
        snprintf(msg, len, "reference: %s", mg_last_error());
        ok = 0;
    }
    int bitwise = ok && (float)loss == (float)ref_loss, blocks_bitwise = 1;
    double worst = ok ? fabs(loss - ref_loss) / fabs(ref_loss) : 1;
    for (int k = 0; ok && k < mg_gpt_param_total(&cfg); k++) {
        mg_dtensor *ga, *gb;
        int held = mg_test_pp_grads(&stage, &ref, k, &ga, &gb, msg, len);
        if (held < 0) ok = 0;
        if (held <= 0) continue;
        mg_test_diff d = mg_test_grad_diff(ga, gb);
        worst = fmax(worst, d.of_largest);
        if (k == 0) bitwise &= d.bitwise;
        else blocks_bitwise &= d.bitwise;
    }
    ok = mg_test_agree(ok);
    bitwise = mg_test_agree(bitwise);
    blocks_bitwise = mg_test_agree(blocks_bitwise);
    double all = mg_test_max_all(worst);
    if (ok && mg_rank() == 0)
        printf("  %-8s %-16s v=%d M=%d: loss %.9g; wte and loss %s, other parameters %s "
               "(worst relative %.2e)\n", c->plan, mg_pp_kind_name(c->kind), c->v, p->microbatches,
               ref_loss, bitwise ? "bitwise equal" : "not bitwise",
               blocks_bitwise ? "bitwise equal" : "NOT bitwise", all);
    if (ok && (all > 1e-6 || !blocks_bitwise)) {
        snprintf(msg, len, "%s %s: gradients differ from gradient accumulation (worst relative "
                 "%.2e, blocks %s)", c->plan, mg_pp_kind_name(c->kind), all,
                 blocks_bitwise ? "bitwise" : "not bitwise");
        ok = 0;
    }
    mg_step_end();
    mg_model_free(&ref);
    mg_model_free(&stage);
    mg_gpt_pp_free(t);
    mg_mesh_free(mesh);
    return ok;
}

START_TEST(test_gpt_schedules_equal_accumulation) {
    static const char *const plans[] = {"pp,dp", "pp,tp", "pp,fsdp", "pp,sp", "pp,tp+sp", NULL};
    mg_test_pp_config meshes[6];
    int nm = mg_test_pp_meshes(meshes, plans);
    char msg[512] = "";
    for (int i = 0; i < nm; i++)
        for (int k = 0; k < MG_PP_KIND_COUNT; k++) {
            mg_test_pp_config c = mg_test_pp_schedule(&meshes[i], k);
            if (c.v * c.shape[0] > cfg.layers) continue; /* more stages than blocks */
            c.m = k == MG_PP_INTERLEAVED_1F1B ? 2 * c.shape[0] : 4;
            if (c.ndim == 2) c.m = 2; /* rows of 4 windows: 2 per data-parallel rank */
            mg_assert_all(run_config(&c, msg, sizeof msg), "%s", msg);
        }
}
END_TEST

static Suite *make_suite(void) {
    const TTest *tests[] = {test_gpt_schedules_equal_accumulation, NULL};
    return mg_test_suite("gpt_pipeline", tests);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
