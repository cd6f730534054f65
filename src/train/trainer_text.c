/* trainer_text.c: a language model's side of a training run (the GPT or the
 * Llama; see trainer.h): the token splits of the data set, the windows of
 * each step and micro-batch, and the validation loss; with pp in the plan,
 * the model's pipeline (nn/gpt_pipeline.h): every rank loads the step's windows whole, the
 * pipeline cuts them into its micro-batches (--microbatches, not --grad-accum).
 *
 * A step's B windows of T + 1 tokens start where Philox(seed, step, row) puts
 * them (io/tokens.h), so every mesh, every resume and every --grad-accum sees
 * the same rows; micro-batch m of N takes rows [m B/N, (m + 1) B/N). The
 * validation loss is the mean loss over the non-overlapping T-windows of
 * /val (the first of them that hold --eval-tokens tokens, or all), in chunks
 * of what a training forward takes at once (mg_trainer_eval_chunks; each
 * chunk's mean weighted by its windows), the same on every mesh up to float
 * reassociation. A meta run (trainer.h) opens
 * no token file: the vocabulary and the val windows are given.
 * Exports mg_trainer_text_setup, mg_trainer_text_batch,
 * mg_trainer_text_pp_step, mg_trainer_text_evaluate, mg_trainer_text_eval_split
 * (trainer.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "context.h"
#include "machine.h"
#include "nn/gpt_pipeline.h"
#include "ops/ops_state.h"
#include "status.h"
#include "train/trainer.h"
#include "train/trainer_pp.h"

/* A split of at least T + 1 tokens, with the train split's vocabulary. */
static int check_split(mg_trainer *tr, const mg_tokens *t, const char *split) {
    const mg_train_config *c = &tr->cfg;
    if (mg_tokens_count(t) < c->ctx + 1)
        return mg_error(MG_EINVAL, "%s: the %s split holds %lld tokens, fewer than --ctx + 1 = %lld "
                        "(a window is ctx + 1 tokens): use a longer text or a smaller --ctx",
                        c->data, split, (long long)mg_tokens_count(t), (long long)c->ctx + 1);
    if (mg_tokens_vocab(t) != mg_tokens_vocab(tr->tokens))
        return mg_error(MG_EFORMAT, "%s: the val split's vocabulary (%d) is not the train split's "
                        "(%d)", c->data, mg_tokens_vocab(t), mg_tokens_vocab(tr->tokens));
    return MG_OK;
}

/* The rows of all ranks' windows: the plan's batch placements; with pp the
 * whole of them on every rank (the pipeline cuts its micro-batches). */
static int batch_spec(mg_trainer *tr, int64_t rows, mg_spec *s, const char *what) {
    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(&tr->plan, bp);
    for (int d = 0; tr->gpt_pp && d < tr->mesh->ndim; d++) bp[d] = MG_REPLICATE;
    return mg_spec_make(s, tr->mesh, bp, tr->mesh->ndim, 2, (int64_t[]){rows, tr->cfg.ctx}, what);
}

/* The model of the run: the whole model, or with pp this rank's stages. */
static int build_model(mg_trainer *tr, const mg_lm_config *g) {
    mg_train_config *c = &tr->cfg;
    if (mg_plan_pp_dim(&tr->plan) < 0)
        return mg_model_build_lm(&tr->model, tr->mesh, &tr->plan, g, (uint64_t)c->seed, NULL);
    if (c->grad_accum > 1)
        return mg_error(MG_EINVAL, "--grad-accum %lld with pp: the pipeline accumulates over its "
                        "micro-batches already; give --microbatches %lld instead",
                        (long long)c->grad_accum, (long long)c->grad_accum);
    mg_pp_options *o = malloc(sizeof *o);
    int rc = o ? mg_train_pp_options(c, o) : mg_error(MG_ENOMEM, "train: out of memory");
    if (rc == MG_OK && tr->meta) o->machine_bytes = 0; /* a plan, not this machine's run */
    if (rc == MG_OK)
        rc = mg_lm_pp_new(&tr->gpt_pp, tr->mesh, &tr->plan, o, g, (uint64_t)c->seed, c->batch,
                          &tr->model);
    free(o);
    return rc;
}

/* The token splits (a meta run: their shapes), checked against ctx. */
static int open_splits(mg_trainer *tr) {
    mg_train_config *c = &tr->cfg;
    if (tr->meta) return MG_OK;
    mg_comm *world = tr->mesh->world;
    if (!(tr->tokens = mg_tokens_open(c->data, "train", world))) return mg_last_code();
    int rc = check_split(tr, tr->tokens, "train");
    if (rc == MG_OK && !(tr->val = mg_tokens_open(c->data, "val", world))) rc = mg_last_code();
    if (rc == MG_OK) rc = check_split(tr, tr->val, "val");
    return rc;
}

static int64_t vocab_of(const mg_trainer *tr) {
    return tr->meta ? tr->shapes.vocab : mg_tokens_vocab(tr->tokens);
}

/* The split evaluations read: /val, or /train (mg_trainer_text_eval_split). */
static mg_tokens *eval_split(const mg_trainer *tr) { return tr->eval_train ? tr->tokens : tr->val; }

/* The non-overlapping ctx-windows of that split. */
static int64_t val_windows(const mg_trainer *tr) {
    return tr->meta ? tr->shapes.test_rows : mg_tokens_eval_windows(eval_split(tr), tr->cfg.ctx);
}

int mg_trainer_text_setup(mg_trainer *tr) {
    mg_train_config *c = &tr->cfg;
    int64_t micro = c->batch / c->grad_accum;
    int degree = mg_plan_data_degree(&tr->plan, tr->mesh);
    if (micro < degree)
        return mg_error(MG_EINVAL, "a micro-batch of %lld windows (batch %lld / grad-accum %lld) is "
                        "smaller than the data-parallel degree %d: every data-parallel rank needs a "
                        "row (use a smaller --grad-accum)", (long long)micro, (long long)c->batch,
                        (long long)c->grad_accum, degree);
    int rc = open_splits(tr);
    int64_t windows = rc == MG_OK ? val_windows(tr) : 0;
    if (rc == MG_OK && !tr->meta && windows < mg_trainer_eval_least_rows(tr))
        rc = mg_error(MG_EINVAL, "%s: the val split holds %lld windows of --ctx %lld tokens, fewer "
                      "than the %d its evaluation needs (one per data-parallel rank, of each "
                      "pipeline rank's micro-batch)", c->data, (long long)windows,
                      (long long)c->ctx, mg_trainer_eval_least_rows(tr));
    if (rc != MG_OK) return rc;
    mg_lm_config g = mg_train_config_lm(c, vocab_of(tr));
    mg_trainer_meta_data d = {.vocab = vocab_of(tr), .train_rows = c->batch, .test_rows = windows};
    rc = mg_lm_check(&g, &tr->plan, tr->mesh);
    if (rc == MG_OK)
        rc = tr->fits(c, tr->mesh, &d, (double)mg_lm_param_count(&g),
                      "use a smaller --batch (or more --grad-accum), --ctx, --embd or --layers, "
                      "or more machines");
    if (rc != MG_OK) return rc;
    if (!tr->meta && /* a meta run reads no windows */
        !(tr->starts = calloc((size_t)(windows > c->batch ? windows : c->batch), sizeof *tr->starts)))
        return mg_error(MG_ENOMEM, "train: out of memory for %lld windows", (long long)c->batch);
    if ((rc = build_model(tr, &g)) != MG_OK) return rc;
    tr->have_model = 1;
    rc = batch_spec(tr, micro, &tr->x_spec, "train ids");
    if (rc == MG_OK) rc = batch_spec(tr, micro, &tr->y_spec, "train targets");
    return rc;
}

int mg_trainer_text_batch(mg_trainer *tr, int64_t step, int64_t micro, mg_dtensor **x,
                          mg_dtensor **y) {
    const mg_train_config *c = &tr->cfg;
    int64_t b = c->batch / c->grad_accum;
    if (tr->meta) return mg_trainer_meta_batch(tr, &tr->x_spec, &tr->y_spec, x, y);
    if (micro == 0)
        mg_tokens_train_starts(tr->tokens, (uint64_t)c->seed, step, c->batch, c->ctx, tr->starts);
    return mg_tokens_batch(tr->tokens, tr->starts + micro * b, b, c->ctx, &tr->x_spec, &tr->y_spec,
                           x, y, mg_step_arena());
}

/* x (rows, T) and y, whole on this rank, copied to the host (tr->host). */
static int to_host(mg_trainer *tr, const mg_dtensor *x, const mg_dtensor *y, float **ids,
                   float **targets) {
    const mg_tensor *lx = mg_local(x), *ly = mg_local(y);
    size_t n = (size_t)lx->numel;
    if (2 * n > tr->host_cap) {
        free(tr->host);
        if (!(tr->host = malloc(2 * n * sizeof(float))))
            return mg_error(MG_ENOMEM, "train: out of memory for %zu tokens", 2 * n);
        tr->host_cap = 2 * n;
    }
    mg_backend *be = mg_backend_of(lx);
    be->iface->to_host(be->context, tr->host, lx->data, lx->numel);
    be->iface->to_host(be->context, tr->host + n, ly->data, ly->numel);
    *ids = tr->host;
    *targets = tr->host + n;
    return MG_OK;
}

int mg_trainer_text_pp_step(mg_trainer *tr, const mg_dtensor *x, const mg_dtensor *y, double *loss) {
    float *ids, *targets;
    int rc = to_host(tr, x, y, &ids, &targets);
    return rc == MG_OK ? mg_gpt_pp_step(tr->gpt_pp, ids, targets, loss) : rc;
}

/* The loss of `n` windows from window `first` of /val (a mean over n T). */
static int chunk_loss(mg_trainer *tr, int64_t first, int64_t n, double *loss) {
    mg_spec xs, ys;
    int rc = batch_spec(tr, n, &xs, "val ids");
    if (rc == MG_OK) rc = batch_spec(tr, n, &ys, "val targets");
    if (rc != MG_OK) return rc;
    mg_dtensor *x, *y, *l = NULL;
    if (tr->meta) {
        rc = mg_trainer_meta_batch(tr, &xs, &ys, &x, &y);
    } else {
        mg_tokens_eval_starts(first, n, tr->cfg.ctx, tr->starts);
        rc = mg_tokens_batch(eval_split(tr), tr->starts, n, tr->cfg.ctx, &xs, &ys, &x, &y,
                             mg_step_arena());
    }
    if (rc != MG_OK) return rc;
    if (tr->gpt_pp) {
        float *ids, *targets;
        rc = to_host(tr, x, y, &ids, &targets);
        return rc == MG_OK ? mg_gpt_pp_loss(tr->gpt_pp, ids, targets, n, loss) : rc;
    }
    mg_dtensor *logits = mg_model_forward(&tr->model, x); // logits: (n, T, V)
    if (logits) l = mg_cross_entropy(logits, y);
    mg_tensor *full = l ? mg_full_tensor(l) : NULL;
    if (!full) return mg_last_code() ? mg_last_code() : MG_ENOMEM;
    *loss = full->data[0];
    mg_tensor_free(full);
    return MG_OK;
}

/* The windows an evaluation reads: every one of /val, or the first of them
 * that hold eval-tokens tokens (at least what one chunk needs), so a long
 * split costs a bounded time and every evaluation reads the same text. */
static int64_t eval_windows(const mg_trainer *tr) {
    const mg_train_config *c = &tr->cfg;
    int64_t all = val_windows(tr), bound = c->eval_tokens / c->ctx;
    if (c->eval_tokens <= 0 || bound >= all) return all;
    int64_t least = mg_trainer_eval_least_rows(tr);
    return bound > least ? bound : least;
}

int mg_trainer_text_eval_split(mg_trainer *tr, const char *split) {
    if (strcmp(split, "val") != 0 && strcmp(split, "train") != 0)
        return mg_error(MG_EINVAL, "--split %s: give val or train", split);
    tr->eval_train = strcmp(split, "train") == 0;
    int64_t windows = tr->meta ? 1 << 30 : val_windows(tr);
    if (windows < mg_trainer_eval_least_rows(tr))
        return mg_error(MG_EINVAL, "%s: the %s split holds %lld windows of --ctx %lld tokens, "
                        "fewer than the %d an evaluation needs", tr->cfg.data, split,
                        (long long)windows, (long long)tr->cfg.ctx, mg_trainer_eval_least_rows(tr));
    if (tr->meta) return MG_OK;
    /* room for a chunk's window starts, as setup made for /val */
    int64_t *starts = realloc(tr->starts, sizeof *starts * (size_t)(windows > tr->cfg.batch
                                                                        ? windows : tr->cfg.batch));
    if (!starts) return mg_error(MG_ENOMEM, "eval: out of memory for %lld windows", (long long)windows);
    tr->starts = starts;
    return MG_OK;
}

/* The deterministic mode's evaluation loss: the exact sum of every row's loss
 * the chunks' cross-entropies kept (ops_vocab.c) over their count, whatever
 * the chunks and the mesh; with pp made on the last stage and summed over the
 * stages (0 elsewhere). The training step's sums are left as they were. */
static int exact_eval_loss(mg_trainer *tr, const mg_exact *was, int64_t was_rows, double *loss) {
    mg_ops_state *c = mg_ops();
    *loss = c->det_loss_rows > 0 ? (float)(mg_exact_value(&c->det_loss) / (double)c->det_loss_rows) : 0;
    c->det_loss = *was;
    c->det_loss_rows = was_rows;
    return tr->gpt_pp ? mg_pipeline_sum(mg_gpt_pp_pipeline(tr->gpt_pp), loss, 1) : MG_OK;
}

int mg_trainer_text_evaluate(mg_trainer *tr, mg_train_eval *ev) {
    int64_t windows = eval_windows(tr);
    int64_t chunks = mg_trainer_eval_chunks(tr, windows);
    int prev = mg_set_grad_enabled(0);
    double sum = 0;
    int rc = MG_OK;
    mg_ops_state *ctx = mg_ops();
    mg_exact was = ctx->det_loss;
    int64_t was_rows = ctx->det_loss_rows;
    mg_exact_zero(&ctx->det_loss);
    ctx->det_loss_rows = 0;
    for (int64_t k = 0, first = 0; rc == MG_OK && k < chunks; k++) {
        int64_t n = windows / chunks + (k < windows % chunks); /* sizes differ by one at most */
        double loss = 0;
        rc = chunk_loss(tr, first, n, &loss);
        sum += loss * (double)n;
        first += n;
        mg_step_end();
        if (ev->progress) ev->progress(ev->ctx, first, windows);
    }
    mg_set_grad_enabled(prev);
    ev->loss = sum / (double)windows;
    ev->rows = windows;
    if (rc == MG_OK && mg_get_deterministic()) return exact_eval_loss(tr, &was, was_rows, &ev->loss);
    ctx->det_loss = was;
    ctx->det_loss_rows = was_rows;
    return rc;
}
