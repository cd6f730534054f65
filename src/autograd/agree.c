/* agree.c: the ranks of a mesh agree on the graph a backward walks (see
 * agree.h). Exports mg_graph_agree, mg_graph_node_hash. */
#include "autograd/agree.h"

#include <stdio.h>
#include <string.h>

#include "hash.h"
#include "ops/ops.h"
#include "status.h"

static uint64_t spec_hash(uint64_t h, const mg_spec *s) {
    if (!s) return mg_hash_i64(h, -1);
    h = mg_hash_i64(h, s->ndim);
    for (int d = 0; d < s->ndim; d++) h = mg_hash_i64(h, s->shape[d]);
    for (int m = 0; m < s->mesh->ndim; m++)
        h = mg_hash_i64(mg_hash_i64(h, s->p[m].kind), s->p[m].dim);
    return h;
}

/* One node: its op, its arguments (the node is zeroed when made: unused ones
 * are 0 on every rank), and the specs of its output and inputs. */
uint64_t mg_graph_node_hash(const mg_node *n) {
    uint64_t h = MG_HASH_START;
    uint32_t farg;
    memcpy(&farg, &n->args.f, sizeof farg);
    h = mg_hash_bytes(h, n->def->name, strlen(n->def->name));
    h = mg_hash_i64(mg_hash_i64(mg_hash_i64(h, n->n_inputs), n->args.ni), n->args.flag);
    for (int i = 0; i < MG_MAX_DIMS; i++)
        h = mg_hash_i64(mg_hash_i64(h, n->args.i[i]), n->args.shape[i]);
    h = mg_hash_i64(mg_hash_i64(mg_hash_i64(h, farg), n->args.ndim), n->args.pos);
    for (int m = 0; m < MG_MAX_MESH_DIMS; m++)
        h = mg_hash_i64(mg_hash_i64(h, n->placements[m].kind), n->placements[m].dim);
    h = spec_hash(h, &n->output->spec);
    for (int i = 0; i < n->n_inputs; i++)
        h = spec_hash(h, n->inputs[i] ? &n->inputs[i]->spec : NULL);
    return h;
}

/* This rank's node k, for the message. */
static void describe(char *buf, size_t len, const mg_node *n) {
    char shape[160], place[96];
    const mg_spec *s = &n->output->spec;
    size_t used = (size_t)snprintf(buf, len, "%s, out %s %s", n->def->name,
                                   mg_shape_format(shape, sizeof shape, s->ndim, s->shape),
                                   mg_placements_format(place, sizeof place, s->p, s->mesh->ndim));
    if (n->args.f != 0.0f && used < len)
        used += (size_t)snprintf(buf + used, len - used, ", %g", n->args.f);
    for (int i = 0; i < n->args.ni && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? " " : ", args ", n->args.i[i]);
    if (n->args.pos != 0 && used < len)
        snprintf(buf + used, len - used, ", pos %lld", (long long)n->args.pos);
}

int mg_graph_agree(const mg_mesh *mesh, mg_node *const *graph, int n, const char *who) {
    if (!mesh || mesh->size <= 1) return MG_OK;
    uint64_t all = MG_HASH_START;
    for (int k = 0; k < n; k++) all = mg_hash_i64(all, (int64_t)mg_graph_node_hash(graph[k]));
    all = mg_hash_i64(all, n); /* n -1: this rank refused the backward; it still takes part */
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
        for (int i = 0; i < m; i++) h[i] = mg_graph_node_hash(graph[k0 + i]);
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
