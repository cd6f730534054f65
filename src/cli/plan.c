/* plan.c: `meshgrad plan`: plans a pipeline-parallel step without training.
 *
 *   meshgrad plan [--model mlp] [--layers 1024,4096,...] [--batch B]
 *                 [--model gpt --layers L --heads H --embd C --ctx T --vocab V]
 *                 [--mesh 4] [--parallel pp|pp,dp] [--microbatches M |
 *                 --microbatch-rows 32,32,...] [--pp-schedule 1f1b]
 *                 [--virtual-stages v] [--pp-layers 3,3,2] [--trace FILE]
 *                 [--flops GFLOPS] [--bandwidth GB/s] [--latency us] [--threads T]
 *
 * Cuts the model's layers into stages (balanced by cost, or --pp-layers; the
 * GPT's are its blocks, the embedding with the first and the head with the
 * last: nn/gpt_pipeline.h),
 * makes the schedule's action lists, proves them (dist/pipeline_verify.h),
 * measures this machine (a FLOP rate through the backend, a link through the
 * comm; or takes --flops / --bandwidth / --latency) and prints the stages,
 * the per-rank timeline, the predicted step time and the peak activation
 * memory per stage; --trace writes the timeline as Chrome-trace JSON. It runs
 * as one process (no mpirun needed: the link is then a copy within it) or
 * under mpirun (the link is then measured between ranks 0 and 1); every rank
 * plans the same and rank 0 prints.
 * --config FILE takes a train config's model, batch, mesh and pipeline.
 * With --estimate it estimates a step of `meshgrad train` instead
 * (plan_estimate.c), unless a pipeline is given by plan's own flags (the
 * widths, --flops, --bandwidth, --latency): then the plan adds each pipeline
 * rank's memory and bytes per step.
 * Exports mg_cli_plan (cli.h). */
#include <ctype.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cli/cli.h"
#include "cli/plan_show.h"
#include "context.h"
#include "dist/dist_state.h"
#include "dist/mesh.h"
#include "nn/gpt_pipeline.h"
#include "nn/pipeline.h"
#include "nn/pipeline_cost.h"
#include "status.h"
#include "train/config.h"

#define MAX_LIST 1024 /* entries of a comma-separated flag */

typedef struct {
    int64_t widths[MAX_LIST];
    int nwidths;
    int gpt;                /* --model gpt: g instead of the widths */
    mg_gpt_config g;
    const char *layers_arg; /* --layers: widths (mlp) or blocks (gpt) */
    int64_t batch;
    int microbatches; /* 0: from --microbatch-rows, or 8 */
    int64_t mb_rows[MAX_LIST];
    int n_mb_rows;
    char mesh[64], parallel[64];
    mg_pp_kind schedule;
    int virtual_stages;
    int pp_layers[MAX_LIST];
    int n_pp_layers;
    const char *trace;
    double gflops, gbps, latency_us; /* 0: measure */
    int threads;
    int estimate; /* --estimate: each rank's memory and bytes per step too */
} plan_opts;

static const char usage_text[] =
    "plan [--model mlp] [--layers W0,W1,...] [--batch B] [--mesh SHAPE] [--parallel pp|pp,dp]\n"
    "       [--model gpt --layers L --heads H --embd C --ctx T --vocab V (--pp-layers: blocks)]\n"
    "       [--microbatches M | --microbatch-rows R1,R2,...] [--pp-schedule "
    "gpipe|1f1b|interleaved-1f1b|zb-h1]\n"
    "       [--virtual-stages V] [--pp-layers N1,N2,...] [--trace FILE] [--flops GFLOPS]\n"
    "       [--bandwidth GB/s] [--latency us] [--threads T] [--estimate] [--config FILE]\n"
    "  plan --estimate [train's flags: --config FILE --mesh M --parallel P --model\n"
    "       --hidden --batch --optimizer ...] [--input RxC] [--classes K] [--vocab V]\n"
    "       [--nodes N]";

static int bad_value(const char *flag, const char *value, const char *want) {
    return mg_error(MG_EINVAL, "plan: %s '%s' is not %s", flag, value, want);
}

static int parse_double(const char *flag, const char *text, double *out) {
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || isspace((unsigned char)text[0]) || !(v > 0) || !isfinite(v))
        return bad_value(flag, text, "a finite positive number");
    *out = v;
    return MG_OK;
}

/* One count from 1 to `most` (a list of one) into *out; else the error naming flag. */
static int parse_count(const char *flag, const char *text, int64_t most, int64_t *out) {
    int64_t one[1];
    if (mg_pp_int_list_parse(text, one, 1, 1) == 1 && one[0] <= most) {
        *out = one[0];
        return MG_OK;
    }
    char want[64];
    snprintf(want, sizeof want, "a count from 1 to %lld", (long long)(most < INT32_MAX ? most : INT32_MAX));
    return bad_value(flag, text, want);
}

/* MG_OK, 1 for --help, or an error (usage). */
static int parse_args(plan_opts *o, int argc, char **argv) {
    static const struct option opts[] = {
        {"model", 1, 0, 'o'},         {"layers", 1, 0, 'l'},        {"batch", 1, 0, 'b'},
        {"mesh", 1, 0, 'm'},          {"parallel", 1, 0, 'p'},      {"microbatches", 1, 0, 'M'},
        {"microbatch-rows", 1, 0, 'R'}, {"pp-schedule", 1, 0, 's'}, {"virtual-stages", 1, 0, 'v'},
        {"pp-layers", 1, 0, 'L'},     {"trace", 1, 0, 't'},         {"flops", 1, 0, 'F'},
        {"bandwidth", 1, 0, 'W'},     {"latency", 1, 0, 'a'},       {"threads", 1, 0, 'T'},
        {"help", 0, 0, 'h'},          {"estimate", 0, 0, 'e'},      {"heads", 1, 0, 'H'},
        {"embd", 1, 0, 'C'},          {"ctx", 1, 0, 'X'},           {"vocab", 1, 0, 'V'},
        {"config", 1, 0, 'c'},        {0, 0, 0, 0}};
    int c, rc = MG_OK;
    int64_t list[MAX_LIST], n = 0;
    opterr = 0;
    while (rc == MG_OK && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            o->gpt = strcmp(optarg, "gpt") == 0;
            if (!o->gpt && strcmp(optarg, "mlp") != 0)
                rc = mg_error(MG_EINVAL, "plan: unknown --model '%s': plan knows the mlp of "
                                         "`meshgrad bench step` (--layers gives its widths) and "
                                         "the gpt (--layers gives its blocks)", optarg);
            break;
        case 'l': o->layers_arg = optarg; break;
        case 'H': rc = parse_count("--heads", optarg, INT32_MAX, &o->g.heads); break;
        case 'C': rc = parse_count("--embd", optarg, INT32_MAX, &o->g.embd); break;
        case 'X': rc = parse_count("--ctx", optarg, INT32_MAX, &o->g.ctx); break;
        case 'V': rc = parse_count("--vocab", optarg, INT32_MAX, &o->g.vocab); break;
        case 'b': rc = parse_count("--batch", optarg, INT32_MAX, &o->batch); break;
        case 'M':
            rc = parse_count("--microbatches", optarg, MG_PP_MAX_MICROBATCHES, &n);
            o->microbatches = (int)n;
            break;
        case 'R':
            o->n_mb_rows = mg_pp_int_list_parse(optarg, o->mb_rows, MAX_LIST, 1);
            if (o->n_mb_rows < 1) rc = bad_value("--microbatch-rows", optarg, "row counts from 1 to 2147483647");
            break;
        case 'm': snprintf(o->mesh, sizeof o->mesh, "%s", optarg); break;
        case 'p': snprintf(o->parallel, sizeof o->parallel, "%s", optarg); break;
        case 's': rc = mg_pp_kind_parse(optarg, &o->schedule); break;
        case 'v':
            rc = parse_count("--virtual-stages", optarg, MG_PP_MAX_STAGES, &n);
            o->virtual_stages = (int)n;
            break;
        case 'L':
            o->n_pp_layers = mg_pp_int_list_parse(optarg, list, MAX_LIST, 0);
            if (o->n_pp_layers < 1) rc = bad_value("--pp-layers", optarg, "layer counts, one per stage");
            for (int i = 0; i < o->n_pp_layers; i++) o->pp_layers[i] = (int)list[i];
            break;
        case 't': /* refused now, not after the plan is made and printed */
            o->trace = optarg;
            if (!optarg[0])
                rc = mg_error(MG_EINVAL, "plan: --trace '' is not a file name: give the file to "
                                         "write the trace to");
            break;
        case 'F': rc = parse_double("--flops", optarg, &o->gflops); break;
        case 'W': rc = parse_double("--bandwidth", optarg, &o->gbps); break;
        case 'a': rc = parse_double("--latency", optarg, &o->latency_us); break;
        case 'T':
            rc = parse_count("--threads", optarg, INT32_MAX, &n);
            o->threads = (int)n;
            break;
        case 'e': o->estimate = 1; break;
        case 'c': break; /* read first (from_config) */
        case 'h': return 1;
        default: rc = mg_cli_bad_flag("plan", argv);
        }
    }
    if (rc == MG_OK && o->layers_arg && o->gpt)
        rc = parse_count("--layers", o->layers_arg, MAX_LIST - 2, &o->g.layers);
    if (rc == MG_OK && o->layers_arg && !o->gpt) {
        o->nwidths = mg_pp_int_list_parse(o->layers_arg, o->widths, MAX_LIST, 1);
        if (o->nwidths < 2) rc = bad_value("--layers", o->layers_arg, "two or more widths from 1 to 2147483647");
    }
    return rc == MG_OK ? mg_cli_no_arguments_left("plan", argc, argv) : rc;
}

/* The pipeline dim and the data-parallel degree from --mesh and --parallel. */
static int parse_mesh(const plan_opts *o, int *pp, int *dp) {
    int shape[MG_MAX_MESH_DIMS], ndim = mg_mesh_parse(o->mesh, shape);
    if (ndim < 0) return ndim;
    char text[64], *save = NULL;
    snprintf(text, sizeof text, "%s", o->parallel);
    int n = 0, pp_dim = -1, dp_dim = -1;
    for (char *t = strtok_r(text, ",", &save); t; t = strtok_r(NULL, ",", &save), n++) {
        int *dim = strcmp(t, "pp") == 0 ? &pp_dim : strcmp(t, "dp") == 0 ? &dp_dim : NULL;
        if (!dim)
            return mg_error(MG_EINVAL, "plan: --parallel '%s': plan models pp and dp so far (pp "
                                       "with tp or fsdp trains and benchmarks, but its cost is not "
                                       "modelled yet)", o->parallel);
        if (*dim >= 0 || n >= ndim) break;
        *dim = n;
    }
    if (n != ndim || pp_dim < 0)
        return mg_error(MG_EINVAL, "plan: --parallel '%s' on mesh %s: give one plan per mesh dim, "
                                   "pp once (and dp at most once), e.g. --mesh 4 --parallel pp or "
                                   "--mesh 2x2 --parallel pp,dp", o->parallel, o->mesh);
    *pp = shape[pp_dim];
    *dp = dp_dim >= 0 ? shape[dp_dim] : 1;
    return MG_OK;
}

/* Rows of each micro-batch (o->n_mb_rows given, or the batch split). */
static int microbatch_rows(plan_opts *o, int64_t *rows, int dp) {
    if (o->n_mb_rows) {
        if (o->microbatches && o->microbatches != o->n_mb_rows)
            return mg_error(MG_EINVAL, "plan: --microbatches %d but --microbatch-rows lists %d; "
                                       "give one of them", o->microbatches, o->n_mb_rows);
        o->microbatches = o->n_mb_rows;
        o->batch = 0;
        for (int i = 0; i < o->n_mb_rows; i++) o->batch += (rows[i] = o->mb_rows[i]);
    } else {
        int rc = mg_pp_microbatch_rows(o->batch, o->microbatches, rows);
        if (rc != MG_OK) return rc;
    }
    for (int i = 0; i < o->microbatches; i++)
        if (rows[i] < dp)
            return mg_error(MG_EINVAL, "plan: micro-batch %d has %lld rows, fewer than the %d "
                                       "data-parallel ranks that share it: use fewer micro-batches "
                                       "or a larger batch", i, (long long)rows[i], dp);
    return MG_OK;
}

/* The FLOP rate and the link: from the flags, or measured. */
static int calibrate(const plan_opts *o, const mg_layer_cost *layers, int n, int64_t rows,
                     mg_pp_machine *m, char *how, size_t len) {
    return mg_plan_calibrate(o->gflops, o->gbps, o->latency_us, layers, n, rows, m, how, len);
}

/* When every rank runs on this one machine and together they want more cores
 * than it has (the cores a rank runs on counted): the share of its rate alone
 * a rank gets when all compute, and how many ranks can compute at once
 * (*cores). Else 1 and 0: a rank has its cores to itself. A rank runs on no
 * more cores than it has threads, nor than mpirun bound it to (then its
 * threads take turns there, measured alone as with the others). *cpus: the
 * CPUs the machine's ranks may run on together. Collective over `world`: the
 * ranks may run on different numbers of cores (affinity masks that overlap in
 * part), and all must plan, and measure, alike, so each counts the most cores
 * any of them runs on. */
static int core_share(mg_comm *world, double *share, int *cores, long *cpus) {
    int on_node = mg_ctx()->node_ranks, threads = mg_backend_cpu_threads();
    long usable = mg_backend_cpu_usable();
    int64_t most = threads < usable ? threads : usable; /* the cores this rank runs on */
    int rc = mg_comm_all_reduce_i64(world, &most, 1, MG_CONTROL_MAX);
    long used = (long)most;
    *cpus = mg_dist()->node_cpus; /* the CPUs the machine's ranks run on together */
    *share = 1;
    *cores = 0;
    if (mg_dist()->node_is_world && *cpus > 0 && (long)on_node * used > *cpus) {
        *share = (double)*cpus / ((double)on_node * (double)used);
        *cores = (int)(*cpus / used) > 0 ? (int)(*cpus / used) : 1;
    }
    return rc;
}

/* The most rows the rate is measured on, and the most floats the link is:
 * both are the same for more (a plan for a batch far larger than this
 * machine holds is still made here). */
#define PROBE_ROWS 1024
#define PROBE_FLOATS (1 << 22)

int mg_plan_calibrate(double gflops, double gbps, double latency_us, const mg_layer_cost *layers,
                      int n, int64_t rows, mg_pp_machine *m, char *how, size_t len) {
    int world = mg_world_size(), rc = MG_OK;
    if (rows > PROBE_ROWS) rows = PROBE_ROWS;
    mg_mesh *mesh = mg_mesh_new(1, &world);
    if (!mesh) return mg_last_code();
    const mg_layer_cost *big = &layers[0];
    double most = 0;
    for (int i = 0; i < n; i++)
        if (layers[i].gemm_in * layers[i].gemm_out > big->gemm_in * big->gemm_out) big = &layers[i];
    for (int i = 0; i < n; i++) most = layers[i].out_floats > most ? layers[i].out_floats : most;
    int cores = 0;
    long cpus = 0;
    rc = core_share(mesh->world, &m->core_share, &cores, &cpus);
    double all = 0; /* with shared cores: the rate of a rank when every rank computes */
    if (rc == MG_OK && gflops > 0) m->flops = gflops * 1e9;
    else if (rc == MG_OK)
        rc = mg_pp_measure_flops(mesh->world, m->core_share < 1 ? cores : 0, rows, big->gemm_in,
                                  big->gemm_out, &m->flops);
    if (rc == MG_OK && gflops <= 0 && m->core_share < 1) {
        /* time-slicing costs more than its even share (switches, caches shared
         * in turn): the plan shares fewer cores, as many as this measures */
        rc = mg_pp_measure_flops(mesh->world, 0, rows, big->gemm_in, big->gemm_out, &all);
        if (rc == MG_OK && all < m->flops * m->core_share) m->core_share = all / m->flops;
    }
    double lat = 0, bw = 0;
    if (rc == MG_OK && (gbps <= 0 || latency_us <= 0))
        rc = mg_pp_measure_link(mesh->world, (int64_t)fmin(most * (double)rows, PROBE_FLOATS),
                                &lat, &bw);
    if (rc == MG_ENOMEM) { /* the largest layer does not fit here: the figures can be given */
        char why[256];
        snprintf(why, sizeof why, "%s", mg_last_error());
        rc = mg_error(MG_ENOMEM, "%s: give --flops GFLOPS, --bandwidth GB/s and --latency us to "
                      "plan without measuring", why);
    }
    m->latency = latency_us > 0 ? latency_us * 1e-6 : lat;
    m->bandwidth = gbps > 0 ? gbps * 1e9 : bw;
    int at_once = m->core_share < 1 ? cores : world;
    char shared[112] = "";
    if (m->core_share < 1)
        snprintf(shared, sizeof shared, "; %d ranks share %d core%s%s: %.2f of a core each when all compute",
                 world, (int)cpus, cpus == 1 ? "" : "s", all > 0 ? " (measured)" : "", m->core_share);
    snprintf(how, len,
             "%.1f GFLOP/s (%s, sgemm %lldx%lldx%lld on %d thread%s, %d rank%s at once%s), link "
             "%.2f GB/s + %.1f us (%s)",
             m->flops * 1e-9, gflops > 0 ? "given" : "measured", (long long)rows,
             (long long)big->gemm_in, (long long)big->gemm_out, mg_backend_cpu_threads(),
             mg_backend_cpu_threads() == 1 ? "" : "s", at_once, at_once == 1 ? "" : "s", shared,
             m->bandwidth * 1e-9, m->latency * 1e6,
             gbps > 0 && latency_us > 0 ? "given"
             : world > 1 ? "measured between ranks 0 and 1"
                         : "measured as a copy within this process; run under mpirun -np 2 to "
                           "measure a link");
    mg_mesh_free(mesh);
    return rc;
}

/* Everything one plan needs (the lists are large: on the heap). */
typedef struct {
    plan_opts o;
    int64_t rows[MG_PP_MAX_MICROBATCHES];
    mg_layer_cost layers[MAX_LIST];
    int nlayers;
    mg_pp_split split;
    int pp, dp;
    char model[96]; /* "gpt L4 H4 C128 T64 V256" */
} plan_job;

/* --config FILE: the run of a train config (its model, batch, mesh, plan and
 * pipeline options), which later flags may change. MG_OK when none is given. */
static int from_config(plan_opts *o, int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++)
        if (mg_cli_flag_at(argc, argv, i, "--config")) path = mg_cli_flag_at(argc, argv, i, "--config");
    if (!path) return MG_OK;
    mg_train_config c;
    mg_train_config_defaults(&c);
    int rc = mg_train_config_load(&c, path);
    if (rc != MG_OK) return rc;
    if (c.model == MG_MODEL_GPT) {
        o->gpt = 1;
        o->g = (mg_gpt_config){c.layers, c.heads, c.embd, c.ctx, o->g.vocab};
    } else if (c.model == MG_MODEL_MLP) { /* digits: 8x8 inputs, 10 classes */
        int depth = c.depth ? (int)c.depth : 2;
        if (depth + 1 > MAX_LIST) return mg_error(MG_EINVAL, "plan: %s: depth %d", path, depth);
        o->nwidths = depth + 1;
        int64_t hidden = mg_train_config_hidden(&c); /* --hidden, or the default 128 */
        for (int i = 0; i <= depth; i++) o->widths[i] = i == 0 ? 64 : i == depth ? 10 : hidden;
    } else {
        return mg_error(MG_EINVAL, "plan: %s: model %s: plan's pipeline knows the mlp and the gpt "
                        "(plan --estimate takes every model)", path, mg_model_kind_name(c.model));
    }
    o->batch = c.batch;
    if (c.mesh[0]) snprintf(o->mesh, sizeof o->mesh, "%s", c.mesh);
    snprintf(o->parallel, sizeof o->parallel, "%s", c.parallel);
    if (c.microbatches) o->microbatches = (int)c.microbatches;
    if (c.pp_schedule[0]) rc = mg_pp_kind_parse(c.pp_schedule, &o->schedule);
    if (c.virtual_stages) o->virtual_stages = (int)c.virtual_stages;
    if (c.microbatch_rows[0]) {
        o->n_mb_rows = mg_pp_int_list_parse(c.microbatch_rows, o->mb_rows, MAX_LIST, 1);
        if (o->n_mb_rows < 1) rc = bad_value("microbatch-rows", c.microbatch_rows, "row counts");
    }
    if (rc == MG_OK && c.pp_layers[0]) {
        int64_t list[MAX_LIST];
        o->n_pp_layers = mg_pp_int_list_parse(c.pp_layers, list, MAX_LIST, 0);
        if (o->n_pp_layers < 1) rc = bad_value("pp-layers", c.pp_layers, "layer counts");
        for (int i = 0; i < o->n_pp_layers; i++) o->pp_layers[i] = (int)list[i];
    }
    if (c.threads) o->threads = (int)c.threads;
    return rc;
}

/* From the flags to the split: MG_OK, 1 for --help, or an error (usage). */
static int prepare(plan_job *j, int argc, char **argv) {
    plan_opts *o = &j->o;
    int64_t defaults[] = {1024, 4096, 1024, 4096, 1024, 4096, 1024, 4096, 1024};
    o->nwidths = 9;
    memcpy(o->widths, defaults, sizeof defaults);
    o->batch = 256;
    o->g = (mg_gpt_config){4, 4, 128, 64, 256}; /* bench step --model gpt's */
    o->schedule = MG_PP_1F1B;
    o->virtual_stages = 1;
    snprintf(o->mesh, sizeof o->mesh, "%d", mg_world_size());
    snprintf(o->parallel, sizeof o->parallel, "pp");
    int rc = from_config(o, argc, argv);
    if (rc == MG_OK) rc = parse_args(o, argc, argv);
    if (rc != MG_OK) return rc;
    if (o->threads) mg_backend_cpu_set_threads(o->threads);
    if (!o->microbatches && !o->n_mb_rows) o->microbatches = 8;
    j->dp = 1;
    if ((rc = parse_mesh(o, &j->pp, &j->dp)) != MG_OK ||
        (rc = microbatch_rows(o, j->rows, j->dp)) != MG_OK ||
        (rc = mg_pp_schedule_check(o->schedule, j->pp, o->virtual_stages, o->microbatches)) != MG_OK)
        return rc;
    if (o->gpt) { /* a row is a sequence of ctx tokens */
        if (o->g.embd % o->g.heads != 0)
            return mg_error(MG_EINVAL, "plan: --heads %lld does not divide --embd %lld",
                            (long long)o->g.heads, (long long)o->g.embd);
        j->nlayers = (int)o->g.layers + 2;
        snprintf(j->model, sizeof j->model, "gpt L%lld H%lld C%lld T%lld V%lld",
                 (long long)o->g.layers, (long long)o->g.heads, (long long)o->g.embd,
                 (long long)o->g.ctx, (long long)o->g.vocab);
        rc = mg_gpt_layer_costs(&o->g, j->layers);
    } else {
        j->nlayers = o->nwidths - 1;
        int n = snprintf(j->model, sizeof j->model, "mlp ");
        for (int i = 0; i < o->nwidths && n < (int)sizeof j->model; i++)
            n += snprintf(j->model + n, sizeof j->model - (size_t)n, "%s%lld", i ? "," : "",
                          (long long)o->widths[i]);
        rc = mg_layer_costs_mlp(o->widths, o->nwidths, j->layers);
    }
    if (rc != MG_OK) return rc;
    return mg_pp_split_make(&j->split, j->layers, j->nlayers, j->pp, o->virtual_stages,
                            o->n_pp_layers ? o->pp_layers : NULL, o->n_pp_layers);
}

/* Makes, proves, calibrates, times and shows the plan: MG_OK or an error. */
static int run(plan_job *j) {
    const plan_opts *o = &j->o;
    mg_pp_schedule s;
    mg_pp_sim unit = {0}, sim = {0};
    mg_pp_stage_costs costs = {0};
    mg_pp_machine machine = {.dp = j->dp};
    char how[320];
    int64_t most_rows = 0;
    for (int i = 0; i < o->microbatches; i++)
        most_rows = j->rows[i] > most_rows ? j->rows[i] : most_rows;
    int rc = mg_pp_schedule_make(&s, o->schedule, j->pp, o->virtual_stages, o->microbatches);
    if (rc == MG_OK) rc = mg_pp_verify(&s, NULL, &unit);
    if (rc == MG_OK)
        rc = calibrate(o, j->layers, j->nlayers, (most_rows + j->dp - 1) / j->dp, &machine,
                       how, sizeof how);
    if (rc == MG_OK)
        rc = mg_pp_stage_costs_make(&costs, j->layers, &j->split, &machine, j->rows,
                                    o->microbatches);
    if (rc == MG_OK) rc = mg_pp_verify(&s, &costs.cost, &sim);
    if (rc == MG_OK && mg_rank() == 0) {
        mg_plan_report report = {.schedule = &s, .sim = &sim, .unit = &unit, .costs = &costs,
                                 .split = &j->split, .layers = j->layers, .machine = &machine,
                                 .rows = j->rows, .batch = o->batch, .mesh = o->mesh,
                                 .parallel = o->parallel, .calibration = how, .dp = j->dp,
                                 .model = j->model};
        mg_plan_print(stdout, &report);
        if (o->estimate) mg_plan_estimate_pipeline(stdout, &report, 1 /* SGD with momentum */);
        if (o->trace) rc = mg_plan_write_trace(o->trace, &report);
        if (rc == MG_OK && o->trace)
            printf("trace: %s (chrome://tracing or ui.perfetto.dev)\n", o->trace);
    }
    mg_pp_sim_free(&sim);
    mg_pp_sim_free(&unit);
    mg_pp_stage_costs_free(&costs);
    mg_pp_schedule_free(&s);
    return rc;
}

/* --estimate: a step of meshgrad train (plan_estimate.c), run on the meta
 * device from train's flags, unless pp is in --parallel and plan's own
 * pipeline flags are given (the MLP's widths --layers W0,W1,..., or the
 * machine's --flops, --bandwidth, --latency): then the pipeline planner's
 * estimate of each pipeline rank. */
static int train_estimate(int argc, char **argv) {
    int estimate = 0, pp = 0, planner = 0;
    for (int i = 1; i < argc; i++) {
        estimate |= strcmp(argv[i], "--estimate") == 0;
        const char *plans = mg_cli_flag_at(argc, argv, i, "--parallel"); /* getopt takes both */
        for (const char *p = plans; p && (p = strstr(p, "pp")); p += 2)
            pp |= (p == plans || p[-1] == ',') && (p[2] == '\0' || p[2] == ',');
        const char *layers = mg_cli_flag_at(argc, argv, i, "--layers");
        planner |= (layers && strchr(layers, ',')) || mg_cli_flag_at(argc, argv, i, "--flops") ||
                   mg_cli_flag_at(argc, argv, i, "--bandwidth") ||
                   mg_cli_flag_at(argc, argv, i, "--latency");
    }
    return estimate && !(pp && planner);
}

int mg_cli_plan(int argc, char **argv) {
    if (train_estimate(argc, argv)) return mg_cli_plan_estimate(argc, argv);
    plan_job *j = calloc(1, sizeof *j);
    if (!j) {
        mg_error(MG_ENOMEM, "plan: out of memory");
        return 1;
    }
    int rc = prepare(j, argc, argv), code;
    if (rc == 1) {
        if (mg_rank() == 0) printf("usage: meshgrad %s\n", usage_text);
        code = 0;
    } else if (rc != MG_OK) {
        code = 2; /* decided from the flags alone: every rank says the same */
    } else {
        code = run(j) == MG_OK ? 0 : 1;
    }
    free(j);
    return code;
}
