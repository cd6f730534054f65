/* tokens_api.c: mg_token_loader of the training API (meshgrad_train.h): the
 * window loader of io/tokens.h on a mesh, its batches in the step arena.
 * State: train_state.h's `loaders` (the loaders open now) and `closed_loaders`,
 * so that closing a loader twice does nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "dist/mesh.h"
#include "io/tokens.h"
#include "status.h"
#include "train/api.h"
#include "train/train_state.h"

struct mg_token_loader {
    const mg_mesh *mesh;
    mg_tokens *tokens;
    int64_t *starts; /* window starts of the last batch */
    int64_t cap;
};

/* ---- the loaders open now (train_state.h's `loaders`) ------------------------ */

/* Closed headers held back from malloc (train_state.h's closed_loaders). */
#define HELD_BACK 64

/* l's place among the open loaders, or -1; l is only compared, never read. */
static int open_index(const mg_token_loader *l) {
    mg_train_state *c = mg_train();
    for (int i = 0; i < c->n_loaders; i++)
        if (c->loaders[i] == l) return i;
    return -1;
}

static int open_add(mg_token_loader *l) {
    mg_train_state *c = mg_train();
    if (c->n_loaders == c->cap_loaders) {
        int cap = c->cap_loaders ? 2 * c->cap_loaders : 8;
        mg_token_loader **p = realloc(c->loaders, (size_t)cap * sizeof *p);
        if (!p) return mg_error(MG_ENOMEM, "mg_token_loader_open: out of memory");
        c->loaders = p;
        c->cap_loaders = cap;
    }
    c->loaders[c->n_loaders++] = l;
    return MG_OK;
}

/* A closed header goes back to malloc only HELD_BACK closes later: a pointer
 * a program kept to it is not taken for a loader malloc put at its address. */
static void hold_back(mg_token_loader *l) {
    mg_train_state *c = mg_train();
    if (!c->closed_loaders &&
        !(c->closed_loaders = calloc(HELD_BACK, sizeof *c->closed_loaders))) {
        free(l);
        return;
    }
    free(c->closed_loaders[c->next_closed]);
    c->closed_loaders[c->next_closed] = l;
    c->next_closed = (c->next_closed + 1) % HELD_BACK;
}

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
    if (open_add(l) != MG_OK) {
        mg_tokens_close(l->tokens);
        free(l);
        return NULL;
    }
    return l;
}

/* Only a loader open now is closed: another pointer (closed already) is not
 * read at all, and nothing is said (a second close aborted in free(), and
 * under mpirun then hung in Open MPI's handler). */
void mg_token_loader_close(mg_token_loader *l) {
    int i = l ? open_index(l) : -1;
    if (i < 0) return;
    mg_train_state *c = mg_train();
    c->loaders[i] = c->loaders[--c->n_loaders];
    mg_tokens_close(l->tokens);
    free(l->starts);
    memset(l, 0, sizeof *l);
    hold_back(l);
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
    else if (T >= mg_tokens_count(l->tokens)) /* T + 1 tokens, compared without overflow */
        rc = mg_error(MG_EINVAL, "%s: a window of T = %lld tokens and the one after them does "
                      "not fit in the %lld tokens of the split: give T <= %lld", who,
                      (long long)T, (long long)mg_tokens_count(l->tokens),
                      (long long)(mg_tokens_count(l->tokens) - 1));
    else if (B > INT64_MAX / 2 / (T + 1) / (int64_t)sizeof(float))
        rc = mg_error(MG_EINVAL, "%s: a batch of %lld windows of %lld tokens is more than any "
                      "memory holds: give a smaller B", who, (long long)B, (long long)T);
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
