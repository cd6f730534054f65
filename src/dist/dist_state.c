/* dist_state.c: the reset of the dist layer's state (dist_state.h).
 * Exports: mg_dist_state_reset. */
#include "dist/dist_state.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void mg_dist_state_reset(void) {
    mg_dist_state *d = mg_ctx()->layers.dist;
    if (!d) return;
    free(d->comms);
    memset(d, 0, offsetof(mg_dist_state, live)); /* the rest outlives the reset (dist_state.h) */
}
