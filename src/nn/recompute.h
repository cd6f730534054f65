/* recompute.h: what a model recomputes in backward (meshgrad_train.h's
 * mg_recompute_mode: none, each block, or each block's attention), for any
 * model made of blocks. A model keeps its mode and runs each of its parts
 * through mg_recompute_part with the mode that part stands for: the GPT
 * (gpt.c) runs each block as MG_RECOMPUTE_BLOCKS and, inside it, the head
 * split, attention and head merge as MG_RECOMPUTE_ATTENTION. Another model
 * of blocks does the same: a function of the block's input (and of a small
 * struct of what it needs besides), and one call where the block ran.
 *
 * Exports mg_recompute_mode_parse, mg_recompute_mode_name,
 * mg_recompute_part. */
#ifndef MG_NN_RECOMPUTE_H
#define MG_NN_RECOMPUTE_H

#include <stddef.h>

#include "meshgrad_train.h"

/* "none", "blocks", "attention"; MG_EINVAL with a message otherwise. */
int mg_recompute_mode_parse(const char *text, mg_recompute_mode *mode);
const char *mg_recompute_mode_name(mg_recompute_mode mode);

/* fn(ctx, x), recomputed in backward (mg_recompute, *ctx copied: ctx_bytes)
 * when the model's `mode` is the part's `part`, else run as it is. */
mg_dtensor *mg_recompute_part(mg_recompute_mode mode, mg_recompute_mode part, mg_recompute_fn fn,
                              void *ctx, size_t ctx_bytes, const mg_dtensor *x);

#endif
