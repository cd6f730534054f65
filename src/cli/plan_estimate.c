/* plan_estimate.c: `meshgrad plan --estimate [train's flags]`: what one step
 * of `meshgrad train` with those flags will cost each rank, before it runs
 * (nn/estimate.h): the peak memory of the largest rank by part and the bytes
 * each collective moves per step, the figures train prints at its end. The
 * flags are train's (--config FILE, --mesh, --parallel, --model, --hidden,
 * --channels, --depth, --batch, --optimizer, --momentum, --clip; the rest are
 * taken and ignored), plus --input RxC and --classes K (the data set's: 8x8 and 10
 * for the digits), --vocab V (the GPT's: 256, the bytes of the text) and
 * --nodes N (the ranks' nodes: data-parallel ranks on one node share memory).
 * --model gpt takes train's --layers --heads --embd --ctx --grad-accum
 * (nn/estimate_gpt.c).
 * The mesh defaults to one dim of all ranks of mpirun (or 1). One process is enough. A last line gives the figures as JSON.
 * A pipeline plan (pp in --parallel) is planned by plan.c, which then asks
 * mg_plan_estimate_pipeline for each pipeline rank's memory (its stages'
 * parameters, gradients and optimizer state, and the peak of saved
 * activations the schedule's simulation found) and bytes sent per step (the
 * stage boundaries' activations forward and gradients back, per
 * micro-batch; the data-parallel sum of its stages' gradients).
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
#include "nn/estimate.h"
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

static void print(const estimate_opts *o, const mg_est_config *ec, const mg_estimate *e,
                  const char *mesh) {
    const mg_train_config *c = &o->cfg;
    if (c->model == MG_MODEL_GPT)
        printf("estimate of a step of meshgrad train: gpt (%lld layers, %lld heads, embd %lld, ctx "
               "%lld, vocabulary %lld) on mesh %s [%s], batch %lld in %lld micro-batch%s, %s (%d "
               "state%s a parameter)%s; the largest rank (coordinate 0):\n", (long long)c->layers,
               (long long)c->heads, (long long)c->embd, (long long)c->ctx, (long long)o->vocab, mesh,
               c->parallel, (long long)c->batch, (long long)c->grad_accum,
               c->grad_accum == 1 ? "" : "es", mg_optim_kind_name(c->optimizer), ec->states,
               ec->states == 1 ? "" : "s", c->clip > 0 ? ", clipped" : "");
    else
    printf("estimate of a step of meshgrad train: %s (hidden %lld) on mesh %s [%s], batch %lld, %s "
           "(%d state%s a parameter)%s; the largest rank (coordinate 0):\n",
           mg_model_kind_name(c->model), (long long)c->hidden, mesh, c->parallel,
           (long long)c->batch, mg_optim_kind_name(c->optimizer), ec->states,
           ec->states == 1 ? "" : "s", c->clip > 0 ? ", clipped" : "");
    printf("  memory: peak %.2f MiB: parameters %.2f, gradients %.2f, optimizer %.2f, activations "
           "%.2f, gathered %.2f or gradient scratch %.2f (one arena: the larger), buffers %.2f "
           "(MiB)\n",
           mg_estimate_total(e) / MIB, e->params / MIB, e->grads / MIB, e->optim / MIB,
           e->activations / MIB, e->gathered / MIB, e->scratch / MIB, e->buffers / MIB);
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
           "\"activations\":%.0f,\"gathered\":%.0f,\"scratch\":%.0f,\"buffers\":%.0f},"
           "\"comm_per_step\":{",
           mg_estimate_total(e), e->params, e->grads, e->optim, e->activations, e->gathered,
           e->scratch, e->buffers);
    for (int k = 0; k < MG_COLL_COUNT; k++)
        printf("%s\"%s\":{\"bytes\":%.1f,\"calls\":%.2f}", k ? "," : "",
               mg_coll_name((mg_coll_kind)k), e->bytes[k], e->calls[k]);
    printf("}}\n");
}

int mg_cli_plan_estimate(int argc, char **argv) {
    estimate_opts o;
    if (parse(&o, argc, argv) != MG_OK) return 2;
    const mg_train_config *c = &o.cfg;
    mg_est_config ec;
    memset(&ec, 0, sizeof ec);
    ec.mesh_ndim = 1;
    ec.mesh[0] = mg_world_size();
    if (c->mesh[0] && (ec.mesh_ndim = mg_mesh_parse(c->mesh, ec.mesh)) < 0) return 2;
    if (mg_plan_parse(c->parallel, &ec.plan) != MG_OK) return 2;
    if (mg_plan_pp_dim(&ec.plan) >= 0) { /* pp from a config file: plan.c saw no --parallel pp */
        mg_error(MG_EINVAL, "plan --estimate: parallel '%s'%s%s is a pipeline, whose estimate "
                 "is `meshgrad plan`'s (with plan's flags: --layers W0,W1,... --batch "
                 "--microbatches ...; not --config): give --parallel %s on the command line, "
                 "without --config", c->parallel, c->config[0] ? " of " : "", c->config,
                 c->parallel);
        return 2;
    }
    mg_mesh mesh = {.ndim = ec.mesh_ndim};
    for (int m = 0; m < ec.mesh_ndim; m++) mesh.shape[m] = ec.mesh[m];
    /* train's refusals (mg_plan_check, mg_trainer_text_setup): every data-parallel
     * rank (dp, fsdp; sp and tp+sp split the sequence) needs a row of each
     * micro-batch, batch / --grad-accum rows (which divides: mg_train_config_check) */
    int dp = mg_plan_data_degree(&ec.plan, &mesh);
    int64_t rows = c->batch / c->grad_accum;
    if (ec.plan.ndim == ec.mesh_ndim && rows < dp) {
        if (c->grad_accum > 1)
            mg_error(MG_EINVAL, "plan --estimate: a micro-batch of %lld windows (batch %lld / "
                     "grad-accum %lld) is smaller than the data-parallel degree %d: every "
                     "data-parallel rank needs a row (use a smaller --grad-accum)",
                     (long long)rows, (long long)c->batch, (long long)c->grad_accum, dp);
        else
            mg_error(MG_EINVAL, "plan --estimate: batch %lld is smaller than the data-parallel "
                     "degree %d", (long long)c->batch, dp);
        return 2;
    }
    ec.batch = c->batch;
    ec.micro = c->grad_accum;
    ec.sample_ndim = 2;
    ec.sample[0] = o.input[0];
    ec.sample[1] = o.input[1];
    ec.classes = o.classes;
    ec.states = c->optimizer == MG_OPTIM_ADAMW ? 2 : c->momentum != 0 ? 1 : 0;
    ec.clip = c->clip > 0;
    ec.nodes = o.nodes;
    mg_estimate e;
    if (c->model == MG_MODEL_GPT) { /* windows of --ctx tokens of the text's bytes */
        mg_gpt_config g = {c->layers, c->heads, c->embd, c->ctx, o.vocab};
        if (mg_gpt_check(&g, &ec.plan, &mesh) != MG_OK || mg_estimate_gpt(&g, &ec, &e) != MG_OK)
            return 2;
    } else {
        mg_est_layer layers[MG_EST_MODEL_MAX_LAYERS];
        int n = mg_est_layers_model(c->model, o.input[0], o.input[1], c->hidden, c->channels,
                                    o.classes, (int)c->depth, layers, MG_EST_MODEL_MAX_LAYERS);
        if (n < 0 || mg_estimate_step(layers, n, &ec, &e) != MG_OK) return 2;
    }
    if (mg_rank() == 0) {
        char mesh[64];
        size_t k = 0;
        for (int m = 0; m < ec.mesh_ndim; m++)
            k += (size_t)snprintf(mesh + k, sizeof mesh - k, "%s%d", m ? "x" : "", ec.mesh[m]);
        print(&o, &ec, &e, mesh);
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
