/* convert_llama2c.c: a llama to and from llama2.c's version-0 model file
 * (io/llama2c.h), the arrays in export.py's legacy_export order: the
 * embedding, each of the nine per-layer weights for every layer in turn,
 * the final norm, RoPE's cos and sin tables (written as model.py computes
 * them, skipped on reading, as run.c does), the classifier when untied.
 * llama2.c's file has no place for rope_theta or the norm's epsilon: run.c
 * uses 10000 and 1e-5, so only such a model is written (see convert.h).
 * Exports mg_convert_l2c_check, mg_convert_l2c_write, mg_convert_l2c_read. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/convert.h"
#include "io/llama2c.h"
#include "status.h"

#define L2C_THETA 10000.0
#define L2C_EPS 1e-5
#define FREQ_COS (-1)
#define FREQ_SIN (-2)

/* The file's arrays in order: parameter indices, FREQ_COS and FREQ_SIN; *n
 * of them (order: room for 2 + 9 L + 3). */
static void file_order(const mg_arch *a, int *order, int *n) {
    int L = (int)a->layers, k = 0;
    order[k++] = 0; /* tok_embeddings */
    for (int j = 0; j < 9; j++)
        for (int l = 0; l < L; l++) order[k++] = 1 + 9 * l + j; /* arch.c's llama_layer[j] */
    order[k++] = 1 + 9 * L; /* norm */
    order[k++] = FREQ_COS;
    order[k++] = FREQ_SIN;
    if (!a->tied) order[k++] = 2 + 9 * L; /* output */
    *n = k;
}

static mg_l2c_header header_of(const mg_arch *a) {
    return (mg_l2c_header){a->embd, a->hidden, a->layers, a->heads, a->kv_heads, a->vocab, a->ctx,
                           a->tied};
}

int mg_convert_l2c_check(const mg_arch *a, const char *in) {
    if (a->kind != MG_ARCH_LLAMA)
        return mg_error(MG_EINVAL, "ckpt export: %s holds a %s; llama2.c's format holds a llama "
                        "only (export a GPT with --format safetensors)", in,
                        mg_arch_kind_name(a->kind));
    if (a->rope_theta != L2C_THETA || a->norm_eps != L2C_EPS)
        return mg_error(MG_EINVAL, "ckpt export: %s has rope_theta %g and norm_eps %g; llama2.c's "
                        "file cannot say so and run.c uses 10000 and 1e-05 (export it with "
                        "--format safetensors)", in, a->rope_theta, a->norm_eps);
    return MG_OK;
}

/* RoPE's tables as model.py's precompute_freqs_cis computes them in float32:
 * freqs[i] = 1 / theta^(2i / D), cos and sin of t freqs[i] for t < ctx. */
static void freq_tables(const mg_arch *a, float *cosv, float *sinv) {
    int64_t D = a->embd / a->heads, half = D / 2;
    for (int64_t i = 0; i < half; i++) {
        float f = 1.0f / powf((float)L2C_THETA, (float)(2 * i) / (float)D);
        for (int64_t t = 0; t < a->ctx; t++) {
            float x = (float)t * f;
            cosv[t * half + i] = cosf(x);
            sinv[t * half + i] = sinf(x);
        }
    }
}

int mg_convert_l2c_write(const mg_host_model *m, const char *out) {
    const mg_arch *a = &m->arch;
    int rc = mg_convert_l2c_check(a, out);
    if (rc != MG_OK) return rc;
    int64_t table = a->ctx * (a->embd / a->heads / 2);
    int *order = malloc(sizeof(int) * (size_t)(9 * a->layers + 5));
    mg_l2c_part *parts = malloc(sizeof *parts * (size_t)(9 * a->layers + 5));
    float *cosv = malloc(sizeof(float) * (size_t)table + 1),
          *sinv = malloc(sizeof(float) * (size_t)table + 1);
    int n = 0;
    if (!order || !parts || !cosv || !sinv)
        rc = mg_error(MG_ENOMEM, "ckpt export: out of memory");
    if (rc == MG_OK) {
        freq_tables(a, cosv, sinv);
        file_order(a, order, &n);
        for (int i = 0; i < n; i++) {
            mg_arch_param_desc d;
            if (order[i] >= 0) mg_arch_param(a, order[i], &d);
            parts[i] = order[i] == FREQ_COS   ? (mg_l2c_part){cosv, table}
                       : order[i] == FREQ_SIN ? (mg_l2c_part){sinv, table}
                                              : (mg_l2c_part){m->p[order[i]],
                                                              d.ndim == 2 ? d.shape[0] * d.shape[1]
                                                                          : d.shape[0]};
        }
        mg_l2c_header h = header_of(a);
        rc = mg_l2c_write(out, &h, parts, n);
    }
    free(order), free(parts), free(cosv), free(sinv);
    return rc;
}

int mg_convert_l2c_read(mg_host_model *m, const char *in) {
    mg_l2c_file f;
    int rc = mg_l2c_open(&f, in);
    if (rc != MG_OK) return rc;
    const mg_l2c_header *h = &f.h;
    mg_arch a = {.kind = MG_ARCH_LLAMA, .layers = h->layers, .heads = h->heads, .embd = h->dim,
                 .ctx = h->seq_len, .vocab = h->vocab, .kv_heads = h->kv_heads,
                 .hidden = h->hidden, .rope_theta = L2C_THETA, .norm_eps = L2C_EPS,
                 .tied = h->shared};
    char where[MG_PATH_MAX + 32];
    snprintf(where, sizeof where, "llama2.c file %s", in);
    rc = mg_arch_check(&a, where);
    int *order = rc == MG_OK ? malloc(sizeof(int) * (size_t)(9 * a.layers + 5)) : NULL;
    if (rc == MG_OK && !order) rc = mg_error(MG_ENOMEM, "ckpt import: out of memory");
    if (rc == MG_OK) rc = mg_host_model_alloc(m, &a);
    int n = 0;
    if (rc == MG_OK) file_order(&a, order, &n);
    int64_t at = 0, table = a.ctx * (a.embd / a.heads / 2);
    for (int i = 0; rc == MG_OK && i < n; i++) {
        if (order[i] < 0) { /* RoPE's tables: run.c skips them too */
            at += table;
            continue;
        }
        mg_arch_param_desc d;
        mg_arch_param(&a, order[i], &d);
        int64_t count = d.ndim == 2 ? d.shape[0] * d.shape[1] : d.shape[0];
        rc = mg_l2c_read(&f, at, count, m->p[order[i]]);
        at += count;
    }
    free(order);
    mg_l2c_close(&f);
    return rc;
}
