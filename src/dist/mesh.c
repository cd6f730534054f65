/* mesh.c: the n-D device mesh over all ranks (see mesh.h).
 * MPI_Cart_create without reordering (mesh rank = world rank, row-major in mesh
 * coordinates), one MPI_Cart_sub communicator per mesh dim, each wrapped in a
 * registered mg_comm, plus one for the whole mesh. The comms are MPI ones, or
 * NCCL ones when the device is a GPU (mg_set_device), made in the same order on
 * every rank (dims 0.., then the whole mesh).
 * A submesh (mg_mesh_sub) is made the same way over the ranks that share one
 * coordinate of a dim (MPI_Cart_sub of the mesh, then MPI_Cart_create).
 * A meta mesh (mg_mesh_new_meta) has the same shape, coordinates and comms,
 * made without MPI: its comms count and never send (comm_meta.c).
 * Exports: mg_mesh_new/free/ndim/shape/coord (public), mg_mesh_new_meta, mg_mesh_format,
 * mg_mesh_rank_of, mg_mesh_count_tensor, mg_mesh_parse, mg_mesh_sub,
 * mg_mesh_agree, mg_mesh_pair_new/free. */
#include "config.h"

#include "dist/mesh.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "dist/dist_state.h"
#include "dist/watchdog.h"
#include "status.h"

#ifdef MG_HAVE_CUDA
#include "dist/comm_nccl.h"
#endif

/* The comm of one communicator for the current device. NCCL comms are made
 * collectively; their outcome is agreed over the whole mesh (`cart`) so that a
 * failure on some ranks leaves none of them waiting in the next MPI_Cart_sub. */
static mg_comm *comm_new(MPI_Comm mpi, MPI_Comm cart) {
#ifdef MG_HAVE_CUDA
    if (mg_get_device() == MG_DEVICE_CUDA) {
        mg_comm *c = mg_comm_nccl_new(mpi);
        int mine = c != NULL, all = mine;
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, cart);
        if (!all && c) {
            mg_comm_free(c);
            c = mg_error_null(MG_ECOMM, "mg_mesh_new: making the NCCL communicators failed on "
                                        "another rank (see its error)");
        }
        return c;
    }
#else
    (void)cart;
#endif
    return mg_comm_mpi_new(mpi);
}

char *mg_mesh_format(char *buf, size_t len, const mg_mesh *mesh) {
    size_t used = 0;
    if (len) buf[0] = '\0';
    for (int i = 0; i < mesh->ndim; i++)
        used +=
            snprintf(buf + used, len > used ? len - used : 0, "%s%d", i ? "x" : "", mesh->shape[i]);
    return buf;
}

static char *shape_text(char *buf, size_t len, int ndim, const int *shape) {
    size_t used = 0;
    if (len) buf[0] = '\0';
    for (int i = 0; i < ndim; i++)
        used += snprintf(buf + used, len > used ? len - used : 0, "%s%d", i ? "x" : "", shape[i]);
    return buf;
}

int mg_mesh_rank_of(const mg_mesh *mesh, const int *coord) {
    int r = 0;
    for (int i = 0; i < mesh->ndim; i++) r = r * mesh->shape[i] + coord[i];
    return r;
}

void mg_mesh_count_tensor(const mg_mesh *mesh, int delta) {
    ((mg_mesh *)mesh)->tensors += delta; /* a mesh is never const where it is made */
}

int mg_mesh_parse(const char *text, int *shape) {
    if (!text || !*text)
        return mg_error(MG_EINVAL, "mesh: empty mesh; give sizes separated by 'x', e.g. 2 or 2x2");
    const char *p = text;
    int n = 0;
    for (;;) {
        if (!isdigit((unsigned char)*p))
            return mg_error(MG_EINVAL, "mesh '%s': expected sizes separated by 'x', e.g. 2 or 2x2",
                            text);
        errno = 0;
        char *end;
        long v = strtol(p, &end, 10);
        if (errno || v < 1 || v > INT_MAX)
            return mg_error(MG_EINVAL, "mesh '%s': size %.*s must be between 1 and %d", text,
                            (int)(end - p), p, INT_MAX);
        if (n == MG_MAX_MESH_DIMS)
            return mg_error(MG_EINVAL, "mesh '%s': a mesh has 1 to %d dims", text,
                            MG_MAX_MESH_DIMS);
        shape[n++] = (int)v;
        p = end;
        if (*p == '\0') return n;
        if (*p != 'x' && *p != 'X')
            return mg_error(MG_EINVAL, "mesh '%s': expected sizes separated by 'x', e.g. 2 or 2x2",
                            text);
        p++;
    }
}

/* "2 or 1x2" for 2 ranks, "4 or 2x2" for 4, "1" for 1: meshes that would fit. */
static void suggest(char *buf, size_t len, int world) {
    if (world <= 1) {
        snprintf(buf, len, "1");
        return;
    }
    int a = 1;
    for (int f = 1; (long)f * f <= world; f++)
        if (world % f == 0) a = f;
    snprintf(buf, len, "%d or %dx%d", world, a, world / a);
}

static int mpi_error(const char *what, int err) {
    return mg_mpi_failed(err, "mg_mesh_new: %s failed", what);
}

static mg_mesh *mesh_on(MPI_Comm cart, int ndim, const int *shape);

/* A mesh whose dims' comms are made, once its whole-mesh comm is: registered
 * and numbered; freed (NULL) when that comm could not be made. */
static mg_mesh *finish(mg_mesh *m) {
    if (!m->world) {
        mg_mesh_free(m);
        return NULL;
    }
    mg_comm_register(m->world);
    m->id = ++mg_dist()->next_mesh_id;
    return m;
}

mg_mesh *mg_mesh_new(int ndim, const int *shape) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) return mg_error_null(MG_ESTATE, "mg_mesh_new: call mg_init first");
    if (mg_check_not_finalized("mg_mesh_new") != MG_OK) return NULL;
    if (ndim < 1 || ndim > MG_MAX_MESH_DIMS)
        return mg_error_null(MG_EMESH, "mg_mesh_new: a mesh has 1 to %d dims, got %d",
                             MG_MAX_MESH_DIMS, ndim);
    if (!shape) return mg_error_null(MG_EINVAL, "mg_mesh_new: shape is NULL");
    char text[64];
    shape_text(text, sizeof text, ndim, shape);
    int64_t ranks = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1)
            return mg_error_null(MG_EMESH,
                                 "mg_mesh_new: mesh %s has size %d on dim %d: every mesh size "
                                 "must be at least 1",
                                 text, shape[i], i);
        ranks *= shape[i];
    }
    int world = mg_world_size();
    if (ranks != world) {
        char hint[64];
        suggest(hint, sizeof hint, world);
        return mg_error_null(MG_EMESH,
                             "mg_mesh_new: mesh %s has %lld ranks but the job has %d: give a mesh "
                             "whose sizes multiply to %d, e.g. %s",
                             text, (long long)ranks, world, world, hint);
    }

    int dims[MG_MAX_MESH_DIMS], periods[MG_MAX_MESH_DIMS] = {0};
    for (int i = 0; i < ndim; i++) dims[i] = shape[i];
    MPI_Comm cart = MPI_COMM_NULL;
    int err = MPI_Cart_create(MPI_COMM_WORLD, ndim, dims, periods, 0, &cart);
    if (err != MPI_SUCCESS) {
        mpi_error("MPI_Cart_create", err);
        return NULL;
    }
    return mesh_on(cart, ndim, shape);
}

/* The mesh over the Cartesian communicator `cart` (taken over, freed on
 * failure): its coordinates, one comm per dim and one for the whole. */
static mg_mesh *mesh_on(MPI_Comm cart, int ndim, const int *shape) {
    mg_mesh *m = calloc(1, sizeof *m);
    if (!m) {
        MPI_Comm_free(&cart);
        return mg_error_null(MG_ENOMEM, "mg_mesh_new: out of memory");
    }
    m->ndim = ndim;
    m->cart = cart;
    m->checks = MPI_COMM_NULL;
    for (int i = 0; i < MG_MAX_MESH_DIMS; i++) m->dim_mpi[i] = MPI_COMM_NULL;
    for (int i = 0; i < ndim; i++) m->shape[i] = shape[i];
    MPI_Comm_set_errhandler(m->cart, MPI_ERRORS_RETURN);
    /* names show in MPI's and the watchdog's messages */
    MPI_Comm_set_name(m->cart, "meshgrad mesh");
    MPI_Comm_rank(m->cart, &m->rank);
    MPI_Comm_size(m->cart, &m->size);
    int err = MPI_Cart_coords(m->cart, m->rank, ndim, m->coord);
    if (err != MPI_SUCCESS) {
        mpi_error("MPI_Cart_coords", err);
        goto fail;
    }
    if ((err = MPI_Comm_dup(m->cart, &m->checks)) != MPI_SUCCESS) {
        m->checks = MPI_COMM_NULL;
        mpi_error("MPI_Comm_dup", err);
        goto fail;
    }
    MPI_Comm_set_errhandler(m->checks, MPI_ERRORS_RETURN);
    MPI_Comm_set_name(m->checks, "meshgrad mesh checks");
    for (int i = 0; i < ndim; i++) {
        int remain[MG_MAX_MESH_DIMS] = {0};
        remain[i] = 1;
        err = MPI_Cart_sub(m->cart, remain, &m->dim_mpi[i]);
        if (err != MPI_SUCCESS) {
            mpi_error("MPI_Cart_sub", err);
            goto fail;
        }
        char name[MPI_MAX_OBJECT_NAME];
        snprintf(name, sizeof name, "meshgrad mesh dim %d", i);
        MPI_Comm_set_name(m->dim_mpi[i], name);
        m->dim_comm[i] = comm_new(m->dim_mpi[i], m->cart);
        if (!m->dim_comm[i]) goto fail;
        mg_comm_register(m->dim_comm[i]);
    }
    m->world = comm_new(m->cart, m->cart);
    return finish(m);
fail:
    mg_mesh_free(m);
    return NULL;
}

/* ---- meta meshes ---------------------------------------------------------------- */

static int meta_node(const mg_mesh *m, int64_t world) {
    return m->meta_node_ranks > 0 ? (int)(world / m->meta_node_ranks) : 0;
}

/* A meta comm over `size` ranks from world rank `first`, `stride` apart (on
 * one node when its first and last are: the nodes hold consecutive ranks). */
static mg_comm *meta_comm(const mg_mesh *m, int size, int rank, int64_t first, int64_t stride) {
    bool local = meta_node(m, first) == meta_node(m, first + (int64_t)(size - 1) * stride);
    mg_comm *c = mg_comm_meta_new(size, rank, local);
    if (c) mg_comm_register(c);
    return c;
}

/* The meta mesh of `shape` at `coord`, its ranks at base + coord . stride. */
static mg_mesh *meta_on(int ndim, const int *shape, const int *coord, int base,
                        const int *stride, int node_ranks) {
    mg_mesh *m = calloc(1, sizeof *m);
    if (!m) return mg_error_null(MG_ENOMEM, "mg_mesh_new_meta: out of memory");
    m->ndim = ndim;
    m->meta = 1;
    m->meta_base = base;
    m->meta_node_ranks = node_ranks;
    m->cart = m->checks = MPI_COMM_NULL;
    m->size = 1;
    for (int i = 0; i < MG_MAX_MESH_DIMS; i++) m->dim_mpi[i] = MPI_COMM_NULL;
    for (int i = 0; i < ndim; i++) {
        m->shape[i] = shape[i];
        m->coord[i] = coord[i];
        m->meta_stride[i] = stride[i];
        m->size *= shape[i];
    }
    m->rank = mg_mesh_rank_of(m, coord);
    int64_t here = base;
    for (int i = 0; i < ndim; i++) here += (int64_t)coord[i] * stride[i];
    for (int i = 0; i < ndim; i++) {
        int64_t first = here - (int64_t)coord[i] * stride[i];
        if (!(m->dim_comm[i] = meta_comm(m, shape[i], coord[i], first, stride[i]))) goto fail;
    }
    /* the whole mesh: on one node when its first and last rank are */
    int64_t last = base;
    for (int i = 0; i < ndim; i++) last += (int64_t)(shape[i] - 1) * stride[i];
    m->world = mg_comm_meta_new(m->size, m->rank, meta_node(m, base) == meta_node(m, last));
    return finish(m);
fail:
    mg_mesh_free(m);
    return NULL;
}

mg_mesh *mg_mesh_new_meta(int ndim, const int *shape, const int *coord, int node_ranks) {
    if (ndim < 1 || ndim > MG_MAX_MESH_DIMS || !shape || !coord)
        return mg_error_null(MG_EMESH, "mg_mesh_new_meta: a mesh has 1 to %d dims, got %d",
                             MG_MAX_MESH_DIMS, ndim);
    int stride[MG_MAX_MESH_DIMS], s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] < 1 || coord[i] < 0 || coord[i] >= shape[i])
            return mg_error_null(MG_EMESH, "mg_mesh_new_meta: coordinate %d of dim %d is not in "
                                 "0..%d", coord[i], i, shape[i] - 1);
        stride[i] = s;
        s *= shape[i];
    }
    return meta_on(ndim, shape, coord, 0, stride, node_ranks);
}

mg_mesh *mg_mesh_sub(const mg_mesh *m, int dim) {
    if (!m || dim < 0 || dim >= m->ndim)
        return mg_error_null(MG_EINVAL, "mg_mesh_sub: dim %d is not a dim of the mesh", dim);
    if (m->meta) { /* the other dims, from this rank's coordinate on `dim` */
        int shape[MG_MAX_MESH_DIMS] = {1}, coord[MG_MAX_MESH_DIMS] = {0},
            stride[MG_MAX_MESH_DIMS] = {1}, n = 0;
        for (int i = 0; i < m->ndim; i++)
            if (i != dim) {
                shape[n] = m->shape[i];
                coord[n] = m->coord[i];
                stride[n++] = m->meta_stride[i];
            }
        return meta_on(n > 0 ? n : 1, shape, coord,
                       m->meta_base + m->coord[dim] * m->meta_stride[dim], stride,
                       m->meta_node_ranks);
    }
    int remain[MG_MAX_MESH_DIMS] = {0}, shape[MG_MAX_MESH_DIMS] = {1}, n = 0;
    for (int i = 0; i < m->ndim; i++)
        if (i != dim) {
            remain[i] = 1;
            shape[n++] = m->shape[i];
        }
    MPI_Comm group = MPI_COMM_NULL, cart = MPI_COMM_NULL;
    int err = MPI_Cart_sub(m->cart, remain, &group);
    if (err != MPI_SUCCESS) {
        mpi_error("MPI_Cart_sub", err);
        return NULL;
    }
    int ndim = n > 0 ? n : 1, periods[MG_MAX_MESH_DIMS] = {0};
    err = MPI_Cart_create(group, ndim, shape, periods, 0, &cart);
    MPI_Comm_free(&group);
    if (err != MPI_SUCCESS) {
        mpi_error("MPI_Cart_create", err);
        return NULL;
    }
    return mesh_on(cart, ndim, shape);
}

void mg_mesh_free(mg_mesh *m) {
    if (!m) return;
    int live = m->tensors;
    if (live) { /* they would point to a freed mesh */
        char text[64];
        mg_error(MG_ESTATE, "mg_mesh_free: nothing freed: %d tensor(s) on mesh %s are still alive "
                            "(parameters, gradients, optimizer state): free them first "
                            "(mg_dtensor_free, mg_optim_free)",
                 live, mg_mesh_format(text, sizeof text, m));
        return;
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    for (int i = 0; i < MG_MAX_MESH_DIMS; i++) {
        mg_comm_free(m->dim_comm[i]);
        if (!finalized && m->dim_mpi[i] != MPI_COMM_NULL) MPI_Comm_free(&m->dim_mpi[i]);
    }
    mg_comm_free(m->world);
    if (!finalized && m->checks != MPI_COMM_NULL) MPI_Comm_free(&m->checks);
    if (!finalized && m->cart != MPI_COMM_NULL) MPI_Comm_free(&m->cart);
    free(m);
}

/* the getters: 0 or NULL and a message for a NULL mesh */
int mg_mesh_ndim(const mg_mesh *m) {
    return mg_arg_given(m, "mg_mesh_ndim", "the mesh") ? m->ndim : 0;
}
const int *mg_mesh_shape(const mg_mesh *m) {
    return mg_arg_given(m, "mg_mesh_shape", "the mesh") ? m->shape : NULL;
}
const int *mg_mesh_coord(const mg_mesh *m) {
    return mg_arg_given(m, "mg_mesh_coord", "the mesh") ? m->coord : NULL;
}

int mg_mesh_pair_new(mg_mesh_pair *out, const mg_mesh *m, int dim, int a, int b) {
    memset(out, 0, sizeof *out);
    out->mpi = MPI_COMM_NULL;
    if (!m || dim < 0 || dim >= m->ndim || a == b || a < 0 || b < 0 || a >= m->shape[dim] ||
        b >= m->shape[dim])
        return mg_error(MG_EINVAL, "mg_mesh_pair_new: coordinates %d and %d of dim %d", a, b, dim);
    int c = m->coord[dim], in = c == a || c == b;
    if (m->meta) {
        if (!in) return MG_OK;
        int64_t here = m->meta_base;
        for (int i = 0; i < m->ndim; i++) here += (int64_t)m->coord[i] * m->meta_stride[i];
        int64_t at_a = here + (int64_t)(a - c) * m->meta_stride[dim];
        int64_t at_b = here + (int64_t)(b - c) * m->meta_stride[dim];
        out->comm = mg_comm_meta_new(2, c == a ? 0 : 1, meta_node(m, at_a) == meta_node(m, at_b));
        if (!out->comm) return mg_last_code();
        mg_comm_register(out->comm);
        return MG_OK;
    }
    int err = MPI_Comm_split(m->dim_mpi[dim], in ? 0 : MPI_UNDEFINED, c == a ? 0 : 1, &out->mpi);
    if (err != MPI_SUCCESS) return mg_mpi_failed(err, "mg_mesh_pair_new: MPI_Comm_split failed");
#ifdef MG_HAVE_CUDA
    if (!in && mg_get_device() == MG_DEVICE_CUDA) { /* comm_new's agreement over the mesh */
        int mine = 1, all = 1;
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, m->cart);
        return all ? MG_OK : mg_error(MG_ECOMM, "mg_mesh_pair_new: making the NCCL "
                                                "communicators failed on another rank");
    }
#endif
    if (!in) return MG_OK;
    MPI_Comm_set_name(out->mpi, "meshgrad mesh pair");
    out->comm = comm_new(out->mpi, m->cart);
    if (!out->comm) {
        MPI_Comm_free(&out->mpi);
        return mg_last_code() ? mg_last_code() : MG_ECOMM;
    }
    mg_comm_register(out->comm);
    return MG_OK;
}

void mg_mesh_pair_free(mg_mesh_pair *p) {
    if (!p) return;
    mg_comm_free(p->comm);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && p->mpi != MPI_COMM_NULL) MPI_Comm_free(&p->mpi);
    p->comm = NULL;
    p->mpi = MPI_COMM_NULL;
}

int mg_mesh_agree(const mg_mesh *m, const uint64_t *v, int n, int *every, const char *who) {
    uint64_t buf[64];
    if (n < 0 || n > 32)
        return mg_error(MG_EINVAL, "%s: %d values to agree on (at most 32)", who, n);
    if (m->meta) { /* the ranks that exist only in count agree with this one */
        for (int i = 0; i < n; i++) every[i] = 1;
        return MG_OK;
    }
    for (int i = 0; i < n; i++) buf[2 * i] = v[i], buf[2 * i + 1] = ~v[i];
    mg_watchdog_begin_comm(who, m->checks);
    int err = MPI_Allreduce(MPI_IN_PLACE, buf, 2 * n, MPI_UINT64_T, MPI_MAX, m->checks);
    mg_watchdog_end();
    if (err != MPI_SUCCESS) return mg_error(MG_ECOMM, "%s: agreeing across the mesh failed", who);
    for (int i = 0; i < n; i++) every[i] = buf[2 * i] == v[i] && ~buf[2 * i + 1] == v[i];
    return MG_OK;
}
