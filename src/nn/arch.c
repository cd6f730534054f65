/* arch.c: a model from its checkpoint's attributes, and its parameters' names
 * and shapes (see arch.h). Exports the functions of arch.h. */
#include "nn/arch.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dist/comm.h"
#include "meshgrad.h"
#include "nn/gpt.h"
#include "status.h"

/* The llama's parameters of one layer, in the order they are numbered. */
static const char *const llama_layer[9] = {
    "attention_norm.weight", "attention.wq.weight",   "attention.wk.weight",
    "attention.wv.weight",   "attention.wo.weight",   "ffn_norm.weight",
    "feed_forward.w1.weight", "feed_forward.w2.weight", "feed_forward.w3.weight",
};

const char *mg_arch_kind_name(mg_arch_kind kind) {
    return kind == MG_ARCH_GPT ? "gpt" : kind == MG_ARCH_LLAMA ? "llama" : "?";
}

/* A size attribute: decimal digits only, >= 1, no overflow. */
static int get_size(const mg_ckpt_attr *a, int n, const char *path, const char *key,
                    int64_t *out) {
    const char *v = mg_ckpt_attr_get(a, n, key);
    char *end = NULL;
    errno = 0;
    long long x = v && v[0] >= '0' && v[0] <= '9' ? strtoll(v, &end, 10) : 0;
    if (!v || !end || *end || errno == ERANGE || x < 1)
        return mg_error(MG_EFORMAT, "checkpoint %s: attribute \"%s\" is %s%s%s, not a size: the "
                        "file was not written by a meshgrad training run or import, or was "
                        "altered", path, key, v ? "\"" : "missing", v ? v : "", v ? "\"" : "");
    *out = x;
    return MG_OK;
}

/* A real attribute: the whole text a finite number. */
static int get_real(const mg_ckpt_attr *a, int n, const char *path, const char *key, double *out) {
    const char *v = mg_ckpt_attr_get(a, n, key);
    char *end = NULL;
    double x = v ? strtod(v, &end) : NAN;
    if (!v || !*v || *end || !isfinite(x))
        return mg_error(MG_EFORMAT, "checkpoint %s: attribute \"%s\" is %s%s%s, not a finite "
                        "number", path, key, v ? "\"" : "missing", v ? v : "", v ? "\"" : "");
    *out = x;
    return MG_OK;
}

int mg_arch_check(const mg_arch *m, const char *where) {
    const struct {
        const char *name;
        int64_t v;
    } s[] = {{"layers", m->layers}, {"heads", m->heads}, {"kv_heads", m->kv_heads},
             {"embd", m->embd},     {"ctx", m->ctx},     {"hidden", m->hidden},
             {"vocab", m->vocab}};
    for (int i = 0; i < 7; i++)
        if (s[i].v < 1 || s[i].v > INT32_MAX)
            return mg_error(MG_EFORMAT, "%s: %s %lld is not a size from 1 to %d", where,
                            s[i].name, (long long)s[i].v, INT32_MAX);
    if (m->embd % m->heads != 0 || (m->kind == MG_ARCH_LLAMA && (m->embd / m->heads) % 2 != 0))
        return mg_error(MG_EFORMAT, "%s: heads %lld do not divide embd %lld into heads of %s size",
                        where, (long long)m->heads, (long long)m->embd,
                        m->kind == MG_ARCH_LLAMA ? "an even" : "one");
    if (m->heads % m->kv_heads != 0)
        return mg_error(MG_EFORMAT, "%s: kv_heads %lld do not divide heads %lld", where,
                        (long long)m->kv_heads, (long long)m->heads);
    if (m->kind == MG_ARCH_GPT && (m->kv_heads != m->heads || m->hidden != 4 * m->embd))
        return mg_error(MG_EFORMAT, "%s: a GPT has kv_heads = heads and hidden = 4 embd", where);
    if (m->kind == MG_ARCH_LLAMA &&
        !(isfinite(m->rope_theta) && m->rope_theta > 0 && isfinite(m->norm_eps) && m->norm_eps > 0))
        return mg_error(MG_EFORMAT, "%s: rope_theta %g and norm_eps %g must be finite and > 0",
                        where, m->rope_theta, m->norm_eps);
    if ((double)mg_arch_numel(m) > 9007199254740992.0 || (m->layers > (INT32_MAX - 4) / 12))
        return mg_error(MG_EFORMAT, "%s: %lld layers of embd %lld are more parameters than any "
                        "machine holds", where, (long long)m->layers, (long long)m->embd);
    return MG_OK;
}

int mg_arch_from_attrs(mg_arch *m, const mg_ckpt_attr *a, int n, const char *path) {
    memset(m, 0, sizeof *m);
    const char *kind = mg_ckpt_attr_get(a, n, "model");
    if (!kind) kind = mg_ckpt_attr_get(a, n, "model.kind");
    if (!kind)
        return mg_error(MG_EFORMAT, "checkpoint %s holds no model (no \"model\" attribute): give a "
                        "checkpoint of `meshgrad train` or `meshgrad ckpt import`", path);
    if (strcmp(kind, "gpt") == 0)
        m->kind = MG_ARCH_GPT;
    else if (strcmp(kind, "llama") == 0)
        m->kind = MG_ARCH_LLAMA;
    else
        return mg_error(MG_EINVAL, "checkpoint %s holds a model of kind %s: only a gpt or a llama "
                        "can be evaluated or converted", path, kind);
    int rc = get_size(a, n, path, "model.layers", &m->layers);
    if (rc == MG_OK) rc = get_size(a, n, path, "model.heads", &m->heads);
    if (rc == MG_OK) rc = get_size(a, n, path, "model.embd", &m->embd);
    if (rc == MG_OK) rc = get_size(a, n, path, "model.ctx", &m->ctx);
    if (rc == MG_OK) rc = get_size(a, n, path, "model.vocab", &m->vocab);
    if (rc != MG_OK) return rc;
    if (m->kind == MG_ARCH_GPT) {
        m->kv_heads = m->heads;
        m->hidden = 4 * m->embd;
        m->tied = 1;
    } else {
        rc = get_size(a, n, path, "model.kv_heads", &m->kv_heads);
        if (rc == MG_OK) rc = get_size(a, n, path, "model.hidden", &m->hidden);
        if (rc == MG_OK) rc = get_real(a, n, path, "model.rope_theta", &m->rope_theta);
        if (rc == MG_OK) rc = get_real(a, n, path, "model.norm_eps", &m->norm_eps);
        const char *t = mg_ckpt_attr_get(a, n, "model.tied");
        if (rc == MG_OK && t && (!strcmp(t, "1") || !strcmp(t, "true")))
            m->tied = 1;
        else if (rc == MG_OK && !(t && (!strcmp(t, "0") || !strcmp(t, "false"))))
            rc = mg_error(MG_EFORMAT, "checkpoint %s: attribute \"model.tied\" is %s%s%s, not 1 "
                          "or 0", path, t ? "\"" : "missing", t ? t : "", t ? "\"" : "");
        if (rc != MG_OK) return rc;
    }
    char where[MG_PATH_MAX + 32];
    snprintf(where, sizeof where, "checkpoint %s", path);
    return mg_arch_check(m, where);
}

/* key = value into out[*k] (when there is room) */
static void put(mg_ckpt_attr *out, int max, int *k, const char *key, const char *fmt, ...)
    MG_PRINTF(5, 6);
static void put(mg_ckpt_attr *out, int max, int *k, const char *key, const char *fmt, ...) {
    if (*k >= max) return;
    snprintf(out[*k].key, sizeof out[*k].key, "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out[*k].value, sizeof out[*k].value, fmt, ap);
    va_end(ap);
    (*k)++;
}

/* The shortest "%.Ng" that reads back as exactly v (as train_state.c writes). */
static void put_real(mg_ckpt_attr *out, int max, int *k, const char *key, double v) {
    char buf[64];
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    put(out, max, k, key, "%s", buf);
}

int mg_arch_attrs(const mg_arch *m, mg_ckpt_attr *out, int max) {
    int k = 0;
    put(out, max, &k, "model", "%s", mg_arch_kind_name(m->kind));
    put(out, max, &k, "model.layers", "%lld", (long long)m->layers);
    put(out, max, &k, "model.heads", "%lld", (long long)m->heads);
    put(out, max, &k, "model.embd", "%lld", (long long)m->embd);
    put(out, max, &k, "model.ctx", "%lld", (long long)m->ctx);
    put(out, max, &k, "model.vocab", "%lld", (long long)m->vocab);
    if (m->kind == MG_ARCH_GPT) {
        put(out, max, &k, "model.qkv_rows",
            "per head: (heads, 3, embd / heads), q k v of a head together");
        return k;
    }
    put(out, max, &k, "model.kind", "llama");
    put(out, max, &k, "model.kv_heads", "%lld", (long long)m->kv_heads);
    put(out, max, &k, "model.hidden", "%lld", (long long)m->hidden);
    put_real(out, max, &k, "model.rope_theta", m->rope_theta);
    put_real(out, max, &k, "model.norm_eps", m->norm_eps);
    put(out, max, &k, "model.tied", "%d", m->tied ? 1 : 0);
    return k;
}

int mg_arch_param_count(const mg_arch *m) {
    if (m->kind == MG_ARCH_GPT) {
        mg_gpt_config c = {m->layers, m->heads, m->embd, m->ctx, m->vocab};
        return mg_gpt_param_total(&c);
    }
    return 2 + 9 * (int)m->layers + !m->tied;
}

void mg_arch_param(const mg_arch *m, int k, mg_arch_param_desc *d) {
    memset(d, 0, sizeof *d);
    if (m->kind == MG_ARCH_GPT) {
        mg_gpt_config c = {m->layers, m->heads, m->embd, m->ctx, m->vocab};
        mg_gpt_param_desc g;
        mg_gpt_param_describe(&c, k, &g);
        snprintf(d->name, sizeof d->name, "%s", g.name);
        d->ndim = g.ndim;
        d->shape[0] = g.shape[0];
        d->shape[1] = g.shape[1];
        return;
    }
    const int64_t C = m->embd, D = m->embd / m->heads, L = m->layers;
    if (k == 0 || k == 2 + 9 * L) { /* tok_embeddings, output */
        snprintf(d->name, sizeof d->name, k ? "output.weight" : "tok_embeddings.weight");
        d->ndim = 2, d->shape[0] = m->vocab, d->shape[1] = C;
        return;
    }
    if (k == 1 + 9 * L) {
        snprintf(d->name, sizeof d->name, "norm.weight");
        d->ndim = 1, d->shape[0] = C;
        return;
    }
    int l = (k - 1) / 9, j = (k - 1) % 9;
    snprintf(d->name, sizeof d->name, "layers.%d.%s", l, llama_layer[j]);
    static const char rows[9] = {'C', 'q', 'k', 'k', 'C', 'C', 'F', 'C', 'F'},
                      cols[9] = {0, 'C', 'C', 'C', 'q', 0, 'C', 'F', 'C'};
    int64_t q = m->heads * D, kv = m->kv_heads * D, F = m->hidden;
#define SIZE(ch) ((ch) == 'C' ? C : (ch) == 'q' ? q : (ch) == 'k' ? kv : F)
    d->ndim = cols[j] ? 2 : 1;
    d->shape[0] = SIZE(rows[j]);
    d->shape[1] = cols[j] ? SIZE(cols[j]) : 0;
#undef SIZE
}

int64_t mg_arch_numel(const mg_arch *m) {
    double C = (double)m->embd, V = (double)m->vocab, F = (double)m->hidden;
    double kv = (double)m->kv_heads * (C / (double)m->heads);
    double n = m->kind == MG_ARCH_GPT
                   ? (V + (double)m->ctx + 2) * C + (double)m->layers * (12 * C * C + 13 * C)
                   : V * C * (m->tied ? 1 : 2) + C +
                         (double)m->layers * (2 * C + 2 * C * C + 2 * C * kv + 3 * C * F);
    return n > 9.2e18 ? INT64_MAX : (int64_t)n;
}

void mg_arch_describe(const mg_arch *m, char *buf, size_t len) {
    int k = snprintf(buf, len, "%s: %lld layers, %lld heads", mg_arch_kind_name(m->kind),
                     (long long)m->layers, (long long)m->heads);
    if (k < 0 || (size_t)k >= len) return;
    if (m->kind == MG_ARCH_LLAMA)
        k += snprintf(buf + k, len - (size_t)k, " (%lld kv)", (long long)m->kv_heads);
    if (k < 0 || (size_t)k >= len) return;
    k += snprintf(buf + k, len - (size_t)k, ", embd %lld, ctx %lld, vocab %lld", (long long)m->embd,
                  (long long)m->ctx, (long long)m->vocab);
    if (k < 0 || (size_t)k >= len || m->kind != MG_ARCH_LLAMA) return;
    snprintf(buf + k, len - (size_t)k, ", hidden %lld, %s head", (long long)m->hidden,
             m->tied ? "tied" : "untied");
}

typedef struct {
    char **names; /* the file's params/ datasets, without "params/" */
    int n, cap;
} file_walk;

static int collect_param(void *ctx, const char *name) {
    file_walk *w = ctx;
    if (strncmp(name, "params/", 7) != 0) return MG_OK;
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        char **names = realloc(w->names, sizeof *names * (size_t)cap);
        if (!names) return mg_error(MG_ENOMEM, "checkpoint: out of memory for its names");
        w->names = names, w->cap = cap;
    }
    if (!(w->names[w->n] = strdup(name + 7)))
        return mg_error(MG_ENOMEM, "checkpoint: out of memory for its names");
    w->n++;
    return MG_OK;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The file's names (sorted) are the model's, else MG_EFORMAT naming one. */
static int same_names(const mg_arch *a, const char *path, file_walk *w, const char *model) {
    int n = mg_arch_param_count(a);
    if (w->n != n)
        return mg_error(MG_EFORMAT, "checkpoint %s holds %d parameters, but its attributes' model "
                        "(%s) has %d: the file was altered or cut short", path, w->n, model, n);
    char **mine = calloc((size_t)n + 1, sizeof *mine);
    int rc = mine ? MG_OK : mg_error(MG_ENOMEM, "checkpoint: out of memory for its names");
    for (int k = 0; rc == MG_OK && k < n; k++) {
        mg_arch_param_desc d;
        mg_arch_param(a, k, &d);
        if (!(mine[k] = strdup(d.name))) rc = mg_error(MG_ENOMEM, "checkpoint: out of memory");
    }
    if (rc == MG_OK) {
        qsort(mine, (size_t)n, sizeof *mine, by_name);
        qsort(w->names, (size_t)n, sizeof *w->names, by_name);
    }
    for (int k = 0; rc == MG_OK && k < n; k++)
        if (strcmp(mine[k], w->names[k]) != 0)
            rc = mg_error(MG_EFORMAT, "checkpoint %s holds /params/%s, which its attributes' model "
                          "(%s) does not have: the file was altered or is of another model", path,
                          strcmp(mine[k], w->names[k]) > 0 ? w->names[k] : mine[k], model);
    for (int k = 0; mine && k < n; k++) free(mine[k]);
    free(mine);
    return rc;
}

int mg_arch_check_file(const mg_arch *a, const char *path) {
    char model[256];
    mg_arch_describe(a, model, sizeof model);
    /* first the size, which bounds what follows: each value takes 4 bytes */
    struct stat sb;
    double need = 4.0 * (double)mg_arch_numel(a);
    int rc = MG_OK;
    if (stat(path, &sb) != 0 || (double)sb.st_size < need)
        rc = mg_error(MG_EFORMAT, "checkpoint %s: its attributes describe a model (%s) of %.0f MB "
                      "of parameters but the file has %.0f MB: it was altered", path, model,
                      need / 1e6, (double)sb.st_size / 1e6);
    if ((rc = mg_status_agree(rc)) != MG_OK) return rc;
    file_walk w = {0};
    rc = mg_checkpoint_list(path, collect_param, &w);
    if (rc == MG_OK) rc = same_names(a, path, &w, model);
    for (int k = 0; k < w.n; k++) free(w.names[k]);
    free(w.names);
    return mg_status_agree(rc);
}

int mg_arch_build(mg_model *model, const mg_arch *a, const mg_mesh *mesh, const mg_plan *plan) {
    mg_lm_config c = {.kind = a->kind == MG_ARCH_GPT ? MG_MODEL_GPT : MG_MODEL_LLAMA};
    if (a->kind == MG_ARCH_GPT) {
        c.gpt = (mg_gpt_config){a->layers, a->heads, a->embd, a->ctx, a->vocab};
        return mg_model_init_gpt(model, mesh, plan, &c.gpt, 0);
    }
    c.llama = (mg_llama_config){.layers = a->layers, .heads = a->heads, .kv_heads = a->kv_heads,
                                .embd = a->embd, .ctx = a->ctx, .vocab = a->vocab,
                                .hidden = a->hidden, .rope_theta = a->rope_theta,
                                .norm_eps = a->norm_eps, .tied = a->tied};
    return mg_model_build_lm(model, mesh, plan, &c, 0, NULL);
}
