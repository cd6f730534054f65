/* hf.c: Hugging Face's names, layouts and config.json of meshgrad's models
 * (see hf.h). Exports the functions of hf.h. */
#include "nn/hf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/files.h"
#include "io/json.h"
#include "meshgrad.h"
#include "status.h"

#define CONFIG_MARK "{\n  \"producer\": \"meshgrad\""
#define CONFIG_MAX (16 << 20) /* bytes: a config.json is a few hundred */

/* A block's parameters: meshgrad's name (after "h.<l>." or "layers.<l>."),
 * HF's (after "transformer.h.<l>." or "model.layers.<l>."), the layout. */
typedef struct {
    const char *mine, *theirs;
    mg_hf_layout layout;
} block_name;

static const block_name gpt_block[] = {
    {"ln1.weight", "ln_1.weight", MG_HF_COPY},
    {"ln1.bias", "ln_1.bias", MG_HF_COPY},
    {"attn.qkv.weight", "attn.c_attn.weight", MG_HF_QKV},
    {"attn.qkv.bias", "attn.c_attn.bias", MG_HF_QKV},
    {"attn.proj.weight", "attn.c_proj.weight", MG_HF_TRANSPOSE},
    {"attn.proj.bias", "attn.c_proj.bias", MG_HF_COPY},
    {"ln2.weight", "ln_2.weight", MG_HF_COPY},
    {"ln2.bias", "ln_2.bias", MG_HF_COPY},
    {"mlp.fc.weight", "mlp.c_fc.weight", MG_HF_TRANSPOSE},
    {"mlp.fc.bias", "mlp.c_fc.bias", MG_HF_COPY},
    {"mlp.fc2.weight", "mlp.c_proj.weight", MG_HF_TRANSPOSE},
    {"mlp.fc2.bias", "mlp.c_proj.bias", MG_HF_COPY},
};

static const block_name llama_block[] = {
    {"attention_norm.weight", "input_layernorm.weight", MG_HF_COPY},
    {"attention.wq.weight", "self_attn.q_proj.weight", MG_HF_ROPE},
    {"attention.wk.weight", "self_attn.k_proj.weight", MG_HF_ROPE},
    {"attention.wv.weight", "self_attn.v_proj.weight", MG_HF_COPY},
    {"attention.wo.weight", "self_attn.o_proj.weight", MG_HF_COPY},
    {"ffn_norm.weight", "post_attention_layernorm.weight", MG_HF_COPY},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight", MG_HF_COPY},
    {"feed_forward.w2.weight", "mlp.down_proj.weight", MG_HF_COPY},
    {"feed_forward.w3.weight", "mlp.up_proj.weight", MG_HF_COPY},
};

/* The top-level parameters: meshgrad's name, HF's. */
static const char *const top[][2] = {
    {"wte", "transformer.wte.weight"},
    {"wpe", "transformer.wpe.weight"},
    {"ln_f.weight", "transformer.ln_f.weight"},
    {"ln_f.bias", "transformer.ln_f.bias"},
    {"tok_embeddings.weight", "model.embed_tokens.weight"},
    {"norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

void mg_hf_tensor_of(const mg_arch *a, int k, mg_hf_tensor *t) {
    mg_arch_param_desc d;
    mg_arch_param(a, k, &d);
    memset(t, 0, sizeof *t);
    t->ndim = d.ndim;
    t->shape[0] = d.shape[0];
    t->shape[1] = d.shape[1];
    t->layout = MG_HF_COPY;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (strcmp(d.name, top[i][0]) == 0) {
            snprintf(t->name, sizeof t->name, "%s", top[i][1]);
            return;
        }
    int gpt = a->kind == MG_ARCH_GPT, l = 0, at = 0;
    sscanf(d.name, gpt ? "h.%d.%n" : "layers.%d.%n", &l, &at);
    const block_name *b = gpt ? gpt_block : llama_block;
    int n = gpt ? 12 : 9, j = 0;
    while (j < n - 1 && strcmp(d.name + at, b[j].mine) != 0) j++;
    snprintf(t->name, sizeof t->name, gpt ? "transformer.h.%d.%s" : "model.layers.%d.%s", l,
             b[j].theirs);
    t->layout = b[j].layout;
    if (t->layout == MG_HF_TRANSPOSE) {
        t->shape[0] = d.shape[1];
        t->shape[1] = d.shape[0];
    } else if (t->layout == MG_HF_QKV) {
        t->heads = a->heads;
        if (d.ndim == 2) t->shape[0] = d.shape[1], t->shape[1] = d.shape[0];
    } else if (t->layout == MG_HF_ROPE) {
        t->heads = strstr(d.name, ".wq.") ? a->heads : a->kv_heads;
    }
}

/* Where element i of parameter k (meshgrad's layout) lies in HF's. */
static int64_t hf_index(const mg_hf_tensor *t, const mg_arch_param_desc *d, int64_t i) {
    int64_t cols = d->ndim == 2 ? d->shape[1] : 1, row = i / cols, col = i % cols;
    switch (t->layout) {
    case MG_HF_COPY: return i;
    case MG_HF_TRANSPOSE: return col * d->shape[0] + row;
    case MG_HF_QKV: { /* row = (h, s, e) of (H, 3, D) -> (s, h, e) of (3, H, D) */
        int64_t D = d->shape[0] / (3 * t->heads), h = row / (3 * D), s = row % (3 * D) / D,
                e = row % D, to = (s * t->heads + h) * D + e;
        return d->ndim == 2 ? col * d->shape[0] + to : to;
    }
    case MG_HF_ROPE: { /* row h D + 2 p + j -> h D + j D/2 + p */
        int64_t D = d->shape[0] / t->heads, h = row / D, r = row % D;
        return (h * D + (r % 2) * (D / 2) + r / 2) * cols + col;
    }
    }
    return i;
}

void mg_hf_to(const mg_arch *a, int k, const float *mg, float *hf) {
    mg_arch_param_desc d;
    mg_hf_tensor t;
    mg_arch_param(a, k, &d);
    mg_hf_tensor_of(a, k, &t);
    int64_t n = d.ndim == 2 ? d.shape[0] * d.shape[1] : d.shape[0];
    for (int64_t i = 0; i < n; i++) hf[hf_index(&t, &d, i)] = mg[i];
}

void mg_hf_from(const mg_arch *a, int k, const float *hf, float *mg) {
    mg_arch_param_desc d;
    mg_hf_tensor t;
    mg_arch_param(a, k, &d);
    mg_hf_tensor_of(a, k, &t);
    int64_t n = d.ndim == 2 ? d.shape[0] * d.shape[1] : d.shape[0];
    for (int64_t i = 0; i < n; i++) mg[i] = hf[hf_index(&t, &d, i)];
}

/* 1 when name ends with suffix */
static int ends_with(const char *name, const char *suffix) {
    size_t n = strlen(name), s = strlen(suffix);
    return n >= s && strcmp(name + n - s, suffix) == 0;
}

int mg_hf_extra(const mg_arch *a, const char *name) {
    if (a->tied && strcmp(name, "lm_head.weight") == 0) return 2;
    if (a->kind == MG_ARCH_GPT)
        return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
    return ends_with(name, ".rotary_emb.inv_freq");
}

/* ---- config.json ------------------------------------------------------------------ */

/* The shortest "%.Ng" that reads back as exactly v. */
static void real(char *buf, size_t len, double v) {
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* The text of config.json. */
static void config_text(const mg_arch *a, char *buf, size_t len) {
    char eps[32], theta[32];
    if (a->kind == MG_ARCH_GPT) {
        snprintf(buf, len,
                 CONFIG_MARK ",\n  \"meshgrad_version\": \"%s\",\n"
                 "  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                 "  \"activation_function\": \"gelu_new\",\n  \"n_embd\": %lld,\n"
                 "  \"n_head\": %lld,\n  \"n_layer\": %lld,\n  \"n_positions\": %lld,\n"
                 "  \"n_ctx\": %lld,\n  \"n_inner\": null,\n  \"vocab_size\": %lld,\n"
                 "  \"layer_norm_epsilon\": 1e-05,\n  \"tie_word_embeddings\": true,\n"
                 "  \"scale_attn_weights\": true,\n  \"scale_attn_by_inverse_layer_idx\": false,\n"
                 "  \"attn_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"resid_pdrop\": 0.0,\n"
                 "  \"torch_dtype\": \"float32\"\n}\n",
                 mg_version(), (long long)a->embd, (long long)a->heads, (long long)a->layers,
                 (long long)a->ctx, (long long)a->ctx, (long long)a->vocab);
        return;
    }
    real(eps, sizeof eps, a->norm_eps);
    real(theta, sizeof theta, a->rope_theta);
    snprintf(buf, len,
             CONFIG_MARK ",\n  \"meshgrad_version\": \"%s\",\n"
             "  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
             "  \"hidden_act\": \"silu\",\n  \"hidden_size\": %lld,\n"
             "  \"intermediate_size\": %lld,\n  \"num_hidden_layers\": %lld,\n"
             "  \"num_attention_heads\": %lld,\n  \"num_key_value_heads\": %lld,\n"
             "  \"head_dim\": %lld,\n  \"max_position_embeddings\": %lld,\n"
             "  \"vocab_size\": %lld,\n  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,\n"
             "  \"rope_scaling\": null,\n  \"tie_word_embeddings\": %s,\n"
             "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
             "  \"torch_dtype\": \"float32\"\n}\n",
             mg_version(), (long long)a->embd, (long long)a->hidden, (long long)a->layers,
             (long long)a->heads, (long long)a->kv_heads, (long long)(a->embd / a->heads),
             (long long)a->ctx, (long long)a->vocab, eps, theta, a->tied ? "true" : "false");
}

int mg_hf_config_is_ours(const char *path) { return mg_file_starts_with(path, CONFIG_MARK); }

int mg_hf_config_write(const mg_arch *a, const char *target) {
    char text[4096];
    config_text(a, text, sizeof text);
    int exists;
    int rc = mg_file_replaceable(target, "config.json meshgrad wrote", mg_hf_config_is_ours,
                                 &exists);
    mg_tmp_file tmp = {.fd = -1};
    if (rc == MG_OK) rc = mg_tmp_create(&tmp, target);
    size_t len = strlen(text);
    if (rc == MG_OK && write(tmp.fd, text, len) != (ssize_t)len)
        rc = mg_error(MG_EIO, "cannot write %s: %s", target, strerror(errno ? errno : EIO));
    if (rc == MG_OK)
        return mg_tmp_commit(&tmp, target, "config.json meshgrad wrote", mg_hf_config_is_ours);
    mg_tmp_discard(&tmp);
    return rc;
}

/* The whole file at path (at most CONFIG_MAX bytes), NUL-terminated. */
static int slurp(const char *path, char **out, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > CONFIG_MAX) {
        int e = fd < 0 ? errno : 0;
        if (fd >= 0) close(fd);
        return mg_error(MG_EIO, "cannot read the model's config %s: %s (an import of safetensors "
                        "needs the config.json written beside it, or --config FILE)", path,
                        e ? strerror(e) : "not a regular file of at most 16 MB");
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    ssize_t got = buf ? read(fd, buf, (size_t)sb.st_size) : -1;
    close(fd);
    if (got != sb.st_size) {
        free(buf);
        return mg_error(MG_EIO, "cannot read the model's config %s", path);
    }
    buf[got] = '\0';
    *out = buf;
    *len = (size_t)got;
    return MG_OK;
}

typedef struct {
    const mg_json *root;
    const char *path;
    int rc;
} config;

/* A count key (required, or dflt when absent and dflt >= 0). */
static int64_t count(config *c, const char *key, int64_t dflt) {
    const mg_json *v = mg_json_get(c->root, key);
    int64_t x = 0;
    if (c->rc != MG_OK) return 0;
    if (!v && dflt >= 0) return dflt;
    if (!v || !mg_json_count(v, &x) || x < 1)
        c->rc = mg_error(MG_EFORMAT, "config %s: \"%s\" is %s, not a size", c->path, key,
                         v ? "not a whole number >= 1" : "missing");
    return x;
}

/* A number key, or dflt when absent. */
static double number(config *c, const char *key, double dflt) {
    const mg_json *v = mg_json_get(c->root, key);
    if (c->rc != MG_OK || !v) return dflt;
    if (v->type != MG_JSON_NUMBER || !isfinite(v->number) || v->number <= 0)
        c->rc = mg_error(MG_EFORMAT, "config %s: \"%s\" is not a number > 0", c->path, key);
    return v->number;
}

/* A true/false key, or dflt when absent or null. */
static int flag(config *c, const char *key, int dflt) {
    const mg_json *v = mg_json_get(c->root, key);
    if (c->rc != MG_OK || !v || v->type == MG_JSON_NULL) return dflt;
    if (v->type != MG_JSON_BOOL)
        c->rc = mg_error(MG_EFORMAT, "config %s: \"%s\" is not true or false", c->path, key);
    return v->type == MG_JSON_BOOL && v->integer;
}

/* A text key that must be one of `allowed` ("a|b") when present. */
static void text_in(config *c, const char *key, const char *allowed, const char *why) {
    const mg_json *v = mg_json_get(c->root, key);
    if (c->rc != MG_OK || !v) return;
    char list[128];
    snprintf(list, sizeof list, "|%s|", allowed);
    char want[160];
    snprintf(want, sizeof want, "|%s|", v->type == MG_JSON_STRING ? v->string : "");
    if (v->type != MG_JSON_STRING || !strstr(list, want) || strlen(v->string) > 100)
        c->rc = mg_error(MG_EFORMAT, "config %s: \"%s\" is %s%.60s%s: %s", c->path, key,
                         v->type == MG_JSON_STRING ? "\"" : "not ",
                         v->type == MG_JSON_STRING ? v->string : "text",
                         v->type == MG_JSON_STRING ? "\"" : "", why);
}

/* A key that must be absent or null. */
static void null_only(config *c, const char *key, const char *why) {
    const mg_json *v = mg_json_get(c->root, key);
    if (c->rc == MG_OK && v && v->type != MG_JSON_NULL)
        c->rc = mg_error(MG_EFORMAT, "config %s: \"%s\" is set: %s", c->path, key, why);
}

static void read_gpt2(config *c, mg_arch *a) {
    a->kind = MG_ARCH_GPT;
    text_in(c, "activation_function", "gelu_new|gelu_pytorch_tanh",
            "meshgrad's GPT uses GELU's tanh approximation (gelu_new)");
    a->embd = count(c, "n_embd", -1);
    a->heads = count(c, "n_head", -1);
    a->layers = count(c, "n_layer", -1);
    a->vocab = count(c, "vocab_size", -1);
    a->ctx = count(c, "n_positions", -1);
    a->kv_heads = a->heads;
    a->hidden = 4 * a->embd;
    a->tied = 1;
    const mg_json *inner = mg_json_get(c->root, "n_inner");
    if (c->rc == MG_OK && inner && inner->type != MG_JSON_NULL && count(c, "n_inner", -1) != a->hidden)
        c->rc = mg_error(MG_EFORMAT, "config %s: \"n_inner\" is not 4 n_embd: meshgrad's GPT "
                         "has an MLP of width 4 embd", c->path);
    double eps = number(c, "layer_norm_epsilon", 1e-5);
    if (c->rc == MG_OK && eps != 1e-5)
        c->rc = mg_error(MG_EFORMAT, "config %s: \"layer_norm_epsilon\" is %g: meshgrad's GPT "
                         "uses 1e-05", c->path, eps);
    if (!flag(c, "tie_word_embeddings", 1) && c->rc == MG_OK)
        c->rc = mg_error(MG_EFORMAT, "config %s: \"tie_word_embeddings\" is false: meshgrad's GPT "
                         "ties its head to the embedding", c->path);
    if (!flag(c, "scale_attn_weights", 1) && c->rc == MG_OK)
        c->rc = mg_error(MG_EFORMAT, "config %s: \"scale_attn_weights\" is false: meshgrad's "
                         "attention scales by 1/sqrt(D)", c->path);
    if (flag(c, "scale_attn_by_inverse_layer_idx", 0) && c->rc == MG_OK)
        c->rc = mg_error(MG_EFORMAT, "config %s: \"scale_attn_by_inverse_layer_idx\" is true: "
                         "meshgrad's attention does not scale by layer", c->path);
}

static void read_llama(config *c, mg_arch *a) {
    a->kind = MG_ARCH_LLAMA;
    text_in(c, "hidden_act", "silu", "meshgrad's llama uses SwiGLU (silu)");
    a->embd = count(c, "hidden_size", -1);
    a->hidden = count(c, "intermediate_size", -1);
    a->layers = count(c, "num_hidden_layers", -1);
    a->heads = count(c, "num_attention_heads", -1);
    a->kv_heads = count(c, "num_key_value_heads", a->heads);
    a->vocab = count(c, "vocab_size", -1);
    a->ctx = count(c, "max_position_embeddings", -1);
    a->norm_eps = number(c, "rms_norm_eps", 1e-6); /* LlamaConfig's defaults */
    a->rope_theta = number(c, "rope_theta", 10000.0);
    a->tied = flag(c, "tie_word_embeddings", 0);
    const mg_json *hd = mg_json_get(c->root, "head_dim");
    if (c->rc == MG_OK && hd && hd->type != MG_JSON_NULL &&
        count(c, "head_dim", -1) * a->heads != a->embd && c->rc == MG_OK)
        c->rc = mg_error(MG_EFORMAT, "config %s: \"head_dim\" is not hidden_size / "
                         "num_attention_heads: meshgrad's llama has heads of embd / heads", c->path);
    if ((flag(c, "attention_bias", 0) || flag(c, "mlp_bias", 0)) && c->rc == MG_OK)
        c->rc = mg_error(MG_EFORMAT, "config %s: the model has biases (attention_bias or "
                         "mlp_bias): meshgrad's llama has none", c->path);
    null_only(c, "rope_scaling", "meshgrad's llama has plain RoPE (no scaling)");
}

int mg_hf_config_read(mg_arch *a, const char *path) {
    memset(a, 0, sizeof *a);
    char *text = NULL;
    size_t len = 0;
    int rc = slurp(path, &text, &len);
    if (rc != MG_OK) return rc;
    char err[256];
    mg_json *root = mg_json_parse(text, len, err, sizeof err);
    free(text);
    if (!root) return mg_error(MG_EFORMAT, "config %s is not JSON: %s", path, err);
    config c = {root, path, MG_OK};
    if (root->type != MG_JSON_OBJECT)
        c.rc = mg_error(MG_EFORMAT, "config %s is not a JSON object", path);
    const char *type = c.rc == MG_OK ? mg_json_str(root, "model_type", NULL) : NULL;
    if (c.rc == MG_OK && type && strcmp(type, "gpt2") == 0)
        read_gpt2(&c, a);
    else if (c.rc == MG_OK && type && strcmp(type, "llama") == 0)
        read_llama(&c, a);
    else if (c.rc == MG_OK)
        c.rc = mg_error(MG_EFORMAT, "config %s: \"model_type\" is %s%.60s%s: meshgrad imports gpt2 "
                        "(GPT2LMHeadModel) and llama (LlamaForCausalLM)", path,
                        type ? "\"" : "", type ? type : "missing", type ? "\"" : "");
    mg_json_free(root);
    char where[MG_PATH_MAX + 16];
    snprintf(where, sizeof where, "config %s", path);
    return c.rc == MG_OK ? mg_arch_check(a, where) : c.rc;
}
