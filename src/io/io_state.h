/* io_state.h: what the io layer remembers between calls, behind the
 * context's layers.io (context.h): made on first use by mg_io, freed at each
 * mg_context_reset by mg_io_state_free (io_state.c). Included by io/ and the
 * layers above it.
 * Exports: mg_io_state, mg_io, mg_io_state_free. */
#ifndef MG_IO_STATE_H
#define MG_IO_STATE_H

#include "context.h"

struct mg_observe;

struct mg_io_state {
    int h5_started; /* h5util.c: HDF5 opened, its error printing off */
    struct mg_observe *observe; /* observe.c: mg_trace_open's timeline, the flight directory */
};
typedef struct mg_io_state mg_io_state;

/* Frees observe.c's state (plain data: a trace still open is not written),
 * then the state, and NULLs the context's pointer (mg_context_on_reset: at
 * every reset; nothing when the state was not made). */
void mg_io_state_free(void);

/* The io layer's state, made on first use. */
MG_CONTEXT_LAYER(mg_io, mg_io_state, io, mg_io_state_free)

#endif
