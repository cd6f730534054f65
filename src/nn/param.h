/* param.h: the parameter table of a model. Each entry is a named, long-lived
 * distributed tensor ("fc1.weight") with the placements it is stored in, the
 * placements it is used in by the forward pass (FSDP gathers a Shard(0) dim to
 * Replicate first), its gradient for the current step, and the optimizer state
 * tensors, which always have the parameter's own spec (sharded like it).
 *
 * Exports: mg_param, mg_param_table, mg_param_init, mg_params_add,
 * mg_params_add_init, mg_params_free,
 * mg_params_use (the tensor the forward pass should use), mg_params_collect_grads,
 * mg_param_grad_in_parts,
 * mg_params_zero_grads, mg_params_checksum (FNV-1a 64 over every full tensor). */
#ifndef MG_NN_PARAM_H
#define MG_NN_PARAM_H

#include <stdbool.h>
#include <stdint.h>

#include "dist/dtensor.h"
#include "meshgrad.h"

#define MG_PARAM_NAME_MAX 64
#define MG_PARAM_STATE_MAX 2

typedef struct {
    char name[MG_PARAM_NAME_MAX];
    mg_dtensor *value;                      /* heap, stored spec, requires grad */
    mg_placement use[MG_MAX_MESH_DIMS];     /* placements for the forward pass */
    int gather;                             /* 1 when use differs from the stored spec */
    int64_t replication;                    /* product of mesh sizes over Replicate dims */
    mg_dtensor *grad;                       /* this step's gradient (parameter's spec) or NULL */
    mg_dtensor *state[MG_PARAM_STATE_MAX];  /* optimizer state, parameter's spec */
    int shard_dim;                          /* optimizer: mesh dim whose ranks split its
                                             * update (optim_shard.h), or -1 */
    int one_copy;                           /* value and state are one copy per node, that
                                             * only the split step may update */
    int index;                              /* its place in the whole model (the Philox
                                             * stream of its initial values) */
} mg_param;

typedef struct {
    mg_param *p;
    int n, cap;
    int next_index; /* the index of the next parameter added: n, unless a pipeline
                     * stage holds only some of the model's parameters and sets it */
} mg_param_table;

/* Adds a parameter of global `shape`, stored with placements `store` and used
 * with placements `use` (n = mesh ndim each), initialized U(lo, hi) from
 * Philox(seed, stream = its index in the whole model: t->next_index, which is
 * its index in the table unless set ahead). Returns its index in the table
 * or a negative status with a message. */
int mg_params_add(mg_param_table *t, const mg_mesh *mesh, const char *name, int ndim,
                  const int64_t *shape, const mg_placement *store, const mg_placement *use,
                  uint64_t seed, float lo, float hi);
/* How a parameter starts: U(a, b), N(a, b^2) (mean a, standard deviation b),
 * or the constant a. Draws come from Philox(seed, stream = the index in the
 * table) by global element index. */
typedef enum { MG_INIT_UNIFORM = 0, MG_INIT_NORMAL, MG_INIT_CONSTANT } mg_init_kind;
typedef struct {
    mg_init_kind kind;
    float a, b;
} mg_param_init;
/* mg_params_add with any of those. */
int mg_params_add_init(mg_param_table *t, const mg_mesh *mesh, const char *name, int ndim,
                       const int64_t *shape, const mg_placement *store, const mg_placement *use,
                       uint64_t seed, mg_param_init init);
void mg_params_free(mg_param_table *t);

/* The tensor the forward pass uses for parameter i: the value itself, or (FSDP)
 * the value redistributed to its use placements (an op: autograd sends the
 * gradient back reduce-scattered). NULL with a message on failure. */
mg_dtensor *mg_params_use(mg_param_table *t, int i);

/* After mg_backward: p->grad = mg_grad(p->value) for every parameter (a
 * parameter the loss did not reach gets NULL). */
void mg_params_collect_grads(mg_param_table *t);
/* The gradient is left in parts for a split optimizer step: each rank's
 * addend, or each rank's rows of the sum (dist/reducer.h: LOCAL or ROWS). */
bool mg_param_grad_in_parts(const mg_param *p);
/* mg_zero_grad on every parameter; clears p->grad. */
int mg_params_zero_grads(mg_param_table *t);

/* Collective. FNV-1a 64 of the bytes of every parameter's full tensor, in table
 * order: equal on every mesh when the initial parameters are bitwise equal. */
int mg_params_checksum(mg_param_table *t, uint64_t *out);
/* The same over parameters [first, first + n), continuing the hash *h
 * (pipeline stages hash their parts in turn). */
int mg_params_checksum_more(mg_param_table *t, int first, int n, uint64_t *h);
/* Total number of elements of every parameter (global). */
int64_t mg_params_numel(const mg_param_table *t);

#endif
