/* test_train_api.c (MPI): the training API of meshgrad_train.h, but for its
 * checkpoints (test_train_api_ckpt.c):
 * - mg_optim (SGD with and without momentum, AdamW), with and without
 *   clipping, against the library's own optimizer (nn/optim.h) driven as
 *   `meshgrad train` drives it, on a copy of the same parameters with the same
 *   gradients: bitwise equal after every step. The parameters are replicated
 *   (data parallel: their gradients are sums over the ranks), sharded, and one
 *   large enough for the split step of a node's ranks, which must be taken
 *   (shard_dim, one copy) at 2 and 4 ranks; on a 1-D and, at 4 ranks, a 2x2
 *   mesh;
 * - the gradient norm and clipping against plain loops over the full
 *   gradients;
 * - schedules against their formulas (and the recipe's own);
 * - the token loader: its windows are the ones io/tokens.h draws, read from
 *   the text itself, on every placement;
 * - refusals, each with its message: NULL lists, bad names, a tensor twice,
 *   one that does not require grad, is an op's result (also last step's), is
 *   freed (refused, not read), or is Partial, settings
 *   out of range, ranks that disagree, bad batches, a parameter freed while an
 *   optimizer or a checkpoint holds it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "io/tokens.h"
#include "meshgrad.h"
#include "meshgrad_train.h"
#include "nn/optim.h"
#include "status.h"
#include "testutil.h"
#include "train/api.h"

int mg_cli_text2h5(int argc, char **argv); /* src/cli/data_text.c, linked in */

static int world;

/* ---- a small model: three linears, one large enough for the split step ------------ */

enum { N = 6, I = 6, O = 8, O2 = 10, BIG = 512, NP = 4 };
static const char *const names[NP] = {"w", "b", "w2", "big"};
static const int64_t shapes[NP][2] = {{O, I}, {O}, {O2, I}, {BIG, BIG}};

typedef struct {
    mg_mesh *mesh;
    mg_placement place[NP][2], batch[2];
    mg_dtensor *p[NP];
} model;

static mg_dtensor *make(const mg_mesh *mesh, int nd, const int64_t *shape, const mg_placement *p,
                        uint64_t seed) {
    mg_tensor *t = mg_tensor_new(nd, shape);
    mg_test_fill(mg_tensor_data(t), mg_tensor_numel(t), seed);
    mg_dtensor *d = mg_distribute(mesh, t, p, mg_mesh_ndim(mesh));
    mg_tensor_free(t);
    return d;
}

static int ndim_of(int i) { return shapes[i][1] ? 2 : 1; }

/* The parameters on mesh (2-D when two), all from the same data. */
static void model_make(model *m, int two_d) {
    memset(m, 0, sizeof *m);
    int shape2[2] = {2, world / 2};
    m->mesh = two_d ? mg_mesh_new(2, shape2) : mg_mesh_new(1, &world);
    mg_placement R = MG_REPLICATE;
    for (int i = 0; i < NP; i++) m->place[i][0] = m->place[i][1] = R;
    m->place[2][two_d] = MG_SHARD(0); /* w2: tensor parallel on the last mesh dim */
    m->batch[0] = MG_SHARD(0);        /* the batch on the first: data parallel */
    m->batch[1] = R;
    for (int i = 0; i < NP; i++) {
        m->p[i] = make(m->mesh, ndim_of(i), shapes[i], m->place[i], 100 + i);
        mg_assert_all(m->p[i] && mg_set_requires_grad(m->p[i], 1) == MG_OK, "%s: %s", names[i],
                      mg_last_error());
    }
}

static void model_free(model *m) {
    for (int i = 0; i < NP; i++) mg_dtensor_free(m->p[i]);
    mg_mesh_free(m->mesh);
}

/* Forward and backward of step k's loss: sum(linear(x, w, b) * r) +
 * sum(linear(x, w2) * r2) + sum(linear(xb, big) * rb), x batch-sharded. */
static void backward(const model *m, mg_dtensor *const *p, int k) {
    const int64_t xs[2] = {N, I}, ys[2] = {N, O}, y2[2] = {N, O2}, bs[2] = {N, BIG};
    uint64_t s = 1000 + 10 * (uint64_t)k;
    mg_dtensor *x = make(m->mesh, 2, xs, m->batch, s), *xb = make(m->mesh, 2, bs, m->batch, s + 1);
    mg_dtensor *r = make(m->mesh, 2, ys, m->batch, s + 2), *r2 = make(m->mesh, 2, y2, m->batch, s + 3);
    mg_dtensor *rb = make(m->mesh, 2, bs, m->batch, s + 4);
    mg_dtensor *loss = mg_add(mg_add(mg_sum(mg_mul(mg_linear(x, p[0], p[1]), r)),
                                     mg_sum(mg_mul(mg_linear(x, p[2], NULL), r2))),
                              mg_sum(mg_mul(mg_linear(xb, p[3], NULL), rb)));
    mg_assert_all(loss && mg_backward(loss) == MG_OK, "step %d: %s", k, mg_last_error());
    mg_dtensor *all[5] = {x, xb, r, r2, rb};
    for (int i = 0; i < 5; i++) mg_dtensor_free(all[i]);
}

typedef struct {
    mg_optim_kind kind;
    float momentum, weight_decay, beta2;
    double clip; /* 0: none */
    float lr;
} optim_case;

/* The case with the API and with nn/optim.h as cli/train.c drives it, three
 * steps from the same parameters: every parameter bitwise equal after each. */
static void check_case(const optim_case *c, int two_d) {
    model pub, ref;
    model_make(&pub, two_d);
    model_make(&ref, two_d);
    mg_optim *o = c->kind == MG_OPTIM_SGD
                      ? mg_optim_new_sgd(NP, pub.p, names, c->momentum, c->weight_decay)
                      : mg_optim_new_adamw(NP, pub.p, names, 0.9f, c->beta2, 1e-8f, c->weight_decay);
    mg_assert_all(o != NULL, "mg_optim_new: %s", mg_last_error());
    /* the library's own: a table of the same values (params_add draws, then the copy) */
    mg_param_table t = {0};
    for (int i = 0; i < NP; i++) {
        int rc = mg_params_add(&t, ref.mesh, names[i], ndim_of(i), shapes[i], ref.place[i],
                               ref.place[i], 7, -1, 1);
        mg_assert_all(rc == i, "params_add: %s", mg_last_error());
        const mg_tensor *from = mg_local(ref.p[i]);
        memcpy(mg_tensor_data((mg_tensor *)mg_local(t.p[i].value)), mg_tensor_data((mg_tensor *)from),
               (size_t)mg_tensor_numel(from) * sizeof(float));
    }
    mg_optimizer ro;
    mg_optimizer_init(&ro, c->kind, c->momentum, c->weight_decay);
    ro.beta2 = c->kind == MG_OPTIM_ADAMW ? c->beta2 : ro.beta2;
    mg_assert_all(mg_optimizer_add_state(&ro, &t) == MG_OK, "add_state: %s", mg_last_error());
    mg_dtensor *tp[NP];
    for (int i = 0; i < NP; i++) tp[i] = t.p[i].value;
    for (int k = 0; k < 3; k++) {
        double n1 = 0, n2 = 0;
        backward(&pub, pub.p, k);
        if (c->clip > 0) mg_assert_all(mg_optim_clip_grads(o, c->clip, &n1) == MG_OK, "clip: %s",
                                       mg_last_error());
        mg_assert_all(mg_optim_step(o, c->lr) == MG_OK, "step: %s", mg_last_error());
        mg_assert_all(mg_optim_zero_grad(o) == MG_OK, "zero_grad: %s", mg_last_error());
        mg_step_end();
        backward(&ref, tp, k);
        mg_params_collect_grads(&t);
        if (c->clip > 0) mg_assert_all(mg_clip_grad_norm(&t, c->clip, &n2) == MG_OK, "%s",
                                       mg_last_error());
        mg_assert_all(mg_optimizer_step(&ro, &t, c->lr) == MG_OK, "%s", mg_last_error());
        mg_assert_all(mg_params_zero_grads(&t) == MG_OK, "%s", mg_last_error());
        mg_step_end();
        mg_assert_all(n1 == n2, "step %d: norm %.17g, the library's %.17g", k, n1, n2);
        for (int i = 0; i < NP; i++) {
            mg_tensor *a = mg_full_tensor(pub.p[i]), *b = mg_full_tensor(tp[i]);
            int same = a && b && !memcmp(mg_tensor_data(a), mg_tensor_data(b),
                                         (size_t)mg_tensor_numel(b) * sizeof(float));
            mg_assert_all(same, "%s step %d: %s differs from the library's optimizer",
                          mg_optim_kind_name(c->kind), k, names[i]);
            mg_tensor_free(a);
            mg_tensor_free(b);
        }
    }
    /* the large replicated parameter took the split step of a node's ranks */
    const mg_param *big = &o->params.p[3];
    int split = world > 1 ? big->shard_dim >= 0 && big->one_copy : big->shard_dim < 0;
    mg_assert_all(split && big->shard_dim == t.p[3].shard_dim,
                  "big: shard_dim %d (the library's %d), one copy %d at %d ranks", big->shard_dim,
                  t.p[3].shard_dim, big->one_copy, world);
    mg_optim_free(o);
    mg_params_free(&t);
    model_free(&pub);
    model_free(&ref);
}

static const optim_case cases[] = {
    {MG_OPTIM_SGD, 0.9f, 0.01f, 0, 0, 0.05f},   {MG_OPTIM_SGD, 0.0f, 0.0f, 0, 0, 0.1f},
    {MG_OPTIM_ADAMW, 0, 0.1f, 0.95f, 0, 1e-2f}, {MG_OPTIM_ADAMW, 0, 0.01f, 0.999f, 5.0, 1e-2f},
    {MG_OPTIM_SGD, 0.9f, 0.0f, 0, 3.0, 0.05f},
};

START_TEST(optimizers_match_the_library) {
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        check_case(&cases[c], 0);
        if (world == 4) check_case(&cases[c], 1);
    }
}
END_TEST

/* ---- norm and clipping against plain loops ----------------------------------------------- */

START_TEST(clipping_matches_plain_loops) {
    model m;
    model_make(&m, 0);
    mg_optim *o = mg_optim_new_sgd(NP, m.p, names, 0, 0);
    mg_assert_all(o != NULL, "%s", mg_last_error());
    backward(&m, m.p, 0);
    mg_tensor *g[NP];
    double sq = 0;
    for (int i = 0; i < NP; i++) {
        g[i] = mg_full_tensor(mg_grad(m.p[i]));
        for (int64_t e = 0; e < mg_tensor_numel(g[i]); e++)
            sq += (double)mg_tensor_data(g[i])[e] * mg_tensor_data(g[i])[e];
    }
    double want = sqrt(sq), norm = 0, before = 0;
    mg_assert_all(mg_optim_grad_norm(o, &norm) == MG_OK, "%s", mg_last_error());
    mg_assert_all(fabs(norm - want) <= 1e-6 * want, "norm %.17g, loops %.17g", norm, want);
    /* above the norm: nothing changes */
    mg_assert_all(mg_optim_clip_grads(o, 2 * want, &before) == MG_OK, "%s", mg_last_error());
    for (int i = 0; i < NP; i++) {
        mg_tensor *h = mg_full_tensor(mg_grad(m.p[i]));
        mg_assert_all(!memcmp(mg_tensor_data(h), mg_tensor_data(g[i]),
                              (size_t)mg_tensor_numel(h) * sizeof(float)),
                      "%s changed by a clip above its norm", names[i]);
        mg_tensor_free(h);
    }
    /* a third of the norm: each gradient scaled by max / (norm + 1e-6) */
    mg_assert_all(mg_optim_clip_grads(o, want / 3, &before) == MG_OK, "%s", mg_last_error());
    mg_assert_all(fabs(before - want) <= 1e-6 * want, "norm before %.17g, loops %.17g", before, want);
    float coef = (float)((want / 3) / (before + 1e-6));
    for (int i = 0; i < NP; i++) {
        mg_tensor *h = mg_full_tensor(mg_grad(m.p[i]));
        int64_t n = mg_tensor_numel(h);
        float *expect = malloc((size_t)n * sizeof *expect);
        for (int64_t e = 0; e < n; e++) expect[e] = mg_tensor_data(g[i])[e] * coef;
        char msg[256] = "";
        mg_assert_all(mg_test_close(mg_tensor_data(h), expect, n, 1e-6, 1e-9, msg, sizeof msg),
                      "%s clipped: %s", names[i], msg);
        free(expect);
        mg_tensor_free(h);
        mg_tensor_free(g[i]);
    }
    mg_assert_all(mg_optim_grad_norm(o, &norm) == MG_OK && fabs(norm - want / 3) <= 1e-5 * want,
                  "norm after clipping %.9g, want %.9g", norm, want / 3);
    mg_step_end();
    mg_optim_free(o);
    model_free(&m);
}
END_TEST

/* ---- schedules ------------------------------------------------------------------------ */

START_TEST(schedules_follow_their_formulas) {
    const double lr = 1e-3, lr_min = 1e-4;
    mg_schedule *cos_ = mg_schedule_new_cosine(lr, lr_min, 50, 1000);
    mg_schedule *con = mg_schedule_new_constant(0.3, 4), *flat = mg_schedule_new_constant(0.3, 0);
    ck_assert_msg(cos_ && con && flat, "%s", mg_last_error());
    for (int64_t s = 0; s < 1100; s++) {
        double p = s < 50 ? 0 : fmin(1.0, (double)(s - 50) / 950);
        double want = s < 50 ? lr * (double)(s + 1) / 50 : lr_min + (lr - lr_min) * 0.5 * (1 + cos(M_PI * p));
        double recipe = s < 50 ? lr * (s + 1) / 50 : 0.1 * lr + 0.45 * lr * (1 + cos(M_PI * p));
        double got = mg_schedule_lr(cos_, s);
        ck_assert_msg(got == want, "cosine step %lld: %.17g, formula %.17g", (long long)s, got, want);
        ck_assert_msg(fabs(got - recipe) <= 1e-15, "step %lld: %.17g, the recipe %.17g",
                      (long long)s, got, recipe);
        ck_assert_msg(mg_schedule_lr(con, s) == (s < 4 ? 0.3 * (double)(s + 1) / 4 : 0.3),
                      "constant step %lld: %.17g", (long long)s, mg_schedule_lr(con, s));
        ck_assert(mg_schedule_lr(flat, s) == 0.3);
    }
    ck_assert(mg_schedule_lr(cos_, 1000) == lr_min && fabs(mg_schedule_lr(cos_, 50) - lr) < 1e-18);
    ck_assert(isnan(mg_schedule_lr(cos_, -1)) && strstr(mg_last_error(), "negative"));
    ck_assert(isnan(mg_schedule_lr(NULL, 3)) && strstr(mg_last_error(), "NULL"));
    struct {
        mg_schedule *s;
        const char *says;
    } bad[] = {
        {mg_schedule_new_cosine(1e-3, 2e-3, 5, 10), "lr_min is 0.002"},
        {mg_schedule_new_cosine(1e-3, 0, 10, 10), "total > warmup"},
        {mg_schedule_new_cosine(NAN, 0, 0, 10), "lr is nan"},
        {mg_schedule_new_constant(-1, 0), "lr is -1"},
        {mg_schedule_new_constant(1, -2), "warmup is -2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!bad[i].s, "bad schedule %zu made", i);
    /* the messages, each from its own call */
    mg_schedule_new_cosine(1e-3, 2e-3, 5, 10);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), bad[0].says));
    mg_schedule_new_cosine(1e-3, 0, 10, 10);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), bad[1].says));
    mg_schedule_new_constant(1, -2);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), bad[4].says));
    mg_schedule_free(cos_);
    mg_schedule_free(con);
    mg_schedule_free(flat);
}
END_TEST

/* ---- refusals of the optimizer -------------------------------------------------------------- */

/* The call returned `ok` (a NULL or non-zero status when 0) with a message
 * holding `says`, on every rank. */
#define REFUSED(failed, says)                                                                  \
    mg_assert_all((failed) && strstr(mg_last_error(), says), "%s: got \"%s\", want \"%s\"", \
                  #failed, mg_last_error(), says)

START_TEST(optimizer_refusals) {
    model m;
    model_make(&m, 0);
    const char *dup[NP] = {"w", "b", "w", "big"}, *bad[NP] = {"w", "b/x", "w2", "big"};
    mg_dtensor *twice[NP] = {m.p[0], m.p[1], m.p[0], m.p[3]};
    REFUSED(!mg_optim_new_sgd(NP, NULL, names, 0, 0), "params NULL");
    REFUSED(!mg_optim_new_sgd(NP, m.p, NULL, 0, 0), "names NULL");
    REFUSED(!mg_optim_new_adamw(0, m.p, names, 0.9f, 0.99f, 1e-8f, 0), "0 parameters");
    REFUSED(!mg_optim_new_sgd(NP, m.p, dup, 0, 0), "\"w\" is given twice");
    REFUSED(!mg_optim_new_sgd(NP, m.p, bad, 0, 0), "\"b/x\" is not valid");
    REFUSED(!mg_optim_new_sgd(NP, twice, names, 0, 0), "are the same tensor");
    REFUSED(!mg_optim_new_sgd(NP, m.p, names, -0.5f, 0), "momentum is -0.5");
    REFUSED(!mg_optim_new_adamw(NP, m.p, names, 1.0f, 0.99f, 1e-8f, 0), "beta1 is 1");
    REFUSED(!mg_optim_new_adamw(NP, m.p, names, 0.9f, 0.99f, -1e-8f, 0), "eps is -1e-08");
    REFUSED(!mg_optim_new_adamw(NP, m.p, names, 0.9f, 0.99f, 1e-8f, NAN), "weight_decay is nan");
    mg_set_requires_grad(m.p[1], 0);
    REFUSED(!mg_optim_new_sgd(NP, m.p, names, 0, 0), "\"b\" does not require grad");
    mg_set_requires_grad(m.p[1], 1);
    mg_dtensor *op[NP] = {m.p[0], mg_scale(m.p[1], 2), m.p[2], m.p[3]};
    REFUSED(!mg_optim_new_sgd(NP, op, names, 0, 0), "\"b\" is the result of an op");
    mg_placement partial = MG_PARTIAL_SUM;
    mg_dtensor *part[NP] = {m.p[0], make(m.mesh, 1, shapes[1], &partial, 3), m.p[2], m.p[3]};
    mg_set_requires_grad(part[1], 1);
    REFUSED(!mg_optim_new_sgd(NP, part, names, 0, 0), "Partial");
    mg_dtensor_free(part[1]);
    /* a freed tensor is refused without being read (it was read: a crash) */
    REFUSED(!mg_optim_new_sgd(NP, part, names, 0, 0), "\"b\" is the result of an op, freed at "
            "mg_step_end(), or a tensor freed already");
    mg_ckpt *gone = mg_ckpt_new();
    REFUSED(mg_ckpt_add(gone, "b", part[1]) != MG_OK, "or a tensor freed already");
    mg_step_end();
    /* last step's result, as a freed one */
    REFUSED(!mg_optim_new_sgd(NP, op, names, 0, 0), "\"b\" is the result of an op");
    REFUSED(mg_ckpt_add(gone, "b", op[1]) != MG_OK, "\"b\" is the result of an op");
    mg_ckpt_free(gone);

    mg_optim *o = mg_optim_new_sgd(NP, m.p, names, 0.9f, 0);
    mg_assert_all(o != NULL, "%s", mg_last_error());
    REFUSED(mg_optim_step(o, NAN) != MG_OK, "the learning rate is nan");
    REFUSED(mg_optim_step(NULL, 0.1f) != MG_OK, "the optimizer is NULL");
    REFUSED(mg_optim_clip_grads(o, 0, NULL) != MG_OK, "max_norm is 0");
    REFUSED(mg_optim_grad_norm(o, NULL) != MG_OK, "norm is NULL");
    REFUSED(mg_optim_zero_grad(NULL) != MG_OK, "NULL");
    if (world > 1) { /* a learning rate that differs on one rank: refused everywhere */
        REFUSED(mg_optim_step(o, mg_rank() == 1 ? 0.2f : 0.1f) != MG_OK, "the ranks disagree");
        const char *other[NP] = {"w", "b", "w2", mg_rank() == 1 ? "large" : "big"};
        REFUSED(!mg_optim_new_sgd(NP, m.p, other, 0, 0), "the ranks disagree");
    }
    /* a parameter an optimizer or a checkpoint holds is not freed under it
     * (its next step read freed memory) */
    mg_dtensor_free(m.p[0]);
    REFUSED(mg_last_code() == MG_ESTATE, "optimizer(s) or checkpoint(s) still hold");
    mg_assert_all(mg_optim_zero_grad(o) == MG_OK, "%s", mg_last_error());
    mg_ckpt *ck = mg_ckpt_new();
    mg_assert_all(mg_ckpt_add(ck, "w", m.p[0]) == MG_OK, "%s", mg_last_error());
    /* nor an optimizer a checkpoint holds (its save read freed state) */
    mg_assert_all(mg_ckpt_set_optim(ck, o) == MG_OK, "%s", mg_last_error());
    mg_optim_free(o);
    REFUSED(mg_last_code() == MG_ESTATE, "1 checkpoint(s) still hold this optimizer");
    mg_assert_all(mg_optim_zero_grad(o) == MG_OK, "the optimizer was freed: %s", mg_last_error());
    mg_assert_all(mg_ckpt_set_optim(ck, NULL) == MG_OK, "%s", mg_last_error());
    mg_optim_free(o);
    mg_dtensor_free(m.p[0]);
    REFUSED(mg_last_code() == MG_ESTATE, "1 optimizer(s) or checkpoint(s) still hold");
    mg_ckpt_free(ck);
    for (int i = 0; i < NP; i++) mg_dtensor_free(m.p[i]); /* now every parameter goes */
    mg_assert_all(mg_dtensor_live_on(m.mesh) == 0, "%d tensors left", mg_dtensor_live_on(m.mesh));
    mg_mesh_free(m.mesh);
}
END_TEST

/* ---- the token loader --------------------------------------------------------------------- */

enum { TEXT = 3000 };
static unsigned char text[TEXT];
static const char *data_path = "test_train_api.h5";

static void make_data_set(void) {
    for (int i = 0; i < TEXT; i++) text[i] = (unsigned char)((i * 13 + i / 256) % 256);
    if (mg_rank() == 0) {
        FILE *f = fopen("test_train_api.txt", "wb");
        fwrite(text, 1, TEXT, f);
        fclose(f);
        remove(data_path);
        char *argv[] = {"text2h5", "test_train_api.txt", (char *)data_path, NULL};
        if (mg_cli_text2h5(3, argv) != 0) fprintf(stderr, "text2h5: %s\n", mg_last_error());
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* x and y, gathered, are the windows at starts[] of the text from `base`. */
static int windows_are(mg_dtensor *x, mg_dtensor *y, const int64_t *starts, int64_t B, int64_t T,
                       int64_t base) {
    mg_tensor *fx = mg_full_tensor(x), *fy = mg_full_tensor(y);
    int ok = fx && fy && mg_tensor_numel(fx) == B * T;
    for (int64_t r = 0; ok && r < B; r++)
        for (int64_t j = 0; j < T; j++) {
            ok &= mg_tensor_data(fx)[r * T + j] == (float)text[base + starts[r] + j];
            ok &= mg_tensor_data(fy)[r * T + j] == (float)text[base + starts[r] + j + 1];
        }
    mg_tensor_free(fx);
    mg_tensor_free(fy);
    return ok;
}

/* 1 when text holds no '-' before a digit (a size or count printed negative). */
static int no_negative_number(const char *text) {
    for (const char *c = strchr(text, '-'); c; c = strchr(c + 1, '-'))
        if (c[1] >= '0' && c[1] <= '9') return 0;
    return 1;
}

START_TEST(token_loader_windows) {
    make_data_set();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    mg_token_loader *tr = mg_token_loader_open(mesh, data_path, "train");
    mg_token_loader *va = mg_token_loader_open(mesh, data_path, "val");
    mg_assert_all(tr && va, "open: %s", mg_last_error());
    mg_tokens *ref = mg_tokens_open(data_path, "train", mesh->world);
    int64_t ntrain = mg_token_loader_count(tr);
    mg_assert_all(ntrain == (int64_t)(0.9 * TEXT) && mg_token_loader_vocab(tr) == 256,
                  "%lld train tokens, vocab %d", (long long)ntrain, mg_token_loader_vocab(tr));
    enum { B = 5, T = 7 };
    mg_placement ps[3] = {MG_SHARD(0), MG_SHARD(1), MG_REPLICATE};
    for (int k = 0; k < 3; k++)
        for (int64_t step = 0; step < 3; step++) {
            int64_t starts[B];
            mg_tokens_train_starts(ref, 42, step, B, T, starts);
            mg_dtensor *x, *y;
            mg_assert_all(mg_token_loader_batch(tr, 42, step, B, T, &ps[k], 1, &x, &y) == MG_OK,
                          "batch: %s", mg_last_error());
            mg_assert_all(windows_are(x, y, starts, B, T, 0), "placement %d step %lld: the batch "
                          "is not the windows io/tokens.h draws", k, (long long)step);
            int64_t first = 2 + step, es[B];
            mg_tokens_eval_starts(first, B, T, es);
            mg_assert_all(mg_token_loader_eval_batch(va, first, B, T, &ps[k], 1, &x, &y) == MG_OK,
                          "eval batch: %s", mg_last_error());
            mg_assert_all(windows_are(x, y, es, B, T, ntrain), "placement %d: evaluation windows "
                          "%lld.. are not at k T of /val", k, (long long)first);
            mg_step_end();
        }
    int64_t nval = mg_token_loader_count(va);
    mg_assert_all(mg_token_loader_eval_windows(va, T) == (nval - 1) / T, "eval windows");
    /* refusals */
    mg_dtensor *x, *y;
    mg_placement p = MG_SHARD(0), partial = MG_PARTIAL_SUM, two[2] = {p, p};
    int64_t w = (nval - 1) / T;
    REFUSED(mg_token_loader_batch(tr, 1, 0, 0, T, &p, 1, &x, &y) != MG_OK && !x && !y, "B >= 1");
    REFUSED(mg_token_loader_batch(tr, 1, 0, B, ntrain, &p, 1, &x, &y) != MG_OK, "does not fit");
    /* T + 1 overflowed: the window was taken to fit, and a negative size was printed */
    REFUSED(mg_token_loader_batch(tr, 1, 0, B, INT64_MAX, &p, 1, &x, &y) != MG_OK && !x && !y,
            "a window of T = 9223372036854775807 tokens and the one after them does not fit");
    mg_assert_all(no_negative_number(mg_last_error()), "a negative number in \"%s\"",
                  mg_last_error());
    REFUSED(mg_token_loader_batch(tr, 1, 0, INT64_MAX, T, &p, 1, &x, &y) != MG_OK && !x && !y,
            "is more than any memory holds: give a smaller B");
    mg_assert_all(no_negative_number(mg_last_error()), "a negative number in \"%s\"",
                  mg_last_error());
    REFUSED(mg_token_loader_batch(tr, 1, -1, B, T, &p, 1, &x, &y) != MG_OK, "step -1");
    REFUSED(mg_token_loader_batch(tr, 1, 0, B, T, &partial, 1, &x, &y) != MG_OK, "Partial");
    REFUSED(mg_token_loader_batch(tr, 1, 0, B, T, two, 2, &x, &y) != MG_OK, "placement");
    REFUSED(mg_token_loader_batch(NULL, 1, 0, B, T, &p, 1, &x, &y) != MG_OK, "NULL");
    REFUSED(mg_token_loader_eval_batch(va, w - B + 1, B, T, &p, 1, &x, &y) != MG_OK,
            "are not among the");
    if (world > 1)
        REFUSED(mg_token_loader_batch(tr, 1, mg_rank() == 1, B, T, &p, 1, &x, &y) != MG_OK,
                "the ranks disagree");
    REFUSED(!mg_token_loader_open(mesh, data_path, "test"), "split 'test'");
    REFUSED(!mg_token_loader_open(mesh, "no-such-file.h5", "train"), "no-such-file.h5");
    REFUSED(!mg_token_loader_open(NULL, data_path, "train"), "the mesh is NULL");
    REFUSED(mg_token_loader_count(NULL) == -1 && mg_token_loader_eval_windows(va, 0) == -1,
            "T is 0");
    mg_tokens_close(ref);
    mg_token_loader_close(tr);
    mg_token_loader_close(va);
    /* a second close does nothing (it aborted in free(), then hung under mpirun); a
     * loader opened since is not taken for the one closed */
    mg_token_loader *again = mg_token_loader_open(mesh, data_path, "train");
    mg_assert_all(again != NULL, "open again: %s", mg_last_error());
    mg_token_loader_close(tr);
    mg_token_loader_close(va);
    mg_token_loader_close(NULL);
    mg_assert_all(mg_token_loader_count(again) == ntrain, "the loader opened after the closes: "
                  "%lld tokens", (long long)mg_token_loader_count(again));
    mg_token_loader_close(again);
    mg_token_loader_close(again);
    mg_mesh_free(mesh);
}
END_TEST

static Suite *make_suite(void) {
    world = mg_world_size();
    const TTest *tests[] = {optimizers_match_the_library, clipping_matches_plain_loops,
                            schedules_follow_their_formulas, optimizer_refusals,
                            token_loader_windows, NULL};
    return mg_test_suite("train_api", tests);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
