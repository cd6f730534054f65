/* api.c: the argument checks shared by the training API (see api.h). */
#include "train/api.h"

#include <string.h>

#include "dist/comm.h"
#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "io/h5util.h"
#include "status.h"

uint64_t mg_api_hash(uint64_t h, const void *p, size_t n) { return mg_hash_bytes(h, p, n); }

uint64_t mg_api_hash_tensor(uint64_t h, const char *name, const mg_dtensor *t) {
    const mg_spec *s = &t->spec;
    h = mg_api_hash(h, name, strlen(name) + 1);
    h = mg_api_hash(h, &s->ndim, sizeof s->ndim);
    h = mg_api_hash(h, s->shape, (size_t)s->ndim * sizeof *s->shape);
    return mg_api_hash(h, s->p, (size_t)s->mesh->ndim * sizeof *s->p);
}

int mg_api_agree(int rc, uint64_t hash, const char *who, const char *what) {
    mg_comm *world = mg_comm_world();
    if (!world) return mg_last_code() ? mg_last_code() : MG_ESTATE;
    /* max of the digest and of its negation: equal digests when max == -(-min) */
    int64_t v[3] = {rc != MG_OK, (int64_t)(hash >> 1), -(int64_t)(hash >> 1)};
    int st = mg_comm_all_reduce_i64(world, v, 3, MG_CONTROL_MAX);
    if (st != MG_OK) return st;
    if (v[0]) return mg_io_agree(world, rc); /* the failing rank's message, everywhere */
    if (v[1] != -v[2])
        return mg_error(MG_EINVAL, "%s: the ranks disagree on %s; every rank must make this "
                        "call with the same arguments", who, what);
    return MG_OK;
}

int mg_api_name_check(const char *who, const char *kind, const char *name) {
    if (!name) return mg_error(MG_EINVAL, "%s: a %s is NULL", who, kind);
    size_t n = strlen(name);
    int ok = n >= 1 && n <= 63 && name[0] != '.';
    for (size_t i = 0; ok && i < n; i++) {
        char c = name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '.' || c == '-';
    }
    if (!ok)
        return mg_error(MG_EINVAL, "%s: %s \"%.80s\" is not valid: use 1 to 63 letters, digits, "
                        "'_', '.' or '-', not starting with '.' (e.g. \"h.0.attn.weight\")",
                        who, kind, name);
    return MG_OK;
}

int mg_api_tensor_check(const char *who, const char *name, const mg_dtensor *t, int partial_ok) {
    if (!t) return mg_error(MG_EINVAL, "%s: the tensor of \"%s\" is NULL", who, name);
    /* looked up before t is read: a freed tensor is not read at all */
    if (!mg_dtensor_kept(t))
        return mg_error(MG_EINVAL, "%s: \"%s\" is the result of an op, freed at mg_step_end(), "
                        "or a tensor freed already (mg_dtensor_free): give a tensor made by "
                        "mg_distribute or mg_from_local that is not freed", who, name);
    if (!partial_ok && mg_spec_has_partial(&t->spec))
        return mg_error(MG_EPLACEMENT, "%s: \"%s\" has a Partial placement; give it Shard or "
                        "Replicate placements (mg_redistribute)", who, name);
    return MG_OK;
}
