/* io_state.c: the free of the io layer's state (io_state.h).
 * Exports: mg_io_state_free. */
#include "io/io_state.h"

#include <stdlib.h>

void mg_io_state_free(void) {
    mg_io_state *s = mg_ctx()->layers.io;
    if (s) free(s->observe);
    mg_context_layer_drop((void **)&mg_ctx()->layers.io);
}
