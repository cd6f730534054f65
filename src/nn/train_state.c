/* train_state.c: a training run saved to and loaded from a checkpoint (see
 * train_state.h). Both directions build the same attribute list from the
 * model, optimizer and configuration, so a resume compares the file's list
 * with the current one key by key, as text. */
#include "nn/train_state.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "dist/mesh.h"
#include "dist/placement.h"
#include "io/checkpoint.h"
#include "io/files.h"
#include "status.h"
#include "text.h"

#define MAX_FILE_ATTRS 256

typedef struct {
    mg_ckpt_attr *a;
    int n, cap;
} attr_list;

static void attr_set(attr_list *l, const char *key, const char *fmt, ...) MG_PRINTF(3, 4);
static void attr_set(attr_list *l, const char *key, const char *fmt, ...) {
    if (l->n == l->cap || strlen(key) >= sizeof l->a[0].key) return; /* informational overflow */
    mg_ckpt_attr *a = &l->a[l->n++];
    snprintf(a->key, sizeof a->key, "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->value, sizeof a->value, fmt, ap);
    va_end(ap);
}

/* The shortest "%.Ng" text that reads back as exactly v. */
static void attr_double(attr_list *l, const char *key, double v) {
    char buf[64];
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    attr_set(l, key, "%s", buf);
}

/* The same for a float (the optimizer's settings are floats). */
static void attr_float(attr_list *l, const char *key, float v) {
    char buf[64];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    attr_set(l, key, "%s", buf);
}

static void attr_int(attr_list *l, const char *key, int64_t v) {
    attr_set(l, key, "%lld", (long long)v);
}

/* The whole mesh (a pipeline's, not a stage's). */
static const mg_mesh *model_mesh(const mg_model *m) {
    return m->mesh ? m->mesh : m->params.p[0].value->spec.mesh;
}

/* "exp_avg,exp_avg_sq", "momentum_buffer" or "none" */
static void state_names(const mg_optimizer *opt, char *buf, size_t len) {
    int n = mg_optimizer_state_count(opt);
    size_t used = 0;
    buf[0] = '\0';
    for (int s = 0; s < n; s++)
        used += (size_t)snprintf(buf + used, len > used ? len - used : 0, "%s%s", s ? "," : "",
                                 mg_optimizer_state_name(opt, s));
    if (n == 0) snprintf(buf, len, "none");
}

/* Every attribute of a run: st, the model, the optimizer, the mesh and plan. */
static void build_attrs(attr_list *l, const mg_model *model, const mg_optimizer *opt,
                        const mg_plan *plan, const mg_train_state *st) {
    char buf[256];
    attr_int(l, "step", st->step);
    attr_int(l, "seed", st->seed);
    attr_set(l, "rng", "philox4x32-10, stateless: parameters keyed by (seed, parameter index, "
                       "element index), data order by (seed, data.epoch)");
    attr_int(l, "data.epoch", st->data_epoch);
    attr_int(l, "data.cursor", st->data_cursor);
    attr_int(l, "data.batch", st->batch);
    attr_set(l, "data.file", "%s", st->data_file ? st->data_file : "");
    attr_set(l, "model", "%s", mg_model_kind_name(model->kind));
    if (model->kind == MG_MODEL_GPT) {
        const mg_gpt_config *g = &model->gpt.cfg;
        attr_int(l, "model.layers", g->layers);
        attr_int(l, "model.heads", g->heads);
        attr_int(l, "model.embd", g->embd);
        attr_int(l, "model.ctx", g->ctx);
        attr_int(l, "model.vocab", g->vocab);
        attr_set(l, "model.qkv_rows", "per head: (heads, 3, embd / heads), q k v of a head together");
    } else if (model->kind == MG_MODEL_LLAMA) {
        const mg_llama_config *g = &model->llama.cfg;
        attr_set(l, "model.kind", "llama"); /* the kind again, under the model.* keys */
        attr_int(l, "model.layers", g->layers);
        attr_int(l, "model.heads", g->heads);
        attr_int(l, "model.kv_heads", g->kv_heads);
        attr_int(l, "model.embd", g->embd);
        attr_int(l, "model.ctx", g->ctx);
        attr_int(l, "model.hidden", g->hidden);
        attr_int(l, "model.vocab", g->vocab);
        attr_double(l, "model.rope_theta", g->rope_theta);
        attr_double(l, "model.norm_eps", g->norm_eps);
        attr_int(l, "model.tied", g->tied);
    } else {
        attr_int(l, "model.hidden", model->hidden);
        attr_int(l, "model.channels", model->channels);
        attr_int(l, "model.classes", model->classes);
        attr_int(l, "model.depth", model->nlayers);
        attr_set(l, "model.input", "%lldx%lld", (long long)model->sample_shape[0],
                 (long long)model->sample_shape[1]);
    }
    attr_set(l, "optimizer", "%s", mg_optim_kind_name(opt->kind));
    state_names(opt, buf, sizeof buf);
    attr_set(l, "optimizer.state", "%s", buf);
    attr_int(l, "optimizer.step", opt->step);
    attr_float(l, "optimizer.momentum", opt->momentum);
    attr_float(l, "optimizer.weight_decay", opt->weight_decay);
    attr_set(l, "optimizer.decay", "%s", opt->decay_2d_only ? "2-d" : "all"); /* which parameters */
    attr_float(l, "optimizer.beta1", opt->beta1);
    attr_float(l, "optimizer.beta2", opt->beta2);
    attr_float(l, "optimizer.eps", opt->eps);
    attr_double(l, "clip", st->clip);
    attr_set(l, "schedule", "%s", mg_schedule_kind_name(st->schedule.kind));
    attr_double(l, "schedule.lr", st->schedule.lr);
    attr_int(l, "schedule.warmup", st->schedule.warmup);
    attr_int(l, "schedule.total_steps", st->schedule.total);
    attr_double(l, "schedule.lr_min", st->schedule.lr_min);
    const mg_mesh *mesh = model_mesh(model);
    attr_set(l, "mesh", "%s", mg_mesh_format(buf, sizeof buf, mesh));
    attr_set(l, "parallel", "%s", mg_plan_format(buf, sizeof buf, plan));
    for (int k = 0; k < mg_model_param_count(model); k++) { /* every stage's, where a pipeline cuts it */
        mg_model_param_info info;
        mg_model_param((mg_model *)model, k, &info);
        char key[128];
        snprintf(key, sizeof key, "placements.%s", info.name);
        attr_set(l, key, "%s", mg_placements_format(buf, sizeof buf, info.store, info.mesh_ndim));
    }
    attr_set(l, "meshgrad.version", "%s", mg_version());
}

/* The entries params/<name> and optim/<name>/<state> of every parameter of
 * the whole model, in order (a pipeline stage's ranks hold some; the others
 * take part in making them; a GPT's last stage loads wte's copy but saves
 * nothing of it); names and shapes in *names (free it). */
static int build_entries(mg_model *model, const mg_optimizer *opt, int saving, mg_ckpt_entry **out,
                         int *n, char **names) {
    enum { NAME = MG_PARAM_NAME_MAX + 32 };
    _Static_assert(NAME % 8 == 0, "the shapes after the names must be aligned");
    int nstate = mg_optimizer_state_count(opt), np = mg_model_param_count(model), count = np * (1 + nstate);
    mg_ckpt_entry *e = calloc((size_t)count, sizeof *e);
    /* the names, then the shapes (NAME is a multiple of 8) */
    char *buf = calloc(1, (size_t)count * NAME + (size_t)np * 2 * sizeof(int64_t));
    if (!e || !buf) {
        free(e);
        free(buf);
        return mg_error(MG_ENOMEM, "checkpoint: out of memory for %d entries", count);
    }
    int64_t (*shapes)[2] = (int64_t(*)[2])(void *)(buf + (size_t)count * NAME);
    int k = 0;
    for (int i = 0; i < np; i++) {
        mg_model_param_info info;
        mg_param *p = mg_model_param(model, i, &info);
        if (saving && p && i == 0 && mg_model_embedding_copy(model) >= 0)
            p = NULL; /* the head's copy of the embedding: the first pipeline stage writes it */
        shapes[i][0] = info.shape[0];
        shapes[i][1] = info.shape[1];
        char *name = buf + (size_t)k * NAME;
        snprintf(name, NAME, "params/%s", info.name);
        e[k++] = (mg_ckpt_entry){name, p ? p->value : NULL, info.ndim, shapes[i]};
        for (int s = 0; s < nstate; s++) {
            if (p && !p->state[s]) {
                free(e);
                free(buf);
                return mg_error(MG_ESTATE, "checkpoint: %s has no optimizer state %s", p->name,
                                mg_optimizer_state_name(opt, s));
            }
            name = buf + (size_t)k * NAME;
            snprintf(name, NAME, "optim/%s/%s", info.name, mg_optimizer_state_name(opt, s));
            e[k++] = (mg_ckpt_entry){name, p ? p->state[s] : NULL, info.ndim, shapes[i]};
        }
    }
    *out = e;
    *n = count;
    *names = buf;
    return MG_OK;
}

int mg_train_state_save(const char *path, mg_model *model, const mg_optimizer *opt,
                        const mg_plan *plan, const mg_train_state *st) {
    if (model->params.n == 0)
        return mg_error(MG_EINVAL, "checkpoint %s: the model has no parameters", path);
    attr_list l = {calloc(64 + (size_t)mg_model_param_count(model), sizeof(mg_ckpt_attr)), 0,
                   64 + mg_model_param_count(model)};
    if (!l.a) return mg_error(MG_ENOMEM, "checkpoint: out of memory for attributes");
    build_attrs(&l, model, opt, plan, st);
    mg_ckpt_entry *e;
    char *names;
    int n, rc = build_entries(model, opt, 1, &e, &n, &names);
    if (rc == MG_OK) {
        rc = mg_checkpoint_save(path, e, n, l.a, l.n);
        free(e);
        free(names);
    }
    free(l.a);
    return rc;
}

/* ---- load ------------------------------------------------------------------- */

/* The settings compared on resume: those of the model and of the optimizer's
 * state must match (a load refuses a difference); the others may change. */
typedef struct {
    const char *key;
    int must_match;
    int models; /* the models it belongs to: bit (1 << kind) */
} setting;

#define MLPS ((1 << MG_MODEL_MLP) | (1 << MG_MODEL_PERMUTE_MLP))
#define GPT (1 << MG_MODEL_GPT)
#define LLAMA (1 << MG_MODEL_LLAMA)
#define LMS (GPT | LLAMA)
#define ALL (MLPS | LMS)
static const setting settings[] = {
    {"model", 1, ALL},
    {"model.hidden", 1, MLPS | LLAMA},
    {"model.channels", 1, 1 << MG_MODEL_PERMUTE_MLP},
    {"model.classes", 1, MLPS},
    {"model.depth", 1, MLPS},
    {"model.input", 1, MLPS},
    {"model.layers", 1, LMS},
    {"model.heads", 1, LMS},
    {"model.kv_heads", 1, LLAMA},
    {"model.embd", 1, LMS},
    {"model.ctx", 1, LMS},
    {"model.vocab", 1, LMS},
    {"model.rope_theta", 1, LLAMA},
    {"model.norm_eps", 1, LLAMA},
    {"model.tied", 1, LLAMA},
    {"optimizer", 1, ALL},
    {"optimizer.state", 1, ALL},
    {"seed", 0, ALL},
    {"data.file", 0, ALL},
    {"data.batch", 0, ALL},
    {"schedule", 0, ALL},
    {"schedule.lr", 0, ALL},
    {"schedule.warmup", 0, ALL},
    {"schedule.total_steps", 0, ALL},
    {"schedule.lr_min", 0, ALL},
    {"optimizer.beta1", 0, ALL},
    {"optimizer.beta2", 0, ALL},
    {"optimizer.momentum", 0, ALL},
    {"optimizer.weight_decay", 0, ALL},
    {"optimizer.decay", 0, ALL},
    {"clip", 0, ALL},
};

/* A count attribute, parsed exactly: decimal digits only, no overflow. */
static int get_int(const char *path, const mg_ckpt_attr *a, int n, const char *key, int64_t *out) {
    const char *v = mg_ckpt_attr_get(a, n, key);
    char *end = NULL;
    errno = 0;
    long long x = v && v[0] >= '0' && v[0] <= '9' ? strtoll(v, &end, 10) : -1;
    if (!v || end == v || !end || *end != '\0' || x < 0 || errno == ERANGE)
        return mg_error(MG_EFORMAT, "checkpoint %s: attribute \"%s\" is %s%s%s; the file was not "
                        "written by this version of meshgrad, or was altered", path, key,
                        v ? "\"" : "missing", v ? v : "",
                        v ? "\", not a count (0 .. 9223372036854775807)" : "");
    *out = x;
    return MG_OK;
}

/* Refuses a difference in a setting that must match (no on_diff given). */
static int refuse_diff(void *ctx, const mg_train_state_diff *d) {
    (void)ctx;
    if (!d->must_match) return MG_OK;
    return mg_error(MG_EINVAL, "cannot resume from %s: it was saved with %s = %s but this run "
                    "has %s (the model and optimizer must match)", d->path, d->key, d->saved,
                    d->current);
}

static int compare_settings(const char *path, const mg_ckpt_attr *file, int nfile,
                            const attr_list *cur, const mg_model *model, int model_only,
                            mg_train_state_on_diff on_diff, void *ctx) {
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        const setting *s = &settings[i];
        if (!(s->models & (1 << model->kind))) continue;
        if (model_only && strncmp(s->key, "model", 5) != 0) continue;
        if ((strcmp(s->key, "schedule.total_steps") == 0 || strcmp(s->key, "schedule.lr_min") == 0) &&
            strcmp(mg_ckpt_attr_get(cur->a, cur->n, "schedule"), "cosine") != 0)
            continue; /* a constant schedule does not depend on the length of the run */
        const char *want = mg_ckpt_attr_get(cur->a, cur->n, s->key);
        const char *have = mg_ckpt_attr_get(file, nfile, s->key);
        if (!have && strcmp(s->key, "model.depth") == 0) /* saved before --depth: the default */
            have = model->kind == MG_MODEL_PERMUTE_MLP ? "3" : "2";
        if (!have) {
            if (s->must_match)
                return mg_error(MG_EFORMAT, "checkpoint %s has no attribute \"%s\": it was not "
                                "written by a meshgrad training run, or by an older version",
                                path, s->key);
            continue;
        }
        if (strcmp(want, have) == 0) continue;
        if (strcmp(s->key, "data.file") == 0 && mg_path_same_file(want, have))
            continue; /* one file, named another way (another directory, a link) */
        char safe[256]; /* the file's value, printed by the caller: escaped (text.h) */
        mg_train_state_diff d = {path, s->key, mg_text_safe(have, safe, sizeof safe), want,
                                 s->must_match};
        int rc = (on_diff ? on_diff : refuse_diff)(ctx, &d);
        if (rc != MG_OK) return rc;
    }
    return MG_OK;
}

/* A checkpoint of parameters only, as `meshgrad ckpt import` writes: no
 * optimizer, step 0. */
static int params_only(const mg_ckpt_attr *file, int n) {
    const char *o = mg_ckpt_attr_get(file, n, "optimizer"), *s = mg_ckpt_attr_get(file, n, "step");
    return o && strcmp(o, "none") == 0 && s && strcmp(s, "0") == 0;
}

int mg_train_state_load_params(const char *path, mg_model *model) {
    if (model->params.n == 0)
        return mg_error(MG_EINVAL, "checkpoint %s: the model has no parameters", path);
    mg_optimizer none; /* no state: only the parameters are read */
    mg_optimizer_init(&none, MG_OPTIM_SGD, 0.0f, 0.0f);
    mg_ckpt_entry *e;
    char *names;
    int n, rc = build_entries(model, &none, 0, &e, &n, &names);
    if (rc != MG_OK) return rc;
    rc = mg_checkpoint_load(path, e, n, NULL, 0, NULL);
    free(e);
    free(names);
    return rc;
}

int mg_train_state_load(const char *path, mg_model *model, mg_optimizer *opt, const mg_plan *plan,
                        const mg_train_state *cur, mg_train_state *saved,
                        mg_train_state_on_diff on_diff, void *ctx) {
    memset(saved, 0, sizeof *saved);
    if (model->params.n == 0)
        return mg_error(MG_EINVAL, "checkpoint %s: the model has no parameters", path);
    mg_ckpt_attr *file = calloc(MAX_FILE_ATTRS, sizeof *file);
    attr_list l = {calloc(64 + (size_t)mg_model_param_count(model), sizeof(mg_ckpt_attr)), 0,
                   64 + mg_model_param_count(model)};
    if (!file || !l.a) {
        free(file);
        free(l.a);
        return mg_error(MG_ENOMEM, "checkpoint: out of memory for attributes");
    }
    int nfile = 0;
    int rc = mg_checkpoint_read_attrs(path, file, MAX_FILE_ATTRS, &nfile);
    if (rc == MG_OK && !mg_ckpt_attr_get(file, nfile, "model"))
        rc = mg_error(MG_EFORMAT, "checkpoint %s holds no training run (it has no \"model\" "
                      "attribute): resume from a checkpoint saved by a training run", path);
    int fresh = rc == MG_OK && params_only(file, nfile);
    if (rc == MG_OK) {
        build_attrs(&l, model, opt, plan, cur);
        rc = compare_settings(path, file, nfile, &l, model, fresh, on_diff, ctx);
    }
    if (rc == MG_OK && fresh) { /* the parameters; the optimizer and the run start here */
        rc = mg_train_state_load_params(path, model);
        if (rc == MG_OK) {
            opt->step = 0;
            *saved = *cur;
            saved->step = saved->data_epoch = saved->data_cursor = 0;
            saved->data_file = NULL;
            const char *v = mg_ckpt_attr_get(file, nfile, "mesh");
            snprintf(saved->mesh, sizeof saved->mesh, "%s", v ? v : "?");
            v = mg_ckpt_attr_get(file, nfile, "parallel");
            snprintf(saved->parallel, sizeof saved->parallel, "%s", v ? v : "?");
        }
        free(file);
        free(l.a);
        return rc;
    }
    int64_t step = 0, epoch = 0, cursor = 0, opt_step = 0, seed = 0, batch = 0, warmup = 0, total = 0;
    if (rc == MG_OK) rc = get_int(path, file, nfile, "step", &step);
    if (rc == MG_OK) rc = get_int(path, file, nfile, "data.epoch", &epoch);
    if (rc == MG_OK) rc = get_int(path, file, nfile, "data.cursor", &cursor);
    if (rc == MG_OK) rc = get_int(path, file, nfile, "optimizer.step", &opt_step);
    if (rc == MG_OK) rc = get_int(path, file, nfile, "seed", &seed);
    if (rc == MG_OK) rc = get_int(path, file, nfile, "data.batch", &batch);
    if (rc == MG_OK) rc = get_int(path, file, nfile, "schedule.warmup", &warmup);
    if (rc == MG_OK) rc = get_int(path, file, nfile, "schedule.total_steps", &total);
    if (rc == MG_OK && (epoch > step || opt_step > step))
        rc = mg_error(MG_EFORMAT, "checkpoint %s: data.epoch %lld and optimizer.step %lld cannot "
                      "follow %lld steps: the file is damaged or was altered", path,
                      (long long)epoch, (long long)opt_step, (long long)step);
    if (rc == MG_OK) {
        mg_ckpt_entry *e;
        char *names;
        int n;
        rc = build_entries(model, opt, 0, &e, &n, &names);
        if (rc == MG_OK) {
            rc = mg_checkpoint_load(path, e, n, NULL, 0, NULL);
            free(e);
            free(names);
        }
    }
    if (rc == MG_OK) {
        opt->step = opt_step;
        saved->step = step;
        saved->seed = seed;
        saved->data_epoch = epoch;
        saved->data_cursor = cursor;
        saved->batch = batch;
        const char *v;
        if ((v = mg_ckpt_attr_get(file, nfile, "schedule")))
            mg_schedule_kind_parse(v, &saved->schedule.kind);
        if ((v = mg_ckpt_attr_get(file, nfile, "schedule.lr"))) saved->schedule.lr = strtod(v, NULL);
        if ((v = mg_ckpt_attr_get(file, nfile, "clip"))) saved->clip = strtod(v, NULL);
        if ((v = mg_ckpt_attr_get(file, nfile, "schedule.lr_min")))
            saved->schedule.lr_min = strtod(v, NULL);
        saved->schedule.warmup = warmup;
        saved->schedule.total = total;
        v = mg_ckpt_attr_get(file, nfile, "mesh");
        mg_text_safe(v ? v : "?", saved->mesh, sizeof saved->mesh); /* printed: text.h */
        v = mg_ckpt_attr_get(file, nfile, "parallel");
        mg_text_safe(v ? v : "?", saved->parallel, sizeof saved->parallel);
    }
    free(file);
    free(l.a);
    return rc;
}
