/* trainer.c: what a training run is and holds (struct mg_trainer, trainer.h):
 * its free, what meshgrad_train.h reads of it (its steps, resume, mesh,
 * parameters, checksum and memory) and a meta run's batches. It stands on
 * the MLPs' pipeline (trainer_pp.c), and every other trainer file on it:
 * trainer_run.c builds the run and takes its steps, trainer_text.c and
 * trainer_eval.c are the models' sides, trainer_ckpt.c saves and resumes,
 * estimate.c runs it on the meta device.
 * Exports mg_trainer_free, mg_trainer_steps, mg_trainer_resumed_from,
 * mg_trainer_resume_changes, mg_trainer_mesh, mg_trainer_numel,
 * mg_trainer_checksum, mg_train_memory_total, mg_trainer_memory_get
 * (meshgrad_train.h) and mg_trainer_meta_batch (trainer.h). */
#include "train/trainer.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "context.h"
#include "dist/dist_state.h"
#include "dist/reducer.h"
#include "dist/redistribute.h"
#include "io/h5util.h"
#include "nn/gpt_pipeline.h"
#include "status.h"
#include "train/trainer_pp.h"

void mg_trainer_free(mg_trainer *tr) {
    if (!tr) return;
    mg_set_deterministic(tr->det_was);
    mg_backend_bf16_weights_free();
    if (tr->have_model) mg_model_free(&tr->model);
    mg_train_pp_free(tr->pp);
    mg_gpt_pp_free(tr->gpt_pp);
    mg_arena_free(tr->micro);
    free(tr->host);
    if (tr->have_train_loader) mg_loader_free(&tr->train_loader);
    if (tr->have_test_loader) mg_loader_free(&tr->test_loader);
    if (tr->train) mg_dataset_close(tr->train);
    if (tr->test) mg_dataset_close(tr->test);
    mg_tokens_close(tr->tokens);
    mg_tokens_close(tr->val);
    free(tr->starts);
    if (tr->own_mesh && tr->mesh) mg_mesh_free(tr->mesh);
    free(tr);
}

/* ---- what the run holds ------------------------------------------------------------ */

int64_t mg_trainer_steps(const mg_trainer *tr) { return tr ? tr->step : -1; }

const char *mg_trainer_resumed_from(const mg_trainer *tr) { return tr ? tr->resumed_from : ""; }

const char *mg_trainer_resume_changes(const mg_trainer *tr) {
    return tr ? tr->resume_changes : "";
}

const mg_mesh *mg_trainer_mesh(const mg_trainer *tr) { return tr ? tr->mesh : NULL; }

int64_t mg_trainer_numel(const mg_trainer *tr) { return tr ? mg_model_numel(&tr->model) : -1; }

int mg_trainer_checksum(mg_trainer *tr, uint64_t *out) {
    int rc = tr->pp       ? mg_train_pp_checksum(tr->pp, out)
             : tr->gpt_pp ? mg_gpt_pp_checksum(tr->gpt_pp, out)
                          : mg_params_checksum(&tr->model.params, out);
    /* the whole parameters it gathered are no step's: their staging buffers
     * go back, so a run's memory is its steps' */
    mg_redistribute_release();
    return rc;
}

double mg_train_memory_total(const mg_train_memory *m) {
    return m->params + m->grads + m->optim + m->activations + m->scratch + m->buffers + m->casts;
}

void mg_trainer_memory_get(const mg_trainer *tr, mg_train_memory *m) {
    memset(m, 0, sizeof *m);
    const mg_param_table *t = &tr->model.params;
    for (int i = 0; i < t->n; i++) {
        const mg_param *p = &t->p[i];
        double share = 1;
        if (p->one_copy && p->shard_dim >= 0)
            share = 1.0 / p->value->spec.mesh->dim_comm[p->shard_dim]->size;
        m->params += 4.0 * (double)p->value->local->numel * share;
        if (p->value->grad) m->grads += 4.0 * (double)p->value->grad->local->numel;
        for (int s = 0; s < MG_PARAM_STATE_MAX; s++)
            if (p->state[s]) m->optim += 4.0 * (double)p->state[s]->local->numel * share;
    }
    m->activations = (double)mg_arena_peak(mg_step_arena());
    if (tr->micro) m->activations += (double)mg_arena_peak(tr->micro); /* --grad-accum */
    mg_arena *again = mg_recompute_arena(); /* --recompute: one segment's data at a time */
    if (again) m->activations += (double)mg_arena_peak(again);
    m->scratch = (double)mg_arena_peak(mg_scratch_arena());
    m->buffers = (double)mg_reducer_buffer_bytes();
    const mg_dist_state *c = mg_dist();
    for (int d = 0; d < MG_DEVICE_KINDS; d++)
        for (int k = 0; k < 2; k++) m->buffers += (double)c->staging[d][k].bytes;
    m->casts = (double)mg_backend_bf16_weights_bytes(mg_arena_device(mg_step_arena()));
}

int mg_trainer_meta_batch(const mg_trainer *tr, const mg_spec *x_spec, const mg_spec *y_spec,
                          mg_dtensor **x, mg_dtensor **y) {
    /* as the loaders make one: the two blocks, the ranks' agreement on the
     * read, the two tensors */
    mg_arena *arena = mg_step_arena();
    int64_t xl[MG_MAX_DIMS], yl[MG_MAX_DIMS];
    mg_spec_local(x_spec, NULL, xl, NULL);
    mg_spec_local(y_spec, NULL, yl, NULL);
    mg_tensor *xt = mg_tensor_alloc(arena, x_spec->ndim, xl);
    mg_tensor *yt = mg_tensor_alloc(arena, y_spec->ndim, yl);
    int rc = mg_io_agree(tr->mesh->world, xt && yt ? MG_OK : MG_ENOMEM);
    if (rc != MG_OK) return rc;
    if (!(*x = mg_dtensor_make(x_spec, xt, arena))) return mg_last_code();
    if (!(*y = mg_dtensor_make(y_spec, yt, arena))) return mg_last_code();
    return MG_OK;
}
