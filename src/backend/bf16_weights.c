/* bf16_weights.c: the weights' bf16 copies for the bf16 GEMMs (backend.h).
 *
 * A step of bf16 training multiplies each weight several times (forward,
 * the input's gradient, every micro-batch), and the weight changes only
 * when the optimizer updates it. So a weight is cast to bf16 once a step,
 * by its backend's cast_bf16, into memory of its own device taken through
 * the backend's alloc (so the meta backend of the step estimate lays out
 * and counts the same bytes), and later GEMMs of the step read the copy.
 * The copies are found by the weight's data pointer and size (a short list:
 * one entry per weight), and are valid while the context's step count
 * (mg_step_end) and bf16 version (backend.c's mg_backend_bf16_weights_changed)
 * are those they were made at; an entry's memory is kept and cast into again.
 *
 * Exports mg_backend_bf16_weight, mg_backend_bf16_weights_bytes,
 * mg_backend_bf16_weights_free (backend.h). */
#include "backend/backend.h"

#include <stdlib.h>

#include "backend/backend_state.h"
#include "context.h"

/* The entry of w's data (made empty when none is), or NULL when out of memory. */
static mg_bf16_copy *entry_of(const mg_tensor *w) {
    mg_backend_state *c = mg_backend_ctx();
    for (int i = 0; i < c->n_bf16_copies; i++) {
        mg_bf16_copy *e = &c->bf16_copies[i];
        if (e->src == w->data && e->device == w->device) return e;
    }
    if (c->n_bf16_copies == c->cap_bf16_copies) {
        int cap = c->cap_bf16_copies ? 2 * c->cap_bf16_copies : 16;
        mg_bf16_copy *p = realloc(c->bf16_copies, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        c->bf16_copies = p;
        c->cap_bf16_copies = cap;
    }
    mg_bf16_copy *e = &c->bf16_copies[c->n_bf16_copies++];
    *e = (mg_bf16_copy){.src = w->data, .device = w->device, .step = -1};
    return e;
}

const uint16_t *mg_backend_bf16_weight(const mg_tensor *w) {
    mg_backend *be = mg_backend_of(w);
    if (!be || !be->iface->cast_bf16 || w->numel <= 0) return NULL;
    mg_backend_state *c = mg_backend_ctx();
    mg_bf16_copy *e = entry_of(w);
    if (!e) return NULL;
    int64_t steps = mg_ctx()->steps;
    if (e->bf16 && e->numel == w->numel && e->step == steps && e->version == c->bf16_version)
        return e->bf16;
    size_t bytes = (size_t)w->numel * sizeof(uint16_t);
    if (e->bytes < bytes) { /* new, or the weight at this address grew */
        void *p = be->iface->alloc(be->context, bytes);
        if (!p) return NULL;
        if (e->bf16) e->free(e->free_ctx, e->bf16);
        e->bf16 = p;
        e->bytes = bytes;
        e->free = be->iface->free;
        e->free_ctx = be->context;
    }
    be->iface->cast_bf16(be->context, w->data, e->bf16, w->numel);
    e->numel = w->numel;
    e->step = steps;
    e->version = c->bf16_version;
    return e->bf16;
}

size_t mg_backend_bf16_weights_bytes(int device) {
    const mg_backend_state *c = mg_backend_ctx();
    size_t bytes = 0;
    for (int i = 0; i < c->n_bf16_copies; i++)
        if (c->bf16_copies[i].device == device) bytes += c->bf16_copies[i].bytes;
    return bytes;
}

void mg_backend_bf16_weights_free(void) {
    mg_backend_state *c = mg_backend_ctx();
    for (int i = 0; i < c->n_bf16_copies; i++) {
        mg_bf16_copy *e = &c->bf16_copies[i];
        if (e->bf16) e->free(e->free_ctx, e->bf16);
    }
    c->n_bf16_copies = 0;
    mg_backend_bf16_weights_changed();
}
