/* trainer_eval.c: the evaluation of a training run, without autograd: the
 * MLPs' loss and accuracy on the test split; and the chunks an evaluation
 * takes, which the GPT's val_loss (trainer_text.c) shares.
 * Exports mg_trainer_image_evaluate, mg_trainer_eval_chunks,
 * mg_trainer_eval_least_rows (trainer.h). */
#include "context.h"
#include "dist/redistribute.h"
#include "nn/gpt_pipeline.h"
#include "status.h"
#include "train/trainer.h"
#include "train/trainer_pp.h"

/* Collective, without autograd: the loss and the correct predictions of the
 * model (the pipeline's with pp) on x (N, rows, cols), y (N). */
static int eval_batch(mg_trainer *tr, const mg_dtensor *x, const mg_dtensor *y, double *loss_out,
                      int64_t *correct) {
    if (tr->pp) return mg_train_pp_evaluate(tr->pp, x, y, loss_out, correct);
    mg_dtensor *logits = mg_model_forward(&tr->model, x);
    mg_dtensor *loss = logits ? mg_cross_entropy(logits, y) : NULL;
    if (!loss) return mg_last_code();
    int rc = mg_dtensor_item(loss, loss_out);
    mg_tensor *lf = NULL, *yf = NULL;
    if (rc == MG_OK && !(lf = mg_full_tensor(logits))) rc = mg_last_code();
    if (rc == MG_OK && !(yf = mg_full_tensor(y))) rc = mg_last_code();
    if (rc == MG_OK) {
        // lf: (N, K) logits, yf: (N) labels
        int64_t n = lf->shape[0], K = lf->shape[1];
        for (int64_t i = 0; i < n; i++) {
            const float *row = lf->data + i * K;
            int64_t best = 0;
            for (int64_t k = 1; k < K; k++)
                if (row[k] > row[best]) best = k;
            *correct += (float)best == yf->data[i];
        }
    }
    mg_tensor_free(lf);
    mg_tensor_free(yf);
    return rc;
}

/* The loss and correct predictions of the n test rows from row `first`:
 * specs of n rows, placed as the training batch's. */
static int eval_chunk(mg_trainer *tr, int64_t first, int64_t n, double *loss, int64_t *correct) {
    const int64_t *sample = mg_dataset_sample_shape(tr->test);
    int64_t xs[3] = {n, sample[0], sample[1]};
    mg_spec x_spec, y_spec;
    int rc = mg_spec_make(&x_spec, tr->mesh, tr->x_spec.p, tr->mesh->ndim, 3, xs,
                          "test inputs");
    if (rc == MG_OK)
        rc = mg_spec_make(&y_spec, tr->mesh, tr->y_spec.p, tr->mesh->ndim, 1, &n,
                          "test labels");
    mg_dtensor *x = NULL, *y = NULL;
    if (rc == MG_OK)
        rc = mg_loader_rows(&tr->test_loader, first, n, &x_spec, &y_spec, &x, &y, mg_step_arena());
    return rc == MG_OK ? eval_batch(tr, x, y, loss, correct) : rc;
}

int mg_trainer_eval_least_rows(const mg_trainer *tr) {
    int degree = mg_plan_data_degree(&tr->plan, tr->mesh), pp = mg_plan_pp_dim(&tr->plan);
    return pp < 0 ? degree : degree * tr->mesh->shape[pp];
}

/* As many rows as a training forward takes at once (the batch, or its part
 * of --grad-accum; with pp, the evaluation's micro-batches of the step's
 * largest), so evaluating needs no more memory than a step, which was
 * checked, whatever the split's length. (Chunks of at least a batch held a
 * whole batch's activations on every pipeline rank, nearly twice a step's
 * memory.) */
int64_t mg_trainer_eval_chunks(const mg_trainer *tr, int64_t n) {
    const mg_pipeline *p = tr->pp ? mg_train_pp_pipeline(tr->pp)
                           : tr->gpt_pp ? mg_gpt_pp_pipeline(tr->gpt_pp)
                                        : NULL;
    int64_t chunk = p ? mg_pipeline_eval_rows(p) : tr->cfg.batch / tr->cfg.grad_accum;
    int64_t chunks = (n + chunk - 1) / chunk, least = mg_trainer_eval_least_rows(tr);
    return n / chunks < least ? n / least : chunks; /* every chunk >= least */
}

/* The MLPs': loss and accuracy on the whole test split in chunks
 * (mg_trainer_eval_chunks); nothing without a test split. */
int mg_trainer_image_evaluate(mg_trainer *tr, mg_train_eval *ev) {
    if (!tr->test) return MG_OK;
    int64_t n = mg_dataset_rows(tr->test), chunks = mg_trainer_eval_chunks(tr, n);
    int prev = mg_set_grad_enabled(0);
    double test_loss = 0;
    int64_t correct = 0;
    int rc = MG_OK;
    for (int64_t k = 0, first = 0; rc == MG_OK && k < chunks; k++) {
        int64_t rows = n / chunks + (k < n % chunks); /* sizes differ by one at most */
        double loss = 0;
        rc = eval_chunk(tr, first, rows, &loss, &correct);
        test_loss += loss * (double)rows / (double)n;
        first += rows;
        mg_step_end();
        if (ev->progress) ev->progress(ev->ctx, first, n);
    }
    mg_set_grad_enabled(prev);
    if (rc != MG_OK) return rc;
    ev->loss = test_loss;
    ev->rows = n;
    ev->correct = correct;
    ev->accuracy = n ? (double)correct / (double)n : 0;
    return MG_OK;
}
