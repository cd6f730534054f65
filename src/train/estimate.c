/* estimate.c: a step's cost by running it on the meta device (estimate.h).
 * Each run: the meta device's memory registered (backend/meta.c), new tensors
 * put there, a meta mesh at the run's coordinates, the trainer built as
 * mg_trainer_new would build it, two steps taken; the second step's
 * collectives and the memory after it are the run's figures. The arenas of
 * the meta device are dropped between runs so each rank's high-water marks
 * are its own. Exports mg_train_estimate_run, mg_train_estimate_fits,
 * mg_train_estimate_fits_lm (estimate.h) and meshgrad_train.h's
 * mg_trainer_new: the run built (trainer_run.c) with mg_train_estimate_fits
 * as the memory check it takes before its model, which is why it is made
 * here, above the builder, and not by the builder itself. */
#include "train/estimate.h"

#include <stdbool.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/redistribute.h"
#include "machine.h"
#include "nn/pipeline_exec.h"
#include "status.h"

/* One rank's run: its memory and its second step's collectives. */
static int run_one(const mg_train_config *cfg, int ndim, const int *shape, const int *coord,
                   int node_ranks, const mg_trainer_meta_data *data, mg_train_memory *memory,
                   mg_comm_stats step[MG_COLL_COUNT], int64_t *numel) {
    mg_context_drop_arenas(MG_DEVICE_META);
    mg_mesh *mesh = mg_mesh_new_meta(ndim, shape, coord, node_ranks);
    if (!mesh) return mg_last_code();
    mg_trainer *tr = mg_trainer_build(cfg, mesh, data, mg_train_estimate_fits);
    int rc = tr ? MG_OK : mg_last_code();
    mg_comm_stats before[MG_COLL_COUNT], after[MG_COLL_COUNT];
    for (int s = 0; s < 2 && rc == MG_OK; s++) {
        mg_train_step st;
        memset(&st, 0, sizeof st);
        mg_comm_stats_get(before);
        rc = mg_trainer_step(tr, &st);
    }
    if (rc == MG_OK) {
        mg_comm_stats_get(after);
        for (int k = 0; k < MG_COLL_COUNT; k++) {
            step[k].bytes = after[k].bytes - before[k].bytes;
            step[k].calls = after[k].calls - before[k].calls;
        }
        mg_trainer_memory_get(tr, memory);
        *numel = mg_trainer_numel(tr);
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", rc == MG_OK ? "" : mg_last_error());
    mg_trainer_free(tr);
    mg_redistribute_release();
    mg_mesh_free(mesh);
    if (rc != MG_OK) mg_error(rc, "%s", msg);
    return rc;
}

int mg_train_estimate_run(const mg_train_config *cfg, int ndim, const int *shape, int node_ranks,
                          const mg_trainer_meta_data *data, mg_train_estimate *out) {
    memset(out, 0, sizeof *out);
    mg_plan plan;
    int rc = mg_plan_parse(cfg->parallel, &plan);
    if (rc != MG_OK) return rc;
    int pp = plan.ndim == ndim ? mg_plan_pp_dim(&plan) : -1;
    int runs = pp >= 0 ? shape[pp] : 1, done[MG_PP_MAX_RANKS] = {0}, left = runs;
    if (runs > MG_PP_MAX_RANKS)
        return mg_error(MG_EINVAL, "estimate: %d pipeline ranks, at most %d", runs,
                        MG_PP_MAX_RANKS);
    int device = mg_get_device(), bf16 = mg_backend_gemm_bf16(); /* the runs set cfg's */
    mg_meta_start();
    if ((rc = mg_device_use(MG_DEVICE_META)) != MG_OK) return rc;
    double most = -1;
    mg_pp_meta_headers_free();
    /* pipeline rank by rank, each after the ranks whose activations it
     * receives (interleaved stages: a rank may need a later one's; it is run
     * again once that one has run) */
    for (int pass = 0; pass <= runs && left > 0 && rc == MG_OK; pass++) {
        for (int r = 0; r < runs && rc == MG_OK; r++) {
            if (done[r]) continue;
            int coord[MG_MAX_MESH_DIMS] = {0};
            if (pp >= 0) coord[pp] = r;
            mg_train_memory m;
            mg_comm_stats step[MG_COLL_COUNT];
            rc = run_one(cfg, ndim, shape, coord, node_ranks, data, &m, step, &out->numel);
            if (rc != MG_OK && mg_pp_meta_headers_missing() && pass < runs) {
                rc = MG_OK; /* again in the next pass */
                mg_clear_error();
                continue;
            }
            if (rc != MG_OK) break;
            done[r] = 1;
            left--;
            if (mg_train_memory_total(&m) > most) {
                most = mg_train_memory_total(&m);
                out->memory = m;
                out->pp_rank = r;
            }
            for (int k = 0; k < MG_COLL_COUNT; k++) {
                if ((double)step[k].bytes > out->bytes[k]) out->bytes[k] = (double)step[k].bytes;
                if ((double)step[k].calls > out->calls[k]) out->calls[k] = (double)step[k].calls;
            }
        }
    }
    mg_pp_meta_headers_free();
    mg_context_drop_arenas(MG_DEVICE_META);
    mg_backend_set_gemm_bf16(bf16);
    int back = mg_device_use(device);
    return rc != MG_OK ? rc : back;
}

/* What a meta run keeps of each GPT layer on the host, whose data are not
 * kept: tensor headers, graph nodes and the pages of its mappings. */
#define META_LAYER_BYTES (512.0 * 1024.0)

int mg_train_estimate_fits(const mg_train_config *cfg, const mg_mesh *mesh,
                           const mg_trainer_meta_data *data, double params, const char *fix) {
    const double G = 1073741824.0;
    double have = mg_machine_memory_bytes();
    if (!(have > 0)) return MG_OK;
    if (mesh->meta) {
        double layers = mg_model_kind_is_lm(cfg->model) ? (double)cfg->layers : (double)cfg->depth;
        if (layers * META_LAYER_BYTES <= have / 2) return MG_OK;
        return mg_error(MG_ENOMEM,
                        "an estimate of %.0f layers lays out every layer's tensors "
                        "(about %.1f GiB on this machine, 0.5 MiB a layer), more than half its "
                        "%.1f GiB: estimate fewer layers and scale",
                        layers, layers * META_LAYER_BYTES / G, have / G);
    }
    /* the floor: the parameters with their gradients and optimizer state, and
     * one output a layer kept for the backward (a micro-batch's rows, each
     * ctx x embd for the GPT and the Llama, hidden for the MLPs), all spread
     * evenly */
    int states = cfg->optimizer == MG_OPTIM_ADAMW ? 2 : cfg->momentum != 0 ? 1 : 0;
    bool lm = mg_model_kind_is_lm(cfg->model);
    double rows = (double)cfg->batch / (double)(lm && cfg->grad_accum > 0 ? cfg->grad_accum : 1);
    double width =
        lm ? (double)cfg->ctx * (double)cfg->embd : (double)mg_train_config_hidden(cfg);
    double layers = lm ? (double)cfg->layers : (double)(cfg->depth > 0 ? cfg->depth : 2);
    mg_plan plan;
    bool pp = mg_plan_parse(cfg->parallel, &plan) == MG_OK && mg_plan_pp_dim(&plan) >= 0;
    mg_clear_error();
    if (pp) rows = 0; /* the pipeline checks its activations itself, by micro-batch */
    double floor = 4.0 * (params * (2 + states) + rows * width * layers) / mesh->size;
    char what[256], acts[96] = "";
    if (!pp)
        snprintf(acts, sizeof acts, ", and one output a layer for the backward (%.3g floats)",
                 rows * width * layers);
    snprintf(what, sizeof what, "the model's %.3g parameters with their gradients and optimizer "
             "state%s, split over all %d ranks,", params, acts, mesh->size);
    int rc = mg_machine_check_memory(what, floor, fix);
    if (rc != MG_OK || pp) return rc;
    int on_node = mg_ctx()->node_ranks > 0 ? mg_ctx()->node_ranks : 1;
    mg_train_estimate e;
    if ((rc = mg_train_estimate_run(cfg, mesh->ndim, mesh->shape, on_node, data, &e)) != MG_OK) {
        if (rc == MG_ENOMEM) { /* a tensor past the address space */
            char why[512];
            snprintf(why, sizeof why, "%s", mg_last_error());
            return mg_error(MG_ENOMEM, "a step of this run cannot even be laid out (%s): %s", why,
                            fix);
        }
        mg_clear_error(); /* no estimate: the run itself will say what fails */
        return MG_OK;
    }
    return mg_machine_check_memory("a step of this run (meshgrad plan --estimate shows its parts)",
                                   mg_train_memory_total(&e.memory), fix);
}

int mg_train_estimate_fits_lm(const mg_lm_config *g, const mg_mesh *mesh, const char *parallel,
                              int64_t batch, const char *fix) {
    mg_train_config c;
    mg_train_config_defaults(&c);
    c.model = g->kind;
    const mg_gpt_config *s = &g->gpt;
    c.layers = s->layers, c.heads = s->heads, c.embd = s->embd, c.ctx = s->ctx;
    if (g->kind == MG_MODEL_LLAMA) {
        const mg_llama_config *l = &g->llama;
        c.layers = l->layers, c.heads = l->heads, c.embd = l->embd, c.ctx = l->ctx;
        c.kv_heads = l->kv_heads, c.hidden = l->hidden, c.untied_head = !l->tied;
        c.rope_theta = l->rope_theta, c.norm_eps = l->norm_eps;
    }
    c.batch = batch;
    c.optimizer = MG_OPTIM_ADAMW;
    c.clip = 1;
    snprintf(c.parallel, sizeof c.parallel, "%s", parallel);
    if (mg_backend_gemm_bf16()) snprintf(c.dtype, sizeof c.dtype, "bf16");
    mg_trainer_meta_data d = {.vocab = mg_lm_vocab(g), .train_rows = batch, .test_rows = batch};
    return mg_train_estimate_fits(&c, mesh, &d, (double)mg_lm_param_count(g), fix);
}

mg_trainer *mg_trainer_new(const mg_train_config *cfg, mg_mesh *mesh) {
    return mg_trainer_build(cfg, mesh, NULL, mg_train_estimate_fits);
}
