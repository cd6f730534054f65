/* recompute.c: the recompute modes of a model of blocks (see recompute.h).
 * Exports mg_recompute_mode_parse, mg_recompute_mode_name, mg_recompute_part. */
#include "nn/recompute.h"

#include "array.h"
#include "status.h"

static const char *const mode_names[] = {"none", "blocks", "attention"};

int mg_recompute_mode_parse(const char *text, mg_recompute_mode *mode) {
    int k = 0, rc = mg_name_parse(text, mode_names, 3, "recompute mode", &k);
    if (rc == MG_OK) *mode = (mg_recompute_mode)k;
    return rc;
}

const char *mg_recompute_mode_name(mg_recompute_mode mode) {
    return mode >= MG_RECOMPUTE_NONE && mode <= MG_RECOMPUTE_ATTENTION ? mode_names[mode] : "?";
}

mg_dtensor *mg_recompute_part(mg_recompute_mode mode, mg_recompute_mode part, mg_recompute_fn fn,
                              void *ctx, size_t ctx_bytes, const mg_dtensor *x) {
    return mode == part && mode != MG_RECOMPUTE_NONE ? mg_recompute(fn, ctx, ctx_bytes, x)
                                                     : fn(ctx, x);
}
