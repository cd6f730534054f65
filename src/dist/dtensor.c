/* dtensor.c: distributed tensors (see dtensor.h): a spec and this rank's block.
 * Exports the internal constructors mg_dtensor_make / mg_dtensor_zeros /
 * mg_dtensor_fill_uniform / _normal, mg_dtensor_same_mesh, mg_dtensor_alive,
 * mg_dtensor_kept, mg_dtensor_live_on, mg_dtensor_agree, mg_dtensor_on_free
 * and the public calls mg_distribute, mg_from_local, mg_local, the accessors,
 * mg_dtensor_describe and mg_dtensor_free. (mg_full_tensor and mg_dtensor_item,
 * which move data, live with redistribute; mg_redistribute, which records an
 * autograd node, with the ops.) Shards live on the current device
 * (mg_set_device): mg_distribute and mg_from_local copy the caller's tensor
 * there. Both constructors are collective: they check that every rank passed
 * the same global shape and placements. */
#include "dist/dtensor.h"

#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "backend/backend.h"
#include "backend/device.h"
#include "context.h"
#include "dist/dist_state.h"
#include "dist/mesh.h"
#include "dist/watchdog.h"
#include "hash.h"
#include "rng.h"
#include "status.h"

/* ---- the heap tensors not yet freed (the context's `live`) ------------------ */

/* t's index in the list, or -1; the newest first (tensors are mostly freed in
 * the reverse order of their making). t is only compared, never read. */
static int live_index(const mg_dtensor *t) {
    mg_dist_state *c = mg_dist();
    for (int i = c->n_live - 1; i >= 0; i--)
        if (c->live[i] == t) return i;
    return -1;
}

int mg_dtensor_kept(const mg_dtensor *t) { return t && live_index(t) >= 0; }

int mg_dtensor_live_on(const mg_mesh *mesh) { return mesh->tensors; }

/* ---- internal constructors -------------------------------------------------- */

/* The header of a tensor in `arena`. In the step arena it sits 8 (steps % 16)
 * bytes past a multiple of 128 (the first such address in a slot of
 * MG_DTENSOR_STEP_BYTES): every header of a step sits at the step's offset,
 * and a pointer kept to a result from one of the 15 steps before points where
 * no header of this step can be, whatever the ops made (mg_dtensor_alive; a
 * shift of the arena's start by 64 bytes a step did that only while the
 * headers were further apart than the shifts). */
static mg_dtensor *header_in(mg_arena *arena) {
    if (!mg_is_step_arena(arena)) return mg_arena_alloc(arena, sizeof(mg_dtensor));
    unsigned char *slot = mg_arena_alloc(arena, MG_DTENSOR_STEP_BYTES);
    if (!slot) return NULL;
    /* the bytes from slot to the next address that is `want` past a multiple
     * of the cycle (a power of two) */
    uintptr_t cycle = 8 * MG_DTENSOR_STEPS;
    uintptr_t want = 8 * (uintptr_t)(mg_ctx()->steps % MG_DTENSOR_STEPS);
    return (mg_dtensor *)(slot + ((want - (uintptr_t)slot) & (cycle - 1)));
}

static mg_dtensor *wrap(const mg_spec *spec, mg_tensor *local, mg_arena *arena) {
    mg_dist_state *c = mg_dist();
    if (!arena && mg_array_grow((void **)&c->live, &c->cap_live, c->n_live + 1, sizeof *c->live,
                                "dtensor: the list of live tensors") != MG_OK) {
        mg_tensor_free(local);
        return NULL;
    }
    mg_dtensor *t = arena ? header_in(arena) : calloc(1, sizeof *t);
    if (!t) {
        mg_tensor_free(local);
        return mg_error_null(MG_ENOMEM, "dtensor: out of memory");
    }
    if (!arena) {
        c->live[c->n_live++] = t;
        mg_mesh_count_tensor(spec->mesh, 1);
    }
    memset(t, 0, sizeof *t);
    t->magic = MG_DTENSOR_ALIVE;
    t->spec = *spec;
    t->local = local;
    t->flags = arena ? 0 : MG_DTENSOR_HEAP;
    t->made_step = arena && mg_is_step_arena(arena) ? mg_ctx()->steps : -1;
    return t;
}

int mg_dtensor_alive(const mg_dtensor *t, const char *who) {
    /* after mg_finalize the arenas are gone: that is the message then */
    int rc = mg_check_not_finalized(who);
    if (rc != MG_OK) return rc;
    /* read only where it may be: in an arena's block now (op results: the
     * common case, first), or a heap tensor not freed */
    if (!mg_arenas_hold(t) && live_index(t) < 0)
        return mg_error(MG_ESTATE, "%s: not a live tensor: it was freed (mg_dtensor_free), or is an "
                        "op's result from a step that mg_step_end ended, whose memory is gone", who);
    if (t->magic != MG_DTENSOR_ALIVE)
        return mg_error(MG_ESTATE, "%s: not a live tensor: it was freed (mg_dtensor_free), or is an "
                        "op's result from a step that mg_step_end ended, whose memory is in use "
                        "again", who);
    int64_t now = mg_ctx()->steps;
    if (t->made_step >= 0 && t->made_step != now)
        return mg_error(MG_ESTATE, "%s: this tensor is an op's result from %lld step%s ago, and "
                        "mg_step_end released it: an op's result lives until the step ends; to "
                        "keep a value across steps, copy it out (mg_full_tensor) and back in "
                        "(mg_distribute)", who, (long long)(now - t->made_step),
                        now - t->made_step == 1 ? "" : "s");
    return MG_OK;
}

mg_dtensor *mg_dtensor_make(const mg_spec *spec, mg_tensor *local, mg_arena *arena) {
    if (!spec || !local) {
        mg_tensor_free(local);
        return mg_error_null(MG_EINVAL, "mg_dtensor_make: NULL spec or local tensor");
    }
    int64_t want[MG_MAX_DIMS];
    mg_spec_local(spec, NULL, want, NULL);
    if (!mg_shape_equal(local->ndim, local->shape, spec->ndim, want)) {
        char a[128], b[128], s[256];
        mg_shape_format(a, sizeof a, local->ndim, local->shape);
        mg_shape_format(b, sizeof b, spec->ndim, want);
        mg_spec_format(s, sizeof s, spec);
        mg_tensor_free(local);
        return mg_error_null(MG_ESHAPE,
                             "dtensor: local tensor %s does not fit %s: rank %d's block is %s", a,
                             s, spec->mesh->rank, b);
    }
    return wrap(spec, local, arena);
}

mg_dtensor *mg_dtensor_zeros(const mg_spec *spec, mg_arena *arena) {
    int64_t shape[MG_MAX_DIMS];
    mg_spec_local(spec, NULL, shape, NULL);
    mg_tensor *local = mg_tensor_zeros(arena, spec->ndim, shape);
    if (!local) return NULL;
    return wrap(spec, local, arena);
}

/* Is this rank the one that holds the value of every Partial mesh dim? */
static bool holds_partial_value(const mg_spec *s) {
    for (int i = 0; i < s->mesh->ndim; i++)
        if (s->p[i].kind == MG_PLACE_PARTIAL && s->mesh->coord[i] != 0) return false;
    return true;
}

/* Fills t with Philox draws by global element index: uniform in [lo, hi), or
 * (normal) mean lo plus std hi times a standard normal. */
static int fill_random(mg_dtensor *t, uint64_t seed, uint64_t stream, bool normal, float lo,
                       float hi, const char *who) {
    if (!t) return mg_error(MG_EINVAL, "%s: NULL tensor", who);
    mg_tensor *l = t->local;
    if (l->numel == 0) return MG_OK;
    mg_backend *be = mg_backend_of(l);
    if (!holds_partial_value(&t->spec)) {
        be->iface->fill(be->context, l, 0.0f);
        return MG_OK;
    }
    if (mg_tensor_is_meta(l)) return MG_OK; /* no values to draw */
    float *host = l->data;
    if (l->device != MG_DEVICE_CPU) {
        host = malloc((size_t)l->numel * sizeof(float));
        if (!host) return mg_error(MG_ENOMEM, "%s: out of memory", who);
    }
    int nd = t->spec.ndim;
    int64_t off[MG_MAX_DIMS], gstride[MG_MAX_DIMS];
    mg_spec_local(&t->spec, NULL, NULL, off);
    mg_shape_strides(nd, t->spec.shape, gstride);
    int64_t row = nd ? l->shape[nd - 1] : 1, rows = l->numel / row;
    int64_t idx[MG_MAX_DIMS] = {0}; /* local index of the row's first element */
    float span = hi - lo;
    for (int64_t r = 0; r < rows; r++) {
        uint64_t first = 0;
        for (int d = 0; d < nd; d++) first += (uint64_t)((off[d] + idx[d]) * gstride[d]);
        float *out = host + r * row;
        if (normal) {
            mg_rng_normal(seed, stream, first, row, out);
            for (int64_t j = 0; j < row; j++) out[j] = lo + hi * out[j];
        } else {
            mg_rng_uniform(seed, stream, first, row, out);
            for (int64_t j = 0; j < row; j++) {
                float v = lo + span * out[j];
                out[j] = v < hi ? v : nextafterf(hi, lo);
            }
        }
        for (int d = nd - 2; d >= 0; d--) { /* next row */
            if (++idx[d] < l->shape[d]) break;
            idx[d] = 0;
        }
    }
    if (host != l->data) {
        be->iface->from_host(be->context, l->data, host, l->numel);
        free(host);
    }
    return MG_OK;
}

int mg_dtensor_fill_uniform(mg_dtensor *t, uint64_t seed, uint64_t stream, float lo, float hi) {
    return fill_random(t, seed, stream, false, lo, hi, "mg_dtensor_fill_uniform");
}

int mg_dtensor_fill_normal(mg_dtensor *t, uint64_t seed, uint64_t stream, float mean, float std) {
    return fill_random(t, seed, stream, true, mean, std, "mg_dtensor_fill_normal");
}

int mg_dtensor_same_mesh(const mg_dtensor *a, const mg_dtensor *b, const char *who) {
    if (!who) who = "op";
    if (!a || !b) return mg_error(MG_EINVAL, "%s: NULL tensor", who);
    if (a->spec.mesh == b->spec.mesh) return MG_OK;
    char ma[64], mb[64], da[512], db[512];
    mg_mesh_format(ma, sizeof ma, a->spec.mesh);
    mg_mesh_format(mb, sizeof mb, b->spec.mesh);
    mg_spec_format(da, sizeof da, &a->spec);
    mg_spec_format(db, sizeof db, &b->spec);
    return mg_error(MG_EMESH,
                    "%s: the tensors are on different meshes (mesh %s #%d and mesh %s #%d; "
                    "%s and %s): make every input of one call on the same mg_mesh",
                    who, ma, a->spec.mesh->id, mb, b->spec.mesh->id, da, db);
}

/* ---- every rank passes the same global shape and placements ----------------------
 * mg_distribute and mg_from_local take a spec from each rank; ranks that passed
 * different ones would die later, in the first collective (MPI_ERR_TRUNCATE) or
 * in the watchdog. One all-reduce settles it: the max and min of a hash of each
 * rank's spec, and the first rank that refused its own arguments. Only when the
 * hashes differ are the specs gathered, to name the ranks. */

#define SPEC_WORDS (1 + MG_MAX_DIMS + 2 * MG_MAX_MESH_DIMS)

/* the global shape and placements as integers (0 after the mesh's dims) */
static void spec_words(const mg_spec *s, long long *w) {
    memset(w, 0, SPEC_WORDS * sizeof *w);
    w[0] = s->ndim;
    for (int d = 0; d < s->ndim; d++) w[1 + d] = s->shape[d];
    for (int m = 0; m < s->mesh->ndim; m++) {
        w[1 + MG_MAX_DIMS + 2 * m] = 1 + (long long)s->p[m].kind;
        w[2 + MG_MAX_DIMS + 2 * m] = s->p[m].kind == MG_PLACE_SHARD ? s->p[m].dim : 0;
    }
}

static char *words_text(char *buf, size_t len, const long long *w) {
    int64_t shape[MG_MAX_DIMS];
    mg_placement p[MG_MAX_MESH_DIMS];
    int nd = (int)w[0], nm = 0;
    for (int d = 0; d < nd && d < MG_MAX_DIMS; d++) shape[d] = w[1 + d];
    while (nm < MG_MAX_MESH_DIMS && w[1 + MG_MAX_DIMS + 2 * nm]) {
        p[nm] = (mg_placement){(mg_place_kind)(w[1 + MG_MAX_DIMS + 2 * nm] - 1),
                               (int)w[2 + MG_MAX_DIMS + 2 * nm]};
        nm++;
    }
    char a[160], b[96];
    snprintf(buf, len, "%s %s", mg_shape_format(a, sizeof a, nd, shape),
             mg_placements_format(b, sizeof b, p, nm));
    return buf;
}

/* The ranks whose words differ from rank 0's, named in the message. */
static int name_differing_ranks(const long long *w, const char *who) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long long *all = malloc((size_t)size * SPEC_WORDS * sizeof *all);
    if (!all) return mg_error(MG_ENOMEM, "%s: the ranks passed different specs", who);
    mg_watchdog_begin_comm(who, MPI_COMM_WORLD);
    int err =
        MPI_Allgather(w, SPEC_WORDS, MPI_LONG_LONG, all, SPEC_WORDS, MPI_LONG_LONG, MPI_COMM_WORLD);
    mg_watchdog_end();
    char ranks[160] = "", mine[256], other[256];
    int first = -1, n = 0;
    size_t used = 0;
    for (int r = 1; err == MPI_SUCCESS && r < size; r++) {
        if (!memcmp(all + (size_t)r * SPEC_WORDS, all, SPEC_WORDS * sizeof *all)) continue;
        if (first < 0) first = r;
        n++;
        used += snprintf(ranks + used, sizeof ranks > used ? sizeof ranks - used : 0, "%s%d",
                         n > 1 ? ", " : "", r);
    }
    if (first > 0) {
        words_text(mine, sizeof mine, all);
        words_text(other, sizeof other, all + (size_t)first * SPEC_WORDS);
    }
    free(all);
    if (err != MPI_SUCCESS || first < 0)
        return mg_error(MG_ECOMM, "%s: the ranks passed different global shapes or placements",
                        who);
    return mg_error(MG_EPLACEMENT,
                    "%s: the ranks passed different global shapes or placements: rank 0 %s, but "
                    "rank%s %s other ones (rank %d: %s); every rank must pass the same global "
                    "shape and placements (only the data may differ)",
                    who, mine, n > 1 ? "s" : "", ranks, first, other);
}

int mg_dtensor_agree(int rc, const mg_spec *s, const char *who) {
    if (rc == MG_OK) rc = mg_check_not_finalized(who);
    int initialized = 0, finalized = 0, rank = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) return rc;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long long w[SPEC_WORDS] = {0};
    if (rc == MG_OK) spec_words(s, w);
    unsigned long long h = mg_hash_bytes(MG_HASH_START, w, sizeof w);
    unsigned long long mine[3] = {h, ~h, rc != MG_OK ? ULLONG_MAX - (unsigned)rank : 0}, all[3];
    mg_watchdog_begin_comm(who, MPI_COMM_WORLD);
    int err = MPI_Allreduce(mine, all, 3, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    mg_watchdog_end();
    if (err != MPI_SUCCESS) return mg_error(MG_ECOMM, "%s: agreeing on the arguments failed", who);
    if (rc != MG_OK) return rc;
    if (all[2])
        return mg_error(MG_EINVAL, "%s: rank %llu refused its arguments (its message says why)",
                        who, ULLONG_MAX - all[2]);
    if (all[0] == h && ~all[1] == h) return MG_OK; /* max == min: all equal */
    return name_differing_ranks(w, who);
}

/* ---- public ----------------------------------------------------------------- */

mg_dtensor *mg_distribute(const mg_mesh *mesh, const mg_tensor *full, const mg_placement *p,
                          int n) {
    const char *who = "mg_distribute";
    mg_spec spec;
    int rc = full ? mg_spec_make(&spec, mesh, p, n, full->ndim, full->shape, who)
                  : mg_error(MG_EINVAL, "%s: the full tensor is NULL", who);
    if (mg_dtensor_agree(rc, &spec, who) != MG_OK) return NULL;
    int64_t shape[MG_MAX_DIMS], off[MG_MAX_DIMS], zero[MG_MAX_DIMS] = {0};
    mg_spec_local(&spec, NULL, shape, off);
    mg_tensor *local = mg_tensor_alloc(NULL, spec.ndim, shape); /* on the current device */
    if (!local) return NULL;
    mg_backend *be = mg_backend_of(local);
    if (!holds_partial_value(&spec)) {
        be->iface->fill(be->context, local, 0.0f);
    } else if (local->numel > 0 && full->device == local->device) {
        be->iface->copy_block(be->context, full, off, local, zero, shape);
    } else if (local->numel > 0) { /* cut the block on full's device, then move it */
        mg_tensor *block = mg_tensor_alloc_on(NULL, full->device, spec.ndim, shape);
        mg_backend *fb = mg_backend_of(full);
        int rc = block && fb ? MG_OK : MG_ENOMEM;
        if (rc == MG_OK) fb->iface->copy_block(fb->context, full, off, block, zero, shape);
        if (rc == MG_OK) rc = mg_tensor_copy_any(block, local);
        mg_tensor_free(block);
        if (rc != MG_OK) {
            mg_tensor_free(local);
            return NULL;
        }
    }
    return wrap(&spec, local, NULL);
}

mg_dtensor *mg_from_local(const mg_mesh *mesh, const mg_tensor *local, const mg_placement *p, int n,
                          int ndim, const int64_t *global_shape) {
    const char *who = "mg_from_local";
    mg_spec spec;
    int rc = mg_spec_make(&spec, mesh, p, n, ndim, global_shape, who);
    if (mg_dtensor_agree(rc, &spec, who) != MG_OK) return NULL;
    /* The local tensor is this rank's own: agree, so no rank goes on alone. */
    int64_t want[MG_MAX_DIMS];
    mg_spec_local(&spec, NULL, want, NULL);
    int mine = MG_OK;
    char a[128], b[128], s[256], co[64];
    if (!local)
        mine = mg_error(MG_EINVAL, "%s: rank %d passed a NULL local tensor", who, mesh->rank);
    else if (!mg_shape_equal(local->ndim, local->shape, ndim, want)) {
        mine = MG_ESHAPE;
        size_t used = 0;
        used += snprintf(co, sizeof co, "(");
        for (int i = 0; i < mesh->ndim; i++)
            used += snprintf(co + used, sizeof co > used ? sizeof co - used : 0, "%s%d",
                             i ? "," : "", mesh->coord[i]);
        snprintf(co + used, sizeof co > used ? sizeof co - used : 0, ")");
        mg_error(MG_ESHAPE,
                 "%s: rank %d %s passed a local tensor of shape %s but %s gives it %s: pass "
                 "this rank's block (or give every rank the full tensor to mg_distribute)",
                 who, mesh->rank, co, mg_shape_format(a, sizeof a, local->ndim, local->shape),
                 mg_spec_format(s, sizeof s, &spec), mg_shape_format(b, sizeof b, ndim, want));
    }
    int where = -1;
    rc = mg_status_agree_rank(mine, &where);
    if (rc != MG_OK) {
        if (mine == MG_OK && (rc == MG_ESHAPE || rc == MG_EINVAL))
            mg_error(rc,
                     "%s: rank %d passed a local tensor that does not fit %s (see rank %d's "
                     "error)",
                     who, where, mg_spec_format(s, sizeof s, &spec), where);
        return NULL;
    }
    /* a copy on the current device (the caller's tensor may be host memory) */
    mg_tensor *copy = mg_tensor_alloc(NULL, local->ndim, local->shape);
    if (!copy) return NULL;
    if (mg_tensor_copy_any(local, copy) != MG_OK) {
        mg_tensor_free(copy);
        return NULL;
    }
    return wrap(&spec, copy, NULL);
}

/* the getters: NULL (or -1) and a message for a NULL tensor */
#define GIVEN(t, who) (mg_arg_given(t, who, "the tensor") && mg_dtensor_alive(t, who) == MG_OK)
const mg_tensor *mg_local(const mg_dtensor *t) { return GIVEN(t, "mg_local") ? t->local : NULL; }
const mg_mesh *mg_dtensor_mesh(const mg_dtensor *t) {
    return GIVEN(t, "mg_dtensor_mesh") ? t->spec.mesh : NULL;
}
int mg_dtensor_ndim(const mg_dtensor *t) { return GIVEN(t, "mg_dtensor_ndim") ? t->spec.ndim : -1; }
const int64_t *mg_dtensor_shape(const mg_dtensor *t) {
    return GIVEN(t, "mg_dtensor_shape") ? t->spec.shape : NULL;
}
const mg_placement *mg_dtensor_placements(const mg_dtensor *t) {
    return GIVEN(t, "mg_dtensor_placements") ? t->spec.p : NULL;
}

/* "[0:1, 0:40, 0:10]" */
static int block_text(char *buf, size_t len, const mg_spec *s, const int *coord) {
    int64_t shape[MG_MAX_DIMS], off[MG_MAX_DIMS];
    mg_spec_local(s, coord, shape, off);
    size_t used = 0;
    used += snprintf(buf + used, len > used ? len - used : 0, "[");
    for (int d = 0; d < s->ndim; d++)
        used += snprintf(buf + used, len > used ? len - used : 0, "%s%lld:%lld", d ? ", " : "",
                         (long long)off[d], (long long)(off[d] + shape[d]));
    used += snprintf(buf + used, len > used ? len - used : 0, "]");
    return (int)used;
}

int mg_dtensor_describe(const mg_dtensor *t, char *buf, size_t len) {
    if (!t || (!buf && len)) return mg_error(MG_EINVAL, "mg_dtensor_describe: NULL argument");
    if (mg_dtensor_alive(t, "mg_dtensor_describe") != MG_OK) return mg_last_code();
    const mg_spec *s = &t->spec;
    const mg_mesh *m = s->mesh;
    char sh[160], pl[96], ms[64];
    size_t used = 0;
#define PUT(...) used += snprintf(buf + used, len > used ? len - used : 0, __VA_ARGS__)
    PUT("%s on mesh %s %s", mg_shape_format(sh, sizeof sh, s->ndim, s->shape),
        mg_mesh_format(ms, sizeof ms, m), mg_placements_format(pl, sizeof pl, s->p, m->ndim));
    /* every rank's block for small meshes, this rank's otherwise */
    int first = m->size <= 8 ? 0 : m->rank, last = m->size <= 8 ? m->size - 1 : m->rank;
    for (int r = first; r <= last; r++) {
        int coord[MG_MAX_MESH_DIMS], rest = r;
        for (int i = m->ndim - 1; i >= 0; i--) {
            coord[i] = rest % m->shape[i];
            rest /= m->shape[i];
        }
        char block[256], co[64];
        size_t cu = 0;
        co[0] = '\0';
        for (int i = 0; i < m->ndim; i++)
            cu += snprintf(co + cu, sizeof co > cu ? sizeof co - cu : 0, "%s%d", i ? "," : "",
                           coord[i]);
        block_text(block, sizeof block, s, coord);
        PUT("; rank %d (%s) holds %s", r, co, block);
    }
    if (mg_spec_has_partial(s)) PUT(" (Partial: addends of the block)");
#undef PUT
    return (int)used;
}

void mg_dtensor_on_free(void (*fn)(const mg_dtensor *t)) { mg_dist()->dtensor_on_free = fn; }

/* A freed heap tensor's header stays allocated, off the live list and with
 * magic 0, for the next MG_DTENSOR_QUARANTINE frees before it goes back to
 * malloc (dist_state.h's `quarantine`): a pointer the program kept to it
 * cannot meanwhile be taken for a new tensor that malloc put at the same
 * address (an op would take that one; freed again, it would free that one).
 * The oldest goes back as each new one comes. */
static void quarantine_put(mg_dtensor *t) {
    mg_dist_state *d = mg_dist();
    free(d->quarantine[d->quarantine_next]);
    d->quarantine[d->quarantine_next] = t;
    d->quarantine_next = (d->quarantine_next + 1) % MG_DTENSOR_QUARANTINE;
}

/* Frees the heap tensor at index i of the live list, and its gradient. */
static void release(mg_dtensor *t, int i) {
    mg_dist_state *c = mg_dist();
    c->live[i] = c->live[--c->n_live];
    mg_mesh_count_tensor(t->spec.mesh, -1);
    if (c->dtensor_on_free) c->dtensor_on_free(t);
    if (t->grad && t->grad != t) {
        int g = live_index(t->grad);
        if (g >= 0) release(t->grad, g);
    }
    mg_tensor_free(t->local);
    t->magic = 0;
    quarantine_put(t);
}

/* Only a live heap tensor is freed: one not on the list (freed already, or an
 * op's result, which lives in the step arena) is not read at all, and nothing
 * is said (failure paths free what they made, arena or heap, and their error
 * must stay the one reported). A parameter's gradient goes with its
 * parameter, and a tensor an optimizer or a checkpoint still holds stays:
 * either would leave them a dangling pointer. */
void mg_dtensor_free(mg_dtensor *t) {
    if (!t) return;
    int i = live_index(t);
    if (i < 0) return;
    if (t->flags & MG_DTENSOR_GRAD) {
        mg_error(MG_ESTATE, "mg_dtensor_free: nothing freed: this is a parameter's gradient "
                            "(mg_grad), freed with the parameter; free the parameter instead");
        return;
    }
    mg_context *c = mg_ctx();
    if (t->graph_step == c->steps + 1 && c->tape_seq > 0) {
        mg_error(MG_ESTATE, "mg_dtensor_free: nothing freed: an op of this step took this tensor "
                            "and its graph (for mg_backward) still needs it: call mg_step_end "
                            "first");
        return;
    }
    if (t->holders > 0) {
        mg_error(MG_ESTATE, "mg_dtensor_free: nothing freed: %d optimizer(s) or checkpoint(s) "
                            "still hold this tensor: mg_optim_free / mg_ckpt_free them first",
                 t->holders);
        return;
    }
    release(t, i);
}
