/* tokens_api.c: mg_token_loader of the training API (meshgrad_train.h): the
 * window loader of io/tokens.h on a mesh, its batches in the step arena. */
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "dist/mesh.h"
#include "io/tokens.h"
#include "status.h"
#include "train/api.h"

struct mg_token_loader {
    const mg_mesh *mesh;
    mg_tokens *tokens;
    int64_t *starts; /* window starts of the last batch */
    int64_t cap;
};

mg_token_loader *mg_token_loader_open(const mg_mesh *mesh, const char *path, const char *split) {
    const char *who = "mg_token_loader_open";
    int rc = MG_OK;
    if (!mesh) rc = mg_error(MG_EINVAL, "%s: the mesh is NULL", who);
    else if (!path || !split) rc = mg_error(MG_EINVAL, "%s: the path or the split is NULL", who);
    uint64_t h = MG_API_HASH_START;
    if (rc == MG_OK) h = mg_api_hash(mg_api_hash(h, path, strlen(path) + 1), split, strlen(split));
    if (mg_api_agree(rc, h, who, "paths or splits") != MG_OK) return NULL;
    mg_token_loader *l = calloc(1, sizeof *l);
    if (!l) return mg_error_null(MG_ENOMEM, "%s: out of memory", who);
    l->mesh = mesh;
    if (!(l->tokens = mg_tokens_open(path, split, mesh->world))) {
        free(l);
        return NULL;
    }
    return l;
}

void mg_token_loader_close(mg_token_loader *l) {
    if (!l) return;
    mg_tokens_close(l->tokens);
    free(l->starts);
    free(l);
}

int64_t mg_token_loader_count(const mg_token_loader *l) {
    return mg_arg_given(l, "mg_token_loader_count", "the loader") ? mg_tokens_count(l->tokens) : -1;
}

int mg_token_loader_vocab(const mg_token_loader *l) {
    return mg_arg_given(l, "mg_token_loader_vocab", "the loader") ? mg_tokens_vocab(l->tokens) : -1;
}

int64_t mg_token_loader_eval_windows(const mg_token_loader *l, int64_t T) {
    if (!mg_arg_given(l, "mg_token_loader_eval_windows", "the loader")) return -1;
    if (T < 1) {
        mg_error(MG_EINVAL, "mg_token_loader_eval_windows: T is %lld; give 1 or more",
                 (long long)T);
        return -1;
    }
    return mg_tokens_eval_windows(l->tokens, T);
}

/* Collective. Checks the arguments of a batch (the same on every rank), makes
 * room for B starts and the spec of x and y. */
static int batch_begin(const char *who, mg_token_loader *l, const int64_t *args, int nargs,
                       const mg_placement *p, int n, mg_dtensor **x, mg_dtensor **y,
                       mg_spec *spec) {
    int64_t B = args[0], T = args[1];
    int rc = MG_OK;
    if (x) *x = NULL;
    if (y) *y = NULL;
    if (!l || !x || !y)
        rc = mg_error(MG_EINVAL, "%s: the loader, x or y is NULL", who);
    else if (B < 1 || T < 1)
        rc = mg_error(MG_EINVAL, "%s: a batch of %lld windows of %lld tokens: give B >= 1 and "
                      "T >= 1", who, (long long)B, (long long)T);
    else if (T + 1 > mg_tokens_count(l->tokens))
        rc = mg_error(MG_EINVAL, "%s: a window of T + 1 = %lld tokens does not fit in the %lld "
                      "of the split", who, (long long)(T + 1),
                      (long long)mg_tokens_count(l->tokens));
    if (rc == MG_OK) rc = mg_spec_make(spec, l->mesh, p, n, 2, (int64_t[]){B, T}, who);
    if (rc == MG_OK && mg_spec_has_partial(spec))
        rc = mg_error(MG_EPLACEMENT, "%s: a batch cannot be Partial; give Shard or Replicate "
                      "placements (Shard(0) for data parallel)", who);
    if (rc == MG_OK && B > l->cap) {
        int64_t *s = realloc(l->starts, (size_t)B * sizeof *s);
        if (!s) rc = mg_error(MG_ENOMEM, "%s: out of memory for %lld windows", who, (long long)B);
        else l->starts = s, l->cap = B;
    }
    uint64_t h = mg_api_hash(MG_API_HASH_START, args, (size_t)nargs * sizeof *args);
    if (rc == MG_OK) h = mg_api_hash(h, p, (size_t)n * sizeof *p);
    return mg_api_agree(rc, h, who, "batch arguments");
}

static int batch_read(mg_token_loader *l, int64_t B, int64_t T, const mg_spec *spec,
                      mg_dtensor **x, mg_dtensor **y) {
    return mg_tokens_batch(l->tokens, l->starts, B, T, spec, spec, x, y, mg_step_arena());
}

int mg_token_loader_batch(mg_token_loader *l, uint64_t seed, int64_t step, int64_t B, int64_t T,
                          const mg_placement *p, int n, mg_dtensor **x, mg_dtensor **y) {
    const char *who = "mg_token_loader_batch";
    int64_t args[4] = {B, T, (int64_t)seed, step};
    mg_spec spec;
    int rc = batch_begin(who, l, args, 4, p, n, x, y, &spec);
    if (rc == MG_OK && step < 0)
        rc = mg_error(MG_EINVAL, "%s: step %lld is negative", who, (long long)step);
    if (rc != MG_OK) return rc;
    mg_tokens_train_starts(l->tokens, seed, step, B, T, l->starts);
    return batch_read(l, B, T, &spec, x, y);
}

int mg_token_loader_eval_batch(mg_token_loader *l, int64_t first, int64_t B, int64_t T,
                               const mg_placement *p, int n, mg_dtensor **x, mg_dtensor **y) {
    const char *who = "mg_token_loader_eval_batch";
    int64_t args[3] = {B, T, first};
    mg_spec spec;
    int rc = batch_begin(who, l, args, 3, p, n, x, y, &spec);
    int64_t windows = rc == MG_OK ? mg_tokens_eval_windows(l->tokens, T) : 0;
    if (rc == MG_OK && (first < 0 || first > windows - B))
        rc = mg_error(MG_EINVAL, "%s: windows %lld .. %lld are not among the %lld evaluation "
                      "windows of %lld tokens (0 .. %lld)", who, (long long)first,
                      (long long)(first + B - 1), (long long)windows, (long long)T,
                      (long long)(windows - 1));
    if (rc != MG_OK) return rc;
    mg_tokens_eval_starts(first, B, T, l->starts);
    return batch_read(l, B, T, &spec, x, y);
}
