/* plan_estimate.c: `meshgrad plan --estimate [train's flags]`: what one step
 * of `meshgrad train` with those flags will cost each rank, before it runs:
 * train's step itself, run on the meta device (train/estimate.h), so its
 * collectives are train's to the byte and call and its memory the largest
 * rank's high-water marks. Prints the peak memory by part, the bytes and
 * calls of each collective per step, and a last line of JSON. The flags are
 * train's (--config FILE, --mesh, --parallel with pp too, --model ...; the
 * ones a step does not use are taken and ignored), plus the data set's
 * shapes, which are not read: --input RxC and --classes K (the digits': 8x8
 * and 10), --vocab V (the text's bytes: 256), and --nodes N (the ranks'
 * machines: data-parallel ranks on one node share memory). The mesh defaults
 * to one dim of all ranks of mpirun (or 1). One process is enough.
 * The pipeline planner's own estimate (plan.c: pp with a model given by
 * widths) is mg_plan_estimate_pipeline: each pipeline rank's memory (its
 * stages' parameters, gradients and optimizer state, and the peak of saved
 * activations the schedule's simulation found) and bytes sent per step.
 * Exports mg_cli_plan_estimate (cli.h), mg_plan_estimate_pipeline
 * (plan_show.h). */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/plan_show.h"
#include "train/config.h"
#include "dist/mesh.h"
#include "train/estimate.h"
#include "status.h"

#define MIB (1024.0 * 1024.0)

typedef struct {
    mg_train_config cfg;
    int64_t input[2], classes, vocab;
    int nodes;
} estimate_opts;

/* A count from 1 to 2^31 - 1 (--nodes is an int; sizes enter products). */
static int parse_count(const char *flag, const char *text, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end || v < 1 || errno == ERANGE || v > INT32_MAX || isspace((unsigned char)*text))
        return mg_error(MG_EINVAL, "plan --estimate: %s '%s' is not a count from 1 to %d", flag,
                        text, INT32_MAX);
    *out = v;
    return MG_OK;
}

/* Takes --estimate, --input, --classes and --nodes out of argv (argv[0]: the
 * command's name); the rest are train's flags. */
static int parse(estimate_opts *o, int argc, char **argv) {
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return mg_error(MG_ENOMEM, "plan: out of memory");
    int n = 0, rc = MG_OK;
    int64_t nodes = 1;
    o->input[0] = o->input[1] = 8;
    o->classes = 10;
    o->vocab = 256;
    rest[n++] = argv[0];
    for (int i = 1; i < argc && rc == MG_OK; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = strcmp(a, "--input") == 0 || strcmp(a, "--classes") == 0 ||
                     strcmp(a, "--nodes") == 0 || strcmp(a, "--vocab") == 0;
        if (takes && !v) rc = mg_error(MG_EINVAL, "plan --estimate: %s needs a value", a);
        else if (strcmp(a, "--estimate") == 0) continue;
        else if (strcmp(a, "--classes") == 0) rc = parse_count(a, v, &o->classes);
        else if (strcmp(a, "--nodes") == 0) rc = parse_count(a, v, &nodes);
        else if (strcmp(a, "--vocab") == 0) rc = parse_count(a, v, &o->vocab);
        else if (strcmp(a, "--input") == 0) {
            char *x = NULL, *end = NULL;
            errno = 0;
            long long r = strtoll(v, &x, 10), c = *x == 'x' ? strtoll(x + 1, &end, 10) : 0;
            if (!isdigit((unsigned char)*v) || *x != 'x' || !isdigit((unsigned char)x[1]) || *end ||
                errno == ERANGE || r < 1 || c < 1 || r > INT32_MAX || c > INT32_MAX)
                rc = mg_error(MG_EINVAL, "plan --estimate: --input '%s' is not RxC, two sizes from 1 "
                              "to %d (e.g. 8x8)", v, INT32_MAX);
            o->input[0] = r, o->input[1] = c;
        } else {
            rest[n++] = argv[i];
            continue;
        }
        i += takes;
    }
    o->nodes = (int)nodes;
    mg_train_config_defaults(&o->cfg);
    if (rc == MG_OK) rc = mg_train_config_parse_args(&o->cfg, n, rest);
    /* a run train would refuse has no estimate (--grad-accum with the MLP, or
     * not dividing the batch, was estimated as a step of the whole batch) */
    if (rc == MG_OK) rc = mg_train_config_check(&o->cfg);
    free(rest);
    return rc;
}

static void print(const estimate_opts *o, const mg_train_estimate *e, const char *mesh, int pp,
                  int states) {
    const mg_train_config *c = &o->cfg;
    char where[64] = "coordinate 0";
    if (pp >= 0) snprintf(where, sizeof where, "pipeline rank %d", e->pp_rank);
    char shape[160];
    if (c->model == MG_MODEL_LLAMA)
        snprintf(shape, sizeof shape, "%lld layers, %lld heads, %lld kv heads, embd %lld, hidden "
                 "%lld, ctx %lld, vocabulary %lld%s", (long long)c->layers, (long long)c->heads,
                 (long long)(c->kv_heads ? c->kv_heads : c->heads), (long long)c->embd,
                 (long long)mg_train_config_hidden(c), (long long)c->ctx, (long long)o->vocab,
                 c->untied_head ? ", untied head" : "");
    else
        snprintf(shape, sizeof shape, "%lld layers, %lld heads, embd %lld, ctx %lld, vocabulary "
                 "%lld", (long long)c->layers, (long long)c->heads, (long long)c->embd,
                 (long long)c->ctx, (long long)o->vocab);
    if (mg_model_kind_is_lm(c->model))
        printf("estimate of a step of meshgrad train: %s (%s) on mesh %s [%s], batch %lld in %lld "
               "micro-batch%s, %s (%d state%s a parameter)%s; the largest rank (%s):\n",
               mg_model_kind_name(c->model), shape, mesh, c->parallel, (long long)c->batch,
               (long long)(pp >= 0 ? c->microbatches : c->grad_accum),
               (pp >= 0 ? c->microbatches : c->grad_accum) == 1 ? "" : "es",
               mg_optim_kind_name(c->optimizer), states, states == 1 ? "" : "s",
               c->clip > 0 ? ", clipped" : "", where);
    else
        printf("estimate of a step of meshgrad train: %s (hidden %lld) on mesh %s [%s], batch %lld, "
               "%s (%d state%s a parameter)%s; the largest rank (%s):\n",
               mg_model_kind_name(c->model), (long long)mg_train_config_hidden(c), mesh,
               c->parallel, (long long)c->batch, mg_optim_kind_name(c->optimizer), states,
               states == 1 ? "" : "s", c->clip > 0 ? ", clipped" : "", where);
    const mg_train_memory *m = &e->memory;
    char casts[64] = "";
    if (m->casts > 0)
        snprintf(casts, sizeof casts, ", bf16 copies of the weights %.2f", m->casts / MIB);
    printf("  memory: peak %.2f MiB: parameters %.2f, gradients %.2f, optimizer %.2f, activations "
           "%.2f, scratch (gathered weights, gradients) %.2f, buffers %.2f%s (MiB)\n",
           mg_train_memory_total(m) / MIB, m->params / MIB, m->grads / MIB, m->optim / MIB,
           m->activations / MIB, m->scratch / MIB, m->buffers / MIB, casts);
    printf("  comm per step:");
    int any = 0;
    for (int k = 0; k < MG_COLL_COUNT; k++)
        if (e->calls[k] > 0) {
            printf("%s %s %.0f B in %.0f calls", any ? "," : "", mg_coll_name((mg_coll_kind)k),
                   e->bytes[k], e->calls[k]);
            any = 1;
        }
    printf("%s\n", any ? "" : " none");
    printf("{\"estimate\":{\"peak\":%.0f,\"params\":%.0f,\"grads\":%.0f,\"optim\":%.0f,"
           "\"activations\":%.0f,\"scratch\":%.0f,\"buffers\":%.0f,\"casts\":%.0f},"
           "\"comm_per_step\":{",
           mg_train_memory_total(m), m->params, m->grads, m->optim, m->activations, m->scratch,
           m->buffers, m->casts);
    for (int k = 0; k < MG_COLL_COUNT; k++)
        printf("%s\"%s\":{\"bytes\":%.1f,\"calls\":%.2f}", k ? "," : "",
               mg_coll_name((mg_coll_kind)k), e->bytes[k], e->calls[k]);
    printf("}}\n");
}

int mg_cli_plan_estimate(int argc, char **argv) {
    estimate_opts o;
    if (parse(&o, argc, argv) != MG_OK) return 2;
    const mg_train_config *c = &o.cfg;
    int shape[MG_MAX_MESH_DIMS] = {0}, ndim = 1;
    shape[0] = mg_world_size();
    if (c->mesh[0] && (ndim = mg_mesh_parse(c->mesh, shape)) < 0) return 2;
    int64_t world = 1;
    for (int m = 0; m < ndim; m++) world *= shape[m];
    mg_plan plan;
    if (mg_plan_parse(c->parallel, &plan) != MG_OK) return 2;
    int pp = plan.ndim == ndim ? mg_plan_pp_dim(&plan) : -1;
    /* the shapes of the data set the run would read (--input, --classes, --vocab) */
    mg_trainer_meta_data data = {.rows = o.input[0], .cols = o.input[1], .classes = o.classes,
                                 .vocab = o.vocab, .train_rows = c->batch, .test_rows = c->batch};
    int node_ranks = (int)((world + o.nodes - 1) / o.nodes);
    mg_train_estimate e;
    if (mg_train_estimate_run(c, ndim, shape, node_ranks, &data, &e) != MG_OK) return 2;
    if (mg_rank() == 0) {
        char mesh[64];
        size_t k = 0;
        for (int m = 0; m < ndim; m++)
            k += (size_t)snprintf(mesh + k, sizeof mesh - k, "%s%d", m ? "x" : "", shape[m]);
        int states = c->optimizer == MG_OPTIM_ADAMW ? 2 : c->momentum != 0 ? 1 : 0;
        print(&o, &e, mesh, pp, states);
    }
    return 0;
}

void mg_plan_estimate_pipeline(FILE *out, const mg_plan_report *r, int states) {
    const mg_pp_schedule *s = r->schedule;
    const mg_pp_stage_costs *c = r->costs;
    int dp = r->dp > 1 ? r->dp : 1, M = s->microbatches;
    fprintf(out, "\nestimate per pipeline rank (optimizer state: %d per parameter; bytes sent per "
                 "step):\n", states);
    for (int rk = 0; rk < s->ranks; rk++) {
        double params = 0, sent = 0, sends = 0;
        for (int st = rk; st < s->stages; st += s->ranks) {
            params += c->param_bytes[st];
            for (int mb = 0; mb < M; mb++) { /* activations forward, gradients back */
                double rows = (double)c->rows[mb];
                if (st + 1 < s->stages) sent += c->act_bytes[st] * rows, sends++;
                if (st > 0) sent += c->act_bytes[st - 1] * rows, sends++;
            }
        }
        double reduce = dp > 1 ? 2.0 * (dp - 1) / dp * params : 0;
        double total = params * (2 + states) + r->sim->peak_bytes[rk];
        fprintf(out, "  rank %d: memory %.2f MiB (parameters %.2f, gradients %.2f, optimizer %.2f, "
                     "activations %.2f); send %.0f B in %.0f transfers%s",
                rk, total / MIB, params / MIB, params / MIB, states * params / MIB,
                r->sim->peak_bytes[rk] / MIB, sent, sends, dp > 1 ? "" : "\n");
        if (dp > 1) fprintf(out, ", all_reduce %.0f B (the stage's gradients over dp %d)\n", reduce, dp);
    }
}
