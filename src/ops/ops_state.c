/* ops_state.c: the free of the ops layer's state (ops_state.h).
 * Exports: mg_ops_state_free. */
#include "ops/ops_state.h"

#include <stdlib.h>

void mg_ops_state_free(void) {
    mg_ops_state *o = mg_ctx()->layers.ops;
    if (o) free(o->copies);
    mg_context_layer_drop((void **)&mg_ctx()->layers.ops);
}
