/* convert_hf.c: a model to and from a safetensors file under Hugging Face's
 * names and layouts (nn/hf.h), with its config.json (see convert.h).
 * Exports mg_convert_hf_targets, mg_convert_hf_write, mg_convert_hf_read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/convert.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "nn/hf.h"
#include "status.h"

void mg_convert_hf_targets(const char *out, char *config, size_t len) {
    char dir[MG_PATH_MAX - 16]; /* OUT's length was checked with room to spare */
    mg_path_dir(out, dir, sizeof dir);
    snprintf(config, len, "%s/config.json", dir);
}

int mg_convert_hf_write(const mg_host_model *m, const char *out) {
    mg_st_entry *e = calloc((size_t)m->n + 1, sizeof *e);
    mg_hf_tensor *t = calloc((size_t)m->n + 1, sizeof *t);
    float **buf = calloc((size_t)m->n + 1, sizeof *buf);
    int rc = e && t && buf ? MG_OK : mg_error(MG_ENOMEM, "ckpt export: out of memory");
    for (int k = 0; rc == MG_OK && k < m->n; k++) {
        mg_hf_tensor_of(&m->arch, k, &t[k]);
        int64_t numel = t[k].ndim == 2 ? t[k].shape[0] * t[k].shape[1] : t[k].shape[0];
        if (!(buf[k] = malloc(sizeof(float) * (size_t)numel + 1))) {
            rc = mg_error(MG_ENOMEM, "ckpt export: out of memory for %s", t[k].name);
            break;
        }
        mg_hf_to(&m->arch, k, m->p[k], buf[k]);
        e[k] = (mg_st_entry){t[k].name, t[k].ndim, t[k].shape, buf[k]};
    }
    char model[256], config[MG_PATH_MAX];
    mg_arch_describe(&m->arch, model, sizeof model);
    const char *meta[] = {"model", model};
    if (rc == MG_OK) rc = mg_st_write(out, e, m->n, meta, 1);
    mg_convert_hf_targets(out, config, sizeof config);
    if (rc == MG_OK) rc = mg_hf_config_write(&m->arch, config);
    for (int k = 0; buf && k < m->n; k++) free(buf[k]);
    free(buf);
    free(t);
    free(e);
    return rc;
}

/* The file's tensor for HF name `name` (a GPT's also without its
 * "transformer." prefix, as the hub's gpt2 files name them), or NULL. */
static const mg_st_tensor *find(const mg_st_file *f, const char *name) {
    const mg_st_tensor *t = mg_st_find(f, name);
    if (!t && strncmp(name, "transformer.", 12) == 0) t = mg_st_find(f, name + 12);
    return t;
}

/* "(2, 3)" */
static const char *shape_text(char *buf, size_t len, int ndim, const int64_t *shape) {
    int k = snprintf(buf, len, "(");
    for (int d = 0; d < ndim && k > 0 && (size_t)k < len; d++)
        k += snprintf(buf + k, len - (size_t)k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k > 0 && (size_t)k < len) snprintf(buf + k, len - (size_t)k, ")");
    return buf;
}

/* Every tensor of the model is in f with its shape; every tensor of f is
 * one of them or a buffer HF writes (an untied head's lm_head checked later). */
static int check_tensors(const mg_st_file *f, const mg_arch *a, const char *config) {
    int n = mg_arch_param_count(a);
    for (int k = 0; k < n; k++) {
        mg_hf_tensor h;
        mg_hf_tensor_of(a, k, &h);
        const mg_st_tensor *t = find(f, h.name);
        char want[64], have[64];
        if (!t)
            return mg_error(MG_EFORMAT, "safetensors file %s has no tensor %s, which the model of "
                            "%s has", f->path, h.name, config);
        if (t->ndim != h.ndim || t->shape[0] != h.shape[0] || (h.ndim == 2 && t->shape[1] != h.shape[1]))
            return mg_error(MG_EFORMAT, "safetensors file %s: tensor %s has shape %s but %s gives %s",
                            f->path, h.name, shape_text(have, sizeof have, t->ndim, t->shape),
                            config, shape_text(want, sizeof want, h.ndim, h.shape));
    }
    for (int i = 0; i < f->n; i++) {
        const char *name = f->t[i].name;
        int known = mg_hf_extra(a, name) != 0;
        for (int k = 0; !known && k < n; k++) {
            mg_hf_tensor h;
            mg_hf_tensor_of(a, k, &h);
            known = find(f, h.name) == &f->t[i];
        }
        if (!known)
            return mg_error(MG_EFORMAT, "safetensors file %s holds tensor %s, which the model of %s "
                            "does not have (meshgrad imports GPT2LMHeadModel and LlamaForCausalLM "
                            "as their configs describe them)", f->path, name, config);
    }
    return MG_OK;
}

/* A tied head's lm_head.weight, when the file holds one, is the embedding. */
static int check_tied_head(const mg_st_file *f, const mg_host_model *m) {
    const mg_st_tensor *head = m->arch.tied ? mg_st_find(f, "lm_head.weight") : NULL;
    if (!head) return MG_OK;
    mg_hf_tensor emb;
    mg_hf_tensor_of(&m->arch, 0, &emb);
    if (head->ndim != 2 || head->shape[0] != emb.shape[0] || head->shape[1] != emb.shape[1])
        return mg_error(MG_EFORMAT, "safetensors file %s: lm_head.weight is not of the embedding's "
                        "shape, but the config ties the head to it", f->path);
    float *v = malloc(sizeof(float) * (size_t)head->numel + 1);
    int rc = v ? mg_st_read(f, head, v) : mg_error(MG_ENOMEM, "ckpt import: out of memory");
    if (rc == MG_OK && memcmp(v, m->p[0], sizeof(float) * (size_t)head->numel) != 0)
        rc = mg_error(MG_EFORMAT, "safetensors file %s: lm_head.weight differs from %s, but the "
                      "config ties the head to the embedding (tie_word_embeddings)", f->path,
                      emb.name);
    free(v);
    return rc;
}

int mg_convert_hf_read(mg_host_model *m, const char *in, const char *config_path) {
    char config[MG_PATH_MAX];
    if (config_path)
        snprintf(config, sizeof config, "%s", config_path);
    else
        mg_convert_hf_targets(in, config, sizeof config);
    mg_arch a;
    int rc = mg_hf_config_read(&a, config);
    if (rc != MG_OK) return rc;
    mg_st_file f;
    if ((rc = mg_st_open(&f, in)) != MG_OK) return rc;
    rc = check_tensors(&f, &a, config);
    if (rc == MG_OK) rc = mg_host_model_alloc(m, &a);
    float *buf = NULL;
    for (int k = 0; rc == MG_OK && k < m->n; k++) {
        mg_hf_tensor h;
        mg_hf_tensor_of(&a, k, &h);
        const mg_st_tensor *t = find(&f, h.name);
        float *b = realloc(buf, sizeof(float) * (size_t)t->numel + 1);
        if (!b) {
            rc = mg_error(MG_ENOMEM, "ckpt import: out of memory for %s", h.name);
            break;
        }
        buf = b;
        rc = mg_st_read(&f, t, buf);
        if (rc == MG_OK) mg_hf_from(&a, k, buf, m->p[k]);
    }
    free(buf);
    if (rc == MG_OK) rc = check_tied_head(&f, m);
    mg_st_close(&f);
    return rc;
}
