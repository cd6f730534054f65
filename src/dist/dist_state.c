/* dist_state.c: the reset of the dist layer's state (dist_state.h).
 * Exports: mg_dist_state_reset. */
#include "dist/dist_state.h"

#include <stdlib.h>
#include <string.h>

void mg_dist_state_reset(void) {
    mg_dist_state *d = mg_ctx()->layers.dist;
    if (!d) return;
    free(d->comms);
    struct mg_dtensor **live = d->live; /* these outlive the reset (dist_state.h) */
    int n_live = d->n_live, cap_live = d->cap_live;
    memset(d, 0, sizeof *d);
    d->live = live;
    d->n_live = n_live;
    d->cap_live = cap_live;
}
