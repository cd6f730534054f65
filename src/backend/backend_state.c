/* backend_state.c: the free of the backend layer's state (backend_state.h).
 * Exports: mg_backend_state_free. */
#include "backend/backend_state.h"

#include <stdlib.h>

#include "backend/backend.h"

void mg_backend_state_free(void) {
    mg_backend_state *b = mg_ctx()->layers.backend;
    if (!b) return;
    mg_backend_bf16_weights_free(); /* each copy's memory given back to its device */
    free(b->bf16_copies);
    for (int i = 0; i < 2; i++) free(b->bf16_rounded[i].p);
    free(b->bf16_packed.p);
    free(b->det_scratch.p);
    mg_context_layer_drop((void **)&mg_ctx()->layers.backend);
}
