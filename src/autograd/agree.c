/* agree.c: the ranks of a mesh agree on the graph a backward walks (see
 * agree.h). Exports mg_graph_agree. */
#include "autograd/agree.h"

#include <stdio.h>
#include <string.h>

#include "ops/ops.h"
#include "status.h"

static uint64_t fnv(uint64_t h, int64_t word) {
    for (int i = 0; i < 8; i++) h = (h ^ ((uint64_t)word >> (8 * i) & 0xff)) * 1099511628211ull;
    return h;
}

static uint64_t spec_hash(uint64_t h, const mg_spec *s) {
    if (!s) return fnv(h, -1);
    h = fnv(h, s->ndim);
    for (int d = 0; d < s->ndim; d++) h = fnv(h, s->shape[d]);
    for (int m = 0; m < s->mesh->ndim; m++) h = fnv(fnv(h, s->p[m].kind), s->p[m].dim);
    return h;
}

/* One node: its op, its arguments (the node is zeroed when made: unused ones
 * are 0 on every rank), and the specs of its output and inputs. */
static uint64_t node_hash(const mg_node *n) {
    uint64_t h = 1469598103934665603ull;
    uint32_t farg;
    memcpy(&farg, &n->farg, sizeof farg);
    h = fnv(fnv(fnv(h, n->op), n->n_inputs), n->n_iargs);
    for (int i = 0; i < MG_MAX_DIMS; i++) h = fnv(fnv(h, n->iargs[i]), n->shape[i]);
    h = fnv(fnv(h, farg), n->ndim);
    for (int m = 0; m < MG_MAX_MESH_DIMS; m++)
        h = fnv(fnv(h, n->placements[m].kind), n->placements[m].dim);
    h = spec_hash(h, &n->output->spec);
    for (int i = 0; i < n->n_inputs; i++)
        h = spec_hash(h, n->inputs[i] ? &n->inputs[i]->spec : NULL);
    return h;
}

/* This rank's node k, for the message. */
static void describe(char *buf, size_t len, const mg_node *n) {
    char shape[160], place[96];
    const mg_spec *s = &n->output->spec;
    size_t used = (size_t)snprintf(buf, len, "%s, out %s %s", mg_op_names[n->op],
                                   mg_shape_format(shape, sizeof shape, s->ndim, s->shape),
                                   mg_placements_format(place, sizeof place, s->p, s->mesh->ndim));
    if (n->farg != 0.0f && used < len)
        used += (size_t)snprintf(buf + used, len - used, ", %g", n->farg);
    for (int i = 0; i < n->n_iargs && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? " " : ", args ", n->iargs[i]);
}

int mg_graph_agree(const mg_mesh *mesh, mg_node *const *graph, int n, const char *who) {
    if (!mesh || mesh->size <= 1) return MG_OK;
    uint64_t all = 1469598103934665603ull;
    for (int k = 0; k < n; k++) all = fnv(all, (int64_t)node_hash(graph[k]));
    all = fnv(all, n); /* n -1: this rank refused the backward; it still takes part */
    int same = 0;
    int rc = mg_mesh_agree(mesh, &all, 1, &same, who);
    if (rc != MG_OK || same) return rc;
    /* they differ: where? The sizes first, then the nodes, 32 at a time. */
    uint64_t count = (uint64_t)n;
    if ((rc = mg_mesh_agree(mesh, &count, 1, &same, who)) != MG_OK) return rc;
    if (!same)
        return mg_error(MG_ESTATE, "%s: the ranks of the mesh recorded different graphs: this "
                        "rank's has %d ops, some other rank's not (or it refused the backward: "
                        "its message says why); every rank must run the same "
                        "ops with the same arguments (a value that depends on the rank must not "
                        "decide which ops run)", who, n);
    for (int k0 = 0; k0 < n; k0 += 32) {
        uint64_t h[32];
        int every[32], m = n - k0 < 32 ? n - k0 : 32;
        for (int i = 0; i < m; i++) h[i] = node_hash(graph[k0 + i]);
        if ((rc = mg_mesh_agree(mesh, h, m, every, who)) != MG_OK) return rc;
        for (int i = 0; i < m; i++) {
            if (every[i]) continue;
            char here[320];
            describe(here, sizeof here, graph[k0 + i]);
            return mg_error(MG_ESTATE, "%s: the ranks of the mesh recorded different graphs: op "
                            "%d of %d, counted from the loss (here: %s), differs on some rank in "
                            "its arguments or its tensors' global shapes or placements; every rank "
                            "must run the same ops with the same arguments (a value that depends "
                            "on the rank, such as a scale factor or a dim, must not reach an op)",
                            who, k0 + i + 1, n, here);
        }
    }
    return mg_error(MG_ESTATE, "%s: the ranks of the mesh recorded different graphs", who);
}
