/* autograd_state.c: the free of the autograd layer's state
 * (autograd_state.h). Exports: mg_autograd_state_free. */
#include "autograd/autograd_state.h"

#include <stdlib.h>

void mg_autograd_state_free(void) {
    mg_autograd_state *a = mg_ctx()->layers.autograd;
    if (!a) return;
    free(a->graph);
    free(a->uses);
    free(a->replay);
    free(a->segments);
    mg_context_layer_drop((void **)&mg_ctx()->layers.autograd);
}
