/* redistribute.c: moves a local shard from one spec to another (see
 * redistribute.h). Two parts:
 *
 * The planner turns (src, dst) placements into steps, each changing ONE mesh
 * dim's placement with one primitive:
 *   S(d)->R gather        P->R all-reduce        P->S(d) reduce-scatter
 *   S(d)->S(e) all-to-all R->S(d) local slice    R->P keep on coordinate 0
 * A primitive on mesh dim i for tensor dim d is exact only when i is the
 * innermost (rightmost) mesh dim sharding d at that moment. The plan:
 *   - mesh dims of size 1 change freely (every placement holds the same data);
 *   - the change set is every dim whose placement differs, plus every S(d) kept
 *     to the right of a changing dim that shards d (its piece changes meaning);
 *   - right to left over the change set: a dim whose tensor dims no changing dim
 *     to its left touches goes straight to its target (one collective: this is
 *     where P->S becomes a reduce-scatter and S->S an all-to-all); any other is
 *     brought to R;
 *   - left to right: dims left at R take their target (slice, or R->P).
 * Dims to the right of i that shard d are always in the change set and are R by
 * the time i moves, so every primitive runs on the innermost sharding dim.
 *
 * The executor runs the steps on local data. Collectives work on blocks padded
 * to the chunk size (uneven shards) and unpad after; blocks whose sharded dim is
 * the outermost one of size > 1 are contiguous and go to and from the
 * collective in place. Packing uses the backend (copy_block, copy, fill);
 * staging buffers are two process-wide scratch buffers per device kept between
 * calls (mg_finalize frees them: world.h). Device shards go through the same
 * code: the backend of the shard does the packing and the mesh's NCCL comms
 * the collectives.
 * mg_redistribute_cost walks the same plan on coordinate 0 (the largest block)
 * with mg_coll_bytes, so it needs only global metadata.
 *
 * mg_redistribute_moves lists that plan's collectives (mg_redistribute_cost
 * sums their bytes).
 * mg_full_tensor (public) and mg_dtensor_item bring a tensor whole with the
 * same moves, to every placement Replicate.
 * Exports: mg_redistribute_local, mg_redistribute_cost, mg_redistribute_moves,
 * mg_redistribute_is_noop, mg_redistribute_release, mg_dtensor_item and the
 * public mg_full_tensor. */
#include "dist/redistribute.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/dist_state.h"
#include "dist/mesh.h"
#include "dist/world.h"
#include "status.h"

typedef struct {
    int dim; /* mesh dim */
    mg_placement from, to;
} step;

#define MAX_STEPS MG_REDISTRIBUTE_MAX_MOVES

static bool is_shard_of(mg_placement p, int d) { return p.kind == MG_PLACE_SHARD && p.dim == d; }

/* Appends cur -> to as primitives (S->P goes through R). */
static int emit(step *steps, int n, int dim, mg_placement cur, mg_placement to) {
    if (mg_placement_equal(cur, to)) return n;
    if (cur.kind == MG_PLACE_SHARD && to.kind == MG_PLACE_PARTIAL) {
        steps[n++] = (step){dim, cur, MG_REPLICATE};
        cur = MG_REPLICATE;
    }
    steps[n++] = (step){dim, cur, to};
    return n;
}

/* Does changing mesh dim j (src[j] -> dst[j]) touch tensor dim d? */
static bool touches(const mg_placement *src, const mg_placement *dst, int j, int d) {
    return is_shard_of(src[j], d) || is_shard_of(dst[j], d);
}

static int plan(const mg_spec *src, const mg_spec *dst, step *steps) {
    const mg_mesh *m = src->mesh;
    int nm = m->ndim, n = 0;
    mg_placement cur[MG_MAX_MESH_DIMS];
    bool change[MG_MAX_MESH_DIMS] = {false}, done[MG_MAX_MESH_DIMS] = {false};
    for (int i = 0; i < nm; i++) cur[i] = m->shape[i] == 1 ? dst->p[i] : src->p[i];
    for (int i = 0; i < nm; i++) {
        if (m->shape[i] == 1) continue;
        change[i] = !mg_placement_equal(cur[i], dst->p[i]);
        if (!change[i] && cur[i].kind == MG_PLACE_SHARD)
            for (int j = 0; j < i; j++)
                if (change[j] && touches(src->p, dst->p, j, cur[i].dim)) change[i] = true;
    }
    for (int i = nm - 1; i >= 0; i--) {
        if (!change[i]) continue;
        bool direct = true;
        for (int j = 0; j < i && direct; j++) {
            if (!change[j]) continue;
            if (cur[i].kind == MG_PLACE_SHARD && touches(src->p, dst->p, j, cur[i].dim))
                direct = false;
            if (dst->p[i].kind == MG_PLACE_SHARD && touches(src->p, dst->p, j, dst->p[i].dim))
                direct = false;
        }
        if (direct) {
            n = emit(steps, n, i, cur[i], dst->p[i]);
            cur[i] = dst->p[i];
            done[i] = true;
        } else {
            n = emit(steps, n, i, cur[i], MG_REPLICATE);
            cur[i] = MG_REPLICATE;
        }
    }
    for (int i = 0; i < nm; i++)
        if (change[i] && !done[i]) n = emit(steps, n, i, cur[i], dst->p[i]);
    return n;
}

/* ---- executor helpers ------------------------------------------------------ */

static int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; }

static int64_t prod(const int64_t *shape, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= shape[i];
    return p;
}

/* A tensor of `shape` on be's device whose buffer holds at least `capacity` floats. */
static mg_tensor *buf_alloc(const mg_backend *be, mg_arena *arena, int ndim, const int64_t *shape,
                            int64_t capacity) {
    int64_t numel = mg_shape_numel(ndim, shape);
    int64_t cap = capacity > numel ? capacity : numel;
    mg_tensor *t = mg_tensor_alloc_on(arena, be->iface->device, 1, &cap);
    if (!t) return NULL;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    return t;
}

/* A header over `data` (be's memory, not owned), for copy_block on a piece of a buffer. */
static mg_tensor view_of(const mg_backend *be, float *data, int ndim, const int64_t *shape) {
    mg_tensor v;
    memset(&v, 0, sizeof v);
    v.ndim = ndim;
    for (int i = 0; i < ndim; i++) v.shape[i] = shape[i];
    v.numel = mg_shape_numel(ndim, shape);
    v.data = data;
    v.device = be->iface->device;
    return v;
}

static void fill_zero(mg_backend *be, float *data, int64_t n) {
    if (n <= 0) return;
    mg_tensor v = view_of(be, data, 1, &n);
    be->iface->fill(be->context, &v, 0.0f);
}

static void copy_flat(mg_backend *be, const float *src, float *dst, int64_t n) {
    if (n <= 0) return;
    mg_tensor s = view_of(be, (float *)src, 1, &n), d = view_of(be, dst, 1, &n);
    be->iface->copy(be->context, &s, &d);
}

/* dst[dst_off + box] = src[src_off + box]; offsets zero except on dim d. */
static void copy_box(mg_backend *be, const mg_tensor *src, int d_src, int64_t src_start,
                     mg_tensor *dst, int d_dst, int64_t dst_start, const int64_t *extent, int nd) {
    int64_t so[MG_MAX_DIMS] = {0}, dof[MG_MAX_DIMS] = {0};
    if (mg_shape_numel(nd, extent) == 0) return;
    if (d_src >= 0) so[d_src] = src_start;
    if (d_dst >= 0) dof[d_dst] = dst_start;
    be->iface->copy_block(be->context, src, so, dst, dof, extent);
}

typedef struct {
    const mg_spec *cs, *ns; /* current and next spec */
    const mg_tensor *in;
    mg_tensor **out;
    mg_arena *arena;
    mg_backend *be;
    mg_comm *comm;
    int k, me; /* size of the mesh dim, this rank's coordinate on it */
    int nd;
} exec;

/* Staging buffers (padded pieces, gathered pieces): two per device kept
 * between calls in the context (`staging`, not thread-safe), so that a step's
 * moves neither grow the step arena with throw-away data nor touch fresh pages
 * every time (first touch costs more than the copy on some machines). Moves
 * without an arena (one-off calls such as mg_full_tensor) give back buffers
 * above SCRATCH_KEEP bytes. They come from the device's backend. */
#define SCRATCH_KEEP ((size_t)64 << 20)

static mg_staging *staging(int dev, int slot) { return &mg_dist()->staging[dev][slot]; }

static void scratch_release(int dev, int slot) {
    mg_staging *s = staging(dev, slot);
    mg_backend *be = dev == MG_DEVICE_CPU    ? mg_backend_cpu()
                     : dev == MG_DEVICE_META ? mg_backend_meta()
                                             : mg_backend_cuda();
    if (s->p && be) be->iface->free(be->context, s->p);
    s->p = NULL;
    s->bytes = 0;
}

void mg_redistribute_release(void) {
    for (int d = 0; d < MG_DEVICE_KINDS; d++)
        for (int i = 0; i < 2; i++) scratch_release(d, i);
}

static float *tmp_alloc(mg_backend *be, int slot, int64_t n) {
    int dev = be->iface->device;
    mg_staging *s = staging(dev, slot);
    size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) / 64 * 64;
    if (s->bytes < bytes) {
        if (mg_world_on_finalize(mg_redistribute_release) != MG_OK) return NULL;
        scratch_release(dev, slot);
        s->p = be->iface->alloc(be->context, bytes);
        s->bytes = s->p ? bytes : 0;
        if (!s->p) {
            mg_error(MG_ENOMEM, "redistribute: out of memory for a %lld-float staging buffer on %s",
                     (long long)n, be->iface->name);
            return NULL;
        }
    }
    return s->p;
}

static void scratch_trim(void) {
    for (int d = 0; d < MG_DEVICE_KINDS; d++)
        for (int i = 0; i < 2; i++)
            if (staging(d, i)->bytes > SCRATCH_KEEP) scratch_release(d, i);
}

/* Between the k padded slots of buf (rank order, `vol` floats each, shape
 * `padded`) and the pieces of t: piece r is chunk r of length n along `dim`, the
 * other dims as in `extent`. pack: slot r takes piece r of t; else (unpack)
 * piece r of t takes slot r, unpadded (t is then the step's result, ours to write). */
static void move_pieces(exec *x, float *buf, int64_t vol, const int64_t *padded,
                        const mg_tensor *t, int dim, int64_t n, const int64_t *extent, int pack) {
    for (int r = 0; r < x->k; r++) {
        int64_t start, size, ext[MG_MAX_DIMS];
        mg_chunk(n, x->k, r, &start, &size);
        memcpy(ext, extent, sizeof ext);
        ext[dim] = size;
        mg_tensor slot = view_of(x->be, buf + r * vol, x->nd, padded);
        if (pack)
            copy_box(x->be, t, dim, start, &slot, -1, 0, ext, x->nd);
        else
            copy_box(x->be, &slot, -1, 0, (mg_tensor *)t, dim, start, ext, x->nd);
    }
}

/* The blocks of a gather or reduce-scatter along tensor dim d over the k ranks
 * of x->comm: B this rank's block before the step, N after it; P the extent of
 * dim d that is cut in k chunks of c (N's for a gather, B's for a
 * reduce-scatter), Bp the block B with dim d padded to c, vol its elements. */
typedef struct {
    int64_t B[MG_MAX_DIMS], N[MG_MAX_DIMS], Bp[MG_MAX_DIMS];
    int64_t P, c, vol;
} chunks;

/* Fills ch and allocates the step's result *x->out (N, with room for the k
 * padded pieces of a gather, or the one of a reduce-scatter). */
static int chunks_begin(exec *x, int d, int gather, chunks *ch) {
    mg_spec_local(x->cs, NULL, ch->B, NULL);
    mg_spec_local(x->ns, NULL, ch->N, NULL);
    ch->P = gather ? ch->N[d] : ch->B[d];
    ch->c = ceil_div(ch->P, x->k);
    memcpy(ch->Bp, ch->B, sizeof ch->B);
    ch->Bp[d] = ch->c;
    ch->vol = mg_shape_numel(x->nd, ch->Bp);
    mg_tensor *out = buf_alloc(x->be, x->arena, x->nd, ch->N, gather ? x->k * ch->vol : ch->vol);
    if (!out) return mg_last_code();
    *x->out = out;
    return MG_OK;
}

/* S(d) -> R: every rank's piece (padded to the chunk) gathered, then unpadded. */
static int step_gather(exec *x, int d) {
    chunks ch;
    int rc = chunks_begin(x, d, 1, &ch);
    if (rc != MG_OK || ch.vol == 0) return rc;
    const int64_t *B = ch.B, *Bp = ch.Bp;
    int64_t P = ch.P, c = ch.c, vol = ch.vol;
    mg_tensor *out = *x->out;
    const float *send = x->in->data;
    if (B[d] != c) { /* short piece: pad it */
        float *t = tmp_alloc(x->be, 0, vol);
        if (!t) return mg_last_code();
        fill_zero(x->be, t, vol);
        mg_tensor tv = view_of(x->be, t, x->nd, Bp);
        copy_box(x->be, x->in, -1, 0, &tv, -1, 0, B, x->nd);
        send = t;
    }
    if (prod(B, 0, d) == 1) /* pieces are consecutive slabs of the result */
        return mg_comm_all_gather(x->comm, send, vol, out->data);
    float *recv = tmp_alloc(x->be, 1, x->k * vol);
    if (!recv) return mg_last_code();
    rc = mg_comm_all_gather(x->comm, send, vol, recv);
    if (rc != MG_OK) return rc;
    move_pieces(x, recv, vol, Bp, out, d, P, B, 0);
    return MG_OK;
}

/* P -> R: sum of the addends, in place on a copy. */
static int step_all_reduce(exec *x) {
    mg_tensor *out = buf_alloc(x->be, x->arena, x->in->ndim, x->in->shape, 0);
    if (!out) return mg_last_code();
    *x->out = out;
    if (out->numel == 0) return MG_OK;
    copy_flat(x->be, x->in->data, out->data, out->numel);
    return mg_comm_all_reduce(x->comm, out->data, out->numel, MG_REDUCE_SUM);
}

/* P -> S(d): the addends padded to k chunks, summed piece by piece. */
static int step_reduce_scatter(exec *x, int d) {
    chunks ch;
    int rc = chunks_begin(x, d, 0, &ch);
    if (rc != MG_OK || ch.vol == 0) return rc;
    const int64_t *B = ch.B, *N = ch.N, *Bp = ch.Bp;
    int64_t P = ch.P, c = ch.c, vol = ch.vol, whole = mg_shape_numel(x->nd, B);
    mg_tensor *out = *x->out;
    bool outer = prod(B, 0, d) == 1;
    const float *send = x->in->data;
    if (!(outer && P == x->k * c)) {
        float *t = tmp_alloc(x->be, 0, x->k * vol);
        if (!t) return mg_last_code();
        if (outer) { /* the pieces are in order already: only the tail is padding */
            copy_flat(x->be, x->in->data, t, whole);
            fill_zero(x->be, t + whole, x->k * vol - whole);
        } else {
            if (P != x->k * c) fill_zero(x->be, t, x->k * vol);
            move_pieces(x, t, vol, Bp, x->in, d, P, B, 1);
        }
        send = t;
    }
    if (outer || N[d] == c) return mg_comm_reduce_scatter(x->comm, send, out->data, vol);
    float *recv = tmp_alloc(x->be, 1, vol);
    if (!recv) return mg_last_code();
    rc = mg_comm_reduce_scatter(x->comm, send, recv, vol);
    if (rc != MG_OK) return rc;
    mg_tensor piece = view_of(x->be, recv, x->nd, Bp);
    copy_box(x->be, &piece, -1, 0, out, -1, 0, N, x->nd);
    return MG_OK;
}

/* S(d1) -> S(d2): piece r of my block along d2 goes to coordinate r; what comes
 * back from r is its d1 piece of my d2 piece. */
static int step_all_to_all(exec *x, int d1, int d2) {
    int64_t B[MG_MAX_DIMS], N[MG_MAX_DIMS], Sp[MG_MAX_DIMS];
    mg_spec_local(x->cs, NULL, B, NULL);
    mg_spec_local(x->ns, NULL, N, NULL);
    int64_t P1 = N[d1], P2 = B[d2], c1 = ceil_div(P1, x->k), c2 = ceil_div(P2, x->k);
    memcpy(Sp, B, sizeof B);
    Sp[d1] = c1;
    Sp[d2] = c2;
    int64_t vol = mg_shape_numel(x->nd, Sp);
    mg_tensor *out = buf_alloc(x->be, x->arena, x->nd, N, x->k * vol);
    if (!out) return mg_last_code();
    *x->out = out;
    if (vol == 0) return MG_OK;
    const float *send = x->in->data;
    if (!(prod(B, 0, d2) == 1 && P2 == x->k * c2 && B[d1] == c1)) {
        float *t = tmp_alloc(x->be, 0, x->k * vol);
        if (!t) return mg_last_code();
        if (P2 != x->k * c2 || B[d1] != c1) fill_zero(x->be, t, x->k * vol);
        move_pieces(x, t, vol, Sp, x->in, d2, P2, B, 1);
        send = t;
    }
    if (prod(N, 0, d1) == 1 && N[d2] == c2) /* received pieces are consecutive slabs */
        return mg_comm_all_to_all(x->comm, send, vol, out->data);
    float *recv = tmp_alloc(x->be, 1, x->k * vol);
    if (!recv) return mg_last_code();
    int rc = mg_comm_all_to_all(x->comm, send, vol, recv);
    if (rc != MG_OK) return rc;
    move_pieces(x, recv, vol, Sp, out, d1, P1, N, 0);
    return MG_OK;
}

/* R -> S(d): this coordinate's chunk, no communication. */
static int step_slice(exec *x, int d) {
    int64_t N[MG_MAX_DIMS], start;
    mg_spec_local(x->ns, NULL, N, NULL);
    mg_chunk(x->in->shape[d], x->k, x->me, &start, NULL);
    mg_tensor *out = buf_alloc(x->be, x->arena, x->nd, N, 0);
    if (!out) return mg_last_code();
    *x->out = out;
    copy_box(x->be, x->in, d, start, out, -1, 0, N, x->nd);
    return MG_OK;
}

/* R -> P: coordinate 0 keeps the value, the others hold zeros. */
static int step_partial(exec *x) {
    mg_tensor *out = buf_alloc(x->be, x->arena, x->in->ndim, x->in->shape, 0);
    if (!out) return mg_last_code();
    *x->out = out;
    if (x->me == 0) copy_flat(x->be, x->in->data, out->data, out->numel);
    else fill_zero(x->be, out->data, out->numel);
    return MG_OK;
}

static int run_step(exec *x, const step *s) {
    mg_place_kind a = s->from.kind, b = s->to.kind;
    if (a == MG_PLACE_SHARD && b == MG_PLACE_REPLICATE) return step_gather(x, s->from.dim);
    if (a == MG_PLACE_PARTIAL && b == MG_PLACE_REPLICATE) return step_all_reduce(x);
    if (a == MG_PLACE_PARTIAL && b == MG_PLACE_SHARD) return step_reduce_scatter(x, s->to.dim);
    if (a == MG_PLACE_SHARD && b == MG_PLACE_SHARD)
        return step_all_to_all(x, s->from.dim, s->to.dim);
    if (a == MG_PLACE_REPLICATE && b == MG_PLACE_SHARD) return step_slice(x, s->to.dim);
    if (a == MG_PLACE_REPLICATE && b == MG_PLACE_PARTIAL) return step_partial(x);
    return mg_error(MG_EPLACEMENT, "redistribute: no primitive for placement kind %d -> %d", (int)a,
                    (int)b);
}

static int check_pair(const mg_spec *src, const mg_spec *dst) {
    if (src->mesh != dst->mesh)
        return mg_error(MG_EMESH, "redistribute: source and target specs are on different meshes");
    if (!mg_shape_equal(src->ndim, src->shape, dst->ndim, dst->shape)) {
        char a[128], b[128];
        return mg_error(MG_ESHAPE, "redistribute: source shape %s and target shape %s differ",
                        mg_shape_format(a, sizeof a, src->ndim, src->shape),
                        mg_shape_format(b, sizeof b, dst->ndim, dst->shape));
    }
    return MG_OK;
}

bool mg_redistribute_is_noop(const mg_spec *src, const mg_spec *dst) {
    step steps[MAX_STEPS];
    return src->mesh == dst->mesh && mg_shape_equal(src->ndim, src->shape, dst->ndim, dst->shape) &&
           plan(src, dst, steps) == 0;
}

int mg_redistribute_local(const mg_spec *src, const mg_tensor *src_local, const mg_spec *dst,
                          mg_tensor **out, mg_arena *arena) {
    if (!src || !src_local || !dst || !out)
        return mg_error(MG_EINVAL, "redistribute: NULL argument");
    *out = NULL;
    int rc = check_pair(src, dst);
    if (rc != MG_OK) return rc;
    int64_t want[MG_MAX_DIMS];
    mg_spec_local(src, NULL, want, NULL);
    if (!mg_shape_equal(src_local->ndim, src_local->shape, src->ndim, want)) {
        char a[128], b[128], s[256];
        return mg_error(MG_ESHAPE, "redistribute: local tensor %s is not the block %s of %s",
                        mg_shape_format(a, sizeof a, src_local->ndim, src_local->shape),
                        mg_shape_format(b, sizeof b, src->ndim, want),
                        mg_spec_format(s, sizeof s, src));
    }
    mg_backend *be = mg_backend_of(src_local);
    if (!be)
        return mg_error(MG_EDEVICE, "redistribute: no backend for device %d: call "
                                    "mg_set_device(MG_DEVICE_CUDA) first", src_local->device);
    step steps[MAX_STEPS];
    int n = plan(src, dst, steps);
    /* device buffers need a device comm (NCCL) on every mesh dim that communicates */
    for (int i = 0; i < n && src_local->device != MG_DEVICE_CPU; i++) {
        const mg_comm *c = src->mesh->dim_comm[steps[i].dim];
        if (c->size > 1 && strcmp(c->iface->name, "mpi") == 0)
            return mg_error(MG_EDEVICE, "redistribute: device tensors on a mesh with MPI "
                                        "communicators: make the mesh after "
                                        "mg_set_device(MG_DEVICE_CUDA), so it gets NCCL ones");
    }
    if (n == 0) {
        mg_tensor *c = buf_alloc(be, arena, src_local->ndim, src_local->shape, 0);
        if (!c) return mg_last_code();
        copy_flat(be, src_local->data, c->data, c->numel);
        *out = c;
        return MG_OK;
    }
    mg_spec cur = *src, next;
    mg_tensor *t = (mg_tensor *)src_local;
    for (int i = 0; i < n; i++) {
        next = cur;
        next.p[steps[i].dim] = steps[i].to;
        mg_tensor *o = NULL;
        exec x = {.cs = &cur,
                  .ns = &next,
                  .in = t,
                  .out = &o,
                  .arena = arena,
                  .be = be,
                  .comm = src->mesh->dim_comm[steps[i].dim],
                  .k = src->mesh->shape[steps[i].dim],
                  .me = src->mesh->coord[steps[i].dim],
                  .nd = src->ndim};
        rc = run_step(&x, &steps[i]);
        if (t != src_local) mg_tensor_free(t);
        if (rc != MG_OK) {
            mg_tensor_free(o);
            if (!arena) scratch_trim();
            return rc;
        }
        t = o;
        cur = next;
    }
    if (!arena) scratch_trim();
    *out = t;
    return MG_OK;
}

/* The floats of the two staging buffers a step uses (0: none), by the
 * executor's own tests (step_gather, step_reduce_scatter, step_all_to_all). */
static void staging_needs(const mg_spec *cs, const mg_spec *ns, const step *s, int k,
                          int64_t stage[2]) {
    int64_t B[MG_MAX_DIMS], N[MG_MAX_DIMS], Bp[MG_MAX_DIMS];
    mg_spec_local(cs, NULL, B, NULL);
    mg_spec_local(ns, NULL, N, NULL);
    memcpy(Bp, B, sizeof B);
    mg_place_kind a = s->from.kind, b = s->to.kind;
    int nd = cs->ndim;
    if (a == MG_PLACE_SHARD && b == MG_PLACE_REPLICATE) {
        int d = s->from.dim;
        int64_t c = ceil_div(N[d], k);
        Bp[d] = c;
        int64_t vol = mg_shape_numel(nd, Bp);
        if (B[d] != c) stage[0] = vol;
        if (prod(B, 0, d) != 1) stage[1] = k * vol;
    } else if (a == MG_PLACE_PARTIAL && b == MG_PLACE_SHARD) {
        int d = s->to.dim;
        int64_t P = B[d], c = ceil_div(P, k);
        Bp[d] = c;
        int64_t vol = mg_shape_numel(nd, Bp);
        bool outer = prod(B, 0, d) == 1;
        if (!(outer && P == k * c)) stage[0] = k * vol;
        if (!(outer || N[d] == c)) stage[1] = vol;
    } else if (a == MG_PLACE_SHARD && b == MG_PLACE_SHARD) {
        int d1 = s->from.dim, d2 = s->to.dim;
        int64_t c1 = ceil_div(N[d1], k), P2 = B[d2], c2 = ceil_div(P2, k);
        Bp[d1] = c1;
        Bp[d2] = c2;
        int64_t vol = mg_shape_numel(nd, Bp);
        if (!(prod(B, 0, d2) == 1 && P2 == k * c2 && B[d1] == c1)) stage[0] = k * vol;
        if (!(prod(N, 0, d1) == 1 && N[d2] == c2)) stage[1] = k * vol;
    }
}

int mg_redistribute_moves(const mg_spec *src, const mg_spec *dst, mg_redistribute_move *moves,
                          int max) {
    if (check_pair(src, dst) != MG_OK) return -1;
    const mg_mesh *m = src->mesh;
    int zero[MG_MAX_MESH_DIMS] = {0};
    step steps[MAX_STEPS];
    int n = plan(src, dst, steps), count = 0;
    mg_spec cur = *src, next;
    for (int i = 0; i < n; i++) {
        const step *s = &steps[i];
        int k = m->shape[s->dim];
        next = cur;
        next.p[s->dim] = s->to;
        int64_t B[MG_MAX_DIMS], N[MG_MAX_DIMS];
        mg_spec_local(&cur, zero, B, NULL);
        mg_spec_local(&next, zero, N, NULL);
        mg_place_kind a = s->from.kind, b = s->to.kind;
        mg_coll_kind kind = MG_COLL_COUNT; /* a slice, or R -> P: no collective */
        int64_t out = mg_shape_numel(next.ndim, N), whole = mg_shape_numel(cur.ndim, B);
        int64_t stage[2] = {0, 0};
        staging_needs(&cur, &next, s, k, stage);
        if (a == MG_PLACE_SHARD && b == MG_PLACE_REPLICATE) {
            B[s->from.dim] = ceil_div(N[s->from.dim], k);
            kind = MG_COLL_ALL_GATHER;
            out = k * mg_shape_numel(cur.ndim, B);
        } else if (a == MG_PLACE_PARTIAL && b == MG_PLACE_REPLICATE) {
            kind = MG_COLL_ALL_REDUCE;
            out = whole;
        } else if (a == MG_PLACE_PARTIAL && b == MG_PLACE_SHARD) {
            B[s->to.dim] = ceil_div(B[s->to.dim], k);
            kind = MG_COLL_REDUCE_SCATTER;
            out = mg_shape_numel(cur.ndim, B);
        } else if (a == MG_PLACE_SHARD && b == MG_PLACE_SHARD) {
            B[s->from.dim] = ceil_div(N[s->from.dim], k);
            B[s->to.dim] = ceil_div(B[s->to.dim], k);
            kind = MG_COLL_ALL_TO_ALL;
            out = k * mg_shape_numel(cur.ndim, B);
        } else if (b == MG_PLACE_PARTIAL) {
            out = whole;
        }
        if (count < max)
            moves[count++] = (mg_redistribute_move){kind, s->dim, k, mg_shape_numel(cur.ndim, B), out,
                                                    {stage[0], stage[1]}};
        cur = next;
    }
    return count;
}

double mg_redistribute_cost(const mg_spec *src, const mg_spec *dst) {
    mg_redistribute_move moves[MG_REDISTRIBUTE_MAX_MOVES];
    int n = mg_redistribute_moves(src, dst, moves, MG_REDISTRIBUTE_MAX_MOVES);
    if (n < 0) return -1;
    double bytes = 0;
    for (int i = 0; i < n; i++)
        if (moves[i].kind != MG_COLL_COUNT)
            bytes += mg_coll_bytes(moves[i].kind, moves[i].size, 0, moves[i].n, 0);
    return bytes;
}

/* ---- whole tensors ------------------------------------------------------------ */

mg_tensor *mg_full_tensor(const mg_dtensor *t) {
    if (!t) return mg_error_null(MG_EINVAL, "mg_full_tensor: NULL tensor");
    if (mg_dtensor_alive(t, "mg_full_tensor") != MG_OK) return NULL; /* also after mg_finalize */
    mg_spec all = t->spec;
    for (int i = 0; i < all.mesh->ndim; i++) all.p[i] = MG_REPLICATE;
    mg_tensor *out = NULL;
    if (mg_redistribute_local(&t->spec, t->local, &all, &out, NULL) != MG_OK) return NULL;
    /* the caller gets host memory, wherever the shards live */
    return mg_tensor_to_device(NULL, out, MG_DEVICE_CPU);
}

int mg_dtensor_item(const mg_dtensor *t, double *out) {
    if (mg_spec_is_replicate(&t->spec) && t->local->numel == 1) { /* read in place */
        float v;
        mg_backend *be = mg_backend_of(t->local);
        be->iface->to_host(be->context, &v, t->local->data, 1);
        *out = v;
        return MG_OK;
    }
    mg_tensor *full = mg_full_tensor(t);
    if (!full) return mg_last_code() ? mg_last_code() : MG_ENOMEM;
    *out = full->data[0];
    mg_tensor_free(full);
    return MG_OK;
}
