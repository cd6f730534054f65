/* ops_state.h: what the ops layer remembers between calls, behind the
 * context's layers.ops (context.h): made on first use by mg_ops, freed at
 * each mg_context_reset by mg_ops_state_free (ops_state.c). Included by ops/
 * and the layers above it.
 * Exports: mg_ops_state, mg_param_copy_entry, mg_ops, mg_ops_state_free. */
#ifndef MG_OPS_STATE_H
#define MG_OPS_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "context.h"
#include "exact.h"

struct mg_dtensor;

/* A parameter brought to other placements for use (ops/ops.c). */
typedef struct {
    struct mg_dtensor *copy, *param;
    int held; /* its data is in the scratch arena now (else given back) */
} mg_param_copy_entry;

struct mg_ops_state {
    int grad_disabled;         /* tape.c: no-grad mode (mg_set_grad_enabled(0)) */
    mg_param_copy_entry *copies; /* ops.c: this step's parameter copies */
    int n_copies, cap_copies;
    size_t gathered_bytes;       /* ops.c: the scratch arena's data that gathers took since its reset */
    double op_flops, op_bytes;   /* ops.c: the kernels' cost so far (op_def.h's mg_op_cost) */
    /* ops_vocab.c: the deterministic mode's cross-entropy sums since the trainer
     * last took them (the exact sum of the rows' losses, and the rows) */
    mg_exact det_loss;
    int64_t det_loss_rows;
};
typedef struct mg_ops_state mg_ops_state;

/* Frees the parameter copies' table, then the state, and NULLs the context's
 * pointer (mg_context_on_reset: at every reset; nothing when the state was
 * not made). */
void mg_ops_state_free(void);

/* The ops layer's state, made on first use. */
MG_CONTEXT_LAYER(mg_ops, mg_ops_state, ops, mg_ops_state_free)

#endif
