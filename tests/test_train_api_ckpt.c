/* test_train_api_ckpt.c (MPI): checkpoints of the training API
 * (meshgrad_train.h, mg_ckpt):
 * - save -> load on the same mesh: tensors, optimizer state and step, and
 *   the attributes come back, so one more step after the load has the same
 *   bits as the run that never stopped (AdamW and SGD with momentum);
 * - on another mesh and placements (a 2-D mesh, Shard(1), Replicate): the
 *   tensors bitwise, and the optimizer state too (saved again there, loaded
 *   on the first mesh, then the same next step);
 * - the file is what `meshgrad ckpt info` reads (every checksum verifies)
 *   and holds the entries and attributes of `meshgrad train`'s checkpoints;
 * - two optimizers in one checkpoint (an AdamW of the weights that decay and
 *   one of the bias that does not, mg_ckpt_add_optim): each one's state and
 *   step under /optim/<optimizer>/, the next step after a load the same
 *   bits; a file of one optimizer, unnamed (mg_ckpt_set_optim) or named,
 *   loads into a checkpoint of one, named or not;
 * - refusals, each changing nothing: a checkpoint of another model (a tensor
 *   more, a tensor less, another shape), an optimizer of another kind or
 *   none, optimizers of other names or number than the file's, a second
 *   mg_ckpt_set_optim (it replaced the first, whose state was then lost),
 *   names given twice, a file that is no checkpoint, reserved and bad keys,
 *   NULLs, ranks that disagree. */
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "meshgrad.h"
#include "meshgrad_train.h"
#include "testutil.h"

static int world;
static const char *path = "test_train_api_ckpt.h5", *path2 = "test_train_api_ckpt2.h5";

enum { NP = 3 };
static const char *const names[NP] = {"emb", "fc.weight", "fc.bias"};
static const int64_t shapes[NP][2] = {{12, 5}, {7, 5}, {7}};

typedef struct {
    mg_mesh *mesh;
    mg_dtensor *p[NP];
    mg_optim *opt, *opt2; /* opt2: the second of two optimizers (kind 2), else NULL */
} run;

enum { SGD = 0, ADAMW = 1, TWO_ADAMW = 2 };

/* The parameters on a 1-D mesh of the world ([S(0)], [R], [S(0)]), or on a
 * 2-D one ([R, S(1)], [S(0), R], [R, R]); values from seed (zeros if 0), and
 * an AdamW (kind 1) or SGD with momentum (kind 0) over them, or (kind 2) an
 * AdamW with weight decay over emb and fc.weight and one without over
 * fc.bias. */
static void run_make(run *r, int two_d, uint64_t seed, int kind) {
    int shape2[2] = {1, world};
    r->mesh = two_d ? mg_mesh_new(2, shape2) : mg_mesh_new(1, &world);
    mg_placement one[NP][2] = {{MG_SHARD(0)}, {MG_REPLICATE}, {MG_SHARD(0)}};
    mg_placement two[NP][2] = {{MG_REPLICATE, MG_SHARD(1)},
                               {MG_SHARD(0), MG_REPLICATE},
                               {MG_REPLICATE, MG_REPLICATE}};
    for (int i = 0; i < NP; i++) {
        mg_tensor *t = mg_tensor_new(shapes[i][1] ? 2 : 1, shapes[i]);
        if (seed) mg_test_fill(mg_tensor_data(t), mg_tensor_numel(t), seed + (uint64_t)i);
        r->p[i] = mg_distribute(r->mesh, t, two_d ? two[i] : one[i], two_d ? 2 : 1);
        mg_tensor_free(t);
        mg_assert_all(r->p[i] && mg_set_requires_grad(r->p[i], 1) == MG_OK, "%s", mg_last_error());
    }
    r->opt2 = NULL;
    if (kind == TWO_ADAMW) {
        r->opt = mg_optim_new_adamw(2, r->p, names, 0.9f, 0.95f, 1e-8f, 0.1f);
        r->opt2 = mg_optim_new_adamw(1, r->p + 2, names + 2, 0.8f, 0.9f, 1e-6f, 0.0f);
        mg_assert_all(r->opt2 != NULL, "%s", mg_last_error());
    } else {
        r->opt = kind ? mg_optim_new_adamw(NP, r->p, names, 0.9f, 0.95f, 1e-8f, 0.1f)
                      : mg_optim_new_sgd(NP, r->p, names, 0.9f, 0.01f);
    }
    mg_assert_all(r->opt != NULL, "%s", mg_last_error());
}

static void run_free(run *r) {
    mg_optim_free(r->opt2);
    mg_optim_free(r->opt);
    for (int i = 0; i < NP; i++) mg_dtensor_free(r->p[i]);
    mg_mesh_free(r->mesh);
}

/* One training step k: loss = sum(linear(emb, fc.weight, fc.bias) * c_k). */
static void step(run *r, int k) {
    mg_tensor *c = mg_tensor_new(2, (int64_t[]){12, 7});
    mg_test_fill(mg_tensor_data(c), 84, 500 + (uint64_t)k);
    mg_placement rep[2] = {MG_REPLICATE, MG_REPLICATE};
    mg_dtensor *cd = mg_distribute(r->mesh, c, rep, mg_mesh_ndim(r->mesh));
    mg_tensor_free(c);
    mg_dtensor *loss = mg_sum(mg_mul(mg_linear(r->p[0], r->p[1], r->p[2]), cd));
    mg_assert_all(loss && mg_backward(loss) == MG_OK, "%s", mg_last_error());
    mg_assert_all(mg_optim_step(r->opt, 0.05f) == MG_OK && mg_optim_zero_grad(r->opt) == MG_OK,
                  "%s", mg_last_error());
    if (r->opt2)
        mg_assert_all(mg_optim_step(r->opt2, 0.03f) == MG_OK &&
                          mg_optim_zero_grad(r->opt2) == MG_OK,
                      "%s", mg_last_error());
    mg_step_end();
    mg_dtensor_free(cd);
}

/* A checkpoint of r's parameters, with its optimizer (mg_ckpt_set_optim), or
 * with both of two named "decay" and "no_decay" (mg_ckpt_add_optim). */
static mg_ckpt *ckpt_of(run *r, int with_optim) {
    mg_ckpt *ck = mg_ckpt_new();
    for (int i = 0; i < NP; i++)
        mg_assert_all(mg_ckpt_add(ck, names[i], r->p[i]) == MG_OK, "%s", mg_last_error());
    if (with_optim && r->opt2)
        mg_assert_all(mg_ckpt_add_optim(ck, "decay", r->opt) == MG_OK &&
                          mg_ckpt_add_optim(ck, "no_decay", r->opt2) == MG_OK,
                      "%s", mg_last_error());
    else if (with_optim)
        mg_assert_all(mg_ckpt_set_optim(ck, r->opt) == MG_OK, "%s", mg_last_error());
    return ck;
}

/* Every parameter of a and b has the same bits. */
static int same_params(run *a, run *b) {
    int same = 1;
    for (int i = 0; i < NP; i++) {
        mg_tensor *x = mg_full_tensor(a->p[i]), *y = mg_full_tensor(b->p[i]);
        same &= x && y && !memcmp(mg_tensor_data(x), mg_tensor_data(y),
                                  (size_t)mg_tensor_numel(x) * sizeof(float));
        mg_tensor_free(x);
        mg_tensor_free(y);
    }
    return same;
}

static void save_at(run *r, int64_t at, const char *to) {
    mg_ckpt *ck = ckpt_of(r, 1);
    mg_assert_all(mg_ckpt_set_step(ck, at) == MG_OK && mg_ckpt_set_attr(ck, "model", "tiny") == MG_OK &&
                      mg_ckpt_set_attr(ck, "note", "saved by the test") == MG_OK,
                  "%s", mg_last_error());
    mg_assert_all(mg_ckpt_save(ck, to) == MG_OK, "save %s: %s", to, mg_last_error());
    mg_ckpt_free(ck);
}

static void round_trip(int kind) {
    run a, b;
    run_make(&a, 0, 1, kind);
    step(&a, 0);
    step(&a, 1);
    save_at(&a, 2, path);
    if (mg_rank() == 0) { /* `meshgrad ckpt info` reads it; every checksum verifies */
        FILE *out = fopen("/dev/null", "w");
        int rc = mg_checkpoint_info(path, out);
        fclose(out);
        ck_assert_msg(rc == MG_OK, "ckpt info: %s", mg_last_error());
    }
    mg_ckpt_attr attrs[64];
    int nattrs = 0;
    mg_assert_all(mg_checkpoint_read_attrs(path, attrs, 64, &nattrs) == MG_OK, "%s", mg_last_error());
    const char *want[][2] = {{"step", "2"}, {"optimizer", kind ? "adamw" : "sgd"},
                             {"optimizer.state", kind ? "exp_avg,exp_avg_sq" : "momentum_buffer"},
                             {"optimizer.step", "2"}, {"mesh", NULL}, {"placements.emb", NULL},
                             {"meshgrad.version", NULL}, {"model", "tiny"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *v = mg_ckpt_attr_get(attrs, nattrs, want[i][0]);
        mg_assert_all(v && (!want[i][1] || !strcmp(v, want[i][1])), "attribute %s is %s",
                      want[i][0], v ? v : "missing");
    }

    /* the same mesh: one more step after the load has the bits of the run that went on */
    run_make(&b, 0, 0, kind);
    mg_ckpt *ck = ckpt_of(&b, 1);
    mg_assert_all(mg_ckpt_load(ck, path) == MG_OK, "load: %s", mg_last_error());
    mg_assert_all(mg_ckpt_step(ck) == 2 && !strcmp(mg_ckpt_get_attr(ck, "note"), "saved by the test")
                      && !strcmp(mg_ckpt_get_attr(ck, "mesh"), mg_ckpt_attr_get(attrs, nattrs, "mesh")),
                  "step %lld, attributes", (long long)mg_ckpt_step(ck));
    mg_assert_all(same_params(&a, &b), "loaded parameters differ from the saved ones");
    step(&a, 2);
    step(&b, 2);
    mg_assert_all(same_params(&a, &b), "the step after a load differs from the uninterrupted one");
    mg_ckpt_free(ck);
    run_free(&b);

    /* another mesh and placements, and back through a save made there */
    run c, d;
    run_make(&c, 1, 0, kind);
    ck = ckpt_of(&c, 1);
    mg_assert_all(mg_ckpt_load(ck, path) == MG_OK, "load on 1x%d: %s", world, mg_last_error());
    mg_assert_all(mg_ckpt_save(ck, path2) == MG_OK, "save on 1x%d: %s", world, mg_last_error());
    mg_ckpt_free(ck);
    run_make(&d, 0, 0, kind);
    ck = ckpt_of(&d, 1);
    mg_assert_all(mg_ckpt_load(ck, path2) == MG_OK && mg_ckpt_step(ck) == 2 &&
                      !strcmp(mg_ckpt_get_attr(ck, "note"), "saved by the test"),
                  "load of the 1x%d save: %s", world, mg_last_error());
    for (int i = 0; i < NP; i++) {
        mg_tensor *x = mg_full_tensor(c.p[i]), *y = mg_full_tensor(d.p[i]);
        mg_assert_all(!memcmp(mg_tensor_data(x), mg_tensor_data(y), (size_t)mg_tensor_numel(x) * 4),
                      "%s on the 2-D mesh differs", names[i]);
        mg_tensor_free(x);
        mg_tensor_free(y);
    }
    step(&d, 2);
    mg_assert_all(same_params(&a, &d), "the step after a trip through another mesh differs");
    mg_ckpt_free(ck);
    run_free(&c);
    run_free(&d);
    run_free(&a);
}

START_TEST(round_trip_adamw) { round_trip(1); }
END_TEST

START_TEST(round_trip_sgd) { round_trip(0); }
END_TEST

/* ---- several optimizers ------------------------------------------------------------------ */

/* What the datasets under /optim of a checkpoint of two named optimizers are. */
typedef struct {
    int decay, no_decay, unnamed;
} layout_seen;

static int note_layout(void *ctx, const char *name) {
    layout_seen *s = ctx;
    if (strcmp(name, "optim/decay/fc.weight/exp_avg") == 0) s->decay = 1;
    if (strcmp(name, "optim/no_decay/fc.bias/exp_avg_sq") == 0) s->no_decay = 1;
    if (strncmp(name, "optim/", 6) == 0 && strncmp(name, "optim/decay/", 12) != 0 &&
        strncmp(name, "optim/no_decay/", 15) != 0)
        s->unnamed = 1;
    return MG_OK;
}

START_TEST(two_optimizers) {
    run a, b, c;
    run_make(&a, 0, 1, TWO_ADAMW);
    step(&a, 0);
    step(&a, 1);
    step(&a, 2);
    save_at(&a, 3, path);
    if (mg_rank() == 0) { /* `meshgrad ckpt info` reads it: every checksum verifies */
        FILE *out = fopen("/dev/null", "w");
        int rc = mg_checkpoint_info(path, out);
        fclose(out);
        ck_assert_msg(rc == MG_OK, "ckpt info: %s", mg_last_error());
    }
    mg_ckpt_attr attrs[96];
    int nattrs = 0;
    mg_assert_all(mg_checkpoint_read_attrs(path, attrs, 96, &nattrs) == MG_OK, "%s",
                  mg_last_error());
    const char *want[][2] = {{"optimizer.names", "decay,no_decay"},
                             {"optimizer.decay.kind", "adamw"},
                             {"optimizer.decay.state", "exp_avg,exp_avg_sq"},
                             {"optimizer.decay.step", "3"},
                             {"optimizer.decay.weight_decay", "0.1"},
                             {"optimizer.no_decay.kind", "adamw"},
                             {"optimizer.no_decay.step", "3"},
                             {"optimizer.no_decay.weight_decay", "0"},
                             {"optimizer.no_decay.beta1", "0.8"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *v = mg_ckpt_attr_get(attrs, nattrs, want[i][0]);
        mg_assert_all(v && !strcmp(v, want[i][1]), "attribute %s is %s, want %s", want[i][0],
                      v ? v : "missing", want[i][1]);
    }
    mg_assert_all(!mg_ckpt_attr_get(attrs, nattrs, "optimizer"),
                  "a file of named optimizers has the unnamed one's attribute \"optimizer\"");
    /* each optimizer's state under its own name, none under the unnamed layout
     * (listed: a load of some of a group's datasets is refused, checkpoint.h) */
    layout_seen seen = {0, 0, 0};
    mg_assert_all(mg_checkpoint_list(path, note_layout, &seen) == MG_OK, "%s", mg_last_error());
    mg_assert_all(seen.decay && seen.no_decay && !seen.unnamed, "the states are not at "
                  "/optim/<optimizer>/<param>/<state>: decay's %s, no_decay's %s, %s",
                  seen.decay ? "there" : "missing", seen.no_decay ? "there" : "missing",
                  seen.unnamed ? "and some under /optim/<param>" : "none elsewhere");

    /* on a fresh run: the same parameters, then the same next step */
    run_make(&b, 0, 0, TWO_ADAMW);
    mg_ckpt *ck = ckpt_of(&b, 1);
    mg_assert_all(mg_ckpt_load(ck, path) == MG_OK && mg_ckpt_step(ck) == 3, "load: %s",
                  mg_last_error());
    mg_assert_all(same_params(&a, &b), "loaded parameters differ from the saved ones");
    mg_ckpt_free(ck);
    /* on a 2-D mesh, saved there, loaded back on the 1-D one */
    run_make(&c, 1, 0, TWO_ADAMW);
    ck = ckpt_of(&c, 1);
    mg_assert_all(mg_ckpt_load(ck, path) == MG_OK && mg_ckpt_save(ck, path2) == MG_OK,
                  "on 1x%d: %s", world, mg_last_error());
    mg_ckpt_free(ck);
    run_free(&c);
    run_make(&c, 0, 0, TWO_ADAMW);
    ck = ckpt_of(&c, 1);
    mg_assert_all(mg_ckpt_load(ck, path2) == MG_OK, "load of the 2-D save: %s", mg_last_error());
    mg_ckpt_free(ck);
    step(&a, 3);
    step(&b, 3);
    step(&c, 3);
    mg_assert_all(same_params(&a, &b), "the step after a load differs from the uninterrupted one "
                  "(both optimizers' state and step must come back)");
    mg_assert_all(same_params(&a, &c), "the step after a trip through another mesh differs");
    run_free(&a);
    run_free(&b);
    run_free(&c);
}
END_TEST

/* A file of one optimizer loads into a checkpoint of one, named or not: the
 * unnamed layout (mg_ckpt_set_optim, `meshgrad train`'s) by mg_ckpt_add_optim,
 * and a named one by mg_ckpt_set_optim; the next step is the same bits. */
START_TEST(one_optimizer_either_way) {
    for (int way = 0; way < 2; way++) {
        run a, b;
        run_make(&a, 0, 1, ADAMW);
        step(&a, 0);
        step(&a, 1);
        mg_ckpt *ck = ckpt_of(&a, 0);
        mg_assert_all(mg_ckpt_set_step(ck, 2) == MG_OK &&
                          (way ? mg_ckpt_add_optim(ck, "all", a.opt)
                               : mg_ckpt_set_optim(ck, a.opt)) == MG_OK &&
                          mg_ckpt_save(ck, path) == MG_OK,
                      "%s", mg_last_error());
        mg_ckpt_free(ck);
        run_make(&b, 0, 0, ADAMW);
        ck = ckpt_of(&b, 0);
        mg_assert_all((way ? mg_ckpt_set_optim(ck, b.opt) : mg_ckpt_add_optim(ck, "adamw", b.opt))
                          == MG_OK,
                      "%s", mg_last_error());
        mg_assert_all(mg_ckpt_load(ck, path) == MG_OK,
                      "a file of one %s optimizer into a %s one: %s", way ? "named" : "unnamed",
                      way ? "unnamed" : "named", mg_last_error());
        step(&a, 2);
        step(&b, 2);
        mg_assert_all(same_params(&a, &b), "the step after the load differs (%s file)",
                      way ? "named" : "unnamed");
        mg_ckpt_free(ck);
        run_free(&a);
        run_free(&b);
    }
}
END_TEST

#define REFUSED(failed, says)                                                                  \
    mg_assert_all((failed) && strstr(mg_last_error(), says), "%s: got \"%s\", want \"%s\"", \
                  #failed, mg_last_error(), says)

START_TEST(optimizer_refusals) {
    run a, b, keep, one;
    run_make(&a, 0, 1, TWO_ADAMW);
    step(&a, 0);
    save_at(&a, 1, path); /* decay and no_decay */
    run_make(&b, 0, 9, TWO_ADAMW);
    run_make(&keep, 0, 9, TWO_ADAMW); /* what b holds */
    run_make(&one, 0, 9, ADAMW);

    /* the calls: nothing is replaced or dropped without a word */
    mg_ckpt *ck = ckpt_of(&b, 0);
    mg_assert_all(mg_ckpt_set_optim(ck, b.opt) == MG_OK && mg_ckpt_set_optim(ck, b.opt) == MG_OK,
                  "the same optimizer set twice: %s", mg_last_error());
    REFUSED(mg_ckpt_set_optim(ck, b.opt2) != MG_OK, "name each with mg_ckpt_add_optim");
    REFUSED(mg_ckpt_add_optim(ck, "no_decay", b.opt2) != MG_OK, "holds an unnamed optimizer");
    mg_assert_all(mg_ckpt_set_optim(ck, NULL) == MG_OK, "%s", mg_last_error());
    REFUSED(mg_ckpt_add_optim(ck, "a b", b.opt) != MG_OK, "\"a b\" is not valid");
    REFUSED(mg_ckpt_add_optim(ck, "abcdefghijklmnopqrstuvwxyz012345", b.opt) != MG_OK,
            "at most 31 fit");
    REFUSED(mg_ckpt_add_optim(ck, "decay", NULL) != MG_OK, "the optimizer \"decay\" is NULL");
    REFUSED(mg_ckpt_add_optim(NULL, "decay", b.opt) != MG_OK, "NULL");
    mg_assert_all(mg_ckpt_add_optim(ck, "decay", b.opt) == MG_OK, "%s", mg_last_error());
    REFUSED(mg_ckpt_add_optim(ck, "decay", b.opt2) != MG_OK, "named \"decay\" already");
    REFUSED(mg_ckpt_add_optim(ck, "again", b.opt) != MG_OK,
            "in the checkpoint already, as \"decay\"");
    REFUSED(mg_ckpt_set_optim(ck, b.opt2) != MG_OK, "holds named optimizers already");
    REFUSED(mg_ckpt_set_attr(ck, "optimizer.names", "x") != MG_OK, "written by mg_ckpt_save");
    /* a load with one of the file's two: the other's state would be dropped */
    REFUSED(mg_ckpt_load(ck, path) != MG_OK,
            "it holds the state of optimizer \"no_decay\" too, which was not given");
    mg_ckpt_free(ck);
    ck = ckpt_of(&b, 0); /* other names */
    mg_ckpt_add_optim(ck, "decay", b.opt);
    mg_ckpt_add_optim(ck, "bias", b.opt2);
    REFUSED(mg_ckpt_load(ck, path) != MG_OK,
            "holds no optimizer \"bias\" (it holds decay, no_decay)");
    mg_ckpt_free(ck);
    ck = ckpt_of(&b, 0); /* the names swapped: their parameters differ */
    mg_ckpt_add_optim(ck, "decay", b.opt2);
    mg_ckpt_add_optim(ck, "no_decay", b.opt);
    REFUSED(mg_ckpt_load(ck, path) != MG_OK, "which is no state of the optimizers given");
    mg_ckpt_free(ck);
    ck = ckpt_of(&one, 1); /* one unnamed optimizer for a file of two */
    REFUSED(mg_ckpt_load(ck, path) != MG_OK,
            "it holds the state of 2 optimizers (decay, no_decay): name each with "
            "mg_ckpt_add_optim");
    mg_ckpt_free(ck);
    ck = ckpt_of(&one, 0);
    mg_ckpt_set_step(ck, 1);
    mg_ckpt_set_optim(ck, one.opt);
    mg_assert_all(mg_ckpt_save(ck, path2) == MG_OK, "%s", mg_last_error());
    mg_ckpt_free(ck);
    ck = ckpt_of(&b, 1); /* two named for a file of one unnamed */
    REFUSED(mg_ckpt_load(ck, path2) != MG_OK,
            "it holds one optimizer's state, saved unnamed, but 2 optimizers were given");
    mg_assert_all(same_params(&b, &keep), "a refused load changed the tensors");
    step(&b, 5);
    step(&keep, 5);
    mg_assert_all(same_params(&b, &keep), "a refused load changed an optimizer");
    mg_ckpt_free(ck);
    run_free(&a);
    run_free(&b);
    run_free(&keep);
    run_free(&one);
}
END_TEST

/* ---- refusals --------------------------------------------------------------------------- */

/* A checkpoint of tensors `which` (bits) of r, with r's optimizer or none. */
static mg_ckpt *some_of(run *r, unsigned which, int with_optim) {
    mg_ckpt *ck = mg_ckpt_new();
    for (int i = 0; i < NP; i++)
        if (which >> i & 1) mg_ckpt_add(ck, names[i], r->p[i]);
    if (with_optim) mg_ckpt_set_optim(ck, r->opt);
    return ck;
}

START_TEST(refusals_change_nothing) {
    run a, b;
    run_make(&a, 0, 1, 1);
    step(&a, 0);
    save_at(&a, 1, path);
    run_make(&b, 0, 9, 1);
    run keep;
    run_make(&keep, 0, 9, 1); /* what b holds */

    mg_ckpt *ck = some_of(&b, 3, 0); /* emb and fc.weight: the file has fc.bias too */
    REFUSED(mg_ckpt_load(ck, path) != MG_OK, "holds /params/fc.bias, which is not among the 2");
    mg_ckpt_free(ck);
    mg_tensor *t7 = mg_tensor_new(1, shapes[2]);
    mg_dtensor *extra = mg_distribute(b.mesh, t7, (mg_placement[]){MG_REPLICATE}, 1);
    mg_tensor_free(t7);
    ck = some_of(&b, 7, 0);
    mg_ckpt_add(ck, "head", extra); /* a tensor the file does not have */
    REFUSED(mg_ckpt_load(ck, path) != MG_OK, "has no /params/head");
    mg_ckpt_free(ck);
    mg_dtensor_free(extra);
    ck = mg_ckpt_new(); /* another shape under a name of the file */
    mg_dtensor *wide = NULL;
    {
        mg_tensor *t = mg_tensor_new(2, (int64_t[]){12, 6});
        wide = mg_distribute(b.mesh, t, (mg_placement[]){MG_REPLICATE}, 1);
        mg_tensor_free(t);
    }
    mg_ckpt_add(ck, "emb", wide);
    mg_ckpt_add(ck, "fc.weight", b.p[1]);
    mg_ckpt_add(ck, "fc.bias", b.p[2]);
    REFUSED(mg_ckpt_load(ck, path) != MG_OK, "has shape (12, 5) but the tensor loaded into it has "
                                             "global shape (12, 6)");
    mg_ckpt_free(ck);
    mg_dtensor_free(wide);

    run s;
    run_make(&s, 0, 9, 0); /* SGD with momentum: another optimizer */
    ck = some_of(&s, 7, 1);
    REFUSED(mg_ckpt_load(ck, path) != MG_OK, "it holds the state of adamw, but the optimizer is sgd");
    mg_ckpt_free(ck);
    run_free(&s);
    ck = some_of(&a, 7, 0); /* saved without an optimizer, loaded with one */
    mg_assert_all(mg_ckpt_set_step(ck, 1) == MG_OK && mg_ckpt_save(ck, path2) == MG_OK, "%s",
                  mg_last_error());
    mg_ckpt_free(ck);
    ck = some_of(&b, 7, 1);
    REFUSED(mg_ckpt_load(ck, path2) != MG_OK, "it was saved without one");
    mg_ckpt_free(ck);
    if (mg_rank() == 0) { /* a file that is no checkpoint */
        FILE *f = fopen("test_train_api_ckpt.txt", "w");
        fputs("not a checkpoint\n", f);
        fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ck = some_of(&b, 7, 1);
    mg_assert_all(mg_ckpt_load(ck, "test_train_api_ckpt.txt") != MG_OK &&
                      strstr(mg_last_error(), "test_train_api_ckpt.txt"),
                  "a text file: %s", mg_last_error());
    REFUSED(mg_ckpt_save(ck, "test_train_api_ckpt.txt") != MG_OK, "test_train_api_ckpt.txt");
    REFUSED(mg_ckpt_load(ck, "no-such-dir/x.h5") != MG_OK, "no-such-dir/x.h5");
    mg_assert_all(same_params(&b, &keep), "a refused load changed the tensors");
    /* the optimizer state is untouched too: the same next step as an untouched run */
    step(&b, 5);
    step(&keep, 5);
    mg_assert_all(same_params(&b, &keep), "a refused load changed the optimizer");
    /* without the optimizer, the tensors of a file with one load */
    mg_ckpt_free(ck);
    ck = some_of(&b, 7, 0);
    mg_assert_all(mg_ckpt_load(ck, path) == MG_OK && mg_ckpt_step(ck) == 1, "%s", mg_last_error());
    mg_ckpt_free(ck);

    /* the arguments */
    ck = mg_ckpt_new();
    REFUSED(mg_ckpt_add(NULL, "x", b.p[0]) != MG_OK, "NULL");
    REFUSED(mg_ckpt_add(ck, NULL, b.p[0]) != MG_OK, "NULL");
    REFUSED(mg_ckpt_add(ck, "a/b", b.p[0]) != MG_OK, "\"a/b\" is not valid");
    REFUSED(mg_ckpt_add(ck, ".x", b.p[0]) != MG_OK, "not starting with '.'");
    REFUSED(mg_ckpt_add(ck, "x", NULL) != MG_OK, "the tensor of \"x\" is NULL");
    REFUSED(mg_ckpt_add(ck, "x", mg_scale(b.p[0], 2)) != MG_OK, "the result of an op");
    mg_step_end();
    REFUSED(mg_ckpt_save(ck, path2) != MG_OK, "holds no tensor");
    REFUSED(mg_ckpt_add(ck, "x", b.p[0]) == MG_OK && mg_ckpt_add(ck, "x", b.p[1]) != MG_OK,
            "added twice");
    REFUSED(mg_ckpt_set_attr(ck, "step", "3") != MG_OK, "written by mg_ckpt_save itself");
    REFUSED(mg_ckpt_set_attr(ck, "optimizer.lr", "3") != MG_OK, "written by mg_ckpt_save");
    REFUSED(mg_ckpt_set_attr(ck, "placements.x", "3") != MG_OK, "written by mg_ckpt_save");
    REFUSED(mg_ckpt_set_attr(ck, "a key", "3") != MG_OK, "\"a key\" is not valid");
    REFUSED(mg_ckpt_set_attr(ck, "k", NULL) != MG_OK, "the value of \"k\" is NULL");
    char big[1100];
    memset(big, 'v', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    REFUSED(mg_ckpt_set_attr(ck, "k", big) != MG_OK, "at most 1023 fit");
    REFUSED(mg_ckpt_set_step(ck, -1) != MG_OK, "negative");
    REFUSED(!mg_ckpt_get_attr(ck, "nothing"), "no attribute \"nothing\"");
    REFUSED(mg_ckpt_save(ck, NULL) != MG_OK, "the path is NULL");
    REFUSED(mg_ckpt_load(NULL, path) != MG_OK, "the checkpoint is NULL");
    if (world > 1) { /* an attribute that differs on one rank: no file, one message */
        mg_ckpt_set_attr(ck, "host", mg_rank() == 1 ? "b" : "a");
        REFUSED(mg_ckpt_save(ck, "test_train_api_ckpt3.h5") != MG_OK, "the ranks disagree");
        FILE *f = fopen("test_train_api_ckpt3.h5", "r");
        mg_assert_all(!f, "a refused save wrote its file");
        if (f) fclose(f);
    }
    mg_ckpt_free(ck);
    run_free(&a);
    run_free(&b);
    run_free(&keep);
}
END_TEST

static Suite *make_suite(void) {
    world = mg_world_size();
    const TTest *tests[] = {round_trip_adamw, round_trip_sgd, two_optimizers,
                            one_optimizer_either_way, optimizer_refusals, refusals_change_nothing,
                            NULL};
    return mg_test_suite("train_api_ckpt", tests);
}

static void teardown(void) {
    if (mg_rank() == 0) {
        remove(path);
        remove(path2);
        remove("test_train_api_ckpt.txt");
    }
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, teardown); }
