/* recompute.c: the forward side of activation recomputation (see
 * recompute.h): a segment run with its data in the recompute arena, its
 * output kept, its record for backward; the segment run again. State: the
 * context's `segments` (this step's) and `recomputing`.
 * Exports mg_recompute (meshgrad_train.h), mg_recompute_find,
 * mg_recompute_again, mg_recompute_keep, mg_recompute_step_end. */
#include "autograd/recompute.h"

#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "autograd/autograd_state.h"
#include "backend/backend.h"
#include "context.h"
#include "ops/ops.h"
#include "status.h"

mg_dtensor *mg_recompute_keep(const mg_dtensor *t) {
    mg_dtensor *copy = mg_ops_output(&t->spec);
    if (!copy) return NULL;
    if (copy->local->numel > 0) {
        mg_backend *be = mg_backend_of(t->local);
        be->iface->copy(be->context, t->local, copy->local);
    }
    return copy;
}

/* fn(ctx, x) with one more level of `recomputing`: a segment inside runs as it is. */
static mg_dtensor *run(mg_recompute_fn fn, void *ctx, const mg_dtensor *x) {
    mg_autograd_state *c = mg_autograd();
    c->recomputing++;
    mg_dtensor *y = fn(ctx, x);
    c->recomputing--;
    return y;
}

static int add_segment(const mg_recompute_seg *s) {
    mg_autograd_state *c = mg_autograd();
    int rc = mg_array_grow((void **)&c->segments, &c->cap_segments, c->n_segments + 1,
                           sizeof *c->segments, "mg_recompute");
    if (rc == MG_OK) c->segments[c->n_segments++] = *s;
    return rc;
}

mg_dtensor *mg_recompute(mg_recompute_fn fn, void *ctx, size_t ctx_bytes, const mg_dtensor *x) {
    if (!fn || !x) return mg_error_null(MG_EINVAL, "mg_recompute: the function or the input is NULL");
    if (mg_dtensor_alive(x, "mg_recompute") != MG_OK) return NULL;
    mg_autograd_state *c = mg_autograd();
    if (!mg_grad_enabled() || c->recomputing > 0) return fn(ctx, x);
    mg_arena *step = mg_step_arena(), *arena = step ? mg_recompute_arena() : NULL;
    if (!arena) return NULL;
    void *kept = ctx;
    if (ctx_bytes > 0) { /* the step's: it lives until the backward */
        if (!(kept = mg_arena_alloc(step, ctx_bytes))) return NULL;
        memcpy(kept, ctx, ctx_bytes);
    }
    mg_recompute_seg s = {.lo = mg_ctx()->tape_seq, .x = (mg_dtensor *)x, .fn = fn, .ctx = kept};
    mg_arena *was = mg_arena_redirect_data(step, arena);
    mg_dtensor *y = run(fn, kept, x);
    mg_arena_redirect_data(step, was);
    s.hi = mg_ctx()->tape_seq;
    /* the output's data out of the arena (a header the tape holds: the same
     * tensor, its data moved); x itself or a tensor of the heap stays */
    int made = y && y != x && !(y->flags & MG_DTENSOR_HEAP);
    mg_dtensor *copy = made ? mg_recompute_keep(y) : NULL;
    if (copy) y->local = copy->local;
    mg_arena_reset(arena);
    if (!y || (made && !copy)) return NULL;
    s.y = y;
    if (s.hi > s.lo && add_segment(&s) != MG_OK) return NULL;
    return y;
}

mg_recompute_seg *mg_recompute_find(int64_t seq) {
    mg_autograd_state *c = mg_autograd();
    int lo = 0, hi = c->n_segments; /* recorded in order: their ranges ascend */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        mg_recompute_seg *s = &c->segments[mid];
        if (seq < s->lo) hi = mid;
        else if (seq >= s->hi) lo = mid + 1;
        else return s;
    }
    return NULL;
}

mg_dtensor *mg_recompute_again(const mg_recompute_seg *s, int64_t *first) {
    *first = mg_ctx()->tape_seq;
    int was = mg_set_grad_enabled(1);
    mg_dtensor *y = run(s->fn, s->ctx, s->x);
    mg_set_grad_enabled(was);
    return y;
}

void mg_recompute_step_end(void) { mg_autograd()->n_segments = 0; }
