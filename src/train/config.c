/* config.c: defaults, config files and flags of a training job (see
 * config.h; the model it describes: config_model.c), and meshgrad_train.h's
 * mg_train_config_new, _set, _set_recompute, _load and _free. One table lists every option: its key,
 * type, where it lives in mg_train_config, its smallest value and its help
 * line; a second says which flag sets each checkpoint attribute (resume
 * messages). */
#include "train/config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dist/mesh.h"
#include "nn/plan.h"
#include "nn/recompute.h"
#include "status.h"

typedef enum { OPT_STRING, OPT_INT, OPT_FLOAT, OPT_MODEL, OPT_OPTIM, OPT_SCHEDULE, OPT_MESH,
               OPT_PLAN, OPT_RECOMPUTE, OPT_FLAG /* on/off; --key alone means on */,
               OPT_BETAS /* two numbers in [0, 1): "0.9,0.95" */ } opt_type;

typedef struct {
    const char *key;
    opt_type type;
    size_t offset;
    size_t size;  /* strings: buffer size */
    double min;   /* numbers: smallest allowed value */
    const char *arg, *help;
} option_def;

#define F(field) offsetof(mg_train_config, field), sizeof(((mg_train_config *)0)->field)

static const option_def options[] = {
    {"mesh", OPT_MESH, F(mesh), 0, "SHAPE", "device mesh: 2, 4, 1x2, 2x2 (default: 1-D over all ranks)"},
    {"parallel", OPT_PLAN, F(parallel), 0, "PLANS", "one plan per mesh dim: dp, tp, fsdp, sp, tp+sp, pp (e.g. dp,tp)"},
    {"model", OPT_MODEL, F(model), 0, "NAME", "mlp | permute-mlp | gpt | llama"},
    {"hidden", OPT_INT, F(hidden), 0, "H", "mlp: hidden width (0: 128); llama: FFN width (0: by --multiple-of)"},
    {"channels", OPT_INT, F(channels), 1, "C", "permute-mlp: features per image column"},
    {"layers", OPT_INT, F(layers), 1, "L", "gpt, llama: transformer blocks"},
    {"heads", OPT_INT, F(heads), 1, "H", "gpt, llama: attention heads (divides embd)"},
    {"kv-heads", OPT_INT, F(kv_heads), 0, "KV", "llama: k, v heads, dividing heads (0: --heads)"},
    {"embd", OPT_INT, F(embd), 1, "C", "gpt, llama: embedding width"},
    {"ctx", OPT_INT, F(ctx), 1, "T", "gpt, llama: context length (tokens per window)"},
    {"multiple-of", OPT_INT, F(multiple_of), 1, "M", "llama: FFN width floor(8 embd / 3) rounded up to a multiple of M"},
    {"rope-theta", OPT_FLOAT, F(rope_theta), 0, "THETA", "llama: rotary embedding base"},
    {"norm-eps", OPT_FLOAT, F(norm_eps), 0, "EPS", "llama: RMS norm epsilon"},
    {"untied-head", OPT_FLAG, F(untied_head), 0, "", "llama: a head of its own (output.weight), not tok_embeddings"},
    {"decay-all", OPT_FLAG, F(decay_all), 0, "", "gpt, llama: weight decay on every parameter, not on 2-D ones only"},
    {"data", OPT_STRING, F(data), 0, "FILE", "HDF5 data set (default data/digits.h5; gpt, llama: data/mobydick.h5)"},
    {"steps", OPT_INT, F(steps), 1, "N", "optimizer steps in all"},
    {"batch", OPT_INT, F(batch), 1, "B", "global batch size"},
    {"lr", OPT_FLOAT, F(lr), 0, "LR", "peak learning rate"},
    {"optimizer", OPT_OPTIM, F(optimizer), 0, "NAME", "sgd | adamw"},
    {"momentum", OPT_FLOAT, F(momentum), 0, "M", "SGD momentum"},
    {"weight-decay", OPT_FLOAT, F(weight_decay), 0, "WD", "weight decay (default: sgd 0, adamw 0.01)"},
    {"betas", OPT_BETAS, F(betas), 0, "B1,B2", "AdamW's betas"},
    {"schedule", OPT_SCHEDULE, F(schedule), 0, "NAME", "constant | cosine"},
    {"warmup", OPT_INT, F(warmup), 0, "N", "steps of linear LR warmup"},
    {"lr-min", OPT_FLOAT, F(lr_min), 0, "LR", "where the cosine schedule ends"},
    {"grad-accum", OPT_INT, F(grad_accum), 1, "N", "gpt, llama: micro-batches per step (batch / N rows each)"},
    {"clip", OPT_FLOAT, F(clip), 0, "NORM", "clip gradients to this global norm (0 = off)"},
    {"seed", OPT_INT, F(seed), 0, "S", "seed of the initial parameters and the data order"},
    {"eval-every", OPT_INT, F(eval_every), 0, "N", "evaluate every N steps (0 = only at the end; never)"},
    {"eval-tokens", OPT_INT, F(eval_tokens), 1, "N", "gpt, llama: tokens of /val an evaluation reads, from its start (all)"},
    {"metrics", OPT_STRING, F(metrics), 0, "FILE", "write JSON lines of metrics here"},
    {"threads", OPT_INT, F(threads), 0, "N", "CPU threads per rank (0 = cores / ranks)"},
    {"log-every", OPT_INT, F(log_every), 0, "N", "print progress every N steps (0 = never)"},
    {"save", OPT_STRING, F(save), 0, "PATH", "checkpoint file, or directory (dir/) of ckpt-<step>.h5"},
    {"save-every", OPT_INT, F(save_every), 0, "N", "save every N steps (0 = only at the end)"},
    {"keep", OPT_INT, F(keep), 0, "K", "keep the newest K of a directory --save (0 = all)"},
    {"resume", OPT_STRING, F(resume), 0, "PATH", "checkpoint to resume, or a directory: its newest one"},
    {"overwrite", OPT_FLAG, F(overwrite), 0, "", "a new run may save over a checkpoint, or into a directory of them"},
    {"on-nonfinite", OPT_STRING, F(on_nonfinite), 0, "WHAT", "a NaN/inf loss or gradient: stop | skip the step"},
    {"device", OPT_STRING, F(device), 0, "NAME", "cpu | cuda (one GPU per rank)"},
    {"dtype", OPT_STRING, F(dtype), 0, "NAME", "fp32 | bf16: bf16 GEMM inputs, fp32 sums, weights and state"},
    {"tf32", OPT_FLAG, F(tf32), 0, "", "TF32 tensor-core math for the GEMMs on cuda"},
    {"deterministic", OPT_FLAG, F(deterministic), 0, "", "every sum in one fixed order: the same bits on every mesh and split"},
    {"flight-dir", OPT_STRING, F(flight_dir), 0, "DIR", "flight recorder dumps: DIR/rank-<r>.json"},
    {"trace", OPT_STRING, F(trace), 0, "FILE", "write a Chrome-trace timeline of all ranks here"},
    {"trace-steps", OPT_STRING, F(trace_steps), 0, "A:B", "the steps --trace records (default 2:4)"},
    {"depth", OPT_INT, F(depth), 0, "N", "linear layers (0: mlp 2, permute-mlp 3)"},
    {"recompute", OPT_RECOMPUTE, F(recompute), 0, "WHAT", "gpt, llama: none | blocks | attention, dropped after forward, made again in backward"},
    {"pp-schedule", OPT_STRING, F(pp_schedule), 0, "NAME", "pipeline (pp): gpipe | 1f1b | interleaved-1f1b | zb-h1"},
    {"microbatches", OPT_INT, F(microbatches), 0, "M", "pipeline: micro-batches per step (0: 8)"},
    {"microbatch-rows", OPT_STRING, F(microbatch_rows), 0, "R1,R2,..", "pipeline: rows of each micro-batch"},
    {"virtual-stages", OPT_INT, F(virtual_stages), 1, "V", "pipeline: stages per rank (interleaved-1f1b)"},
    {"pp-layers", OPT_STRING, F(pp_layers), 0, "N1,N2,..", "pipeline: layers per stage (gpt, llama: blocks; default: balanced)"},
};
#define NOPTIONS ((int)(sizeof options / sizeof options[0]))
#undef F
_Static_assert(NOPTIONS <= 64, "mg_train_config's `given` holds a bit per option");

/* The options of some models only, each with the models it applies to (bits
 * 1 << mg_model_kind) and what sets the size of the others. */
#define FOR_MLPS (1u << MG_MODEL_MLP | 1u << MG_MODEL_PERMUTE_MLP)
#define FOR_LLAMA (1u << MG_MODEL_LLAMA)
#define FOR_LMS (1u << MG_MODEL_GPT | FOR_LLAMA)
static const struct {
    const char *key;
    unsigned models;
} model_options[] = {
    {"hidden", FOR_MLPS | FOR_LLAMA}, {"depth", FOR_MLPS}, {"channels", 1u << MG_MODEL_PERMUTE_MLP},
    {"layers", FOR_LMS},  {"heads", FOR_LMS},  {"embd", FOR_LMS},
    {"ctx", FOR_LMS},     {"eval-tokens", FOR_LMS},
    {"kv-heads", FOR_LLAMA}, {"multiple-of", FOR_LLAMA}, {"rope-theta", FOR_LLAMA},
    {"norm-eps", FOR_LLAMA}, {"untied-head", FOR_LLAMA}, {"decay-all", FOR_LMS},
};
/* what sizes each model (mg_model_kind's order) */
static const char *const sized_by[] = {"hidden and depth", "hidden, channels and depth",
                                       "layers, heads, embd and ctx",
                                       "layers, heads, kv-heads, embd, hidden and ctx"};

/* The words some counts also take, and the value each stands for. */
static const struct {
    const char *key, *word;
    int64_t value;
} words[] = {
    {"eval-every", "never", -1},
    {"eval-tokens", "all", 0},
};

/* The word option o takes besides numbers, or NULL. */
static const char *word_of(const option_def *o, int64_t *value) {
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcmp(words[i].key, o->key) == 0) {
            if (value) *value = words[i].value;
            return words[i].word;
        }
    return NULL;
}

/* Every option at its default (an option not named is 0 or ""); config.h
 * says what each means. */
static const mg_train_config default_config = {
    .parallel = "dp",
    .model = MG_MODEL_MLP,
    .hidden = 0, /* the model's: mlp 128, llama llama2.c's rule */
    .channels = 16,
    .layers = 4, .heads = 4, .embd = 128, .ctx = 64,
    .multiple_of = 256, .rope_theta = 10000, .norm_eps = 1e-5,
    .betas = {0.9, 0.999},
    .grad_accum = 1, .steps = 2000, .batch = 64, .lr = 1e-3,
    .optimizer = MG_OPTIM_ADAMW, .momentum = 0, .weight_decay = -1,
    .schedule = MG_SCHEDULE_CONSTANT, .warmup = 0, .clip = 0, .seed = 0,
    .eval_every = 0, .eval_tokens = 65536,
    .threads = 0, .log_every = 100,
    .device = "cpu", .flight_dir = "meshgrad-flight", .on_nonfinite = "stop", .dtype = "fp32",
    .pp_schedule = "1f1b", .virtual_stages = 1,
};

void mg_train_config_defaults(mg_train_config *c) {
    memcpy(c, &default_config, sizeof *c); /* the padding too: zero, as a static's */
}

/* "weight_decay" and "weight-decay" are the same key */
static const option_def *find_option(const char *key) {
    for (int i = 0; i < NOPTIONS; i++) {
        const char *a = options[i].key, *b = key;
        while (*a && (*a == *b || (*a == '-' && *b == '_'))) a++, b++;
        if (*a == '\0' && *b == '\0') return &options[i];
    }
    return NULL;
}

/* "where: <the last message>" (copied first: the message buffer is reused) */
static int prefix_error(int code, const char *where) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", mg_last_error());
    return mg_error(code, "%s: %s", where, msg);
}

int mg_train_config_set_at(mg_train_config *c, const char *key, const char *value,
                           const char *where) {
    const option_def *o = find_option(key);
    if (!o)
        return mg_error(MG_EINVAL, "%s: unknown option '%s' (see meshgrad train --help)", where, key);
    c->given |= 1ull << (o - options);
    void *field = (char *)c + o->offset;
    if (*value == '\0') return mg_error(MG_EINVAL, "%s: %s needs a value", where, o->key);
    char *end = NULL;
    int rc = MG_OK;
    switch (o->type) {
    case OPT_STRING:
    case OPT_MESH:
    case OPT_PLAN:
        if (strlen(value) >= o->size)
            return mg_error(MG_EINVAL, "%s: %s value is longer than %zu characters", where, o->key,
                            o->size - 1);
        if (o->type == OPT_MESH) {
            int shape[MG_MAX_MESH_DIMS];
            if (mg_mesh_parse(value, shape) < 0)
                return prefix_error(MG_EINVAL, where);
        } else if (o->type == OPT_PLAN) {
            mg_plan plan;
            if (mg_plan_parse(value, &plan) != MG_OK) return prefix_error(MG_EINVAL, where);
        }
        snprintf(field, o->size, "%s", value);
        return MG_OK;
    case OPT_INT: {
        int64_t stands_for = 0;
        const char *word = word_of(o, &stands_for);
        if (word && strcmp(value, word) == 0) {
            *(int64_t *)field = stands_for;
            return MG_OK;
        }
        /* counts and sizes reach int code and products (batch x ctx x embd): at most
         * 2^31 - 1; the seed is any 64-bit number */
        long long most = strcmp(o->key, "seed") == 0 ? INT64_MAX : INT32_MAX;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (isspace((unsigned char)*value) || end == value || *end != '\0')
            return mg_error(MG_EINVAL, "%s: %s wants an integer%s%s, got '%s'", where, o->key,
                            word ? " or " : "", word ? word : "", value);
        if (errno == ERANGE || v > most)
            return mg_error(MG_EINVAL, "%s: %s must be <= %lld, got %s", where, o->key, most, value);
        if (v < (long long)o->min)
            return mg_error(MG_EINVAL, "%s: %s must be >= %lld, got %lld", where, o->key,
                            (long long)o->min, v);
        *(int64_t *)field = v;
        return MG_OK;
    }
    case OPT_FLOAT: {
        errno = 0;
        double v = strtod(value, &end);
        if (isspace((unsigned char)*value) || errno || end == value || *end != '\0' || !isfinite(v))
            return mg_error(MG_EINVAL, "%s: %s wants a number, got '%s'", where, o->key, value);
        if (v < o->min)
            return mg_error(MG_EINVAL, "%s: %s must be >= %g, got %g", where, o->key, o->min, v);
        *(double *)field = v;
        return MG_OK;
    }
    case OPT_FLAG:
        if (!strcmp(value, "1") || !strcmp(value, "on") || !strcmp(value, "yes") || !strcmp(value, "true"))
            *(int64_t *)field = 1;
        else if (!strcmp(value, "0") || !strcmp(value, "off") || !strcmp(value, "no") ||
                 !strcmp(value, "false"))
            *(int64_t *)field = 0;
        else
            return mg_error(MG_EINVAL, "%s: %s is on or off (1/0, yes/no, true/false), got '%s'",
                            where, o->key, value);
        return MG_OK;
    case OPT_BETAS: {
        double b[2];
        char *mid = NULL;
        errno = 0;
        b[0] = strtod(value, &mid);
        int bad = errno || mid == value || *mid != ',';
        if (!bad) {
            b[1] = strtod(mid + 1, &end);
            bad = errno || end == mid + 1 || *end != '\0';
        }
        for (int i = 0; !bad && i < 2; i++) bad = !(b[i] >= 0 && b[i] < 1);
        if (bad)
            return mg_error(MG_EINVAL, "%s: %s wants two numbers in [0, 1) as B1,B2 (e.g. 0.9,0.95), "
                            "got '%s'", where, o->key, value);
        memcpy(field, b, sizeof b);
        return MG_OK;
    }
    case OPT_MODEL: rc = mg_model_kind_parse(value, field); break;
    case OPT_OPTIM: rc = mg_optim_kind_parse(value, field); break;
    case OPT_SCHEDULE: rc = mg_schedule_kind_parse(value, field); break;
    case OPT_RECOMPUTE: rc = mg_recompute_mode_parse(value, field); break;
    }
    if (rc != MG_OK) return prefix_error(rc, where);
    return MG_OK;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = '\0';
    return s;
}

/* The file must be a regular, readable file. */
static FILE *open_config(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return mg_error_null(MG_EIO, "cannot read config file '%s': %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return mg_error_null(MG_EINVAL, "config file '%s' is a directory: give a file of "
                             "'key = value' lines", path);
    if (!S_ISREG(sb.st_mode))
        return mg_error_null(MG_EINVAL, "config file '%s' is not a regular file", path);
    FILE *f = fopen(path, "r");
    if (!f) return mg_error_null(MG_EIO, "cannot read config file '%s': %s", path, strerror(errno));
    return f;
}

#define MAX_LINE (2 * MG_PATH_MAX) /* characters of a config line, its newline included */

/* One line of f, its newline kept, into buf (MAX_LINE + 1 bytes): its length;
 * 0 at the end of the file; -1 when it is longer than MAX_LINE (the rest of
 * it is not read: a file of one 8 GB line was read whole into memory). */
static long read_line(FILE *f, char *buf) {
    long n = 0;
    int ch = 0;
    while (ch != '\n' && (ch = getc(f)) != EOF) {
        if (n == MAX_LINE) return -1;
        buf[n++] = (char)ch;
    }
    buf[n] = '\0';
    return n;
}

int mg_train_config_load(mg_train_config *c, const char *path) {
    FILE *f = open_config(path);
    if (!f) return mg_last_code();
    char line[MAX_LINE + 1], where[MG_PATH_MAX + 32];
    long got;
    int lineno = 0, rc = MG_OK;
    int seen[NOPTIONS] = {0}; /* the line that set each option, 0: none */
    while (rc == MG_OK && (got = read_line(f, line)) != 0) {
        lineno++;
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        if (got < 0) {
            rc = mg_error(MG_EINVAL, "%s: line longer than %d characters: a config file holds "
                          "short 'key = value' lines", where, MAX_LINE);
            break;
        }
        if (memchr(line, '\0', (size_t)got) != NULL) {
            rc = mg_error(MG_EINVAL, "%s: the line holds a NUL byte: a config file is text "
                          "('key = value' lines), not a binary file", where);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *s = trim(line);
        if (*s == '\0') continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = mg_error(MG_EINVAL, "%s: expected 'key = value', got '%.80s'", where, s);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        if (*key == '\0') {
            rc = mg_error(MG_EINVAL, "%s: expected 'key = value' but the key is empty", where);
            break;
        }
        if (strcmp(key, "config") == 0) {
            rc = mg_error(MG_EINVAL, "%s: a config file cannot name another config file", where);
            break;
        }
        const option_def *o = find_option(key);
        if (o == NULL) {
            rc = mg_error(MG_EINVAL, "%s: unknown key '%.80s' (keys are the flag names of meshgrad "
                                     "train --help without the dashes)", where, key);
            break;
        }
        int *first = &seen[o - options];
        if (*first) {
            rc = mg_error(MG_EINVAL, "%s: %s is set twice, on lines %d and %d: keep one", path,
                          o->key, *first, lineno);
            break;
        }
        *first = lineno;
        rc = mg_train_config_set_at(c, key, value, where);
    }
    if (rc == MG_OK && ferror(f))
        rc = mg_error(MG_EIO, "cannot read config file '%s': %s", path, strerror(errno));
    fclose(f);
    if (rc == MG_OK) snprintf(c->config, sizeof c->config, "%s", path);
    return rc;
}

int mg_train_config_parse_args(mg_train_config *c, int argc, char **argv) {
    struct option longopts[NOPTIONS + 3];
    for (int i = 0; i < NOPTIONS; i++)
        longopts[i] = (struct option){options[i].key,
                                      options[i].type == OPT_FLAG ? optional_argument : required_argument,
                                      NULL, 1000 + i};
    longopts[NOPTIONS] = (struct option){"config", required_argument, NULL, 'c'};
    longopts[NOPTIONS + 1] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[NOPTIONS + 2] = (struct option){NULL, 0, NULL, 0};
    /* pass 1: --config and flag errors; pass 2: every other flag over the file */
    for (int pass = 1; pass <= 2; pass++) {
        optind = 0; /* GNU: full re-initialization */
        opterr = 0;
        int ch, idx = -1;
        while ((ch = getopt_long(argc, argv, ":h", longopts, &idx)) != -1) {
            const char *flag = argv[optind - 1];
            if (ch == '?')
                return mg_error(MG_EINVAL, "unknown option '%s' (see meshgrad train --help)",
                                optopt ? (char[]){'-', (char)optopt, 0} : flag);
            if (ch == ':') return mg_error(MG_EINVAL, "option '%s' needs a value", flag);
            if (ch == 'h') {
                c->help = 1;
                continue;
            }
            if (ch == 'c') {
                if (pass == 1 && c->config[0])
                    return mg_error(MG_EINVAL, "--config given twice (%s, then %s): give one "
                                    "file, and its settings to change as flags", c->config, optarg);
                if (pass == 1) {
                    int rc = mg_train_config_load(c, optarg);
                    if (rc != MG_OK) return rc;
                }
                continue;
            }
            if (pass == 2) {
                char where[80];
                snprintf(where, sizeof where, "--%s", options[ch - 1000].key);
                int rc = mg_train_config_set_at(c, options[ch - 1000].key, optarg ? optarg : "1", where);
                if (rc != MG_OK) return rc;
            }
        }
        if (optind < argc)
            return mg_error(MG_EINVAL, "unexpected argument '%s' (options are --key value; see meshgrad "
                                       "train --help)", argv[optind]);
    }
    return MG_OK;
}

/* An option of another model than c's, set by the user: refused, as it
 * would be dropped (--heads with the MLP, --hidden with the GPT). */
static int check_model_options(const mg_train_config *c) {
    for (size_t i = 0; i < sizeof model_options / sizeof model_options[0]; i++) {
        const option_def *o = find_option(model_options[i].key);
        if (!(c->given & 1ull << (o - options)) || model_options[i].models & 1u << c->model)
            continue;
        unsigned for_models = model_options[i].models;
        char names[64] = "";
        const char *first = NULL;
        for (int k = 0, n = 0; k <= MG_MODEL_LLAMA; k++) { /* "mlp, permute-mlp or llama" */
            if (!(for_models & 1u << k)) continue;
            int left = 0;
            for (int j = k + 1; j <= MG_MODEL_LLAMA; j++) left += (for_models >> j) & 1u;
            size_t used = strlen(names);
            snprintf(names + used, sizeof names - used, "%s%s", n++ ? (left ? ", " : " or ") : "",
                     mg_model_kind_name((mg_model_kind)k));
            if (!first) first = mg_model_kind_name((mg_model_kind)k);
        }
        return mg_error(MG_EINVAL, "%s applies to --model %s, but the model is %s (sized by %s): "
                        "drop %s, or give --model %s", o->key, names,
                        mg_model_kind_name(c->model), sized_by[c->model], o->key, first);
    }
    return MG_OK;
}

int mg_train_config_check(const mg_train_config *c) {
    int rc = check_model_options(c);
    if (rc != MG_OK) return rc;
    if (c->warmup >= c->steps && c->warmup > 0)
        return mg_error(MG_EINVAL, "warmup (%lld steps) must be shorter than the run (%lld steps)",
                        (long long)c->warmup, (long long)c->steps);
    if (c->lr <= 0) return mg_error(MG_EINVAL, "lr must be > 0, got %g", c->lr);
    if (c->momentum >= 1) return mg_error(MG_EINVAL, "momentum must be in [0, 1), got %g", c->momentum);
    if (c->optimizer == MG_OPTIM_ADAMW && c->momentum != 0)
        return mg_error(MG_EINVAL, "momentum %g is an SGD setting; AdamW uses --betas (drop "
                                   "momentum or use --optimizer sgd)", c->momentum);
    if (c->lr_min > c->lr)
        return mg_error(MG_EINVAL, "lr-min %g is above lr %g: the cosine schedule goes from lr down "
                        "to lr-min", c->lr_min, c->lr);
    if (c->grad_accum > 1 && !mg_model_kind_is_lm(c->model))
        return mg_error(MG_EINVAL, "grad-accum %lld applies to --model gpt or llama (the image "
                        "models take one batch per step)", (long long)c->grad_accum);
    mg_plan plan;
    const char *pp_flag = c->microbatches ? "microbatches"
                          : c->microbatch_rows[0] ? "microbatch-rows"
                          : c->pp_layers[0] ? "pp-layers"
                          : c->virtual_stages != 1 ? "virtual-stages"
                          : strcmp(c->pp_schedule, "1f1b") ? "pp-schedule" : NULL;
    if (pp_flag && mg_plan_parse(c->parallel, &plan) == MG_OK && mg_plan_pp_dim(&plan) < 0)
        return mg_error(MG_EINVAL, "%s applies to a pipeline, and --parallel '%s' has no pp: add "
                        "pp to it (e.g. --parallel pp or pp,dp)%s", pp_flag, c->parallel,
                        mg_model_kind_is_lm(c->model) && !strncmp(pp_flag, "microbatch", 10)
                            ? ", or for micro-batches without a pipeline give --grad-accum"
                            : "");
    if (c->recompute != MG_RECOMPUTE_NONE && !mg_model_kind_is_lm(c->model))
        return mg_error(MG_EINVAL, "recompute %s applies to a model of blocks (--model gpt or "
                        "llama); model %s has none: use recompute none",
                        mg_recompute_mode_name(c->recompute),
                        mg_model_kind_name(c->model));
    if (c->recompute != MG_RECOMPUTE_NONE && !strcmp(c->pp_schedule, "zb-h1") &&
        mg_plan_parse(c->parallel, &plan) == MG_OK && mg_plan_pp_dim(&plan) >= 0)
        return mg_error(MG_EINVAL, "recompute %s with --pp-schedule zb-h1: its W step computes "
                        "the weights' gradients after the block has given its activations back; "
                        "use 1f1b, gpipe or interleaved-1f1b, or recompute none",
                        mg_recompute_mode_name(c->recompute));
    if (c->batch % c->grad_accum != 0)
        return mg_error(MG_EINVAL, "grad-accum %lld does not divide batch %lld: each micro-batch "
                        "takes batch / grad-accum windows (e.g. --batch 32 --grad-accum 4)",
                        (long long)c->grad_accum, (long long)c->batch);
    if (!c->save[0] && c->save_every > 0)
        return mg_error(MG_EINVAL, "save-every %lld needs a place to save: give --save FILE or --save DIR/",
                        (long long)c->save_every);
    if (!c->save[0] && c->keep > 0)
        return mg_error(MG_EINVAL, "keep %lld applies to a checkpoint directory: give --save DIR/",
                        (long long)c->keep);
    if (strcmp(c->device, "cpu") != 0 && strcmp(c->device, "cuda") != 0)
        return mg_error(MG_EINVAL, "device '%s' is not one of cpu, cuda", c->device);
    if (strcmp(c->on_nonfinite, "stop") != 0 && strcmp(c->on_nonfinite, "skip") != 0)
        return mg_error(MG_EINVAL, "on-nonfinite '%s' is not one of stop, skip", c->on_nonfinite);
    if (c->overwrite && !c->save[0])
        return mg_error(MG_EINVAL, "overwrite applies to --save (a checkpoint file or directory that "
                        "a new run may write over): give --save FILE or --save DIR/");
    if (strcmp(c->dtype, "fp32") != 0 && strcmp(c->dtype, "bf16") != 0)
        return mg_error(MG_EINVAL, "dtype '%s' is not one of fp32, bf16", c->dtype);
    return MG_OK;
}

/* ---- the public calls (meshgrad_train.h) ------------------------------------------ */

mg_train_config *mg_train_config_new(void) {
    mg_train_config *c = malloc(sizeof *c);
    if (!c) return mg_error_null(MG_ENOMEM, "mg_train_config_new: out of memory");
    mg_train_config_defaults(c);
    return c;
}

int mg_train_config_set(mg_train_config *c, const char *key, const char *value) {
    if (!c || !key || !value)
        return mg_error(MG_EINVAL, "mg_train_config_set: the config, key or value is NULL");
    return mg_train_config_set_at(c, key, value, key);
}

int mg_train_config_set_recompute(mg_train_config *c, mg_recompute_mode mode) {
    if (!c) return mg_error(MG_EINVAL, "mg_train_config_set_recompute: the config is NULL");
    if (mode < MG_RECOMPUTE_NONE || mode > MG_RECOMPUTE_ATTENTION)
        return mg_error(MG_EINVAL, "mg_train_config_set_recompute: mode %d is not "
                        "MG_RECOMPUTE_NONE, _BLOCKS or _ATTENTION", (int)mode);
    c->recompute = mode;
    return MG_OK;
}

void mg_train_config_free(mg_train_config *c) { free(c); }

/* Which flag gives each setting a resume compares (nn/train_state.h). */
static const struct {
    const char *key, *by;
} flag_of[] = {
    {"model", "--model"},
    {"model.hidden", "--hidden"},
    {"model.layers", "--layers"},
    {"model.heads", "--heads"},
    {"model.kv_heads", "--kv-heads"},
    {"model.rope_theta", "--rope-theta"},
    {"model.norm_eps", "--norm-eps"},
    {"model.tied", "--untied-head (given or not) makes it"},
    {"model.embd", "--embd"},
    {"model.ctx", "--ctx"},
    {"model.vocab", "the data set gives"},
    {"model.channels", "--channels"},
    {"model.depth", "--depth"},
    {"model.classes", "the data set gives"},
    {"model.input", "the data set gives"},
    {"optimizer", "--optimizer"},
    {"optimizer.state", "--optimizer and --momentum give"},
    {"seed", "--seed"},
    {"data.file", "--data"},
    {"data.batch", "--batch"},
    {"schedule", "--schedule"},
    {"schedule.lr", "--lr"},
    {"schedule.warmup", "--warmup"},
    {"schedule.total_steps", "--steps"},
    {"schedule.lr_min", "--lr-min"},
    {"optimizer.momentum", "--momentum"},
    {"optimizer.weight_decay", "--weight-decay"},
    {"optimizer.decay", "--decay-all"},
    {"optimizer.beta1", "--betas"},
    {"optimizer.beta2", "--betas"},
    {"clip", "--clip"},
};

const char *mg_train_config_flag_of(const char *key) {
    for (size_t i = 0; i < sizeof flag_of / sizeof flag_of[0]; i++)
        if (strcmp(flag_of[i].key, key) == 0) return flag_of[i].by;
    return key;
}

/* The value of an option in c, as text ("" for an empty string). */
static void format_value(const option_def *o, const mg_train_config *c, char *buf, size_t len) {
    const void *field = (const char *)c + o->offset;
    switch (o->type) {
    case OPT_STRING:
    case OPT_MESH:
    case OPT_PLAN: snprintf(buf, len, "%s", (const char *)field); break;
    case OPT_INT: {
        int64_t v = *(const int64_t *)field, stands_for = 0;
        const char *word = word_of(o, &stands_for);
        if (word && v == stands_for) snprintf(buf, len, "%s", word);
        else snprintf(buf, len, "%lld", (long long)v);
        break;
    }
    case OPT_FLAG: snprintf(buf, len, "%s", *(const int64_t *)field ? "on" : "off"); break;
    case OPT_FLOAT: snprintf(buf, len, "%g", *(const double *)field); break;
    case OPT_BETAS:
        snprintf(buf, len, "%g,%g", ((const double *)field)[0], ((const double *)field)[1]);
        break;
    case OPT_MODEL: snprintf(buf, len, "%s", mg_model_kind_name(*(const mg_model_kind *)field)); break;
    case OPT_OPTIM: snprintf(buf, len, "%s", mg_optim_kind_name(*(const mg_optim_kind *)field)); break;
    case OPT_SCHEDULE:
        snprintf(buf, len, "%s", mg_schedule_kind_name(*(const mg_schedule_kind *)field));
        break;
    case OPT_RECOMPUTE:
        snprintf(buf, len, "%s", mg_recompute_mode_name(*(const mg_recompute_mode *)field));
        break;
    }
}

void mg_train_config_usage(FILE *out) {
    mg_train_config defaults;
    mg_train_config_defaults(&defaults);
    fprintf(out, "usage: mpirun -np N meshgrad train [--config FILE] [options]\n\n"
                 "Trains a model on an HDF5 data set over an N-rank device mesh.\n\n"
                 "  --config FILE         read 'key = value' lines (keys are the option names\n"
                 "                        below; '#' starts a comment); flags override the file\n");
    for (int i = 0; i < NOPTIONS; i++) {
        char left[48];
        char value[64];
        snprintf(left, sizeof left, "--%s %s", options[i].key, options[i].arg);
        format_value(&options[i], &defaults, value, sizeof value);
        /* a negative weight decay means "the optimizer's default" (in the help) */
        if (value[0] && !(options[i].type == OPT_FLOAT && *(double *)((char *)&defaults + options[i].offset) < 0))
            fprintf(out, "  %-21s %s [%s]\n", left, options[i].help, value);
        else
            fprintf(out, "  %-21s %s\n", left, options[i].help);
    }
    fprintf(out, "  %-21s %s\n\n", "--help", "this text");
    fprintf(out, "A relative --data path is looked for in the current directory first, then\n"
                 "in the directory of the meshgrad program (its build directory), so\n"
                 "'data/digits.h5' finds build/data/digits.h5 when run as build/meshgrad.\n"
                 "--model gpt and --model llama train on a token data set (meshgrad data\n"
                 "text2h5): windows of ctx + 1 tokens drawn by (seed, step); val_loss is the\n"
                 "mean over every non-overlapping ctx-window of /val. The recipes:\n"
                 "data/mobydick.conf (gpt), data/mobydick-llama.conf (llama). Their weight\n"
                 "decay applies to 2-D parameters only (not norms nor biases; --decay-all:\n"
                 "every one).\n\n"
                 "Checkpoints (docs/CHECKPOINTS.md): --save FILE rewrites FILE atomically at\n"
                 "every --save-every steps and at the end; --save DIR/ writes DIR/ckpt-<step>.h5\n"
                 "(keeping the newest --keep). --resume PATH continues a run bit for bit on the\n"
                 "same mesh, on any other mesh by resharding; --steps stays the total.\n"
                 "SIGTERM, SIGINT or SIGUSR1 finish the current step, save (to --save, else\n"
                 "to ./%s) and exit 0. A save replaces only a meshgrad\n"
                 "checkpoint and deletes only older ckpt-<step>.h5; a failed save stops the run\n"
                 "(exit 1) with the previous checkpoint intact. A step whose loss or gradient is\n"
                 "not finite stops the run before the update (--on-nonfinite skip: skipped).\n\n"
                 "Seeing inside (docs/OBSERVE.md): every rank keeps its last collectives in a\n"
                 "flight recorder, written to --flight-dir/rank-<r>.json on a collective\n"
                 "timeout, a crash, or kill -USR2 (the run goes on); `meshgrad trace analyze\n"
                 "DIR` says which rank is behind. --trace FILE writes the timeline of steps\n"
                 "--trace-steps A:B of every rank (Perfetto). The progress line splits a step\n"
                 "into compute, communication wait and data wait and names the slowest rank;\n"
                 "the run ends with its peak memory and bytes moved per step.\n",
            MG_TRAIN_PREEMPT_PATH);
}
