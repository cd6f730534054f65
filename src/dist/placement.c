/* placement.c: placements and specs (see placement.h). mg_spec_make validates a
 * placement list against a mesh and a global shape; mg_spec_local says which
 * block of the global tensor a mesh coordinate holds (torch.chunk rule, nested
 * left to right); the rest compares and formats.
 * Exports: mg_spec_make, mg_spec_local, mg_spec_local_numel, mg_chunk,
 * mg_placement_equal, mg_spec_equal, mg_spec_is_replicate, mg_spec_has_partial,
 * mg_placements_format, mg_spec_format. */
#include "dist/placement.h"

#include <stdio.h>
#include <string.h>

#include "dist/mesh.h"
#include "status.h"
#include "tensor.h"

void mg_chunk(int64_t n, int k, int c, int64_t *start, int64_t *size) {
    int64_t chunk = k > 0 ? (n + k - 1) / k : n;
    int64_t s = (int64_t)c * chunk, e = s + chunk;
    if (s > n) s = n;
    if (e > n) e = n;
    if (start) *start = s;
    if (size) *size = e - s;
}

int mg_spec_make(mg_spec *out, const mg_mesh *mesh, const mg_placement *p, int n, int ndim,
                 const int64_t *shape, const char *who) {
    if (!who) who = "spec";
    if (!mesh) return mg_error(MG_EINVAL, "%s: mesh is NULL", who);
    int rc = mg_shape_check(ndim, shape, who);
    if (rc != MG_OK) return rc;
    if (n != mesh->ndim) {
        char ms[64];
        mg_mesh_format(ms, sizeof ms, mesh);
        return mg_error(MG_EPLACEMENT,
                        "%s: placements has %d entr%s but the mesh is %d-D (%s): give one "
                        "placement per mesh dimension",
                        who, n, n == 1 ? "y" : "ies", mesh->ndim, ms);
    }
    if (n > 0 && !p) return mg_error(MG_EINVAL, "%s: placements is NULL", who);
    mg_spec s;
    memset(&s, 0, sizeof s);
    s.mesh = mesh;
    s.ndim = ndim;
    for (int i = 0; i < ndim; i++) s.shape[i] = shape[i];
    for (int i = 0; i < n; i++) {
        mg_placement q = p[i];
        switch (q.kind) {
        case MG_PLACE_REPLICATE:
        case MG_PLACE_PARTIAL: q.dim = 0; break;
        case MG_PLACE_SHARD: {
            if (q.dim < -ndim || q.dim >= ndim) {
                char ss[128];
                mg_shape_format(ss, sizeof ss, ndim, shape);
                if (ndim == 0)
                    return mg_error(MG_EPLACEMENT,
                                    "%s: placement %d is S(%d) but the tensor is 0-d (shape %s): "
                                    "a scalar cannot be sharded, use MG_REPLICATE",
                                    who, i, q.dim, ss);
                return mg_error(MG_EPLACEMENT,
                                "%s: placement %d is S(%d) but the tensor has %d dim%s (shape %s): "
                                "shard a dim in %d..%d",
                                who, i, q.dim, ndim, ndim == 1 ? "" : "s", ss, -ndim, ndim - 1);
            }
            if (q.dim < 0) q.dim += ndim;
            break;
        }
        default:
            return mg_error(MG_EPLACEMENT,
                            "%s: placement %d has unknown kind %d: use MG_SHARD(d), MG_REPLICATE "
                            "or MG_PARTIAL_SUM",
                            who, i, (int)q.kind);
        }
        s.p[i] = q;
    }
    *out = s;
    return MG_OK;
}

void mg_spec_local(const mg_spec *s, const int *coord, int64_t *local_shape, int64_t *offset) {
    const mg_mesh *m = s->mesh;
    if (!coord) coord = m->coord;
    for (int d = 0; d < s->ndim; d++) {
        int64_t start = 0, len = s->shape[d];
        for (int i = 0; i < m->ndim; i++) {
            if (s->p[i].kind != MG_PLACE_SHARD || s->p[i].dim != d) continue;
            int64_t st, sz;
            mg_chunk(len, m->shape[i], coord[i], &st, &sz);
            start += st;
            len = sz;
        }
        if (local_shape) local_shape[d] = len;
        if (offset) offset[d] = start;
    }
}

int64_t mg_spec_local_numel(const mg_spec *s, const int *coord) {
    int64_t shape[MG_MAX_DIMS];
    mg_spec_local(s, coord, shape, NULL);
    return mg_shape_numel(s->ndim, shape);
}

bool mg_placement_equal(mg_placement a, mg_placement b) {
    if (a.kind != b.kind) return false;
    return a.kind != MG_PLACE_SHARD || a.dim == b.dim;
}

bool mg_spec_equal(const mg_spec *a, const mg_spec *b) {
    if (a->mesh != b->mesh || !mg_shape_equal(a->ndim, a->shape, b->ndim, b->shape)) return false;
    for (int i = 0; i < a->mesh->ndim; i++)
        if (!mg_placement_equal(a->p[i], b->p[i])) return false;
    return true;
}

bool mg_spec_is_replicate(const mg_spec *s) {
    for (int i = 0; i < s->mesh->ndim; i++)
        if (s->p[i].kind != MG_PLACE_REPLICATE) return false;
    return true;
}

bool mg_spec_has_partial(const mg_spec *s) {
    for (int i = 0; i < s->mesh->ndim; i++)
        if (s->p[i].kind == MG_PLACE_PARTIAL) return true;
    return false;
}

char *mg_placements_format(char *buf, size_t len, const mg_placement *p, int n) {
    size_t used = 0;
    used += snprintf(buf + used, len > used ? len - used : 0, "[");
    for (int i = 0; i < n; i++) {
        const char *sep = i ? ", " : "";
        switch (p[i].kind) {
        case MG_PLACE_REPLICATE:
            used += snprintf(buf + used, len > used ? len - used : 0, "%sR", sep);
            break;
        case MG_PLACE_PARTIAL:
            used += snprintf(buf + used, len > used ? len - used : 0, "%sP", sep);
            break;
        case MG_PLACE_SHARD:
            used += snprintf(buf + used, len > used ? len - used : 0, "%sS(%d)", sep, p[i].dim);
            break;
        default:
            used += snprintf(buf + used, len > used ? len - used : 0, "%s?%d", sep, (int)p[i].kind);
        }
    }
    snprintf(buf + used, len > used ? len - used : 0, "]");
    return buf;
}

char *mg_spec_format(char *buf, size_t len, const mg_spec *s) {
    char sh[160], pl[96], ms[64];
    mg_shape_format(sh, sizeof sh, s->ndim, s->shape);
    mg_placements_format(pl, sizeof pl, s->p, s->mesh->ndim);
    mg_mesh_format(ms, sizeof ms, s->mesh);
    snprintf(buf, len, "%s %s on mesh %s", sh, pl, ms);
    return buf;
}
