/* nn_state.c: the free of the nn layer's state (nn_state.h).
 * Exports: mg_nn_state_free. */
#include "nn/nn_state.h"

#include <stdlib.h>

#include "nn/pipeline_exec.h"

void mg_nn_state_free(void) {
    mg_nn_state *s = mg_ctx()->layers.nn;
    if (s) mg_pp_meta_headers_free();
    mg_context_layer_drop((void **)&mg_ctx()->layers.nn);
}
