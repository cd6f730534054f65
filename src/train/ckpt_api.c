/* ckpt_api.c: mg_ckpt of the training API (meshgrad_train.h): a list of named
 * tensors, an optimizer, a step and attributes, saved and loaded with
 * io/checkpoint.h in the layout of `meshgrad train` (nn/train_state.h):
 * /params/<name>, /optim/<name>/<state>, and the attributes step, optimizer,
 * optimizer.state, optimizer.step and the optimizer's settings, mesh,
 * placements.<name>, meshgrad.version, then the caller's.
 *
 * A load checks everything a file can get wrong before any tensor changes:
 * its step and optimizer attributes, that its datasets under /params are
 * exactly the names given (and under /optim exactly the optimizer's state),
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

#define ENTRY_NAME 96 /* "optim/" + a name (63) + "/" + a state name */

struct mg_ckpt {
    char (*names)[MG_PARAM_NAME_MAX];
    mg_dtensor **tensors;
    int n, cap, cap_tensors;
    mg_optim *optim;
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
    if (ck->optim) ck->optim->holders--;
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
    if (!mg_arg_given(ck, "mg_ckpt_set_optim", "the checkpoint")) return MG_EINVAL;
    if (ck->optim) ck->optim->holders--;
    ck->optim = optim;
    if (optim) optim->holders++; /* mg_optim_free refuses it until mg_ckpt_free */
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

/* params/<name> for every tensor, then optim/<name>/<state> for every state
 * of the optimizer; *names (free it) holds the entries' names. */
static int build_entries(const mg_ckpt *ck, mg_ckpt_entry **out, int *n, char **names) {
    const mg_optim *o = ck->optim;
    int nstate = o ? mg_optimizer_state_count(&o->opt) : 0;
    int count = ck->n + (o ? o->params.n * nstate : 0), k = 0;
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
    for (int i = 0; o && i < o->params.n; i++)
        for (int s = 0; s < nstate; s++, k++) {
            const mg_param *p = &o->params.p[i];
            snprintf(buf + (size_t)k * ENTRY_NAME, ENTRY_NAME, "optim/%s/%s", p->name,
                     mg_optimizer_state_name(&o->opt, s));
            e[k] = (mg_ckpt_entry){.name = buf + (size_t)k * ENTRY_NAME, .tensor = p->state[s]};
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

/* The attributes this file writes, then the caller's. */
static void build_attrs(const mg_ckpt *ck, attr_out *l) {
    char buf[256] = "", key[128];
    put_int(l, "step", ck->step);
    const mg_optim *o = ck->optim;
    if (o) {
        put(l, "optimizer", mg_optim_kind_name(o->opt.kind));
        int n = mg_optimizer_state_count(&o->opt);
        for (int s = 0; s < n; s++)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", s ? "," : "",
                     mg_optimizer_state_name(&o->opt, s));
        put(l, "optimizer.state", n ? buf : "none");
        put_int(l, "optimizer.step", o->opt.step);
        put_float(l, "optimizer.momentum", o->opt.momentum);
        put_float(l, "optimizer.weight_decay", o->opt.weight_decay);
        put_float(l, "optimizer.beta1", o->opt.beta1);
        put_float(l, "optimizer.beta2", o->opt.beta2);
        put_float(l, "optimizer.eps", o->opt.eps);
    }
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

/* Of a save or load: the checkpoint and the path are given, it holds a
 * tensor, and its entries (build_entries). */
static int begin(const char *who, const mg_ckpt *ck, const char *path, mg_ckpt_entry **e, int *n,
                 char **names) {
    *e = NULL;
    *names = NULL;
    *n = 0;
    if (!ck) return mg_error(MG_EINVAL, "%s: the checkpoint is NULL", who);
    if (!path) return mg_error(MG_EINVAL, "%s: the path is NULL", who);
    if (ck->n == 0)
        return mg_error(MG_EINVAL, "%s: the checkpoint holds no tensor: mg_ckpt_add them first",
                        who);
    return build_entries(ck, e, n, names);
}

int mg_ckpt_save(mg_ckpt *ck, const char *path) {
    const char *who = "mg_ckpt_save";
    mg_ckpt_entry *e;
    char *names;
    int n, rc = begin(who, ck, path, &e, &n, &names);
    attr_out l = {NULL, 0, 0};
    if (rc == MG_OK) {
        l.cap = 16 + ck->n + ck->nattrs;
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

/* The file's optimizer is the one given: kind and state tensors. */
static int check_optimizer(const char *path, const mg_optim *o, const mg_ckpt_attr *a, int n,
                           int64_t step, int64_t *opt_step) {
    const char *kind = mg_ckpt_attr_get(a, n, "optimizer");
    const char *want = mg_optim_kind_name(o->opt.kind);
    if (!kind)
        return mg_error(MG_EINVAL, "cannot load %s with an optimizer: it was saved without one; "
                        "load it without mg_ckpt_set_optim", path);
    if (strcmp(kind, want) != 0)
        return mg_error(MG_EINVAL, "cannot load %s: it holds the state of %s, but the optimizer "
                        "is %s: make the optimizer it was saved with", path, kind, want);
    char names[128] = "";
    int ns = mg_optimizer_state_count(&o->opt);
    for (int s = 0; s < ns; s++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", s ? "," : "",
                 mg_optimizer_state_name(&o->opt, s));
    const char *have = mg_ckpt_attr_get(a, n, "optimizer.state");
    if (!have || strcmp(have, ns ? names : "none") != 0)
        return mg_error(MG_EINVAL, "cannot load %s: its %s state is %s, but this optimizer's is "
                        "%s (SGD keeps a momentum buffer only when momentum is not 0)", path,
                        kind, have ? have : "missing", ns ? names : "none");
    int rc = get_count(path, a, n, "optimizer.step", opt_step);
    if (rc == MG_OK && *opt_step > step)
        rc = mg_error(MG_EFORMAT, "checkpoint %s: optimizer.step %lld cannot follow %lld steps: "
                      "the file was altered", path, (long long)*opt_step, (long long)step);
    return rc;
}

typedef struct {
    const char *path;
    const mg_ckpt_entry *e;
    int n, nparams, optim; /* entries; of them tensors; an optimizer's state is loaded */
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
                    "optimizer given: it was saved with other parameters", m->path, name);
}

/* Every dataset of the file under params/ (and optim/) is an entry and every
 * entry is in the file. */
static int match_file(const char *path, const mg_ckpt *ck, const mg_ckpt_entry *e, int n) {
    match m = {path, e, n, ck->n, ck->optim != NULL, calloc((size_t)n + 1, 1)};
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
    mg_ckpt_entry *e;
    char *names;
    int n, rc = begin(who, ck, path, &e, &n, &names);
    uint64_t h = rc == MG_OK ? mg_api_hash(entries_hash(e, n), path, strlen(path)) : 0;
    if ((rc = mg_api_agree(rc, h, who, "tensors, placements or path")) != MG_OK) {
        free(e);
        free(names);
        return rc;
    }
    int max = 256 + ck->n, nfile = 0;
    int64_t step = 0, opt_step = 0;
    mg_ckpt_attr *file = calloc((size_t)max, sizeof *file);
    rc = file ? mg_checkpoint_read_attrs(path, file, max, &nfile)
              : mg_error(MG_ENOMEM, "%s: out of memory for attributes", who);
    if (rc == MG_OK) rc = get_count(path, file, nfile, "step", &step);
    if (rc == MG_OK && ck->optim)
        rc = check_optimizer(path, ck->optim, file, nfile, step, &opt_step);
    if (rc == MG_OK) rc = match_file(path, ck, e, n);
    if (rc == MG_OK) rc = mg_checkpoint_load(path, e, n, NULL, 0, NULL);
    if (rc == MG_OK) {
        if (ck->optim) ck->optim->opt.step = opt_step;
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
