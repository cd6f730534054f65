/* bench_gpt.c: `meshgrad bench step --model gpt` and `--model llama`: a
 * language model's training step (gpt.h, llama.h; forward, cross-entropy,
 * backward, clipping at global norm 1, AdamW with weight decay on 2-D
 * parameters: the recipes of data/mobydick.conf and data/mobydick-llama.conf,
 * whose models are the defaults) on any mesh and plan, on fixed token ids
 * drawn by Philox (no data file). It prints the median step time after
 * warm-up and of its forward, backward and optimizer parts (each the slowest
 * rank's), GFLOP/s (6 N per token for the N weights the GEMMs touch, plus
 * attention's 12 L T C per token, causal halved), the largest rank's peak RSS,
 * and as its last line the same JSON object as the MLP's step. With pp in
 * --parallel the step runs as a pipeline (nn/gpt_pipeline.h: --microbatches,
 * --pp-schedule, --virtual-stages, --pp-layers counting blocks), its forward
 * and backward timed together. --recompute blocks|attention recomputes each
 * block, or each block's attention, in backward (nn/recompute.h); the JSON
 * line's activation_mib is the activations' high-water of mg_trainer_memory_get.
 * Exports mg_cli_bench_step_gpt (cli.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "cli/bench_util.h"
#include "cli/cli.h"
#include "train/estimate.h"
#include "train/trainer.h"
#include "train/trainer_pp.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "nn/gpt_pipeline.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/recompute.h"
#include "rng.h"
#include "status.h"

static const char usage[] =
    "step --model gpt|llama [--layers L] [--heads H] [--embd C] [--ctx T] [--vocab V] "
    "[--batch B] [--steps S] [--threads N] [--mesh M] [--parallel P] [--lr LR] "
    "[--device cpu|cuda] [--tf32] [--dtype fp32|bf16] [--deterministic] [--microbatches M] [--pp-schedule "
    "gpipe|1f1b|interleaved-1f1b|zb-h1] [--virtual-stages V] [--pp-layers N1,N2,..]"
    " (with pp in --parallel; --pp-layers counts blocks) [--recompute none|blocks|attention]; "
    "llama: [--kv-heads KV] [--hidden F | --multiple-of M] [--rope-theta X] [--norm-eps X] "
    "[--untied-head] (defaults: L4 H4 C128 T64 V256, llama KV2 M32: the recipes' models)";

typedef struct {
    mg_cli_step_flags step;
    mg_lm_config lm;
    int64_t multiple_of; /* llama: the FFN width's rounding when --hidden is not given */
    mg_pp_options pp;
    mg_recompute_mode recompute; /* --recompute */
} bench_options;

/* What the step runs on: options, mesh, plan, model (with pp: this rank's
 * stages), optimizer and the token ids and targets, on the mesh or (with pp)
 * on the host. */
typedef struct {
    const bench_options *o;
    mg_mesh *mesh;
    mg_plan plan;
    mg_model model;
    mg_gpt_pp *pipe; /* pp in the plan */
    mg_optimizer opt;
    mg_dtensor *x, *y;
    float *ids, *targets;
} gpt_job;

/* What it measured: the medians (ms) of the step and of its forward,
 * backward (with pp: the two as one, in the forward's place) and optimizer;
 * the largest rank's peak RSS and step arena peak (MB), and its activations'
 * high-water (MiB: the step arena's and the recompute arena's, the figure of
 * mg_trainer_memory_get; with pp, the stages' micro-batch arenas are not in
 * it). */
typedef struct {
    double ms[4], rss, arena, activation_mib;
} gpt_result;

/* The defaults: the models of data/mobydick.conf and data/mobydick-llama.conf,
 * the pipeline's options with AdamW's state. */
static void defaults(bench_options *o) {
    memset(o, 0, sizeof *o);
    mg_cli_step_flags_init(&o->step, 32);
    o->lm.kind = MG_MODEL_GPT;
    o->lm.gpt = (mg_gpt_config){4, 4, 128, 64, 256}; /* data/mobydick.conf's model */
    o->lm.llama = (mg_llama_config){.layers = 4, .heads = 4, .kv_heads = 2, .embd = 128,
                                    .ctx = 64, .vocab = 256, .rope_theta = 10000,
                                    .norm_eps = 1e-5, .tied = 1}; /* data/mobydick-llama.conf's */
    o->multiple_of = 32;
    mg_pp_options_defaults(&o->pp);
    mg_train_pp_memory(&o->pp, 2); /* AdamW */
}

/* getopt_long's `c` into the model's sizes (the GPT's config holds those both
 * models take): 1 when it is a model flag, *bad what its value should be when
 * it is not that, *llama_only the flag when only the Llama takes it; 0 for
 * another flag. */
static int model_flag(int c, bench_options *o, const char **bad, const char **llama_only) {
    mg_gpt_config *g = &o->lm.gpt;
    mg_llama_config *l = &o->lm.llama;
    switch (c) {
    case 'M':
        if (strcmp(optarg, "gpt") && strcmp(optarg, "llama"))
            *bad = "gpt or llama (the MLP's bench takes no --model)";
        else o->lm.kind = strcmp(optarg, "gpt") ? MG_MODEL_LLAMA : MG_MODEL_GPT;
        return 1;
    case 'L': *bad = mg_cli_parse_count(optarg, &g->layers) ? MG_CLI_COUNT : NULL; return 1;
    case 'H': *bad = mg_cli_parse_count(optarg, &g->heads) ? MG_CLI_COUNT : NULL; return 1;
    case 'C': *bad = mg_cli_parse_count(optarg, &g->embd) ? MG_CLI_COUNT : NULL; return 1;
    case 'T': *bad = mg_cli_parse_count(optarg, &g->ctx) ? MG_CLI_COUNT : NULL; return 1;
    case 'V': *bad = mg_cli_parse_count(optarg, &g->vocab) ? MG_CLI_COUNT : NULL; return 1;
    case 'K':
        *bad = mg_cli_parse_count(optarg, &l->kv_heads) ? MG_CLI_COUNT : NULL;
        *llama_only = "--kv-heads";
        return 1;
    case 'F':
        *bad = mg_cli_parse_count(optarg, &l->hidden) ? MG_CLI_COUNT : NULL;
        *llama_only = "--hidden";
        return 1;
    case 'u':
        *bad = mg_cli_parse_count(optarg, &o->multiple_of) ? MG_CLI_COUNT : NULL;
        *llama_only = "--multiple-of";
        return 1;
    case 'R':
        *bad = mg_cli_parse_positive(optarg, &l->rope_theta) ? "a finite number above 0" : NULL;
        *llama_only = "--rope-theta";
        return 1;
    case 'E':
        *bad = mg_cli_parse_positive(optarg, &l->norm_eps) ? "a finite number above 0" : NULL;
        *llama_only = "--norm-eps";
        return 1;
    case 'U': l->tied = 0, *llama_only = "--untied-head"; return 1;
    default: return 0;
    }
}

/* getopt_long's `c` into the pipeline's options (pp in --parallel) or
 * --recompute: 1 when it is one of those, *rc the error of a value that is
 * not one; 0 for another flag. */
static int run_flag(int c, bench_options *o, const char *cmd, int *rc) {
    int64_t n, list[MG_PP_LIST_MAX];
    switch (c) {
    case 'N':
        if (mg_cli_parse_count(optarg, &n) || n > MG_PP_MAX_MICROBATCHES)
            *rc = mg_error(MG_EINVAL, "%s: --microbatches '%s' is not a count from 1 to %d", cmd,
                           optarg, MG_PP_MAX_MICROBATCHES);
        else o->pp.microbatches = (int)n;
        return 1;
    case 'S': *rc = mg_pp_kind_parse(optarg, &o->pp.kind); return 1;
    case 'v':
        if (mg_cli_parse_count(optarg, &n) || n > MG_PP_MAX_STAGES)
            *rc = mg_error(MG_EINVAL, "%s: --virtual-stages '%s' is not a count from 1 to %d",
                           cmd, optarg, MG_PP_MAX_STAGES);
        else o->pp.virtual_stages = (int)n;
        return 1;
    case 'P':
        n = mg_pp_int_list("--pp-layers", optarg, list, MG_PP_LIST_MAX, 0);
        if (n < 0) *rc = (int)n;
        for (int i = 0; i < n; i++) o->pp.layers[i] = (int)list[i];
        o->pp.nlayers = n > 0 ? (int)n : 0;
        return 1;
    case 'X': *rc = mg_recompute_mode_parse(optarg, &o->recompute); return 1;
    default: return 0;
    }
}

/* After the flags: the sizes given are the Llama's too, its FFN width from
 * --multiple-of when not given; a Llama flag without --model llama and
 * --recompute with zb-h1 are refused. */
static int finish(bench_options *o, const char *llama_only, const char *cmd) {
    const mg_gpt_config *g = &o->lm.gpt;
    mg_llama_config *l = &o->lm.llama;
    if (llama_only && o->lm.kind != MG_MODEL_LLAMA)
        return mg_error(MG_EINVAL, "%s: %s applies to --model llama: drop it, or give --model "
                        "llama", cmd, llama_only);
    l->layers = g->layers, l->heads = g->heads, l->embd = g->embd, l->ctx = g->ctx;
    l->vocab = g->vocab;
    if (!l->hidden) l->hidden = mg_llama_hidden(l->embd, o->multiple_of);
    if (o->recompute != MG_RECOMPUTE_NONE && o->pp.kind == MG_PP_ZB_H1)
        return mg_error(MG_EINVAL, "%s: --recompute %s with --pp-schedule zb-h1: its W step "
                        "computes the weights' gradients after the block has given its "
                        "activations back; use 1f1b, gpipe or interleaved-1f1b", cmd,
                        mg_recompute_mode_name(o->recompute));
    return MG_OK;
}

/* The flags into *o: 0, 1 for --help (the usage printed), or 2 (a usage error). */
static int parse(int argc, char **argv, bench_options *o) {
    static const struct option opts[] = {
        MG_CLI_STEP_OPTIONS, {"model", 1, 0, 'M'}, {"layers", 1, 0, 'L'}, {"heads", 1, 0, 'H'},
        {"embd", 1, 0, 'C'}, {"ctx", 1, 0, 'T'}, {"vocab", 1, 0, 'V'}, {"kv-heads", 1, 0, 'K'},
        {"hidden", 1, 0, 'F'}, {"multiple-of", 1, 0, 'u'}, {"rope-theta", 1, 0, 'R'},
        {"norm-eps", 1, 0, 'E'}, {"untied-head", 0, 0, 'U'}, {"microbatches", 1, 0, 'N'},
        {"pp-schedule", 1, 0, 'S'}, {"virtual-stages", 1, 0, 'v'}, {"pp-layers", 1, 0, 'P'},
        {"recompute", 1, 0, 'X'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *cmd = "bench step --model gpt", *llama_only = NULL; /* a Llama flag given */
    int c, idx = 0, rc = MG_OK;
    defaults(o);
    opterr = 0;
    while (rc == MG_OK && (c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        const char *bad = NULL; /* what the flag takes, when its value is not that */
        if (c == 'h') {
            mg_cli_bench_usage(stdout, usage);
            return 1;
        }
        if (!mg_cli_step_flag(c, &o->step, &bad) && !model_flag(c, o, &bad, &llama_only) &&
            !run_flag(c, o, cmd, &rc))
            rc = mg_cli_bad_flag(cmd, argv);
        if (bad) rc = mg_cli_bench_bad_value(cmd, opts, idx, bad);
    }
    if (rc == MG_OK) rc = finish(o, llama_only, cmd);
    return mg_cli_bench_flags_end(rc, cmd, argc, argv, usage);
}

/* ids (B, T) at the plan's batch placements: Philox draws below V */
static mg_dtensor *token_ids(const mg_mesh *mesh, const mg_plan *plan, int64_t B, int64_t T,
                             int64_t V, uint64_t stream) {
    mg_tensor *f = mg_tensor_new(2, (int64_t[]){B, T});
    if (!f) return NULL;
    for (int64_t i = 0; i < B * T; i++)
        mg_tensor_data(f)[i] = (float)(mg_rng_bits_at(7, stream, (uint64_t)i) % (uint32_t)V);
    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(plan, bp);
    mg_dtensor *d = mg_distribute(mesh, f, bp, mesh->ndim);
    mg_tensor_free(f);
    return d;
}

/* (B, T) Philox draws below V on the host (the pipeline's windows). */
static float *host_ids(int64_t B, int64_t T, int64_t V, uint64_t stream) {
    float *f = malloc((size_t)(B * T) * sizeof *f);
    for (int64_t i = 0; f && i < B * T; i++)
        f[i] = (float)(mg_rng_bits_at(7, stream, (uint64_t)i) % (uint32_t)V);
    return f;
}

/* The ids and targets: on the host for a pipeline, else on the mesh. 0, or 1. */
static int make_data(gpt_job *j) {
    const bench_options *o = j->o;
    const int64_t B = o->step.batch, T = mg_lm_ctx(&o->lm), V = mg_lm_vocab(&o->lm);
    if (j->pipe) {
        j->ids = host_ids(B, T, V, 1);
        j->targets = j->ids ? host_ids(B, T, V, 2) : NULL;
        return !j->targets;
    }
    j->x = token_ids(j->mesh, &j->plan, B, T, V, 1);
    j->y = j->x ? token_ids(j->mesh, &j->plan, B, T, V, 2) : NULL;
    return !j->y;
}

/* The device, mesh, plan, model (a pipeline's with pp in the plan), AdamW
 * and the data: 0, or the exit code (1, or 2 for a mesh or plan that is
 * not one or does not fit). */
static int setup(gpt_job *j) {
    const bench_options *o = j->o;
    int code = mg_cli_step_start(&o->step, &j->mesh, &j->plan);
    if (code) return code;
    /* AdamW, clipped: refused up front when the step cannot fit (a pipeline's
     * check is mg_pipeline_make's) */
    char plan[64];
    if (mg_lm_check(&o->lm, &j->plan, j->mesh) != MG_OK ||
        mg_train_estimate_fits_lm(&o->lm, j->mesh, mg_plan_format(plan, sizeof plan, &j->plan),
                                  o->step.batch,
                                  "use a smaller --batch, --embd or --layers") != MG_OK)
        return 1;
    if (mg_plan_pp_dim(&j->plan) >= 0
            ? mg_lm_pp_new(&j->pipe, j->mesh, &j->plan, &o->pp, &o->lm, 1, o->step.batch,
                           &j->model) != MG_OK
            : mg_model_build_lm(&j->model, j->mesh, &j->plan, &o->lm, 1, NULL) != MG_OK)
        return 1;
    if (mg_model_set_recompute(&j->model, o->recompute) != MG_OK) return 1;
    mg_optimizer_init(&j->opt, MG_OPTIM_ADAMW, 0.0f, 0.1f);
    j->opt.beta2 = 0.95f;
    j->opt.decay_2d_only = 1;
    if (mg_optimizer_add_state(&j->opt, &j->model.params) != MG_OK) return 1;
    return make_data(j);
}

/* One step of the pipeline: parts[] its seconds, the whole step, its forward
 * and backward as one (in the forward's place) and the update. 0, or 1. */
static int pipeline_step(gpt_job *j, double parts[4]) {
    double t0 = mg_clock(), loss, norm;
    int rc = mg_gpt_pp_step(j->pipe, j->ids, j->targets, &loss);
    if (rc == MG_OK) rc = mg_device_synchronize();
    double t1 = mg_clock();
    if (rc == MG_OK) rc = mg_gpt_pp_update(j->pipe, &j->opt, j->o->step.lr, 1.0, &norm);
    if (rc == MG_OK) rc = mg_params_zero_grads(&j->model.params);
    mg_step_end();
    if (rc == MG_OK) rc = mg_device_synchronize();
    double t2 = mg_clock();
    parts[0] = t2 - t0, parts[1] = t1 - t0, parts[2] = 0, parts[3] = t2 - t1;
    return rc != MG_OK;
}

/* One step on the whole model: parts[] its seconds, the whole step and its
 * forward, backward and optimizer. 0, or 1. */
static int model_step(gpt_job *j, double parts[4]) {
    mg_param_table *params = &j->model.params;
    double t0 = mg_clock();
    mg_dtensor *logits = mg_model_forward(&j->model, j->x); // logits: (B, T, V)
    mg_dtensor *loss = logits ? mg_cross_entropy(logits, j->y) : NULL;
    if (mg_device_synchronize() != MG_OK) return 1;
    double t1 = mg_clock();
    if (!loss || mg_backward(loss) != MG_OK) return 1;
    mg_params_collect_grads(params);
    if (mg_device_synchronize() != MG_OK) return 1;
    double t2 = mg_clock();
    if (mg_clip_grad_norm(params, 1.0, NULL) != MG_OK ||
        mg_optimizer_step(&j->opt, params, (float)j->o->step.lr) != MG_OK)
        return 1;
    mg_params_zero_grads(params);
    mg_step_end();
    if (mg_device_synchronize() != MG_OK) return 1;
    double t3 = mg_clock();
    parts[0] = t3 - t0, parts[1] = t1 - t0, parts[2] = t2 - t1, parts[3] = t3 - t2;
    return 0;
}

/* mg_cli_bench_steps' step: the pipeline's or the whole model's, after a
 * barrier. */
static int one_step(void *ctx, int64_t s, double parts[4]) {
    gpt_job *j = ctx;
    (void)s;
    if (mg_comm_barrier(j->mesh->world) != MG_OK) return 1;
    return j->pipe ? pipeline_step(j, parts) : model_step(j, parts);
}

/* The warm-up steps, then the measured ones: 0, or 1 on failure. */
static int run(gpt_job *j, gpt_result *r) {
    mg_comm *world = j->mesh->world;
    if (mg_cli_bench_steps(world, j->o->step.steps, one_step, j, r->ms)) return 1;
    r->rss = mg_cli_peak_rss_mb(world);
    mg_arena *again = mg_recompute_arena();
    double mem[2] = {(double)mg_arena_peak(mg_step_arena()) / 1048576.0, 0};
    mem[1] = mem[0] + (again ? (double)mg_arena_peak(again) / 1048576.0 : 0);
    if (mg_comm_all_reduce_f64(world, mem, 2, MG_CONTROL_MAX) != MG_OK) return 1;
    r->arena = mem[0], r->activation_mib = mem[1];
    return 0;
}

/* The FLOPs of one step per token: 6 N for the N weights the GEMMs touch (the
 * blocks' and the head's), and attention's 12 L T C, causal halved. */
static double flops_per_token(const mg_lm_config *c) {
    if (c->kind == MG_MODEL_LLAMA) {
        const mg_llama_config *l = &c->llama;
        double C = (double)l->embd, KD = (double)l->kv_heads * C / (double)l->heads;
        double weights = (double)l->layers * (2 * C * C + 2 * C * KD + 3 * C * (double)l->hidden) +
                         (double)l->vocab * C;
        return 6 * weights + 6.0 * (double)l->layers * (double)l->ctx * C;
    }
    const mg_gpt_config *g = &c->gpt;
    double C = (double)g->embd, weights = (double)g->layers * 12 * C * C + (double)g->vocab * C;
    return 6 * weights + 6.0 * (double)g->layers * (double)g->ctx * C;
}

/* The table and the JSON line (rank 0). */
static void report(const gpt_job *j, const gpt_result *r) {
    const bench_options *o = j->o;
    if (mg_rank() != 0) return;
    const mg_gpt_config *g = &o->lm.gpt; /* the sizes, the Llama's too */
    const int64_t B = o->step.batch, T = g->ctx;
    int llama = o->lm.kind == MG_MODEL_LLAMA;
    double flops = flops_per_token(&o->lm) * (double)(B * T);
    double gflops = flops / (r->ms[0] * 1e-3) * 1e-9;
    char mt[32], pt[32], more[96] = "";
    mg_mesh_format(mt, sizeof mt, j->mesh);
    mg_plan_format(pt, sizeof pt, &j->plan);
    if (llama)
        snprintf(more, sizeof more, " kv_heads=%lld hidden=%lld%s", (long long)o->lm.llama.kv_heads,
                 (long long)o->lm.llama.hidden, o->lm.llama.tied ? "" : " untied");
    printf("%s step  batch=%lld ctx=%lld layers=%lld heads=%lld embd=%lld vocab=%lld%s "
           "(%lld parameters)  ranks=%d mesh=%s plan=%s threads=%d openblas=%s recompute=%s%s  (median "
           "of %lld after %d warm-up)\n", llama ? "Llama" : "GPT", (long long)B, (long long)T,
           (long long)g->layers, (long long)g->heads, (long long)g->embd, (long long)g->vocab, more,
           (long long)mg_lm_param_count(&o->lm), mg_world_size(), mt, pt, mg_backend_cpu_threads(),
           mg_blas_core(), mg_recompute_mode_name(o->recompute),
           mg_get_deterministic() ? " deterministic" : "", (long long)o->step.steps, MG_CLI_WARMUP);
    printf("  %.2f ms/step   %.1f GFLOP/s   peak RSS (largest rank) %.0f MB  (step arena %.0f MB, "
           "activations %.1f MiB)\n", r->ms[0], gflops, r->rss, r->arena, r->activation_mib);
    if (j->pipe)
        printf("  pipeline (forward and backward) %.2f ms   optimizer %.2f ms  (medians, "
               "slowest rank)\n", r->ms[1], r->ms[3]);
    else
        printf("  forward %.2f ms   backward %.2f ms   optimizer %.2f ms  (medians, slowest "
               "rank)\n", r->ms[1], r->ms[2], r->ms[3]);
    char split[96]; /* a pipeline's forward and backward are one */
    if (j->pipe) snprintf(split, sizeof split, "\"pipeline_ms\":%.3f", r->ms[1]);
    else snprintf(split, sizeof split, "\"fwd_ms\":%.3f,\"bwd_ms\":%.3f", r->ms[1], r->ms[2]);
    printf("{\"bench\":\"step\",\"model\":\"%s\",\"ranks\":%d,\"mesh\":\"%s\",\"plan\":\"%s\","
           "\"threads\":%d,\"ms_per_step\":%.3f,\"gflops\":%.2f,\"peak_rss_mb\":%.1f,"
           "\"arena_mb\":%.1f,\"activation_mib\":%.2f,\"recompute\":\"%s\",%s,\"opt_ms\":%.3f,"
           "\"device\":\"%s\",\"math\":\"%s\",\"deterministic\":%s,\"openblas\":\"%s\"}\n",
           llama ? "llama" : "gpt", mg_world_size(), mt, pt, mg_backend_cpu_threads(), r->ms[0],
           gflops, r->rss, r->arena, r->activation_mib, mg_recompute_mode_name(o->recompute), split,
           r->ms[3], o->step.device == MG_DEVICE_CUDA ? "cuda" : "cpu",
           mg_cli_gemm_math(o->step.device),
           mg_get_deterministic() ? "true" : "false", mg_blas_core());
}

int mg_cli_bench_step_gpt(int argc, char **argv) {
    bench_options o;
    int code = parse(argc, argv, &o);
    if (code) return code == 1 ? 0 : code;
    gpt_job j = {.o = &o};
    gpt_result r;
    if ((code = setup(&j)) != 0) return code;
    /* a failed step leaves what it made: freeing a tensor that its graph
     * still holds would put another error in place of the step's */
    if (run(&j, &r)) return 1;
    report(&j, &r);
    free(j.ids), free(j.targets);
    mg_dtensor_free(j.x), mg_dtensor_free(j.y);
    mg_model_free(&j.model);
    mg_gpt_pp_free(j.pipe);
    mg_mesh_free(j.mesh);
    return 0;
}
