/* test_train.c: the training pieces of src/nn against naive references, at 1, 2
 * and 4 ranks: LR schedules, SGD with momentum and AdamW on sharded and
 * replicated parameters (a few steps vs a host loop), the global gradient norm
 * and clipping (sharded == replicated == naive), parallel plan checks, the
 * models' forward pass under each plan vs a host MLP, the training
 * configuration (flags, config files, their errors), and a training state
 * saved from one plan and loaded under another (nn/train_state.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/param.h"
#include "nn/plan.h"
#include "train/config.h"
#include "nn/train_state.h"
#include "testutil.h"

static int world;

/* ---- schedules ------------------------------------------------------------ */

START_TEST(test_schedule_constant_warmup) {
    mg_lr_schedule s = {MG_SCHEDULE_CONSTANT, 0.1, 4, 100, 0};
    ck_assert_double_eq_tol(mg_lr_at(&s, 0), 0.025, 1e-12);
    ck_assert_double_eq_tol(mg_lr_at(&s, 1), 0.05, 1e-12);
    ck_assert_double_eq_tol(mg_lr_at(&s, 3), 0.1, 1e-12);
    ck_assert_double_eq_tol(mg_lr_at(&s, 4), 0.1, 1e-12);
    ck_assert_double_eq_tol(mg_lr_at(&s, 99), 0.1, 1e-12);
    mg_lr_schedule none = {MG_SCHEDULE_CONSTANT, 0.3, 0, 10, 0};
    ck_assert_double_eq_tol(mg_lr_at(&none, 0), 0.3, 1e-12);
}
END_TEST

START_TEST(test_schedule_cosine) {
    mg_lr_schedule s = {MG_SCHEDULE_COSINE, 1.0, 10, 110, 0};
    ck_assert_double_eq_tol(mg_lr_at(&s, 0), 0.1, 1e-12);   /* warmup (s+1)/10 */
    ck_assert_double_eq_tol(mg_lr_at(&s, 9), 1.0, 1e-12);   /* end of warmup */
    ck_assert_double_eq_tol(mg_lr_at(&s, 10), 1.0, 1e-12);  /* cos(0) */
    ck_assert_double_eq_tol(mg_lr_at(&s, 60), 0.5, 1e-12);  /* halfway */
    ck_assert_double_eq_tol(mg_lr_at(&s, 35), 0.5 * (1 + cos(M_PI * 0.25)), 1e-12);
    ck_assert_double_eq_tol(mg_lr_at(&s, 110), 0.0, 1e-12); /* past the end: 0 */
    for (int64_t i = 11; i < 110; i++) ck_assert(mg_lr_at(&s, i) < mg_lr_at(&s, i - 1));
    mg_lr_schedule c = {MG_SCHEDULE_COSINE, 2.0, 0, 4, 0};
    ck_assert_double_eq_tol(mg_lr_at(&c, 0), 2.0, 1e-12);
    ck_assert_double_eq_tol(mg_lr_at(&c, 2), 1.0, 1e-12);
}
END_TEST

/* ---- optimizers ----------------------------------------------------------- */

/* The 1-D and 2-D placements to try on a (R, C) parameter for this world size. */
typedef struct {
    int ndim, shape[2];
    mg_placement p[2];
} layout;

static int layouts(layout *out) {
    int n = 0;
    out[n++] = (layout){1, {world, 0}, {MG_REPLICATE}};
    out[n++] = (layout){1, {world, 0}, {MG_SHARD(0)}};
    out[n++] = (layout){1, {world, 0}, {MG_SHARD(1)}};
    if (world % 2 == 0) {
        out[n++] = (layout){2, {2, world / 2}, {MG_SHARD(0), MG_REPLICATE}};
        out[n++] = (layout){2, {2, world / 2}, {MG_REPLICATE, MG_SHARD(1)}};
        out[n++] = (layout){2, {2, world / 2}, {MG_SHARD(0), MG_SHARD(1)}};
        out[n++] = (layout){2, {2, world / 2}, {MG_SHARD(0), MG_SHARD(0)}};
    }
    return n;
}

/* The mesh of layout l (asserted made), and its name ("mesh 2x2 [S(0), R]") in name. */
static mg_mesh *layout_mesh(const layout *l, char *name, size_t len) {
    char pb[64];
    mg_placements_format(pb, sizeof pb, l->p, l->ndim);
    if (l->ndim == 2)
        snprintf(name, len, "mesh %dx%d %s", l->shape[0], l->shape[1], pb);
    else
        snprintf(name, len, "mesh %d %s", l->shape[0], pb);
    mg_mesh *mesh = mg_mesh_new(l->ndim, l->shape);
    ck_assert_msg(mesh, "%s", mg_last_error());
    return mesh;
}

static void sgd_ref(double *p, const float *g, double *buf, int64_t n, double lr, double mom,
                    double wd, int first) {
    for (int64_t i = 0; i < n; i++) {
        double d = g[i] + wd * p[i];
        if (mom != 0) {
            buf[i] = first ? d : mom * buf[i] + d;
            d = buf[i];
        }
        p[i] -= lr * d;
    }
}

static void adamw_ref(double *p, const float *g, double *m, double *v, int64_t n, double lr,
                      double wd, int64_t t) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    double bc1 = 1 - pow(b1, (double)t), bc2 = 1 - pow(b2, (double)t);
    for (int64_t i = 0; i < n; i++) {
        p[i] *= 1 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
        p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
}

/* Runs `steps` updates of a (5, 3) parameter under every layout and compares
 * its full value with the host reference. */
static void check_optimizer(mg_optim_kind kind, double lr, double momentum, double wd) {
    enum { R = 5, C = 3, N = R * C, STEPS = 4 };
    const int64_t shape[2] = {R, C};
    layout ls[8];
    int nl = layouts(ls);
    for (int li = 0; li < nl; li++) {
        char name[96];
        mg_mesh *mesh = layout_mesh(&ls[li], name, sizeof name);
        mg_param_table t = {0};
        ck_assert_int_eq(mg_params_add(&t, mesh, "w", 2, shape, ls[li].p, ls[li].p, 7, -1, 1), 0);
        mg_optimizer opt;
        mg_optimizer_init(&opt, kind, (float)momentum, (float)wd);
        ck_assert_int_eq(mg_optimizer_add_state(&opt, &t), MG_OK);

        mg_tensor *init = mg_full_tensor(t.p[0].value);
        double p[N], s0[N] = {0}, s1[N] = {0};
        for (int i = 0; i < N; i++) p[i] = init->data[i];
        mg_tensor_free(init);
        for (int k = 1; k <= STEPS; k++) {
            float g[N];
            mg_test_fill(g, N, 100 + k);
            mg_tensor *gt = mg_tensor_from_data(2, shape, g);
            t.p[0].grad = mg_distribute(mesh, gt, ls[li].p, ls[li].ndim);
            ck_assert_msg(t.p[0].grad, "%s", mg_last_error());
            ck_assert_int_eq(mg_optimizer_step(&opt, &t, (float)lr), MG_OK);
            mg_dtensor_free(t.p[0].grad);
            t.p[0].grad = NULL;
            mg_tensor_free(gt);
            if (kind == MG_OPTIM_SGD)
                sgd_ref(p, g, s0, N, lr, momentum, opt.weight_decay, k == 1);
            else
                adamw_ref(p, g, s0, s1, N, lr, opt.weight_decay, k);
        }
        mg_tensor *got = mg_full_tensor(t.p[0].value);
        float want[N];
        for (int i = 0; i < N; i++) want[i] = (float)p[i];
        char msg[256] = "";
        int ok = mg_test_close(got->data, want, N, 1e-5, 1e-6, msg, sizeof msg);
        mg_assert_all(ok, "%s %s: %s", mg_optim_kind_name(kind), name, msg);
        mg_tensor_free(got);
        mg_params_free(&t);
        mg_mesh_free(mesh);
    }
}

START_TEST(test_sgd_momentum) { check_optimizer(MG_OPTIM_SGD, 0.1, 0.9, 0.01); }
END_TEST

START_TEST(test_sgd_plain) { check_optimizer(MG_OPTIM_SGD, 0.05, 0.0, 0.0); }
END_TEST

START_TEST(test_adamw) { check_optimizer(MG_OPTIM_ADAMW, 0.01, 0.0, -1); }
END_TEST

START_TEST(test_optimizer_defaults) {
    mg_optimizer o;
    mg_optimizer_init(&o, MG_OPTIM_ADAMW, 0, -1);
    ck_assert_float_eq(o.weight_decay, 0.01f);
    ck_assert_float_eq(o.beta1, 0.9f);
    ck_assert_float_eq(o.beta2, 0.999f);
    ck_assert_float_eq(o.eps, 1e-8f);
    ck_assert_int_eq(mg_optimizer_state_count(&o), 2);
    mg_optimizer_init(&o, MG_OPTIM_SGD, 0, -1);
    ck_assert_float_eq(o.weight_decay, 0.0f);
    ck_assert_int_eq(mg_optimizer_state_count(&o), 0);
    mg_optim_kind k;
    ck_assert_int_eq(mg_optim_kind_parse("lion", &k), MG_EINVAL);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "sgd or adamw"));
}
END_TEST

/* ---- gradient norm and clipping ------------------------------------------- */

START_TEST(test_clip_norm_sharded_vs_replicated) {
    enum { R = 6, C = 4, N = R * C };
    const int64_t shape[2] = {R, C}, bshape[1] = {C};
    float g[N], gb[C];
    mg_test_fill(g, N, 5);
    mg_test_fill(gb, C, 6);
    double want = 0;
    for (int i = 0; i < N; i++) want += (double)g[i] * g[i];
    for (int i = 0; i < C; i++) want += (double)gb[i] * gb[i];
    want = sqrt(want);
    layout ls[8];
    int nl = layouts(ls);
    for (int li = 0; li < nl; li++) {
        char name[96];
        mg_mesh *mesh = layout_mesh(&ls[li], name, sizeof name);
        /* a second parameter that is replicated everywhere: counted once */
        mg_placement rep[2] = {MG_REPLICATE, MG_REPLICATE};
        mg_param_table t = {0};
        ck_assert_int_eq(mg_params_add(&t, mesh, "w", 2, shape, ls[li].p, ls[li].p, 1, -1, 1), 0);
        ck_assert_int_eq(mg_params_add(&t, mesh, "b", 1, bshape, rep, rep, 1, -1, 1), 1);
        mg_tensor *gt = mg_tensor_from_data(2, shape, g), *gbt = mg_tensor_from_data(1, bshape, gb);
        t.p[0].grad = mg_distribute(mesh, gt, ls[li].p, ls[li].ndim);
        t.p[1].grad = mg_distribute(mesh, gbt, rep, ls[li].ndim);
        ck_assert(t.p[0].grad && t.p[1].grad);
        double norm = 0;
        ck_assert_int_eq(mg_grad_norm(&t, &norm), MG_OK);
        mg_assert_all(fabs(norm - want) <= 1e-6 * want, "%s: norm %.9g, want %.9g", name, norm, want);
        /* clip to half the norm: every gradient scaled by max / (norm + 1e-6) */
        double before = 0;
        ck_assert_int_eq(mg_clip_grad_norm(&t, want / 2, &before), MG_OK);
        mg_assert_all(fabs(before - want) <= 1e-6 * want, "%s: clip saw norm %.9g", name, before);
        double coef = (want / 2) / (want + 1e-6);
        mg_tensor *got = mg_full_tensor(t.p[0].grad);
        float ref[N];
        for (int i = 0; i < N; i++) ref[i] = (float)(g[i] * coef);
        char msg[256] = "";
        int ok = mg_test_close(got->data, ref, N, 1e-6, 1e-7, msg, sizeof msg);
        mg_assert_all(ok, "%s: clipped gradient: %s", name, msg);
        ck_assert_int_eq(mg_grad_norm(&t, &norm), MG_OK);
        mg_assert_all(fabs(norm - want / 2) <= 1e-5 * want, "%s: norm after clip %.9g", name, norm);
        /* a norm below the limit is left alone */
        ck_assert_int_eq(mg_clip_grad_norm(&t, want, NULL), MG_OK);
        mg_tensor *again = mg_full_tensor(t.p[0].grad);
        mg_assert_all(memcmp(again->data, got->data, sizeof ref) == 0, "%s: clip below the limit changed the gradient", name);
        mg_tensor_free(again);
        mg_tensor_free(got);
        mg_dtensor_free(t.p[0].grad);
        mg_dtensor_free(t.p[1].grad);
        mg_tensor_free(gt);
        mg_tensor_free(gbt);
        mg_params_free(&t);
        mg_mesh_free(mesh);
    }
}
END_TEST

/* ---- plans ---------------------------------------------------------------- */

START_TEST(test_plan_parse_and_check) {
    mg_plan plan;
    ck_assert_int_eq(mg_plan_parse("fsdp,tp", &plan), MG_OK);
    ck_assert_int_eq(plan.ndim, 2);
    ck_assert_int_eq(plan.kind[0], MG_PLAN_FSDP);
    ck_assert_int_eq(plan.kind[1], MG_PLAN_TP);
    ck_assert_int_eq(mg_plan_parse("dp,cp", &plan), MG_EINVAL);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "'cp'"));
    ck_assert_int_eq(mg_plan_parse("pp,dp", &plan), MG_OK);
    ck_assert_int_eq(mg_plan_pp_dim(&plan), 0);
    ck_assert_int_eq(mg_plan_parse("", &plan), MG_EINVAL);
    ck_assert_int_eq(mg_plan_parse("dp,", &plan), MG_EINVAL);

    int shape1[1] = {world}, shape2[2] = {1, world};
    mg_mesh *m1 = mg_mesh_new(1, shape1), *m2 = mg_mesh_new(2, shape2);
    ck_assert(m1 && m2);
    mg_plan_parse("dp,tp", &plan);
    ck_assert_int_eq(mg_plan_check(&plan, m1, 64), MG_EINVAL); /* 2 plans, 1-D mesh */
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "one plan per mesh dim"));
    ck_assert_int_eq(mg_plan_check(&plan, m2, 64), MG_OK);
    mg_plan_parse("dp,fsdp", &plan);
    ck_assert_int_eq(mg_plan_check(&plan, m2, 64), MG_EINVAL); /* two data-parallel dims */
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "at most one"));
    mg_plan_parse("dp", &plan);
    ck_assert_int_eq(mg_plan_check(&plan, m1, world), MG_OK);
    if (world > 1) {
        ck_assert_int_eq(mg_plan_check(&plan, m1, world - 1), MG_EINVAL);
        ck_assert_ptr_nonnull(strstr(mg_last_error(), "smaller than the data-parallel degree"));
    }
    mg_plan_parse("tp", &plan);
    ck_assert_int_eq(mg_plan_check(&plan, m1, 1), MG_OK); /* tp replicates the batch */

    /* placements: tp alternates column / row; fsdp stores Shard(0), uses Replicate */
    mg_placement ws[2], wu[2], bs[2], bu[2];
    mg_plan_parse("fsdp,tp", &plan);
    mg_plan_linear(&plan, 0, ws, wu, bs, bu);
    ck_assert(mg_placement_equal(ws[0], MG_SHARD(0)) && mg_placement_equal(wu[0], MG_REPLICATE));
    ck_assert(mg_placement_equal(ws[1], MG_SHARD(0)) && mg_placement_equal(bs[1], MG_SHARD(0)));
    mg_plan_linear(&plan, 1, ws, wu, bs, bu);
    ck_assert(mg_placement_equal(ws[1], MG_SHARD(1)) && mg_placement_equal(wu[1], MG_SHARD(1)));
    ck_assert(mg_placement_equal(bs[1], MG_REPLICATE) && mg_placement_equal(bs[0], MG_SHARD(0)));
    mg_placement bp[2];
    mg_plan_batch(&plan, bp);
    ck_assert(mg_placement_equal(bp[0], MG_SHARD(0)) && mg_placement_equal(bp[1], MG_REPLICATE));
    mg_mesh_free(m1);
    mg_mesh_free(m2);
}
END_TEST

/* ---- models --------------------------------------------------------------- */

/* y (n, out) = x (n, in) W^T + b, on the host */
static void host_linear(const float *x, const float *w, const float *b, float *y, int64_t n,
                        int64_t in, int64_t out, int relu) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out; o++) {
            double s = b[o];
            for (int64_t k = 0; k < in; k++) s += (double)x[i * in + k] * w[o * in + k];
            y[i * out + o] = relu && s < 0 ? 0.0f : (float)s;
        }
}

/* The model's logits under every plan of this world vs a host forward pass. */
static void check_model(mg_model_kind kind) {
    enum { B = 6, RR = 8, CC = 8, H = 12, CH = 5, K = 10 };
    const char *plans1[] = {"dp", "tp", "fsdp"};
    const char *plans2[] = {"dp,tp", "fsdp,tp", "tp,dp"};
    float x[B * RR * CC];
    mg_test_fill(x, B * RR * CC, 42);
    const int64_t xshape[3] = {B, RR, CC};
    mg_tensor *xt = mg_tensor_from_data(3, xshape, x);
    uint64_t checksum0 = 0;
    for (int pi = 0; pi < 6; pi++) {
        int two = pi >= 3;
        if (two && world % 2) continue;
        const char *plan_text = two ? plans2[pi - 3] : plans1[pi];
        int shape[2] = {two ? 2 : world, world / 2};
        mg_mesh *mesh = mg_mesh_new(two ? 2 : 1, shape);
        mg_plan plan;
        ck_assert_int_eq(mg_plan_parse(plan_text, &plan), MG_OK);
        ck_assert_int_eq(mg_plan_check(&plan, mesh, B), MG_OK);
        mg_model model;
        int rc = mg_model_init(&model, kind, mesh, &plan, RR, CC, H, CH, K, 3);
        ck_assert_msg(rc == MG_OK, "%s", mg_last_error());
        uint64_t checksum;
        ck_assert_int_eq(mg_params_checksum(&model.params, &checksum), MG_OK);
        if (pi == 0) checksum0 = checksum;
        mg_assert_all(checksum == checksum0, "%s: initial parameters differ from plan dp", plan_text);

        mg_placement bp[2];
        mg_plan_batch(&plan, bp);
        mg_dtensor *xd = mg_distribute(mesh, xt, bp, plan.ndim);
        ck_assert_msg(xd, "%s", mg_last_error());
        mg_dtensor *logits = mg_model_forward(&model, xd);
        ck_assert_msg(logits, "%s: %s", plan_text, mg_last_error());
        mg_tensor *got = mg_full_tensor(logits);

        mg_tensor *p[6];
        for (int i = 0; i < model.params.n; i++) p[i] = mg_full_tensor(model.params.p[i].value);
        float want[B * K];
        if (kind == MG_MODEL_MLP) {
            float h[B * H];
            host_linear(x, p[0]->data, p[1]->data, h, B, RR * CC, H, 1);
            host_linear(h, p[2]->data, p[3]->data, want, B, H, K, 0);
        } else {
            float xt_[B * CC * RR], c[B * CC * CH], h[B * H];
            for (int b = 0; b < B; b++)
                for (int i = 0; i < RR; i++)
                    for (int j = 0; j < CC; j++)
                        xt_[(b * CC + j) * RR + i] = x[(b * RR + i) * CC + j]; /* permute(0, 2, 1) */
            host_linear(xt_, p[0]->data, p[1]->data, c, B * CC, RR, CH, 1);
            host_linear(c, p[2]->data, p[3]->data, h, B, CC * CH, H, 1);
            host_linear(h, p[4]->data, p[5]->data, want, B, H, K, 0);
        }
        char msg[256] = "";
        int ok = mg_test_close(got->data, want, B * K, 1e-5, 1e-5, msg, sizeof msg);
        mg_assert_all(ok, "%s %s: logits: %s", mg_model_kind_name(kind), plan_text, msg);
        for (int i = 0; i < model.params.n; i++) mg_tensor_free(p[i]);
        mg_tensor_free(got);
        mg_step_end();
        mg_dtensor_free(xd);
        mg_model_free(&model);
        mg_mesh_free(mesh);
    }
    mg_tensor_free(xt);
}

START_TEST(test_mlp_forward) { check_model(MG_MODEL_MLP); }
END_TEST

START_TEST(test_permute_mlp_forward) { check_model(MG_MODEL_PERMUTE_MLP); }
END_TEST

START_TEST(test_linear_init_bounds) {
    /* PyTorch's default: weight and bias U(-1/sqrt(in), 1/sqrt(in)) */
    int shape[1] = {world};
    mg_mesh *mesh = mg_mesh_new(1, shape);
    mg_plan plan;
    mg_plan_parse("fsdp", &plan);
    mg_param_table t = {0};
    mg_linear_module m;
    ck_assert_int_eq(mg_linear_module_init(&m, &t, mesh, &plan, 0, "fc", 16, 33, 9), MG_OK);
    ck_assert_str_eq(t.p[0].name, "fc.weight");
    ck_assert_str_eq(t.p[1].name, "fc.bias");
    mg_tensor *w = mg_full_tensor(t.p[m.weight].value);
    double lo = 1, hi = -1, mean = 0;
    for (int64_t i = 0; i < w->numel; i++) {
        lo = fmin(lo, w->data[i]);
        hi = fmax(hi, w->data[i]);
        mean += w->data[i] / (double)w->numel;
    }
    ck_assert(lo >= -0.25 && hi < 0.25 && lo < -0.2 && hi > 0.2);
    ck_assert(fabs(mean) < 0.03);
    mg_tensor_free(w);
    mg_params_free(&t);
    mg_mesh_free(mesh);
}
END_TEST

/* ---- configuration -------------------------------------------------------- */

static int parse(mg_train_config *c, int argc, const char **argv) {
    mg_train_config_defaults(c);
    return mg_train_config_parse_args(c, argc, (char **)argv);
}

/* writes text to a per-rank temporary file; returns its name in buf */
static const char *write_conf(char *buf, size_t len, const char *tag, const char *text) {
    snprintf(buf, len, "%s/mg-test-train-%d-%d-%s.conf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid(), mg_rank(), tag);
    FILE *f = fopen(buf, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return buf;
}

#define ERR_HAS(s) ck_assert_msg(strstr(mg_last_error(), (s)) != NULL, "message '%s' lacks '%s'", mg_last_error(), (s))

START_TEST(test_config_flags) {
    mg_train_config c;
    const char *a1[] = {"train", "--steps", "5", "--lr=0.1", "--parallel", "fsdp,tp", "--model",
                        "permute-mlp", "--weight-decay", "0.5", "--optimizer", "sgd", "--momentum", "0.9"};
    ck_assert_msg(parse(&c, 14, a1) == MG_OK, "%s", mg_last_error());
    ck_assert_int_eq(c.steps, 5);
    ck_assert_double_eq(c.lr, 0.1);
    ck_assert_str_eq(c.parallel, "fsdp,tp");
    ck_assert_int_eq(c.model, MG_MODEL_PERMUTE_MLP);
    ck_assert_double_eq(c.weight_decay, 0.5);
    ck_assert_int_eq(c.optimizer, MG_OPTIM_SGD);
    ck_assert_int_eq(mg_train_config_check(&c), MG_OK);
    mg_train_config_defaults(&c);
    ck_assert_int_eq(c.batch, 64);
    ck_assert_int_eq(c.optimizer, MG_OPTIM_ADAMW);
    ck_assert_double_eq(c.lr, 1e-3);

    const char *bad[][3] = {
        {"--frobnicate", "3", "unknown option '--frobnicate'"},
        {"--model", "resnet", "--model: unknown model 'resnet'; use mlp, permute-mlp, gpt or llama"},
        {"--optimizer", "lion", "--optimizer: unknown optimizer 'lion'; use sgd or adamw"},
        {"--schedule", "step", "--schedule: unknown schedule 'step'; use constant or cosine"},
        {"--steps", "1e3x", "--steps: steps wants an integer, got '1e3x'"},
        {"--steps", "0", "--steps: steps must be >= 1, got 0"},
        {"--lr", "-1", "--lr: lr must be >= 0, got -1"},
        {"--mesh", "2xz", "--mesh: mesh '2xz'"},
        {"--parallel", "dp,cp", "unknown entry 'cp'"},
        {"--clip", "nan", "--clip: clip wants a number, got 'nan'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *a[] = {"train", bad[i][0], bad[i][1]};
        ck_assert_int_eq(parse(&c, 3, a), MG_EINVAL);
        ERR_HAS(bad[i][2]);
    }
    const char *a2[] = {"train", "--steps"};
    ck_assert_int_eq(parse(&c, 2, a2), MG_EINVAL);
    ERR_HAS("option '--steps' needs a value");
    const char *a3[] = {"train", "--steps", "4", "extra"};
    ck_assert_int_eq(parse(&c, 4, a3), MG_EINVAL);
    ERR_HAS("unexpected argument 'extra'");
    const char *a4[] = {"train", "--steps", "5", "--warmup", "5"};
    ck_assert_int_eq(parse(&c, 5, a4), MG_OK);
    ck_assert_int_eq(mg_train_config_check(&c), MG_EINVAL);
    ERR_HAS("warmup (5 steps) must be shorter than the run (5 steps)");
    const char *a5[] = {"train", "--momentum", "0.9"};
    ck_assert_int_eq(parse(&c, 3, a5), MG_OK);
    ck_assert_int_eq(mg_train_config_check(&c), MG_EINVAL); /* adamw has no momentum */
    ERR_HAS("momentum 0.9 is an SGD setting");
    const char *a6[] = {"train", "--help"};
    ck_assert_int_eq(parse(&c, 2, a6), MG_OK);
    ck_assert_int_eq(c.help, 1);
    /* checkpoints */
    const char *a7[] = {"train", "--save", "ck/", "--save-every", "10", "--keep", "2", "--resume", "ck"};
    ck_assert_int_eq(parse(&c, 9, a7), MG_OK);
    ck_assert_str_eq(c.save, "ck/");
    ck_assert_int_eq(c.save_every, 10);
    ck_assert_int_eq(c.keep, 2);
    ck_assert_str_eq(c.resume, "ck");
    ck_assert_int_eq(mg_train_config_check(&c), MG_OK);
    const char *a8[] = {"train", "--save-every", "10"};
    ck_assert_int_eq(parse(&c, 3, a8), MG_OK);
    ck_assert_int_eq(mg_train_config_check(&c), MG_EINVAL);
    ERR_HAS("save-every 10 needs a place to save");
    const char *a9[] = {"train", "--keep", "3"};
    ck_assert_int_eq(parse(&c, 3, a9), MG_OK);
    ck_assert_int_eq(mg_train_config_check(&c), MG_EINVAL);
    ERR_HAS("keep 3 applies to a checkpoint directory");
    /* an option of another model: refused, as it was dropped (--heads with the MLP) */
    const char *mo[][6] = {
        {"--heads", "8", "", "", "heads applies to --model gpt or llama, but the model is mlp "
                                "(sized by hidden and depth): drop heads, or give --model gpt"},
        {"--model", "gpt", "--hidden", "64", "hidden applies to --model mlp, permute-mlp or llama, "
                                             "but the model is gpt (sized by layers, heads, embd "
                                             "and ctx): drop hidden, or give --model mlp"},
        {"--model", "gpt", "--depth", "3", "depth applies to --model mlp or permute-mlp"},
        {"--model", "mlp", "--channels", "4", "channels applies to --model permute-mlp, but the "
                                              "model is mlp"},
        {"--eval-tokens", "all", "", "", "eval-tokens applies to --model gpt or llama, but the "
                                         "model is mlp"},
        {"--model", "permute-mlp", "--ctx", "16", "ctx applies to --model gpt or llama, but the "
                                                  "model is permute-mlp (sized by hidden, "
                                                  "channels and depth)"},
        {"--model", "gpt", "--kv-heads", "2", "kv-heads applies to --model llama, but the model "
                                              "is gpt (sized by layers, heads, embd and ctx): "
                                              "drop kv-heads, or give --model llama"},
        {"--model", "llama", "--depth", "3", "depth applies to --model mlp or permute-mlp, but "
                                             "the model is llama (sized by layers, heads, "
                                             "kv-heads, embd, hidden and ctx)"},
    };
    for (size_t i = 0; i < sizeof mo / sizeof mo[0]; i++) {
        const char *a[] = {"train", mo[i][0], mo[i][1], mo[i][2], mo[i][3]};
        ck_assert_int_eq(parse(&c, mo[i][2][0] ? 5 : 3, a), MG_OK);
        ck_assert_int_eq(mg_train_config_check(&c), MG_EINVAL);
        ERR_HAS(mo[i][4]);
    }
    const char *mo_ok[][9] = {
        {"--model", "gpt", "--layers", "2", "--heads", "2", "--embd", "16", "--eval-tokens"},
        {"--model", "permute-mlp", "--hidden", "8", "--channels", "4", "--depth", "3", "--seed"},
        {"--model", "mlp", "--hidden", "8", "--depth", "3", "--steps", "4", "--seed"},
    };
    for (size_t i = 0; i < sizeof mo_ok / sizeof mo_ok[0]; i++) {
        const char *a[] = {"train", mo_ok[i][0], mo_ok[i][1], mo_ok[i][2], mo_ok[i][3], mo_ok[i][4],
                           mo_ok[i][5], mo_ok[i][6], mo_ok[i][7], mo_ok[i][8], "1"};
        ck_assert_int_eq(parse(&c, 11, a), MG_OK);
        ck_assert_msg(mg_train_config_check(&c) == MG_OK, "%s", mg_last_error());
    }
}
END_TEST

/* ---- training state -------------------------------------------------------- */

/* An mlp (8x8 -> H -> 10) and AdamW state on a 1-D mesh of every rank. */
static void make_run(mg_model *m, mg_optimizer *opt, mg_mesh *mesh, const char *plan_text,
                     int64_t hidden, uint64_t seed) {
    mg_plan plan;
    ck_assert_int_eq(mg_plan_parse(plan_text, &plan), MG_OK);
    ck_assert_int_eq(mg_model_init(m, MG_MODEL_MLP, mesh, &plan, 8, 8, hidden, 4, 10, seed), MG_OK);
    mg_optimizer_init(opt, MG_OPTIM_ADAMW, 0, -1);
    ck_assert_int_eq(mg_optimizer_add_state(opt, &m->params), MG_OK);
}

/* every parameter and state tensor of a and b bitwise equal (collective) */
static int same_state(mg_model *a, mg_model *b) {
    int same = 1;
    for (int i = 0; i < a->params.n; i++)
        for (int s = -1; s < 2; s++) {
            mg_dtensor *x = s < 0 ? a->params.p[i].value : a->params.p[i].state[s];
            mg_dtensor *y = s < 0 ? b->params.p[i].value : b->params.p[i].state[s];
            mg_tensor *fx = mg_full_tensor(x), *fy = mg_full_tensor(y);
            same &= fx->numel == fy->numel &&
                    memcmp(fx->data, fy->data, (size_t)fx->numel * sizeof(float)) == 0;
            mg_tensor_free(fx);
            mg_tensor_free(fy);
        }
    return same;
}

START_TEST(test_train_state_reshard) {
    mg_mesh *mesh = mg_mesh_new(1, &world);
    mg_model a, b, c;
    mg_optimizer oa, ob, oc;
    make_run(&a, &oa, mesh, "fsdp", 8, 1); /* stored Shard(0) */
    make_run(&b, &ob, mesh, "dp", 8, 2);   /* Replicate, other values */
    /* optimizer state with values of its own, 7 updates taken */
    for (int i = 0; i < a.params.n; i++)
        for (int s = 0; s < 2; s++) {
            mg_tensor *l = a.params.p[i].state[s]->local;
            for (int64_t k = 0; k < l->numel; k++) l->data[k] = 0.25f * (float)(i + 1) + (float)s + 1e-3f * (float)k;
        }
    oa.step = 7;
    char path[256];
    int pid = (int)getpid();
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    snprintf(path, sizeof path, "/tmp/mg-test-train-state-%d.h5", pid);
    mg_plan pa, pb;
    mg_plan_parse("fsdp", &pa);
    mg_plan_parse("dp", &pb);
    mg_train_state st = {.step = 7, .seed = 1, .data_epoch = 2, .data_cursor = 5, .batch = 16,
                         .data_file = "digits.h5", .schedule = {MG_SCHEDULE_COSINE, 0.01, 2, 20}};
    ck_assert_int_eq(mg_train_state_save(path, &a, &oa, &pa, &st), MG_OK);
    mg_assert_all(!same_state(&a, &b), "the two runs start different");

    mg_train_state saved;
    ck_assert_int_eq(mg_train_state_load(path, &b, &ob, &pb, &st, &saved, NULL, NULL), MG_OK);
    mg_assert_all(same_state(&a, &b), "loaded under dp == saved under fsdp, bitwise");
    ck_assert_int_eq(ob.step, 7);
    ck_assert_int_eq(saved.step, 7);
    ck_assert_int_eq(saved.data_epoch, 2);
    ck_assert_int_eq(saved.data_cursor, 5);
    ck_assert_int_eq(saved.batch, 16);
    ck_assert_int_eq(saved.schedule.kind, MG_SCHEDULE_COSINE);
    ck_assert_double_eq(saved.schedule.lr, 0.01);
    ck_assert_int_eq(saved.schedule.total, 20);
    ck_assert_str_eq(saved.parallel, "fsdp");

    /* another hidden size is refused before anything is loaded */
    make_run(&c, &oc, mesh, "dp", 12, 3);
    ck_assert_int_eq(mg_train_state_load(path, &c, &oc, &pb, &st, &saved, NULL, NULL), MG_EINVAL);
    ERR_HAS("it was saved with model.hidden = 8 but this run has 12"); /* flags: cli */
    ck_assert_int_eq(oc.step, 0);

    if (mg_rank() == 0) remove(path);
    mg_model_free(&a);
    mg_model_free(&b);
    mg_model_free(&c);
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(test_config_file) {
    char path[512], p2[600];
    mg_train_config c;
    write_conf(path, sizeof path, "good",
               "# a job\n\n  steps = 7   # trailing comment\nbatch=16\nweight_decay = 0\n"
               "parallel = dp,tp\nmetrics = /tmp/x y.jsonl\n\tseed\t=\t3\r\n");
    const char *a1[] = {"train", "--config", path};
    ck_assert_int_eq(parse(&c, 3, a1), MG_OK);
    ck_assert_int_eq(c.steps, 7);
    ck_assert_int_eq(c.batch, 16);
    ck_assert_double_eq(c.weight_decay, 0);
    ck_assert_str_eq(c.parallel, "dp,tp");
    ck_assert_str_eq(c.metrics, "/tmp/x y.jsonl");
    ck_assert_int_eq(c.seed, 3);
    ck_assert_str_eq(c.config, path);
    /* flags override the file wherever they stand */
    const char *a2[] = {"train", "--steps", "3", "--config", path, "--batch", "8"};
    ck_assert_int_eq(parse(&c, 7, a2), MG_OK);
    ck_assert_int_eq(c.steps, 3);
    ck_assert_int_eq(c.batch, 8);
    ck_assert_int_eq(c.seed, 3);
    remove(path);

    const char *bad[][2] = {
        {"steps = 10\n# a comment\nbatch 64\n", ":3: expected 'key = value', got 'batch 64'"},
        {"steps = 10\nlearning_rate = 0.1\n", ":2: unknown key 'learning_rate'"},
        {"\n\nhidden = wide # comment\n", ":3: hidden wants an integer, got 'wide'"},
        {"= 3\n", ":1: expected 'key = value' but the key is empty"},
        {"steps =\n", ":1: steps needs a value"},
        {"config = other.conf\n", ":1: a config file cannot name another config file"},
        {"model = mlp\noptimizer = adam\n", ":2: unknown optimizer 'adam'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_conf(path, sizeof path, "bad", bad[i][0]);
        const char *a[] = {"train", "--config", path};
        ck_assert_int_eq(parse(&c, 3, a), MG_EINVAL);
        char want[600];
        snprintf(want, sizeof want, "%s%s", path, bad[i][1]);
        ERR_HAS(want);
        remove(path);
    }
    /* a config file's key of another model is refused as its flag is */
    write_conf(path, sizeof path, "other-model", "model = mlp\nheads = 4\n");
    const char *a4[] = {"train", "--config", path};
    ck_assert_int_eq(parse(&c, 3, a4), MG_OK);
    ck_assert_int_eq(mg_train_config_check(&c), MG_EINVAL);
    ERR_HAS("heads applies to --model gpt or llama, but the model is mlp");
    remove(path);
    snprintf(p2, sizeof p2, "%s.missing", path);
    const char *a3[] = {"train", "--config", p2};
    ck_assert_int_eq(parse(&c, 3, a3), MG_EIO);
    ERR_HAS("cannot read config file");
    ERR_HAS(".missing': No such file or directory");
}
END_TEST

static Suite *make_suite(void) {
    world = mg_world_size();
    const TTest *tests[] = {test_schedule_constant_warmup, test_schedule_cosine,
                            test_optimizer_defaults, test_sgd_momentum, test_sgd_plain, test_adamw,
                            test_clip_norm_sharded_vs_replicated, test_plan_parse_and_check,
                            test_linear_init_bounds, test_mlp_forward, test_permute_mlp_forward,
                            test_config_flags, test_config_file, test_train_state_reshard, NULL};
    return mg_test_suite("train", tests);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
