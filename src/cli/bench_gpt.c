/* bench_gpt.c: `meshgrad bench step --model gpt`: the GPT's training step
 * (gpt.h; forward, cross-entropy, backward, clipping at global norm 1, AdamW:
 * the recipe of data/mobydick.conf) on any mesh and plan, on fixed token ids
 * drawn by Philox (no data file). It prints the median step time after
 * warm-up and of its forward, backward and optimizer parts (each the slowest
 * rank's), GFLOP/s (6 N per token for the N weights the GEMMs touch, plus
 * attention's 12 L T C per token, causal halved), the largest rank's peak RSS,
 * and as its last line the same JSON object as the MLP's step. With pp in
 * --parallel the step runs as a pipeline (nn/gpt_pipeline.h: --microbatches,
 * --pp-schedule, --virtual-stages, --pp-layers counting blocks), its forward
 * and backward timed together.
 * Exports mg_cli_bench_step_gpt (cli.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "cli/cli.h"
#include "cli/train.h"
#include "cli/train_pp.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "nn/gpt_pipeline.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "rng.h"
#include "status.h"

typedef struct {
    mg_gpt_config g;
    int64_t batch, steps, threads;
    int device, tf32; /* --device cpu|cuda, --tf32 */
    double lr;
    char mesh[64], plan[64];
    mg_pp_options pp;
} bench_options;

static int parse(int argc, char **argv, bench_options *o) {
    const char *usage = "step --model gpt [--layers L] [--heads H] [--embd C] [--ctx T] [--vocab V] "
                        "[--batch B] [--steps S] [--threads N] [--mesh M] [--parallel P] [--lr LR] "
                        "[--device cpu|cuda] [--tf32] [--microbatches M] [--pp-schedule "
                        "gpipe|1f1b|interleaved-1f1b|zb-h1] [--virtual-stages V] [--pp-layers N1,N2,..]"
                        " (with pp in --parallel; --pp-layers counts blocks)";
    static const struct option opts[] = {
        {"model", 1, 0, 'M'}, {"layers", 1, 0, 'L'}, {"heads", 1, 0, 'H'}, {"embd", 1, 0, 'C'},
        {"ctx", 1, 0, 'T'},   {"vocab", 1, 0, 'V'},  {"batch", 1, 0, 'b'}, {"steps", 1, 0, 's'},
        {"threads", 1, 0, 't'}, {"mesh", 1, 0, 'm'}, {"parallel", 1, 0, 'p'}, {"lr", 1, 0, 'r'},
        {"device", 1, 0, 'd'}, {"tf32", 0, 0, 'f'}, {"help", 0, 0, 'h'},
        {"microbatches", 1, 0, 'N'}, {"pp-schedule", 1, 0, 'S'}, {"virtual-stages", 1, 0, 'v'},
        {"pp-layers", 1, 0, 'P'}, {0, 0, 0, 0}};
    *o = (bench_options){{4, 4, 128, 64, 256}, 32, 10, 0, MG_DEVICE_CPU, 0, 1e-3, "", "dp", {0}};
    mg_pp_options_defaults(&o->pp);
    mg_train_pp_memory(&o->pp, 2); /* AdamW */
    const char *cmd = "bench step --model gpt", *count = "a count from 1 to 2147483647";
    int c, idx = 0, rc = MG_OK;
    int64_t n, list[MG_PP_LIST_MAX];
    opterr = 0;
    while (rc == MG_OK && (c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        const char *bad = NULL; /* what the flag takes, when its value is not that */
        switch (c) {
        case 'M': bad = strcmp(optarg, "gpt") != 0 ? "gpt (the MLP's bench takes no --model)" : NULL;
            break;
        case 'L': bad = mg_cli_parse_count(optarg, &o->g.layers) ? count : NULL; break;
        case 'H': bad = mg_cli_parse_count(optarg, &o->g.heads) ? count : NULL; break;
        case 'C': bad = mg_cli_parse_count(optarg, &o->g.embd) ? count : NULL; break;
        case 'T': bad = mg_cli_parse_count(optarg, &o->g.ctx) ? count : NULL; break;
        case 'V': bad = mg_cli_parse_count(optarg, &o->g.vocab) ? count : NULL; break;
        case 'b': bad = mg_cli_parse_count(optarg, &o->batch) ? count : NULL; break;
        case 's': bad = mg_cli_parse_count(optarg, &o->steps) ? count : NULL; break;
        case 't': bad = mg_cli_parse_count(optarg, &o->threads) ? count : NULL; break;
        case 'm': snprintf(o->mesh, sizeof o->mesh, "%s", optarg); break;
        case 'p': snprintf(o->plan, sizeof o->plan, "%s", optarg); break;
        case 'r': bad = mg_cli_parse_positive(optarg, &o->lr) ? "a finite number above 0" : NULL;
            break;
        case 'd': bad = mg_cli_parse_device(optarg, &o->device) ? "cpu or cuda" : NULL; break;
        case 'f': o->tf32 = 1; break;
        case 'N':
            if (mg_cli_parse_count(optarg, &n) || n > MG_PP_MAX_MICROBATCHES)
                rc = mg_error(MG_EINVAL, "%s: --microbatches '%s' is not a count from 1 to %d", cmd,
                              optarg, MG_PP_MAX_MICROBATCHES);
            o->pp.microbatches = (int)n;
            break;
        case 'S': rc = mg_pp_kind_parse(optarg, &o->pp.kind); break;
        case 'v':
            if (mg_cli_parse_count(optarg, &n) || n > MG_PP_MAX_STAGES)
                rc = mg_error(MG_EINVAL, "%s: --virtual-stages '%s' is not a count from 1 to %d",
                              cmd, optarg, MG_PP_MAX_STAGES);
            o->pp.virtual_stages = (int)n;
            break;
        case 'P':
            n = mg_pp_int_list("--pp-layers", optarg, list, MG_PP_LIST_MAX, 0);
            if (n < 0) rc = (int)n;
            for (int i = 0; i < n; i++) o->pp.layers[i] = (int)list[i];
            o->pp.nlayers = n > 0 ? (int)n : 0;
            break;
        case 'h':
            if (mg_rank() == 0) printf("usage: meshgrad bench %s\n", usage);
            return 1;
        default: rc = mg_cli_bad_flag(cmd, argv);
        }
        if (bad)
            rc = mg_error(MG_EINVAL, "%s: --%s '%s' is not %s", cmd, opts[idx].name, optarg, bad);
    }
    if (rc == MG_OK) rc = mg_cli_no_arguments_left(cmd, argc, argv);
    if (rc == MG_OK) return 0;
    if (mg_rank() == 0) fprintf(stderr, "usage: meshgrad bench %s\n", usage);
    return 2;
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

/* One step of the pipeline: *pipe_s its forward and backward, *opt_s the update. */
static int pp_step(mg_gpt_pp *t, mg_model *m, mg_optimizer *opt, const float *ids,
                   const float *targets, double lr, double *pipe_s, double *opt_s) {
    double t0 = mg_cli_clock(), loss;
    int rc = mg_gpt_pp_step(t, ids, targets, &loss);
    if (rc == MG_OK) rc = mg_device_synchronize();
    double t1 = mg_cli_clock(), norm;
    if (rc == MG_OK) rc = mg_gpt_pp_update(t, opt, lr, 1.0, &norm);
    if (rc == MG_OK) rc = mg_params_zero_grads(&m->params);
    mg_step_end();
    if (rc == MG_OK) rc = mg_device_synchronize();
    *pipe_s = t1 - t0;
    *opt_s = mg_cli_clock() - t1;
    return rc;
}

int mg_cli_bench_step_gpt(int argc, char **argv) {
    bench_options o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    if (o.threads) mg_backend_cpu_set_threads((int)o.threads);
    if (mg_cli_use_device(o.device, o.tf32, 0)) return 1;
    int world = mg_world_size(), shape[MG_MAX_MESH_DIMS] = {world}, nd = 1;
    if (o.mesh[0] && (nd = mg_mesh_parse(o.mesh, shape)) < 0) return 2;
    mg_mesh *mesh = mg_mesh_new(nd, shape);
    mg_plan plan;
    if (!mesh) return 1;
    /* a plan that is not one, or does not fit the mesh: a usage error */
    if (mg_plan_parse(o.plan, &plan) != MG_OK || mg_plan_check(&plan, mesh, o.batch) != MG_OK) {
        mg_mesh_free(mesh);
        return 2;
    }
    /* AdamW, clipped: refused up front when the step cannot fit (a pipeline's
     * check is mg_pipeline_make's) */
    if (mg_cli_gpt_fits(&o.g, mesh, &plan, o.batch, 1, 2, 1, "--batch") != MG_OK) return 1;
    mg_model model;
    mg_gpt_pp *pipe = NULL; /* pp in the plan */
    if (mg_plan_pp_dim(&plan) >= 0
            ? mg_gpt_pp_new(&pipe, mesh, &plan, &o.pp, &o.g, 1, o.batch, &model) != MG_OK
            : mg_model_init_gpt(&model, mesh, &plan, &o.g, 1) != MG_OK)
        return 1;
    mg_param_table *params = &model.params;
    mg_optimizer opt;
    mg_optimizer_init(&opt, MG_OPTIM_ADAMW, 0.0f, 0.1f);
    opt.beta2 = 0.95f;
    if (mg_optimizer_add_state(&opt, params) != MG_OK) return 1;
    const int64_t B = o.batch, T = o.g.ctx;
    mg_dtensor *x = NULL, *y = NULL;
    float *ids = NULL, *targets = NULL;
    if (pipe) {
        ids = host_ids(B, T, o.g.vocab, 1);
        if (!ids || !(targets = host_ids(B, T, o.g.vocab, 2))) return 1;
    } else {
        x = token_ids(mesh, &plan, B, T, o.g.vocab, 1);
        y = x ? token_ids(mesh, &plan, B, T, o.g.vocab, 2) : NULL;
        if (!y) return 1;
    }
    const int warmup = 2;
    int64_t steps = o.steps;
    double *times = calloc((size_t)(4 * steps), sizeof(double));
    if (!times) return 1;
    for (int64_t s = -warmup; s < steps; s++) {
        if (mg_comm_barrier(mesh->world) != MG_OK) return 1;
        double t0 = mg_cli_clock();
        if (pipe) { /* forward and backward as one (the pipeline's) */
            double slowest[4] = {0};
            if (pp_step(pipe, &model, &opt, ids, targets, o.lr, &slowest[1], &slowest[3]) != MG_OK)
                return 1;
            slowest[0] = mg_cli_clock() - t0;
            if (mg_comm_all_reduce_f64(mesh->world, slowest, 4, MG_CONTROL_MAX) != MG_OK) return 1;
            for (int k = 0; s >= 0 && k < 4; k++) times[k * steps + s] = slowest[k];
            continue;
        }
        mg_dtensor *logits = mg_model_forward(&model, x); // logits: (B, T, V)
        mg_dtensor *loss = logits ? mg_cross_entropy(logits, y) : NULL;
        if (mg_device_synchronize() != MG_OK) return 1;
        double t1 = mg_cli_clock();
        if (!loss || mg_backward(loss) != MG_OK) return 1;
        mg_params_collect_grads(params);
        if (mg_device_synchronize() != MG_OK) return 1;
        double t2 = mg_cli_clock();
        if (mg_clip_grad_norm(params, 1.0, NULL) != MG_OK ||
            mg_optimizer_step(&opt, params, (float)o.lr) != MG_OK)
            return 1;
        mg_params_zero_grads(params);
        mg_step_end();
        if (mg_device_synchronize() != MG_OK) return 1;
        double t3 = mg_cli_clock(), slowest[4] = {t3 - t0, t1 - t0, t2 - t1, t3 - t2};
        if (mg_comm_all_reduce_f64(mesh->world, slowest, 4, MG_CONTROL_MAX) != MG_OK) return 1;
        if (s >= 0)
            for (int k = 0; k < 4; k++) times[k * steps + s] = slowest[k];
    }
    const int64_t C = o.g.embd, L = o.g.layers, V = o.g.vocab;
    double weights = (double)L * 12 * C * C + (double)V * C; /* the GEMMs': blocks and the head */
    double flops = (6 * weights + 6.0 * L * T * C) * (double)(B * T); /* attention causal: half of 12 */
    double ms = mg_cli_median(times, (int)steps) * 1e3, rss = mg_cli_peak_rss_mb(mesh->world);
    double fwd = mg_cli_median(times + steps, (int)steps) * 1e3,
           bwd = mg_cli_median(times + 2 * steps, (int)steps) * 1e3,
           upd = mg_cli_median(times + 3 * steps, (int)steps) * 1e3;
    double arena = (double)mg_arena_peak(mg_step_arena()) / 1048576.0;
    if (mg_comm_all_reduce_f64(mesh->world, &arena, 1, MG_CONTROL_MAX) != MG_OK) return 1;
    if (mg_rank() == 0) {
        char mt[32], pt[32];
        mg_mesh_format(mt, sizeof mt, mesh);
        mg_plan_format(pt, sizeof pt, &plan);
        printf("GPT step  batch=%lld ctx=%lld layers=%lld heads=%lld embd=%lld vocab=%lld "
               "(%lld parameters)  ranks=%d mesh=%s plan=%s threads=%d openblas=%s  (median of "
               "%lld after %d warm-up)\n", (long long)B, (long long)T, (long long)L,
               (long long)o.g.heads, (long long)C, (long long)V,
               (long long)mg_gpt_param_count(&o.g), world, mt, pt, mg_backend_cpu_threads(),
               mg_blas_core(), (long long)steps, warmup);
        printf("  %.2f ms/step   %.1f GFLOP/s   peak RSS (largest rank) %.0f MB  (step arena %.0f MB)\n",
               ms, flops / (ms * 1e-3) * 1e-9, rss, arena);
        if (pipe)
            printf("  pipeline (forward and backward) %.2f ms   optimizer %.2f ms  (medians, "
                   "slowest rank)\n", fwd, upd);
        else
            printf("  forward %.2f ms   backward %.2f ms   optimizer %.2f ms  (medians, slowest "
                   "rank)\n", fwd, bwd, upd);
        char split[96]; /* a pipeline's forward and backward are one */
        if (pipe) snprintf(split, sizeof split, "\"pipeline_ms\":%.3f", fwd);
        else snprintf(split, sizeof split, "\"fwd_ms\":%.3f,\"bwd_ms\":%.3f", fwd, bwd);
        printf("{\"bench\":\"step\",\"model\":\"gpt\",\"ranks\":%d,\"mesh\":\"%s\",\"plan\":\"%s\","
               "\"threads\":%d,\"ms_per_step\":%.3f,\"gflops\":%.2f,\"peak_rss_mb\":%.1f,"
               "\"arena_mb\":%.1f,%s,\"opt_ms\":%.3f,\"device\":\"%s\","
               "\"math\":\"%s\",\"openblas\":\"%s\"}\n",
               world, mt, pt, mg_backend_cpu_threads(), ms, flops / (ms * 1e-3) * 1e-9, rss, arena,
               split, upd, o.device == MG_DEVICE_CUDA ? "cuda" : "cpu",
               mg_cli_gemm_math(o.device), mg_blas_core());
    }
    free(times);
    free(ids), free(targets);
    mg_dtensor_free(x), mg_dtensor_free(y);
    mg_model_free(&model);
    mg_gpt_pp_free(pipe);
    mg_mesh_free(mesh);
    return 0;
}
