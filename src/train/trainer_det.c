/* trainer_det.c: which runs the deterministic mode (--deterministic) can make
 * bitwise equal on every mesh and split, checked before the first step so a
 * run that cannot qualify stops with one clear line instead of differing in
 * silence. The rows of a step (B windows of T tokens; B images) are one sum's
 * terms for every weight gradient, cut m-major into micro-batches (--grad-
 * accum, or the pipeline's --microbatches) and then over the data-parallel
 * ranks: each part must be one subtree of the halving tree (backend.h). The
 * contracted dims the tensor-parallel dims split are checked by the ops
 * themselves (ops_matmul.c), as are any other sizes.
 * Exports: mg_trainer_det_check (trainer.h). */
#include <string.h>

#include "backend/backend.h"
#include "nn/plan.h"
#include "status.h"
#include "train/trainer.h"

static int is_pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

int mg_trainer_det_check(const mg_train_config *c, const mg_mesh *mesh, const mg_plan *plan) {
    if (strcmp(c->device, "cpu") != 0)
        return mg_error(MG_EINVAL, "--deterministic runs on the CPU only: on CUDA it would need "
                        "GEMMs of a fixed order of additions and NCCL sums in a fixed tree, which "
                        "are not built; drop --device %s or --deterministic", c->device);
    if (strcmp(c->dtype, "fp32") != 0)
        return mg_error(MG_EINVAL, "--deterministic is fp32 only: drop --dtype %s", c->dtype);
    for (int m = 0; m < plan->ndim; m++)
        if ((plan->kind[m] == MG_PLAN_SP || plan->kind[m] == MG_PLAN_TP_SP) &&
            mg_mesh_shape(mesh)[m] > 1)
            return mg_error(MG_EINVAL, "--deterministic cannot take sequence parallelism (sp, "
                            "tp+sp): it cuts every window's tokens across ranks, and the fixed "
                            "tree sums a weight's gradient window by window; use dp, fsdp, tp or "
                            "pp for that mesh dim");
    int64_t parts = c->grad_accum, data = mg_plan_data_degree(plan, mesh);
    if (!is_pow2(c->grad_accum))
        return mg_error(MG_EINVAL, "--deterministic needs --grad-accum a power of two (1, 2, 4, "
                        "...), not %lld: micro-batches are halves, quarters, ... of the batch",
                        (long long)c->grad_accum);
    if (mg_plan_pp_dim(plan) >= 0) {
        if (c->microbatch_rows[0])
            return mg_error(MG_EINVAL, "--deterministic takes equal micro-batches: drop "
                            "--microbatch-rows");
        if (strcmp(c->pp_schedule, "gpipe") != 0 && strcmp(c->pp_schedule, "1f1b") != 0)
            return mg_error(MG_EINVAL, "--deterministic runs the gpipe and 1f1b pipeline "
                            "schedules (backward in micro-batch order), not %s", c->pp_schedule);
        int64_t mb = c->microbatches ? c->microbatches : 8;
        if (!is_pow2(mb))
            return mg_error(MG_EINVAL, "--deterministic needs --microbatches a power of two, not "
                            "%lld", (long long)mb);
        parts *= mb;
    }
    if (!is_pow2(data))
        return mg_error(MG_EINVAL, "--deterministic needs a data-parallel degree that is a power "
                        "of two, not %lld", (long long)data);
    parts *= data;
    int64_t rows = c->batch * (mg_model_kind_is_lm(c->model) ? c->ctx : 1);
    if (!mg_det_split_ok(rows, parts))
        return mg_error(MG_EINVAL, "--deterministic: the step's %lld rows (batch%s) cut into "
                        "%lld parts (micro-batches x data-parallel ranks) must be its halves, "
                        "quarters, ..., each halving of more than %d rows; use %lld rows or "
                        "another multiple of %lld (a larger --batch, or fewer parts)",
                        (long long)rows, mg_model_kind_is_lm(c->model) ? " x ctx" : "",
                        (long long)parts, MG_DET_LEAF, (long long)(parts * MG_DET_LEAF),
                        (long long)(parts * MG_DET_LEAF));
    return MG_OK;
}
