/* estimate.h: what one step of a training run costs each rank, found by taking
 * the step: the run of a config is built on a meta mesh (dist/mesh.h) whose
 * tensors live on the meta device (backend/meta.c), so the real ops, rules,
 * autograd, reducer and optimizer run, no kernel runs and no byte is sent,
 * and the arenas and comms count what a run would allocate and send. This is
 * `meshgrad plan --estimate`, and the memory check of `train` before it
 * builds a model. One process is enough for any mesh.
 * Exports mg_train_estimate, mg_train_estimate_run, mg_train_estimate_fits,
 * mg_train_estimate_fits_lm (and defines meshgrad_train.h's mg_trainer_new,
 * whose run takes mg_train_estimate_fits as its memory check). */
#ifndef MG_TRAIN_ESTIMATE_H
#define MG_TRAIN_ESTIMATE_H

#include "meshgrad_train.h"
#include "train/trainer.h"

typedef struct {
    mg_train_memory memory; /* the rank with the most, after two steps */
    int pp_rank;            /* which pipeline rank that is (0 without pp) */
    /* per collective, the bytes this rank sends and its calls in one step
     * after the first (the first also sets up shared memory), the most of
     * any rank, as train reports them */
    double bytes[MG_COLL_COUNT], calls[MG_COLL_COUNT];
    int64_t numel; /* parameters of the whole model */
} mg_train_estimate;

/* The step of `cfg` on a mesh of `shape` (ndim dims), `node_ranks` ranks to a
 * node (0: all on one), reading no data: batches of the shapes in `data`.
 * Takes one run per pipeline rank (with pp; one run without), as the rank at
 * coordinate 0 of the other dims, in cfg's dtype (the GEMM math set before is
 * set again after). MG_OK, or what the run would refuse. */
int mg_train_estimate_run(const mg_train_config *cfg, int ndim, const int *shape, int node_ranks,
                          const mg_trainer_meta_data *data, mg_train_estimate *out);

/* Whether the run of `cfg` on `mesh` (real or meta), with data of `data`'s
 * shapes and a model of `params` parameters, fits this machine's memory, or
 * MG_ENOMEM and one line: what it needs a rank, what the machine has, and
 * `fix`. Checked before the model is built, in this order, each at once:
 * every parameter with its gradient and optimizer state spread evenly over
 * the mesh (a floor no plan goes under), then, for a run without pp (a
 * pipeline checks its own, nn/pipeline.h), the estimate of its step. A meta
 * run only checks that this machine can lay out the graph of its layers. */
int mg_train_estimate_fits(const mg_train_config *cfg, const mg_mesh *mesh,
                           const mg_trainer_meta_data *data, double params, const char *fix);

/* The same for bench step --model gpt's or llama's step: the model of `g`,
 * `batch` windows, `parallel` on `mesh`, AdamW with clipping, the GEMMs in
 * the dtype set now (mg_backend_gemm_bf16). */
int mg_train_estimate_fits_lm(const mg_lm_config *g, const mg_mesh *mesh, const char *parallel,
                              int64_t batch, const char *fix);


#endif
