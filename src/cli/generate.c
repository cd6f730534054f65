/* generate.c: `meshgrad generate`: text from a language model's checkpoint
 * (one written by `meshgrad train --model gpt` or `--model llama`), on any
 * mesh and plan the model allows.
 *
 *   prompt bytes -> prefill the KV cache -> logits (V) of the last position
 *   -> sample a byte -> feed it at the next position (O(T) per token) -> ...
 *
 * The model's configuration (its kind, layers, heads, embd, ctx, vocabulary;
 * the Llama's kv heads, hidden width, rope theta, norm eps and tied head)
 * comes from the checkpoint's attributes; the parameters are loaded into the
 * placements of --parallel on --mesh (nn/train_state.h). Every activation of
 * generation is Replicate (gpt.h, llama.h); the logits of each token are
 * gathered whole on every rank and rank 0 samples; the byte is broadcast, so
 * the ranks never disagree.
 *
 * Sampling: temperature 0 takes the argmax (the lowest index among equals);
 * else the softmax of logits / temperature over the top-k logits (all of them
 * with --top-k 0; ties at the k-th by the lower index), computed in double,
 * inverted at u = Philox uniform(seed, stream "generate", token index): one
 * number per token, addressed by the token's index in the continuation, so a
 * seed names the same draws on every mesh. The logits of two meshes differ
 * at most by float reassociation (about 1e-6 relative): the text differs only
 * when u falls within that distance of a boundary of the cumulative
 * distribution (or two logits tie that closely under greedy), which
 * tests/test_generate_text.sh checks does not happen for its seeds and meshes.
 *
 * Context: a prompt longer than ctx keeps its last ctx bytes (a note on
 * stderr). When the cache is full (ctx positions), the window slides: the last
 * ctx / 2 tokens are prefilled again from position 0 and generation goes on
 * against them, so a token always sees at least ctx / 2 tokens and the cost
 * stays O(T) per token on average (one prefill of ctx / 2 per ctx / 2 tokens).
 *
 * Output: rank 0 prints the prompt and the sampled bytes on stdout, then a
 * newline, then the speed on stderr. Under mpirun a rank's stdout is a pty and
 * its stderr a pipe, which mpirun reads in either order: on a terminal the
 * speed line could land before or inside the text, so rank 0 pauses a moment
 * after the text when stdout is a terminal, letting mpirun pass it on first.
 * Exports mg_cli_generate (cli.h). */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cli/cli.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "io/checkpoint.h"
#include "io/files.h"
#include "nn/model.h"
#include "nn/train_state.h"
#include "rng.h"
#include "status.h"
#include "train/trainer.h"

#define GEN_STREAM 0x67656e6572617465ull /* "generate": the Philox stream of the draws */
#define GEN_MAX_ATTRS 512

typedef struct {
    char resume[MG_PATH_MAX], mesh[64], parallel[64];
    const char *prompt;
    int64_t tokens, top_k, seed, threads;
    double temperature;
    int det; /* --deterministic */
} gen_options;

static const char *usage_text =
    "usage: meshgrad generate --resume CKPT [--prompt TEXT] [--tokens N] [--temperature X]\n"
    "                         [--top-k K] [--seed S] [--mesh M] [--parallel P] [--threads N]\n"
    "                         [--deterministic]\n"
    "\n"
    "Prints TEXT and N bytes sampled from the GPT or Llama of CKPT (a checkpoint file, or a\n"
    "directory of them: the newest), written by `meshgrad train --model gpt` or `--model\n"
    "llama`. Runs on any mesh and\n"
    "plan the model allows (e.g. mpirun -np 2 meshgrad generate --parallel tp ...); the same\n"
    "seed gives the same text on every mesh.\n"
    "\n"
    "  --resume CKPT      the checkpoint (required)\n"
    "  --prompt TEXT      the start of the text (default: a newline); longer than the\n"
    "                     model's ctx, only its last ctx bytes are used (said on stderr)\n"
    "  --tokens N         bytes to sample (default 200; 0 prints the prompt only)\n"
    "  --temperature X    softmax temperature (default 1.0); 0 = greedy (the argmax)\n"
    "  --top-k K          sample among the K most likely bytes (default 0 = all)\n"
    "  --seed S           the draws: Philox by (S, token index) (default 1337)\n"
    "  --mesh M           device mesh: 2, 4, 1x2, 2x2 (default: 1-D over all ranks)\n"
    "  --parallel P       one plan per mesh dim: dp, tp, fsdp, sp, tp+sp (default dp)\n"
    "  --threads N        CPU threads per rank (default: cores / ranks)\n"
    "  --deterministic    every sum in one fixed order: the same logits on every mesh\n"
    "\n"
    "A KV cache makes each token cost O(ctx). When the context is full, the window slides:\n"
    "the last ctx/2 tokens are prefilled again and generation continues from them.\n"
    "Rank 0 prints the text on stdout and the speed (tokens/s) on stderr.\n";

/* An integer from 0 to `most` from text; MG_EINVAL naming the flag otherwise. */
static int parse_nonnegative(const char *flag, const char *s, long long most, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!isdigit((unsigned char)*s) || *end || errno == ERANGE || v > most)
        return mg_error(MG_EINVAL, "%s %s: give a whole number from 0 to %lld", flag, s, most);
    *out = v;
    return MG_OK;
}

/* 0 ok, 1 --help shown, 2 usage error (message in mg_last_error). */
static int parse(int argc, char **argv, gen_options *o) {
    static const struct option opts[] = {
        {"resume", 1, 0, 'r'},  {"prompt", 1, 0, 'p'},   {"tokens", 1, 0, 'n'},
        {"temperature", 1, 0, 'T'}, {"top-k", 1, 0, 'k'}, {"seed", 1, 0, 's'},
        {"mesh", 1, 0, 'm'},    {"parallel", 1, 0, 'P'}, {"threads", 1, 0, 't'},
        {"deterministic", 0, 0, 'D'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    *o = (gen_options){"", "", "dp", "\n", 200, 0, 1337, 0, 1.0, 0};
    int c, rc = MG_OK;
    opterr = 0;
    while (rc == MG_OK && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'r': snprintf(o->resume, sizeof o->resume, "%s", optarg); break;
        case 'p': o->prompt = optarg; break;
        /* the tokens are held (ints) and counted in ints: at most 2^31 - 1 */
        case 'n': rc = parse_nonnegative("--tokens", optarg, INT32_MAX, &o->tokens); break;
        case 'k': rc = parse_nonnegative("--top-k", optarg, INT32_MAX, &o->top_k); break;
        case 's': rc = parse_nonnegative("--seed", optarg, INT64_MAX, &o->seed); break;
        case 't': rc = parse_nonnegative("--threads", optarg, INT32_MAX, &o->threads); break;
        case 'D': o->det = 1; break;
        case 'm': snprintf(o->mesh, sizeof o->mesh, "%s", optarg); break;
        case 'P': snprintf(o->parallel, sizeof o->parallel, "%s", optarg); break;
        case 'T':
            o->temperature = strtod(optarg, &end);
            if (!*optarg || isspace((unsigned char)*optarg) || *end || !isfinite(o->temperature) ||
                o->temperature < 0)
                rc = mg_error(MG_EINVAL, "--temperature %s: give a finite number >= 0 (0 = greedy)",
                              optarg);
            break;
        case 'h':
            if (mg_rank() == 0) fputs(usage_text, stdout);
            return 1;
        default:
            if (mg_rank() == 0) fputs(usage_text, stderr);
            mg_error(MG_EINVAL, "generate: unknown option or missing value '%s' (see the usage above)",
                     argv[optind - 1]);
            return 2;
        }
    }
    if (rc != MG_OK) return 2;
    if (optind < argc) {
        mg_error(MG_EINVAL, "generate: unexpected argument '%s' (the prompt goes after --prompt)",
                 argv[optind]);
        return 2;
    }
    if (!o->resume[0]) {
        mg_error(MG_EINVAL, "generate: no checkpoint given: --resume CKPT (a checkpoint of "
                 "`meshgrad train --model gpt` or `--model llama`)");
        return 2;
    }
    if (!o->prompt[0]) {
        mg_error(MG_EINVAL, "generate: --prompt is empty: give at least one byte (the default is "
                 "a newline)");
        return 2;
    }
    return 0;
}

/* A model attribute of the checkpoint, a count >= least. */
static int model_int(const char *path, const mg_ckpt_attr *a, int n, const char *key, int64_t least,
                     int64_t *out) {
    const char *v = mg_ckpt_attr_get(a, n, key);
    char *end = NULL;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || x < least)
        return mg_error(MG_EFORMAT, "checkpoint %s: attribute \"%s\" is %s: the file was not "
                        "written by `meshgrad train --model gpt` or `--model llama`, or was "
                        "altered", path, key, v ? v : "missing");
    *out = x;
    return MG_OK;
}

/* A model attribute of the checkpoint, a finite number above 0. */
static int model_double(const char *path, const mg_ckpt_attr *a, int n, const char *key,
                        double *out) {
    const char *v = mg_ckpt_attr_get(a, n, key);
    char *end = NULL;
    double x = v ? strtod(v, &end) : 0;
    if (!v || !*v || *end || !isfinite(x) || !(x > 0))
        return mg_error(MG_EFORMAT, "checkpoint %s: attribute \"%s\" is %s: the file was not "
                        "written by `meshgrad train --model llama`, or was altered", path, key,
                        v ? v : "missing");
    *out = x;
    return MG_OK;
}

/* The blocks whose weights a checkpoint holds: 1 + the largest N of
 * params/<prefix>N.* (a walk of its names, no data read). */
typedef struct {
    const char *prefix; /* "params/h." (the GPT's), "params/layers." (the Llama's) */
    int blocks;
} block_count;

static int count_blocks(void *ctx, const char *name) {
    block_count *c = ctx;
    size_t n = strlen(c->prefix);
    int k = -1;
    if (strncmp(name, c->prefix, n) == 0 && sscanf(name + n, "%d.", &k) == 1 && k >= 0 &&
        k + 1 > c->blocks)
        c->blocks = k + 1;
    return MG_OK;
}

/* The Llama's attributes beyond the GPT's. */
static int read_llama(const char *path, const mg_ckpt_attr *a, int n, mg_lm_config *cfg) {
    mg_llama_config *l = &cfg->llama;
    int64_t tied = 0;
    int rc = model_int(path, a, n, "model.kv_heads", 1, &l->kv_heads);
    if (rc == MG_OK) rc = model_int(path, a, n, "model.hidden", 1, &l->hidden);
    if (rc == MG_OK) rc = model_double(path, a, n, "model.rope_theta", &l->rope_theta);
    if (rc == MG_OK) rc = model_double(path, a, n, "model.norm_eps", &l->norm_eps);
    if (rc == MG_OK) rc = model_int(path, a, n, "model.tied", 0, &tied);
    if (rc == MG_OK && tied > 1)
        rc = mg_error(MG_EFORMAT, "checkpoint %s: attribute \"model.tied\" is %lld, not 0 or 1: "
                      "the file was altered", path, (long long)tied);
    l->tied = (int)tied;
    return rc;
}

/* Collective. The language model's configuration of the checkpoint at
 * `path`, its layer count checked against the weights the file holds before
 * any is built. */
static int read_config(const char *path, mg_lm_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    mg_ckpt_attr *a = calloc(GEN_MAX_ATTRS, sizeof *a);
    if (!a) return mg_error(MG_ENOMEM, "generate: out of memory for the checkpoint's attributes");
    int n = 0, rc = mg_checkpoint_read_attrs(path, a, GEN_MAX_ATTRS, &n);
    const char *model = rc == MG_OK ? mg_ckpt_attr_get(a, n, "model") : NULL;
    if (rc == MG_OK && !model)
        rc = mg_error(MG_EFORMAT, "checkpoint %s holds no training run (no \"model\" attribute): "
                      "give a checkpoint of `meshgrad train --model gpt` or `--model llama`", path);
    else if (rc == MG_OK && strcmp(model, "gpt") != 0 && strcmp(model, "llama") != 0)
        rc = mg_error(MG_EINVAL, "checkpoint %s holds a model of kind %s, not a GPT or a Llama: "
                      "generate needs a checkpoint of `meshgrad train --model gpt` or `--model "
                      "llama`", path, model);
    int llama = rc == MG_OK && strcmp(model, "llama") == 0;
    int64_t layers = 0, heads = 0, embd = 0, ctx = 0, vocab = 0;
    if (rc == MG_OK) rc = model_int(path, a, n, "model.layers", 1, &layers);
    block_count blocks = {llama ? "params/layers." : "params/h.", 0};
    if (rc == MG_OK) rc = mg_checkpoint_list(path, count_blocks, &blocks);
    if (rc == MG_OK && blocks.blocks != layers)
        rc = mg_error(MG_EFORMAT, "checkpoint %s: attribute model.layers is %lld but the file "
                      "holds the weights of %d blocks (%s0 to %d): it was altered or cut short; "
                      "give the checkpoint as train saved it", path, (long long)layers,
                      blocks.blocks, blocks.prefix, blocks.blocks - 1);
    if (rc == MG_OK) rc = model_int(path, a, n, "model.heads", 1, &heads);
    if (rc == MG_OK) rc = model_int(path, a, n, "model.embd", 1, &embd);
    if (rc == MG_OK) rc = model_int(path, a, n, "model.ctx", 1, &ctx);
    if (rc == MG_OK) rc = model_int(path, a, n, "model.vocab", 1, &vocab);
    if (rc == MG_OK && vocab > 256)
        rc = mg_error(MG_EINVAL, "checkpoint %s: vocabulary %lld; generate prints bytes and takes "
                      "a byte-level model (vocabulary <= 256)", path, (long long)vocab);
    if (rc == MG_OK) {
        cfg->kind = llama ? MG_MODEL_LLAMA : MG_MODEL_GPT;
        cfg->gpt = (mg_gpt_config){layers, heads, embd, ctx, vocab};
        cfg->llama = (mg_llama_config){.layers = layers, .heads = heads, .embd = embd,
                                       .ctx = ctx, .vocab = vocab};
    }
    if (rc == MG_OK && cfg->kind == MG_MODEL_LLAMA) rc = read_llama(path, a, n, cfg);
    free(a);
    return rc;
}

typedef struct {
    gen_options o;
    mg_mesh *mesh;
    mg_plan plan;
    mg_model model;
    mg_lm_config cfg;
    int have_model, have_cache;
    mg_gpt_cache cache;
    char path[MG_PATH_MAX];
} generator;

/* Collective: mesh, plan, model and its parameters from the checkpoint, cache. */
static int setup(generator *g) {
    const gen_options *o = &g->o;
    if (o->threads > 0) mg_backend_cpu_set_threads((int)o->threads);
    if (o->det && mg_set_deterministic(1) != MG_OK) return mg_last_code();
    if (!(g->mesh = mg_trainer_mesh_new(o->mesh, "cpu"))) return mg_last_code();
    int rc = mg_plan_parse(o->parallel, &g->plan);
    if (rc == MG_OK) rc = mg_plan_check(&g->plan, g->mesh, INT64_MAX); /* no batch to split */
    if (rc == MG_OK && mg_plan_pp_dim(&g->plan) >= 0)
        rc = mg_error(MG_EINVAL, "generate: --parallel %s has pp, which cuts a model into stages "
                      "for training; generation runs every block on each rank: give dp, tp, "
                      "fsdp, sp or tp+sp (a checkpoint saved under pp loads on any of them)",
                      o->parallel);
    if (rc != MG_OK) return rc;

    if (mg_rank() == 0) rc = mg_checkpoint_resolve(o->resume, g->path, sizeof g->path);
    if ((rc = mg_status_agree(rc)) != MG_OK) return rc;
    if ((rc = mg_comm_broadcast_bytes(g->mesh->world, g->path, sizeof g->path, 0)) != MG_OK) return rc;
    if ((rc = read_config(g->path, &g->cfg)) != MG_OK) return rc;
    if ((rc = mg_model_build_lm(&g->model, g->mesh, &g->plan, &g->cfg, 0, NULL)) != MG_OK) return rc;
    g->have_model = 1;
    rc = mg_train_state_load_params(g->path, &g->model);
    if (rc == MG_OK) rc = mg_model_cache_init(&g->model, &g->cache, g->mesh, &g->plan);
    g->have_cache = rc == MG_OK;
    return rc;
}

static void teardown(generator *g) {
    if (g->have_cache) mg_gpt_cache_release(&g->cache);
    if (g->have_model) mg_model_free(&g->model);
    if (g->mesh) mg_mesh_free(g->mesh);
}

/* Collective. logits (V) of the last of ids[0..n), fed at position pos (0: a
 * prompt refilling the cache; else one token after the cache's last). */
static int forward(generator *g, const int *ids, int64_t n, int64_t pos, float *logits) {
    mg_tensor *t = mg_tensor_new(2, (int64_t[]){1, n}); // t: (1, n)
    if (!t) return mg_last_code();
    for (int64_t i = 0; i < n; i++) mg_tensor_data(t)[i] = (float)ids[i];
    mg_placement rep[MG_MAX_MESH_DIMS];
    for (int d = 0; d < g->mesh->ndim; d++) rep[d] = MG_REPLICATE;
    mg_dtensor *x = mg_distribute(g->mesh, t, rep, g->mesh->ndim);
    mg_tensor_free(t);
    mg_dtensor *y = x ? mg_model_forward_cached(&g->model, &g->cache, x, pos) : NULL; // y: (1, 1, V)
    mg_tensor *full = y ? mg_full_tensor(y) : NULL;
    int rc = full ? MG_OK : mg_last_code() ? mg_last_code() : MG_ENOMEM;
    if (full) memcpy(logits, mg_tensor_data(full), sizeof(float) * (size_t)mg_lm_vocab(&g->cfg));
    mg_tensor_free(full);
    mg_dtensor_free(x);
    mg_step_end();
    return rc;
}

/* The byte drawn from logits (V) as the header says; `index` addresses the
 * draw. p: room for V doubles, order: V ints. */
static int sample(const float *logits, int64_t V, const gen_options *o, int64_t index, double *p,
                  int *order) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (o->temperature == 0) return best;
    for (int i = 0; i < V; i++) p[i] = 1; /* kept */
    if (o->top_k > 0 && o->top_k < V) { /* drop all but the k largest (lower index wins a tie) */
        for (int i = 0; i < V; i++) order[i] = i;
        for (int i = 0; i < o->top_k; i++) { /* partial selection sort: k of V */
            int m = i;
            for (int j = i + 1; j < V; j++)
                if (logits[order[j]] > logits[order[m]] ||
                    (logits[order[j]] == logits[order[m]] && order[j] < order[m]))
                    m = j;
            int tmp = order[i];
            order[i] = order[m], order[m] = tmp;
        }
        for (int i = (int)o->top_k; i < V; i++) p[order[i]] = 0;
    }
    double sum = 0;
    for (int i = 0; i < V; i++) {
        p[i] = p[i] ? exp(((double)logits[i] - (double)logits[best]) / o->temperature) : 0;
        sum += p[i];
    }
    double u = (double)mg_rng_uniform_at((uint64_t)o->seed, GEN_STREAM, (uint64_t)index) * sum, c = 0;
    int last = best;
    for (int i = 0; i < V; i++) {
        if (p[i] == 0) continue;
        c += p[i];
        last = i;
        if (u < c) return i;
    }
    return last; /* u * sum rounded up to the total */
}

/* Collective. The whole generation; rank 0 prints. */
static int run(generator *g) {
    const gen_options *o = &g->o;
    const int64_t T = mg_lm_ctx(&g->cfg), V = mg_lm_vocab(&g->cfg);
    const int rank = mg_rank();
    int64_t plen = (int64_t)strlen(o->prompt), keep = plen < T ? plen : T;
    if (plen > T && rank == 0)
        fprintf(stderr, "note: the prompt has %lld bytes, more than the model's ctx %lld: using "
                "its last %lld\n", (long long)plen, (long long)T, (long long)T);
    for (int64_t i = 0; i < plen; i++)
        if ((unsigned char)o->prompt[i] >= V)
            return mg_error(MG_EINVAL, "--prompt: byte %lld is %d, outside the model's vocabulary "
                            "of %lld: give a prompt of bytes below %lld", (long long)i,
                            (unsigned char)o->prompt[i], (long long)V, (long long)V);
    /* seq: the tokens the model sees, the cropped prompt then the sample; only
     * the last T are ever read, so it holds 2 T and moves its last T to the
     * front when full (it held all --tokens: 8 GB asked for 2^31) */
    int64_t cap = 2 * T + 1;
    int *seq = malloc(sizeof(int) * (size_t)cap);
    int *order = malloc(sizeof(int) * (size_t)V);
    float *logits = malloc(sizeof(float) * (size_t)V);
    double *p = malloc(sizeof(double) * (size_t)V);
    int rc = seq && order && logits && p ? MG_OK
                                         : mg_error(MG_ENOMEM, "generate: out of memory for %lld "
                                                    "tokens", (long long)o->tokens);
    int64_t n = 0;
    for (int64_t i = plen - keep; i < plen && rc == MG_OK; i++) seq[n++] = (unsigned char)o->prompt[i];
    if (rank == 0) fputs(o->prompt, stdout);
    double t0 = mg_clock();
    int64_t prefilled = 0;
    if (rc == MG_OK && o->tokens > 0) rc = forward(g, seq, n, 0, logits);
    for (int64_t i = 0; rc == MG_OK && i < o->tokens; i++) {
        int tok = rank == 0 ? sample(logits, V, o, i, p, order) : 0;
        if (rank == 0 && ferror(stdout)) tok = -1; /* stdout takes no more: stop every rank */
        if ((rc = mg_comm_broadcast_bytes(g->mesh->world, &tok, sizeof tok, 0)) != MG_OK) break;
        if (tok < 0) {
            rc = mg_error(MG_EIO, "generate: stdout took no more of the text after %lld of "
                          "%lld bytes (a full disk, or stdout closed?): give it a file or pipe "
                          "that takes it", (long long)i, (long long)o->tokens);
            break;
        }
        if (n == cap) {
            memmove(seq, seq + n - T, sizeof(int) * (size_t)T);
            n = T;
        }
        seq[n++] = tok;
        if (rank == 0) putchar(tok);
        if (i == o->tokens - 1) break;
        if (g->cache.len < T) {
            rc = forward(g, &seq[n - 1], 1, g->cache.len, logits);
        } else { /* full: slide, the last ctx / 2 tokens (at least 1) from position 0 */
            int64_t w = T / 2 > 0 ? T / 2 : 1;
            rc = forward(g, &seq[n - w], w, 0, logits);
            prefilled++;
        }
    }
    double seconds = mg_clock() - t0;
    if (rank == 0) {
        putchar('\n');
        fflush(stdout);
        if (isatty(STDOUT_FILENO)) /* the text first, then the line below (see the top) */
            nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
        if (rc == MG_OK && o->tokens > 0)
            fprintf(stderr, "generate: %lld tokens in %.3f s: %.0f tokens/s (%d thread%s/rank, "
                    "%d rank%s, %lld window slide%s)\n", (long long)o->tokens, seconds,
                    (double)o->tokens / seconds, mg_backend_cpu_threads(),
                    mg_backend_cpu_threads() == 1 ? "" : "s", mg_world_size(),
                    mg_world_size() == 1 ? "" : "s", (long long)prefilled, prefilled == 1 ? "" : "s");
    }
    free(seq), free(order), free(logits), free(p);
    return rc;
}

int mg_cli_generate(int argc, char **argv) {
    generator g;
    memset(&g, 0, sizeof g);
    int rc = parse(argc, argv, &g.o);
    if (rc) return rc == 1 ? 0 : rc;
    rc = setup(&g);
    if (rc == MG_OK) rc = run(&g);
    char msg[1024]; /* main.c prints the message once; keep it across the teardown */
    snprintf(msg, sizeof msg, "%s", mg_last_error());
    teardown(&g);
    if (rc == MG_OK) return 0;
    mg_error(rc, "%s", msg);
    return rc == MG_EINVAL || rc == MG_EMESH ? 2 : 1;
}
