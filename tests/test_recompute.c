/* test_recompute.c: mg_recompute (meshgrad_train.h), a block's activations
 * dropped after its forward and made again in backward, on a model of its own
 * built from the public ops: a table E (V, C) tied as embedding and head,
 * blocks x + W2 gelu(W1 ln(x)) each recomputed, a cross-entropy; data
 * parallel over every rank (the batch Shard(0), the parameters Replicate, so
 * the gradients are summed across ranks). Checked:
 * - every gradient (the tied table's two contributions, summed across ranks
 *   once: its sum waits for the embedding's) and the loss are bitwise those
 *   of the same model without recomputation, with a leaf input whose
 *   gradient is asked for, with two micro-batches a step, with a segment
 *   nested in another (it runs as it is), over two steps;
 * - without gradients it is the function itself (no segment, nothing kept);
 * - refusals, each naming what is wrong, the library working after: a
 *   function that records other ops when run again (state of its own), a
 *   tensor made inside used after the segment, a split backward (zero
 *   bubble's, autograd/backward.h) reaching a segment, a NULL function. */
#include <math.h>
#include <string.h>

#include "autograd/backward.h"
#include "meshgrad.h"
#include "meshgrad_train.h"
#include "testutil.h"

enum { V = 11, C = 8, T = 5, L = 3, NPARAM = 1 + 4 * L };

typedef struct {
    mg_mesh *mesh;
    mg_dtensor *p[NPARAM]; /* E, then per block ln weight, ln bias, W1 (2C, C), W2 (C, 2C) */
} model;

static model m;

static mg_dtensor *param(int ndim, const int64_t *shape, uint64_t seed, float scale, float shift) {
    mg_tensor *t = mg_tensor_new(ndim, shape);
    mg_test_fill(mg_tensor_data(t), mg_tensor_numel(t), seed);
    for (int64_t i = 0; i < mg_tensor_numel(t); i++)
        mg_tensor_data(t)[i] = mg_tensor_data(t)[i] * scale + shift;
    mg_placement r = MG_REPLICATE;
    mg_dtensor *d = mg_distribute(m.mesh, t, &r, 1);
    mg_tensor_free(t);
    mg_set_requires_grad(d, 1);
    return d;
}

/* ---- the block ---------------------------------------------------------------------- */

typedef struct {
    int l;
    int nest;      /* the MLP's second half as a segment inside this one */
    int *calls;    /* not NULL: counts the runs, and the second run records another op */
    mg_dtensor **leak; /* not NULL: an internal tensor is handed out */
} block_args;

static mg_dtensor *second_half(void *ctx, const mg_dtensor *h) {
    const block_args *a = ctx;
    return mg_linear(mg_gelu(h), m.p[4 + 4 * a->l], NULL);
}

static mg_dtensor *block(void *ctx, const mg_dtensor *x) {
    const block_args *a = ctx;
    mg_dtensor *const *w = m.p + 1 + 4 * a->l;
    mg_dtensor *h = mg_linear(mg_layer_norm(x, w[0], w[1], 1e-5f), w[2], NULL); // (B, T, 2C)
    if (a->leak) *a->leak = h;
    if (a->calls && ++*a->calls > 1) h = mg_scale(h, 1.0f); /* a different graph the second time */
    mg_dtensor *y = a->nest ? mg_recompute(second_half, (void *)a, sizeof *a, h) : second_half((void *)a, h);
    return mg_add(x, y);
}

typedef enum { PLAIN, RECOMPUTE, NESTED } mode;

/* The loss of ids and targets (B, T); x0 not NULL: the embedding's output,
 * made without gradients, is a leaf that requires grad (a pipeline stage's
 * input: its gradient buffer in the step's memory). */
static mg_dtensor *loss_of(mode how, mg_dtensor *ids, mg_dtensor *targets, mg_dtensor **x0) {
    int was = x0 ? mg_set_grad_enabled(0) : 1;
    mg_dtensor *x = mg_embedding(ids, m.p[0]); // (B, T, C)
    if (x0) { /* a leaf of the step arena, as a pipeline stage's input */
        mg_set_grad_enabled(was);
        mg_set_requires_grad(x, 1);
        *x0 = x;
    }
    for (int l = 0; l < L && x; l++) {
        block_args a = {.l = l, .nest = how == NESTED};
        x = how == PLAIN ? block(&a, x) : mg_recompute(block, &a, sizeof a, x);
    }
    mg_dtensor *logits = x ? mg_linear(x, m.p[0], NULL) : NULL; // (B, T, V): the tied head
    return logits ? mg_cross_entropy(logits, targets) : NULL;
}

static mg_dtensor *batch(int64_t B, uint64_t seed) {
    mg_tensor *t = mg_tensor_new(2, (int64_t[]){B, T});
    mg_test_fill_int(mg_tensor_data(t), mg_tensor_numel(t), seed);
    for (int64_t i = 0; i < mg_tensor_numel(t); i++)
        mg_tensor_data(t)[i] = (float)((int)fabsf(mg_tensor_data(t)[i]) % V);
    mg_placement s0 = MG_SHARD(0);
    mg_dtensor *d = mg_distribute(m.mesh, t, &s0, 1);
    mg_tensor_free(t);
    return d;
}

/* Every parameter's gradient (whole) and the losses of `micro` micro-batches
 * over two steps, into grads[step][param] (the caller frees) and losses. */
static void run(mode how, int micro, int with_leaf, mg_tensor *grads[2][NPARAM], double *losses,
                mg_tensor *leaf_grad[2]) {
    int64_t B = 2 * mg_world_size();
    for (int step = 0; step < 2; step++) {
        mg_dtensor *kept[4] = {NULL}, *x0s[2] = {NULL}; /* the batches: freed after the step */
        for (int k = 0; k < micro; k++) {
            mg_dtensor *ids = batch(B, 100 + 10 * step + k), *y = batch(B, 200 + 10 * step + k);
            mg_dtensor *x0 = NULL;
            mg_dtensor *loss = loss_of(how, ids, y, with_leaf ? &x0 : NULL);
            ck_assert_msg(loss != NULL, "forward: %s", mg_last_error());
            ck_assert_msg(mg_backward(loss) == MG_OK, "backward: %s", mg_last_error());
            mg_tensor *l = mg_full_tensor(loss);
            losses[step * micro + k] = mg_tensor_data(l)[0];
            mg_tensor_free(l);
            kept[2 * k] = ids, kept[2 * k + 1] = y, x0s[k] = x0;
        }
        /* the leaves' gradients read after every micro-batch ran (their memory
         * must not be the recompute arena's, which the next one reuses) */
        for (int k = 0; k < micro && with_leaf && step == 1; k++)
            leaf_grad[k] = mg_full_tensor(mg_grad(x0s[k]));
        for (int i = 0; i < NPARAM; i++) {
            grads[step][i] = mg_full_tensor(mg_grad(m.p[i]));
            ck_assert_msg(grads[step][i] != NULL, "grad %d: %s", i, mg_last_error());
            mg_zero_grad(m.p[i]);
        }
        mg_step_end();
        for (int k = 0; k < 2 * micro; k++) mg_dtensor_free(kept[k]);
    }
}

static int bitwise(mg_tensor *a, mg_tensor *b) {
    return mg_tensor_numel(a) == mg_tensor_numel(b) &&
           memcmp(mg_tensor_data(a), mg_tensor_data(b), (size_t)mg_tensor_numel(a) * sizeof(float)) == 0;
}

static void same_as_plain(mode how, int micro, int with_leaf) {
    mg_tensor *ref[2][NPARAM], *got[2][NPARAM], *ref_leaf[2] = {NULL}, *got_leaf[2] = {NULL};
    double ref_loss[4], got_loss[4];
    run(PLAIN, micro, with_leaf, ref, ref_loss, ref_leaf);
    run(how, micro, with_leaf, got, got_loss, got_leaf);
    int same = memcmp(ref_loss, got_loss, (size_t)(2 * micro) * sizeof(double)) == 0, first = -1;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < NPARAM; i++) {
            if (!bitwise(ref[s][i], got[s][i]) && first < 0) first = s * NPARAM + i;
            mg_tensor_free(ref[s][i]);
            mg_tensor_free(got[s][i]);
        }
    for (int k = 0; k < micro && with_leaf; k++) {
        same &= ref_leaf[k] && got_leaf[k] && bitwise(ref_leaf[k], got_leaf[k]);
        mg_tensor_free(ref_leaf[k]);
        mg_tensor_free(got_leaf[k]);
    }
    mg_assert_all(same && first < 0, "%s, %d micro-batches%s: loss %s, first gradient that differs "
                  "%d (step, parameter)", how == NESTED ? "nested" : "recomputed", micro,
                  with_leaf ? ", leaf input" : "", same ? "same" : "differs", first);
}

START_TEST(test_bitwise_as_kept) { same_as_plain(RECOMPUTE, 1, 0); }
END_TEST

START_TEST(test_bitwise_leaf_input) { same_as_plain(RECOMPUTE, 2, 1); }
END_TEST

START_TEST(test_bitwise_micro_batches) { same_as_plain(RECOMPUTE, 2, 0); }
END_TEST

START_TEST(test_bitwise_nested) { same_as_plain(NESTED, 1, 0); }
END_TEST

/* Without gradients: the function itself, nothing recorded or kept aside. */
START_TEST(test_no_grad_is_plain) {
    mg_dtensor *ids = batch(2 * mg_world_size(), 5), *y = batch(2 * mg_world_size(), 6);
    int was = mg_set_grad_enabled(0);
    mg_dtensor *a = loss_of(PLAIN, ids, y, NULL), *b = loss_of(RECOMPUTE, ids, y, NULL);
    mg_set_grad_enabled(was);
    mg_tensor *ta = mg_full_tensor(a), *tb = mg_full_tensor(b);
    mg_assert_all(ta && tb && bitwise(ta, tb), "evaluation losses differ");
    mg_tensor_free(ta);
    mg_tensor_free(tb);
    mg_dtensor_free(ids);
    mg_dtensor_free(y);
    mg_step_end();
}
END_TEST

/* A one-block loss with the block's args given: the refusals' model. */
static mg_dtensor *one_block(block_args *a, mg_dtensor **inside) {
    mg_dtensor *ids = batch(2 * mg_world_size(), 7), *y = batch(2 * mg_world_size(), 8);
    mg_dtensor *x = mg_embedding(ids, m.p[0]);
    x = mg_recompute(block, a, 0, x); /* ctx kept as given: it lives on the caller's stack */
    if (inside && *inside) x = mg_add(x, mg_narrow(*inside, 2, 0, C)); /* used after the segment */
    mg_dtensor *loss = mg_cross_entropy(mg_linear(x, m.p[0], NULL), y);
    mg_dtensor_free(ids);
    mg_dtensor_free(y);
    return loss;
}

static void zero_all(void) {
    for (int i = 0; i < NPARAM; i++) mg_zero_grad(m.p[i]);
    mg_step_end();
}

START_TEST(test_refusals) {
    int calls = 0;
    block_args a = {.l = 0, .calls = &calls};
    mg_dtensor *loss = one_block(&a, NULL);
    mg_assert_all(loss && mg_backward(loss) != MG_OK &&
                      strstr(mg_last_error(), "recomputed segment, run again, recorded"),
                  "a different graph the second time: %s", mg_last_error());
    zero_all();
    mg_dtensor *inside = NULL;
    block_args b = {.l = 0, .leak = &inside};
    loss = one_block(&b, &inside);
    mg_assert_all(loss && mg_backward(loss) != MG_OK &&
                      strstr(mg_last_error(), "inside a recomputed segment is used after"),
                  "a tensor used after its segment: %s", mg_last_error());
    zero_all();
    mg_assert_all(!mg_recompute(NULL, NULL, 0, m.p[0]) && strstr(mg_last_error(), "NULL"),
                  "NULL function: %s", mg_last_error());
    block_args c = {.l = 0};
    loss = one_block(&c, NULL); /* the library works after */
    mg_assert_all(loss && mg_backward(loss) == MG_OK, "after the refusals: %s", mg_last_error());
    zero_all();
}
END_TEST

/* Zero-bubble's split backward cannot walk a segment: W would need the
 * activations it gave back. */
START_TEST(test_split_backward_refused) {
    block_args a = {.l = 1};
    mg_dtensor *loss = one_block(&a, NULL);
    mg_backward_weights w = {.now = NULL, .n_now = 0};
    mg_assert_all(loss && mg_backward_input(loss, NULL, &w) != MG_OK &&
                      strstr(mg_last_error(), "split backward"),
                  "split backward: %s", mg_last_error());
    zero_all();
}
END_TEST

static Suite *make_suite(void) {
    int w = mg_world_size();
    m.mesh = mg_mesh_new(1, &w);
    m.p[0] = param(2, (int64_t[]){V, C}, 1, 0.5f, 0);
    for (int l = 0; l < L; l++) {
        mg_dtensor **p = m.p + 1 + 4 * l;
        p[0] = param(1, (int64_t[]){C}, 10 + l, 0.1f, 1);
        p[1] = param(1, (int64_t[]){C}, 20 + l, 0.1f, 0);
        p[2] = param(2, (int64_t[]){2 * C, C}, 30 + l, 0.4f, 0);
        p[3] = param(2, (int64_t[]){C, 2 * C}, 40 + l, 0.4f, 0);
    }
    const TTest *tests[] = {test_bitwise_as_kept,       test_bitwise_leaf_input,
                            test_bitwise_micro_batches, test_bitwise_nested,
                            test_no_grad_is_plain,      test_refusals,
                            test_split_backward_refused, NULL};
    return mg_test_suite("recompute", tests);
}

static void teardown(void) {
    for (int i = 0; i < NPARAM; i++) mg_dtensor_free(m.p[i]);
    mg_mesh_free(m.mesh);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, teardown); }
