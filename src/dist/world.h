/* world.h: what world.c offers the files of dist/ above it (its public calls
 * are in meshgrad.h, mg_check_not_finalized in context.h). mg_finalize frees
 * the state of the files below world.c itself (the world comm, the watchdog,
 * the flight recorder, the communicator records); a file above it that keeps
 * state in the context registers the function that frees it when it first
 * makes that state (the reducer, redistribute's staging buffers), and
 * mg_finalize runs those first, the newest first.
 * Exports: mg_world_on_finalize. */
#ifndef MG_DIST_WORLD_H
#define MG_DIST_WORLD_H

/* fn runs at mg_finalize (registered once: again, it does nothing). MG_OK, or
 * MG_ESTATE with a message when MG_FINALIZERS (dist_state.h) are registered. */
int mg_world_on_finalize(void (*fn)(void));

#endif
