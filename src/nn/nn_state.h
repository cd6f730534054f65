/* nn_state.h: what the nn layer remembers between calls, behind the
 * context's layers.nn (context.h): made on first use by mg_nn, freed at each
 * mg_context_reset by mg_nn_state_free (nn_state.c). Included by nn/ and the
 * layers above it.
 * Exports: mg_nn_state, mg_nn, mg_nn_state_free. */
#ifndef MG_NN_STATE_H
#define MG_NN_STATE_H

#include "context.h"

struct mg_pp_meta_headers;

struct mg_nn_state {
    /* pipeline_exec.c: activation headers a meta run sent, for a later run's
     * receives (a plan estimate's runs, one per pipeline rank) */
    struct mg_pp_meta_headers *pp_meta_headers;
};
typedef struct mg_nn_state mg_nn_state;

/* Frees the pipeline's meta headers, then the state, and NULLs the context's
 * pointer (mg_context_on_reset: at every reset; nothing when the state was
 * not made). */
void mg_nn_state_free(void);

/* The nn layer's state, made on first use. */
MG_CONTEXT_LAYER(mg_nn, mg_nn_state, nn, mg_nn_state_free)

#endif
