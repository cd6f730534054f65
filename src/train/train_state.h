/* train_state.h: what the train layer remembers between calls, behind the
 * context's layers.train (context.h): made on first use by mg_train, and
 * never freed, nor emptied at a reset: a program may close its loaders after
 * mg_finalize, and mg_token_loader_close must then still know them. (Not
 * nn/train_state.h, a training run's checkpoint.) Included by train/ and the
 * layers above it.
 * Exports: mg_train_state, mg_train. */
#ifndef MG_TRAIN_STATE_H
#define MG_TRAIN_STATE_H

#include "context.h"

struct mg_token_loader;

struct mg_train_state {
    /* tokens_api.c: the token loaders open now (pointers compared, never read
     * through), so that a second mg_token_loader_close does nothing; and the
     * headers closed last, held back from malloc a while (a pointer kept to
     * one is not taken for a loader that malloc put at its address). Kept by
     * mg_context_reset (a program may close its loaders after mg_finalize). */
    struct mg_token_loader **loaders;
    int n_loaders, cap_loaders;
    struct mg_token_loader **closed_loaders;
    int next_closed;
};
typedef struct mg_train_state mg_train_state;

/* The train layer's state, made on first use (with no free to run at a reset). */
MG_CONTEXT_LAYER(mg_train, mg_train_state, train, NULL)

#endif
