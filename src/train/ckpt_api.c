/* ckpt_api.c: mg_ckpt of the training API (meshgrad_train.h): a list of named
 * tensors, optimizers, a step and attributes, saved and loaded with
 * io/checkpoint.h in the layout of `meshgrad train` (nn/train_state.h):
 * /params/<name>, and the attributes step, mesh, placements.<name>,
 * meshgrad.version, then the caller's. The optimizers (docs/CHECKPOINTS.md):
 * - one set by mg_ckpt_set_optim, unnamed, in the layout `meshgrad train`
 *   writes: /optim/<param>/<state>, the attributes optimizer (its kind),
 *   optimizer.state, optimizer.step and its settings optimizer.<setting>;
 * - or several, each named by mg_ckpt_add_optim: /optim/<optimizer>/<param>/
 *   <state>, the attribute optimizer.names (the names, in the order added)
 *   and optimizer.<optimizer>.kind, .state, .step and .<setting> for each.
 * A load maps the file's optimizers onto the checkpoint's by name; one
 * optimizer on each side loads whatever its name (or none) on either side.
 *
 * A load checks everything a file can get wrong before any tensor changes:
 * its step and optimizer attributes, that its datasets under /params are
 * exactly the names given (and under /optim exactly the optimizers' state),
 * and (io/checkpoint.h) every shape, layout and checksum filter. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "dist/mesh.h"
#include "io/checkpoint.h"
#include "meshgrad.h"
#include "status.h"
#include "train/api.h"

/* "optim/" + an optimizer's name (31) + "/" + a parameter's (63) + "/" + a state's */
#define ENTRY_NAME 160
#define OPTIM_NAME_MAX 32 /* with the NUL: "optimizer.<name>.weight_decay" fits a key */
#define MAX_OPTIMS 16     /* "optimizer.names" fits an attribute */

/* An optimizer of the checkpoint: unnamed (mg_ckpt_set_optim, name "") or named. */
typedef struct {
    mg_optim *optim;
    char name[OPTIM_NAME_MAX];
} ckpt_optim;

struct mg_ckpt {
    char (*names)[MG_PARAM_NAME_MAX];
    mg_dtensor **tensors;
    int n, cap, cap_tensors;
    ckpt_optim optims[MAX_OPTIMS]; /* one unnamed, or up to MAX_OPTIMS named */
    int noptims;
    int64_t step;
    mg_ckpt_attr *attrs; /* set by the caller, or read by the last load */
    int nattrs, cap_attrs;
};

mg_ckpt *mg_ckpt_new(void) {
    mg_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck) return mg_error_null(MG_ENOMEM, "mg_ckpt_new: out of memory");
    return ck;
}

void mg_ckpt_free(mg_ckpt *ck) {
    if (!ck) return;
    for (int i = 0; i < ck->n; i++) ck->tensors[i]->holders--;
    for (int i = 0; i < ck->noptims; i++) ck->optims[i].optim->holders--;
    free(ck->names);
    free(ck->tensors);
    free(ck->attrs);
    free(ck);
}

int mg_ckpt_add(mg_ckpt *ck, const char *name, mg_dtensor *tensor) {
    const char *who = "mg_ckpt_add";
    if (!mg_arg_given(ck, who, "the checkpoint")) return MG_EINVAL;
    int rc = mg_api_name_check(who, "tensor name", name);
    if (rc == MG_OK) rc = mg_api_tensor_check(who, name, tensor, 1);
    for (int i = 0; rc == MG_OK && i < ck->n; i++)
        if (strcmp(ck->names[i], name) == 0)
            rc = mg_error(MG_EINVAL, "%s: \"%s\" is added twice", who, name);
    if (rc == MG_OK)
        rc = mg_array_grow((void **)&ck->names, &ck->cap, ck->n + 1, sizeof *ck->names, who);
    if (rc == MG_OK)
        rc = mg_array_grow((void **)&ck->tensors, &ck->cap_tensors, ck->n + 1,
                           sizeof *ck->tensors, who);
    if (rc != MG_OK) return rc;
    snprintf(ck->names[ck->n], sizeof ck->names[0], "%s", name);
    ck->tensors[ck->n++] = tensor;
    tensor->holders++; /* mg_dtensor_free refuses it until mg_ckpt_free */
    return MG_OK;
}

int mg_ckpt_set_optim(mg_ckpt *ck, mg_optim *optim) {
    const char *who = "mg_ckpt_set_optim";
    if (!mg_arg_given(ck, who, "the checkpoint")) return MG_EINVAL;
    if (!optim) { /* none from now on */
        for (int i = 0; i < ck->noptims; i++) ck->optims[i].optim->holders--;
        ck->noptims = 0;
        return MG_OK;
    }
    if (ck->noptims == 1 && ck->optims[0].optim == optim && !ck->optims[0].name[0]) return MG_OK;
    if (ck->noptims > 0) /* it replaced the first one, whose state was then not saved */
        return mg_error(MG_EINVAL, "%s: the checkpoint holds %s already, and it saves one "
                        "optimizer unnamed: to save several, name each with mg_ckpt_add_optim("
                        "ckpt, name, optim); to replace it, mg_ckpt_set_optim(ckpt, NULL) first",
                        who, ck->optims[0].name[0] ? "named optimizers" : "an optimizer");
    ck->optims[0] = (ckpt_optim){optim, ""};
    ck->noptims = 1;
    optim->holders++; /* mg_optim_free refuses it until mg_ckpt_free */
    return MG_OK;
}

int mg_ckpt_add_optim(mg_ckpt *ck, const char *name, mg_optim *optim) {
    const char *who = "mg_ckpt_add_optim";
    if (!mg_arg_given(ck, who, "the checkpoint")) return MG_EINVAL;
    int rc = mg_api_name_check(who, "optimizer name", name);
    if (rc != MG_OK) return rc;
    if (strlen(name) >= OPTIM_NAME_MAX)
        return mg_error(MG_EINVAL, "%s: optimizer name \"%s\" has %zu characters; at most %d "
                        "fit (e.g. \"decay\", \"no_decay\")", who, name, strlen(name),
                        OPTIM_NAME_MAX - 1);
    if (!optim) return mg_error(MG_EINVAL, "%s: the optimizer \"%s\" is NULL", who, name);
    if (ck->noptims > 0 && !ck->optims[0].name[0])
        return mg_error(MG_EINVAL, "%s: the checkpoint holds an unnamed optimizer "
                        "(mg_ckpt_set_optim): name every optimizer with mg_ckpt_add_optim, or "
                        "hold none first (mg_ckpt_set_optim(ckpt, NULL))", who);
    for (int i = 0; i < ck->noptims; i++) {
        if (strcmp(ck->optims[i].name, name) == 0)
            return mg_error(MG_EINVAL, "%s: an optimizer is named \"%s\" already: give each its "
                            "own name", who, name);
        if (ck->optims[i].optim == optim)
            return mg_error(MG_EINVAL, "%s: this optimizer is in the checkpoint already, as "
                            "\"%s\": add each optimizer once", who, ck->optims[i].name);
    }
    if (ck->noptims == MAX_OPTIMS)
        return mg_error(MG_EINVAL, "%s: the checkpoint holds %d optimizers, as many as one "
                        "holds: give \"%s\" to a checkpoint of its own", who, MAX_OPTIMS, name);
    ck->optims[ck->noptims] = (ckpt_optim){optim, ""};
    snprintf(ck->optims[ck->noptims++].name, OPTIM_NAME_MAX, "%s", name);
    optim->holders++; /* mg_optim_free refuses it until mg_ckpt_free */
    return MG_OK;
}

int mg_ckpt_set_step(mg_ckpt *ck, int64_t step) {
    if (!mg_arg_given(ck, "mg_ckpt_set_step", "the checkpoint")) return MG_EINVAL;
    if (step < 0)
        return mg_error(MG_EINVAL, "mg_ckpt_set_step: step %lld is negative", (long long)step);
    ck->step = step;
    return MG_OK;
}

int64_t mg_ckpt_step(const mg_ckpt *ck) {
    return mg_arg_given(ck, "mg_ckpt_step", "the checkpoint") ? ck->step : -1;
}

/* ---- attributes -------------------------------------------------------------------- */

/* Keys this file writes itself. */
static int is_reserved(const char *key) {
    static const char *const whole[] = {"format", "version", "step", "mesh", "meshgrad.version",
                                        "optimizer"};
    return mg_name_find(key, whole, 6) >= 0 || strncmp(key, "optimizer.", 10) == 0 ||
           strncmp(key, "placements.", 11) == 0;
}

static int attr_put(mg_ckpt *ck, const char *key, const char *value) {
    int i = 0;
    while (i < ck->nattrs && strcmp(ck->attrs[i].key, key) != 0) i++;
    if (i == ck->nattrs) {
        int rc = mg_array_grow((void **)&ck->attrs, &ck->cap_attrs, i + 1, sizeof *ck->attrs,
                               "checkpoint attributes");
        if (rc != MG_OK) return rc;
        ck->nattrs++;
    }
    snprintf(ck->attrs[i].key, sizeof ck->attrs[i].key, "%s", key);
    snprintf(ck->attrs[i].value, sizeof ck->attrs[i].value, "%s", value);
    return MG_OK;
}

int mg_ckpt_set_attr(mg_ckpt *ck, const char *key, const char *value) {
    const char *who = "mg_ckpt_set_attr";
    if (!mg_arg_given(ck, who, "the checkpoint")) return MG_EINVAL;
    int rc = mg_api_name_check(who, "attribute key", key);
    if (rc != MG_OK) return rc;
    if (is_reserved(key))
        return mg_error(MG_EINVAL, "%s: \"%s\" is written by mg_ckpt_save itself (format, "
                        "version, step, mesh, meshgrad.version, optimizer, optimizer.*, "
                        "placements.*): choose another key", who, key);
    if (!value) return mg_error(MG_EINVAL, "%s: the value of \"%s\" is NULL", who, key);
    if (strlen(value) >= sizeof ck->attrs[0].value)
        return mg_error(MG_EINVAL, "%s: the value of \"%s\" has %zu characters; at most %zu fit",
                        who, key, strlen(value), sizeof ck->attrs[0].value - 1);
    return attr_put(ck, key, value);
}

const char *mg_ckpt_get_attr(const mg_ckpt *ck, const char *key) {
    if (!mg_arg_given(ck, "mg_ckpt_get_attr", "the checkpoint") ||
        !mg_arg_given(key, "mg_ckpt_get_attr", "the key"))
        return NULL;
    const char *v = mg_ckpt_attr_get(ck->attrs, ck->nattrs, key);
    if (!v) mg_error(MG_EINVAL, "mg_ckpt_get_attr: there is no attribute \"%s\"", key);
    return v;
}

/* ---- entries --------------------------------------------------------------------------- */

/* params/<name> for every tensor, then for every optimizer i, for every state
 * of each of its parameters, optim/<param>/<state> when in_file[i] is "" (an
 * unnamed optimizer) or optim/<in_file[i]>/<param>/<state>; *names (free it)
 * holds the entries' names. in_file: the optimizers' names in the file. */
static int build_entries(const mg_ckpt *ck, char (*in_file)[OPTIM_NAME_MAX], mg_ckpt_entry **out,
                         int *n, char **names) {
    int count = ck->n, k = 0;
    for (int i = 0; i < ck->noptims; i++) {
        const mg_optim *o = ck->optims[i].optim;
        count += o->params.n * mg_optimizer_state_count(&o->opt);
    }
    mg_ckpt_entry *e = calloc((size_t)count + 1, sizeof *e);
    char *buf = calloc((size_t)count + 1, ENTRY_NAME);
    if (!e || !buf) {
        free(e);
        free(buf);
        return mg_error(MG_ENOMEM, "checkpoint: out of memory for %d entries", count);
    }
    for (int i = 0; i < ck->n; i++, k++) {
        snprintf(buf + (size_t)k * ENTRY_NAME, ENTRY_NAME, "params/%s", ck->names[i]);
        e[k] = (mg_ckpt_entry){.name = buf + (size_t)k * ENTRY_NAME, .tensor = ck->tensors[i]};
    }
    for (int j = 0; j < ck->noptims; j++) {
        const mg_optim *o = ck->optims[j].optim;
        int nstate = mg_optimizer_state_count(&o->opt);
        for (int i = 0; i < o->params.n; i++)
            for (int s = 0; s < nstate; s++, k++) {
                const mg_param *p = &o->params.p[i];
                snprintf(buf + (size_t)k * ENTRY_NAME, ENTRY_NAME, "optim/%s%s%s/%s", in_file[j],
                         in_file[j][0] ? "/" : "", p->name, mg_optimizer_state_name(&o->opt, s));
                e[k] = (mg_ckpt_entry){.name = buf + (size_t)k * ENTRY_NAME, .tensor = p->state[s]};
            }
    }
    *out = e;
    *n = count;
    *names = buf;
    return MG_OK;
}

/* A digest of the entries' names, global shapes and placements. */
static uint64_t entries_hash(const mg_ckpt_entry *e, int n) {
    uint64_t h = MG_API_HASH_START;
    for (int i = 0; i < n; i++) h = mg_api_hash_tensor(h, e[i].name, e[i].tensor);
    return h;
}

/* ---- save -------------------------------------------------------------------------------- */

typedef struct {
    mg_ckpt_attr *a;
    int n, cap;
} attr_out;

static void put(attr_out *l, const char *key, const char *value) {
    if (l->n == l->cap || strlen(key) >= sizeof l->a[0].key) return; /* informational */
    snprintf(l->a[l->n].key, sizeof l->a[0].key, "%s", key);
    snprintf(l->a[l->n++].value, sizeof l->a[0].value, "%s", value);
}

/* the shortest text that reads back as exactly v */
static void put_float(attr_out *l, const char *key, float v) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    put(l, key, buf);
}

static void put_int(attr_out *l, const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    put(l, key, buf);
}

/* "exp_avg,exp_avg_sq", "momentum_buffer" or "none": an optimizer's state. */
static const char *state_names(const mg_optim *o, char *buf, size_t len) {
    int n = mg_optimizer_state_count(&o->opt);
    buf[0] = '\0';
    for (int s = 0; s < n; s++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", s ? "," : "",
                 mg_optimizer_state_name(&o->opt, s));
    return n ? buf : "none";
}

/* An optimizer's attributes: unnamed (name "") optimizer, optimizer.state,
 * optimizer.step, optimizer.<setting>; named optimizer.<name>.kind,
 * optimizer.<name>.state... */
static void put_optimizer(attr_out *l, const char *name, const mg_optim *o) {
    char prefix[16 + OPTIM_NAME_MAX], key[64], buf[256];
    snprintf(prefix, sizeof prefix, "optimizer.%.*s%s", OPTIM_NAME_MAX - 1, name,
             name[0] ? "." : "");
    static const char *const settings[] = {"momentum", "weight_decay", "beta1", "beta2", "eps"};
    const float values[] = {o->opt.momentum, o->opt.weight_decay, o->opt.beta1, o->opt.beta2,
                            o->opt.eps};
    snprintf(key, sizeof key, "%skind", prefix);
    put(l, name[0] ? key : "optimizer", mg_optim_kind_name(o->opt.kind));
    snprintf(key, sizeof key, "%sstate", prefix);
    put(l, key, state_names(o, buf, sizeof buf));
    snprintf(key, sizeof key, "%sstep", prefix);
    put_int(l, key, o->opt.step);
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof key, "%s%s", prefix, settings[i]);
        put_float(l, key, values[i]);
    }
}

/* The attributes this file writes, then the caller's. */
static void build_attrs(const mg_ckpt *ck, attr_out *l) {
    char buf[MAX_OPTIMS * OPTIM_NAME_MAX] = "", key[128];
    put_int(l, "step", ck->step);
    if (ck->noptims > 0 && ck->optims[0].name[0]) { /* named: their list first */
        for (int i = 0; i < ck->noptims; i++)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? "," : "",
                     ck->optims[i].name);
        put(l, "optimizer.names", buf);
    }
    for (int i = 0; i < ck->noptims; i++) put_optimizer(l, ck->optims[i].name, ck->optims[i].optim);
    const mg_mesh *mesh = ck->tensors[0]->spec.mesh;
    put(l, "mesh", mg_mesh_format(buf, sizeof buf, mesh));
    for (int i = 0; i < ck->n; i++) {
        const mg_spec *s = &ck->tensors[i]->spec;
        snprintf(key, sizeof key, "placements.%s", ck->names[i]);
        put(l, key, mg_placements_format(buf, sizeof buf, s->p, s->mesh->ndim));
    }
    put(l, "meshgrad.version", mg_version());
    for (int i = 0; i < ck->nattrs; i++)
        if (!is_reserved(ck->attrs[i].key)) put(l, ck->attrs[i].key, ck->attrs[i].value);
}

/* Of a save or load: the checkpoint and the path are given and it holds a
 * tensor. */
static int begin(const char *who, const mg_ckpt *ck, const char *path) {
    if (!ck) return mg_error(MG_EINVAL, "%s: the checkpoint is NULL", who);
    if (!path) return mg_error(MG_EINVAL, "%s: the path is NULL", who);
    if (ck->n == 0)
        return mg_error(MG_EINVAL, "%s: the checkpoint holds no tensor: mg_ckpt_add them first",
                        who);
    return MG_OK;
}

/* The optimizers' names as the checkpoint holds them (a save writes them so). */
static void own_names(const mg_ckpt *ck, char (*in_file)[OPTIM_NAME_MAX]) {
    for (int i = 0; i < ck->noptims; i++) memcpy(in_file[i], ck->optims[i].name, OPTIM_NAME_MAX);
}

int mg_ckpt_save(mg_ckpt *ck, const char *path) {
    const char *who = "mg_ckpt_save";
    mg_ckpt_entry *e = NULL;
    char *names = NULL, in_file[MAX_OPTIMS][OPTIM_NAME_MAX];
    int n = 0, rc = begin(who, ck, path);
    if (rc == MG_OK) {
        own_names(ck, in_file);
        rc = build_entries(ck, in_file, &e, &n, &names);
    }
    attr_out l = {NULL, 0, 0};
    if (rc == MG_OK) {
        l.cap = 16 + ck->n + ck->nattrs + 8 * ck->noptims;
        if (!(l.a = calloc((size_t)l.cap, sizeof *l.a)))
            rc = mg_error(MG_ENOMEM, "%s: out of memory for attributes", who);
    }
    uint64_t h = 0;
    if (rc == MG_OK) {
        build_attrs(ck, &l);
        h = entries_hash(e, n);
        for (int i = 0; i < l.n; i++) h = mg_api_hash(h, &l.a[i], sizeof l.a[i]);
        h = mg_api_hash(h, path, strlen(path));
    }
    rc = mg_api_agree(rc, h, who, "tensors, placements, path, step or attributes");
    if (rc == MG_OK) rc = mg_checkpoint_save(path, e, n, l.a, l.n);
    free(e);
    free(names);
    free(l.a);
    return rc;
}

/* ---- load ------------------------------------------------------------------------------- */

/* A count attribute of the file, parsed exactly (digits only, no overflow). */
static int get_count(const char *path, const mg_ckpt_attr *a, int n, const char *key,
                     int64_t *out) {
    const char *v = mg_ckpt_attr_get(a, n, key);
    char *end = NULL;
    errno = 0;
    long long x = v && v[0] >= '0' && v[0] <= '9' ? strtoll(v, &end, 10) : -1;
    if (!v)
        return mg_error(MG_EFORMAT, "checkpoint %s has no \"%s\" attribute: it was not saved by "
                        "mg_ckpt_save or meshgrad train", path, key);
    if (end == v || !end || *end != '\0' || x < 0 || errno == ERANGE)
        return mg_error(MG_EFORMAT, "checkpoint %s: attribute \"%s\" is \"%s\", not a count; the "
                        "file was altered", path, key, v);
    *out = x;
    return MG_OK;
}

/* The file's optimizer under `name` ("": the unnamed one) is `o`: kind and
 * state tensors; *opt_step its step. */
static int check_optimizer(const char *path, const mg_optim *o, const char *name,
                           const mg_ckpt_attr *a, int n, int64_t step, int64_t *opt_step) {
    char prefix[16 + OPTIM_NAME_MAX], key[64], what[16 + OPTIM_NAME_MAX];
    snprintf(prefix, sizeof prefix, "optimizer.%.*s%s", OPTIM_NAME_MAX - 1, name,
             name[0] ? "." : "");
    snprintf(key, sizeof key, "%skind", prefix);
    snprintf(what, sizeof what, name[0] ? "optimizer \"%s\"" : "optimizer%s", name);
    const char *kind = mg_ckpt_attr_get(a, n, name[0] ? key : "optimizer");
    const char *want = mg_optim_kind_name(o->opt.kind);
    if (!kind && !name[0])
        return mg_error(MG_EINVAL, "cannot load %s with an optimizer: it was saved without one; "
                        "load it without mg_ckpt_set_optim", path);
    if (!kind)
        return mg_error(MG_EFORMAT, "checkpoint %s names the optimizer \"%s\" but has no \"%s\" "
                        "attribute: the file was altered", path, name, key);
    if (strcmp(kind, want) != 0)
        return mg_error(MG_EINVAL, "cannot load %s: it holds the state of %s, but the %s is %s: "
                        "make the optimizer it was saved with", path, kind, what, want);
    char names[128];
    const char *mine = state_names(o, names, sizeof names);
    snprintf(key, sizeof key, "%sstate", prefix);
    const char *have = mg_ckpt_attr_get(a, n, key);
    if (!have || strcmp(have, mine) != 0)
        return mg_error(MG_EINVAL, "cannot load %s: its %s state is %s, but this %s's is %s (SGD "
                        "keeps a momentum buffer only when momentum is not 0)", path, kind,
                        have ? have : "missing", what, mine);
    snprintf(key, sizeof key, "%sstep", prefix);
    int rc = get_count(path, a, n, key, opt_step);
    if (rc == MG_OK && *opt_step > step)
        rc = mg_error(MG_EFORMAT, "checkpoint %s: %s %lld cannot follow %lld steps: the file was "
                      "altered", path, key, (long long)*opt_step, (long long)step);
    return rc;
}

/* The optimizers of the file: none, one unnamed (its attribute "optimizer":
 * names[0] ""), or those named by optimizer.names. */
static int file_optimizers(const char *path, const mg_ckpt_attr *a, int n,
                           char (*names)[OPTIM_NAME_MAX], int *count) {
    const char *list = mg_ckpt_attr_get(a, n, "optimizer.names");
    *count = 0;
    if (!list) {
        if (mg_ckpt_attr_get(a, n, "optimizer")) names[(*count)++][0] = '\0';
        return MG_OK;
    }
    for (const char *p = list;; p++) {
        size_t len = strcspn(p, ",");
        int ok = *count < MAX_OPTIMS && len >= 1 && len < OPTIM_NAME_MAX && p[0] != '.';
        for (size_t i = 0; ok && i < len; i++)
            ok = (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
                 (p[i] >= '0' && p[i] <= '9') || p[i] == '_' || p[i] == '.' || p[i] == '-';
        if (ok) {
            memcpy(names[*count], p, len);
            names[*count][len] = '\0';
            for (int i = 0; ok && i < *count; i++) ok = strcmp(names[i], names[*count]) != 0;
        }
        if (!ok)
            return mg_error(MG_EFORMAT, "checkpoint %s: attribute \"optimizer.names\" is "
                            "\"%.200s\", not up to %d distinct names: the file was altered",
                            path, list, MAX_OPTIMS);
        (*count)++;
        p += len;
        if (!*p) return MG_OK;
    }
}

/* "decay, no_decay" */
static const char *name_list(char (*names)[OPTIM_NAME_MAX], int n, char *buf, size_t len) {
    buf[0] = '\0';
    for (int i = 0; i < n; i++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", i ? ", " : "", names[i]);
    return buf;
}

/* in_file[i]: the file's name of the checkpoint's optimizer i. One optimizer
 * on each side goes with the other whatever their names; else every
 * optimizer of either side must be named, with the same names. */
static int map_optimizers(const char *path, const mg_ckpt *ck, char (*file)[OPTIM_NAME_MAX],
                          int nfile, char (*in_file)[OPTIM_NAME_MAX]) {
    char list[MAX_OPTIMS * (OPTIM_NAME_MAX + 2)];
    if (ck->noptims == 0) return MG_OK;
    if (nfile == 0)
        return mg_error(MG_EINVAL, "cannot load %s with an optimizer: it was saved without one; "
                        "load it without mg_ckpt_set_optim or mg_ckpt_add_optim", path);
    if (ck->noptims == 1 && nfile == 1) {
        memcpy(in_file[0], file[0], OPTIM_NAME_MAX);
        return MG_OK;
    }
    if (!file[0][0])
        return mg_error(MG_EINVAL, "cannot load %s: it holds one optimizer's state, saved unnamed, "
                        "but %d optimizers were given: load it with one", path, ck->noptims);
    if (!ck->optims[0].name[0])
        return mg_error(MG_EINVAL, "cannot load %s: it holds the state of %d optimizers (%s): name "
                        "each with mg_ckpt_add_optim to load them", path, nfile,
                        name_list(file, nfile, list, sizeof list));
    for (int i = 0; i < ck->noptims; i++) {
        int k = 0;
        while (k < nfile && strcmp(file[k], ck->optims[i].name) != 0) k++;
        if (k == nfile)
            return mg_error(MG_EINVAL, "cannot load %s: it holds no optimizer \"%s\" (it holds "
                            "%s): name the optimizers as they were saved", path,
                            ck->optims[i].name, name_list(file, nfile, list, sizeof list));
        memcpy(in_file[i], file[k], OPTIM_NAME_MAX);
    }
    for (int k = 0; k < nfile; k++) {
        int i = 0;
        while (i < ck->noptims && strcmp(file[k], ck->optims[i].name) != 0) i++;
        if (i == ck->noptims)
            return mg_error(MG_EINVAL, "cannot load %s: it holds the state of optimizer \"%s\" "
                            "too, which was not given: add every optimizer it holds", path,
                            file[k]);
    }
    return MG_OK;
}

typedef struct {
    const char *path;
    const mg_ckpt_entry *e;
    int n, nparams, optim; /* entries; of them tensors; optimizers' state is loaded */
    char *found;
} match;

/* One dataset of the file: under params/ (and optim/ with an optimizer) it
 * must be one of the entries. */
static int match_dataset(void *ctx, const char *name) {
    match *m = ctx;
    int params = strncmp(name, "params/", 7) == 0, optim = strncmp(name, "optim/", 6) == 0;
    if (!params && !(optim && m->optim)) return MG_OK;
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->e[i].name, name) == 0) {
            m->found[i] = 1;
            return MG_OK;
        }
    if (params)
        return mg_error(MG_EINVAL, "cannot load %s: it holds /%s, which is not among the %d "
                        "tensors given: it is a checkpoint of another model (or add every "
                        "tensor it holds)", m->path, name, m->nparams);
    return mg_error(MG_EINVAL, "cannot load %s: it holds /%s, which is no state of the "
                    "optimizers given: it was saved with other parameters", m->path, name);
}

/* Every dataset of the file under params/ (and optim/) is an entry and every
 * entry is in the file. */
static int match_file(const char *path, const mg_ckpt *ck, const mg_ckpt_entry *e, int n) {
    match m = {path, e, n, ck->n, ck->noptims > 0, calloc((size_t)n + 1, 1)};
    if (!m.found) return mg_error(MG_ENOMEM, "checkpoint: out of memory");
    int rc = mg_checkpoint_list(path, match_dataset, &m);
    for (int i = 0; rc == MG_OK && i < n; i++)
        if (!m.found[i])
            rc = mg_error(MG_EINVAL, "cannot load %s: it has no /%s: it is a checkpoint of "
                          "another model%s", path, e[i].name,
                          i < ck->n ? "" : ", or its optimizer had other parameters");
    free(m.found);
    return rc;
}

int mg_ckpt_load(mg_ckpt *ck, const char *path) {
    const char *who = "mg_ckpt_load";
    mg_ckpt_entry *e = NULL;
    char *names = NULL, in_file[MAX_OPTIMS][OPTIM_NAME_MAX], file_names[MAX_OPTIMS][OPTIM_NAME_MAX];
    int n = 0, rc = begin(who, ck, path);
    uint64_t h = 0;
    if (rc == MG_OK) { /* what every rank was given: its own names */
        own_names(ck, in_file);
        rc = build_entries(ck, in_file, &e, &n, &names);
        if (rc == MG_OK) h = mg_api_hash(entries_hash(e, n), path, strlen(path));
        free(e);
        free(names);
        e = NULL;
        names = NULL;
    }
    if ((rc = mg_api_agree(rc, h, who, "tensors, placements, optimizers or path")) != MG_OK)
        return rc;
    int max = 256 + ck->n + 8 * MAX_OPTIMS, nfile = 0, nopt = 0;
    int64_t step = 0, opt_step[MAX_OPTIMS] = {0};
    mg_ckpt_attr *file = calloc((size_t)max, sizeof *file);
    rc = file ? mg_checkpoint_read_attrs(path, file, max, &nfile)
              : mg_error(MG_ENOMEM, "%s: out of memory for attributes", who);
    if (rc == MG_OK) rc = get_count(path, file, nfile, "step", &step);
    if (rc == MG_OK && ck->noptims > 0) rc = file_optimizers(path, file, nfile, file_names, &nopt);
    if (rc == MG_OK) rc = map_optimizers(path, ck, file_names, nopt, in_file);
    for (int i = 0; rc == MG_OK && i < ck->noptims; i++)
        rc = check_optimizer(path, ck->optims[i].optim, in_file[i], file, nfile, step,
                             &opt_step[i]);
    if (rc == MG_OK) rc = build_entries(ck, in_file, &e, &n, &names); /* the file's names */
    if (rc == MG_OK) rc = match_file(path, ck, e, n);
    if (rc == MG_OK) rc = mg_checkpoint_load(path, e, n, NULL, 0, NULL);
    if (rc == MG_OK) {
        for (int i = 0; i < ck->noptims; i++) ck->optims[i].optim->opt.step = opt_step[i];
        ck->step = step;
        free(ck->attrs);
        ck->attrs = file;
        ck->nattrs = nfile;
        ck->cap_attrs = max;
        file = NULL;
    }
    free(file);
    free(e);
    free(names);
    return rc;
}
