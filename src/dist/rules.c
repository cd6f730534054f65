/* rules.c: candidate strategies per op family and the least-bytes chooser
 * (see rules.h). Everything here reads global metadata only, so every rank
 * makes the same choice. */
#include "dist/rules.h"

#include <string.h>

#include "dist/mesh.h"
#include "tensor.h"
#include "status.h"

static const mg_placement R = {MG_PLACE_REPLICATE, 0};
static const mg_placement P = {MG_PLACE_PARTIAL, 0};
static mg_placement S(int d) { return (mg_placement){MG_PLACE_SHARD, d}; }

static mg_dim_strategy *add(mg_candidates *c) {
    if (c->n >= MG_RULE_MAX_CANDIDATES) return NULL;
    mg_dim_strategy *s = &c->c[c->n++];
    for (int i = 0; i < MG_RULE_MAX_INPUTS; i++) s->in[i] = R;
    s->out = R;
    s->mesh_dims = 0;
    return s;
}

/* ---- cost and choice -------------------------------------------------------- */

double mg_rules_dim_cost(const mg_spec *s, int m, mg_placement to) {
    mg_placement from = s->p[m];
    int k = s->mesh->shape[m];
    if (k == 1 || mg_placement_equal(from, to)) return 0;
    if (from.kind == MG_PLACE_REPLICATE) return 0; /* slice, or keep on coordinate 0 */
    /* bytes of this rank's block: global bytes over the shard factor of every mesh dim */
    double bytes = 4.0 * (double)mg_shape_numel(s->ndim, s->shape);
    for (int j = 0; j < s->mesh->ndim; j++)
        if (s->p[j].kind == MG_PLACE_SHARD) bytes /= s->mesh->shape[j];
    double f = (double)(k - 1) / k;
    if (from.kind == MG_PLACE_SHARD) {
        if (to.kind == MG_PLACE_SHARD) return f * bytes; /* all-to-all */
        if (to.kind == MG_PLACE_PARTIAL) /* all-gather, zero; and the sum it joins is owed */
            return 2 * (k - 1) * bytes;               /* (a reduce-scatter of k blocks) */
        return (k - 1) * bytes;                        /* all-gather */
    }
    /* from Partial */
    if (to.kind == MG_PLACE_SHARD) return f * bytes; /* reduce-scatter */
    return 2 * f * bytes;                             /* all-reduce */
}

static bool takes_partial(const mg_dim_strategy *s, int n_inputs, const mg_spec *const *inputs) {
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i] && s->in[i].kind == MG_PLACE_PARTIAL) return true;
    return false;
}

/* Some candidate takes every input without Partial. */
static bool takes_unpartial(const mg_candidates *cands, int n_inputs,
                            const mg_spec *const *inputs) {
    for (int c = 0; c < cands->n; c++)
        if (!takes_partial(&cands->c[c], n_inputs, inputs)) return true;
    return false;
}

int mg_rules_choose(const mg_candidates *cands, int n_inputs, const mg_spec *const *inputs,
                    int out_ndim, const int64_t *out_shape, mg_spec *targets, mg_spec *out) {
    const mg_mesh *mesh = NULL;
    for (int i = 0; i < n_inputs; i++) {
        if (inputs[i]) {
            targets[i] = *inputs[i];
            if (!mesh) mesh = inputs[i]->mesh;
        }
    }
    if (!mesh || cands->n == 0) return mg_error(MG_ESTATE, "rules: no inputs or no strategy");
    memset(out, 0, sizeof *out);
    out->mesh = mesh;
    out->ndim = out_ndim;
    for (int d = 0; d < out_ndim; d++) out->shape[d] = out_shape[d];
    bool det = mg_get_deterministic();
    for (int m = 0; m < mesh->ndim; m++) {
        /* least bytes; on ties, fewest inputs whose placement changes (so a size-1
         * mesh dim keeps what it has); then list order */
        int best = 0, best_changes = 0;
        double best_cost = -1;
        /* the deterministic mode sums a Partial input before any op takes it
         * (a linear op on the addends would add them in another order) */
        bool no_partial = det && mesh->shape[m] > 1 && takes_unpartial(cands, n_inputs, inputs);
        for (int c = 0; c < cands->n; c++) {
            if (cands->c[c].mesh_dims && !(cands->c[c].mesh_dims >> m & 1u)) continue;
            if (no_partial && takes_partial(&cands->c[c], n_inputs, inputs)) continue;
            double cost = 0;
            int changes = 0;
            for (int i = 0; i < n_inputs; i++) {
                if (!inputs[i]) continue;
                cost += mg_rules_dim_cost(inputs[i], m, cands->c[c].in[i]);
                changes += !mg_placement_equal(inputs[i]->p[m], cands->c[c].in[i]);
            }
            if (best_cost < 0 || cost < best_cost || (cost == best_cost && changes < best_changes)) {
                best = c;
                best_cost = cost;
                best_changes = changes;
            }
        }
        for (int i = 0; i < n_inputs; i++)
            if (inputs[i]) targets[i].p[m] = cands->c[best].in[i];
        out->p[m] = cands->c[best].out;
    }
    return MG_OK;
}

/* ---- contraction ------------------------------------------------------------ */

static int find_label(int ndim, const int *labels, int label) {
    for (int d = 0; d < ndim; d++)
        if (labels[d] == label) return d;
    return -1;
}

void mg_rules_contraction(mg_candidates *c, int n_inputs, const int *ndims, const int *const *labels,
                          int out_ndim, const int *out_labels, bool has_bias) {
    int n_operands = has_bias ? n_inputs - 1 : n_inputs; /* the bias is the last input */
    c->n = 0;
    add(c); /* all Replicate */
    /* each label, in order of first appearance: output labels, then contracted ones */
    int seen[2 * MG_MAX_DIMS + 2], n_seen = 0;
    for (int d = 0; d < out_ndim; d++) seen[n_seen++] = out_labels[d];
    for (int i = 0; i < n_operands; i++)
        for (int d = 0; d < ndims[i]; d++)
            if (find_label(n_seen, seen, labels[i][d]) < 0) seen[n_seen++] = labels[i][d];
    for (int l = 0; l < n_seen; l++) {
        int label = seen[l];
        mg_dim_strategy *s = add(c);
        if (!s) return;
        for (int i = 0; i < n_operands; i++) {
            int d = find_label(ndims[i], labels[i], label);
            s->in[i] = d >= 0 ? S(d) : R;
        }
        int od = find_label(out_ndim, out_labels, label);
        s->out = od >= 0 ? S(od) : P;
        if (has_bias) s->in[n_inputs - 1] = (od >= 0 && od == out_ndim - 1) ? S(0) : R;
    }
    /* Partial through one operand, the others Replicate (the product is linear in each) */
    for (int i = 0; i < n_operands; i++) {
        mg_dim_strategy *s = add(c);
        if (!s) return;
        s->in[i] = P;
        s->out = P;
    }
}

/* ---- pointwise ---------------------------------------------------------------- */

void mg_rules_pointwise(mg_candidates *c, int n_inputs, const int *ndims,
                        const int64_t *const *shapes, int out_ndim, const int64_t *out_shape,
                        mg_linearity lin) {
    c->n = 0;
    add(c); /* all Replicate */
    if (lin == MG_LINEARITY_SUM) {
        mg_dim_strategy *s = add(c);
        for (int i = 0; i < n_inputs; i++) s->in[i] = P;
        s->out = P;
    } else if (lin == MG_LINEARITY_FIRST || lin == MG_LINEARITY_ANY) {
        int last = lin == MG_LINEARITY_FIRST ? 1 : n_inputs;
        for (int j = 0; j < last; j++) {
            mg_dim_strategy *s = add(c);
            s->in[j] = P;
            s->out = P;
        }
    }
    for (int d = 0; d < out_ndim; d++) {
        mg_dim_strategy *s = add(c);
        if (!s) return;
        s->out = S(d);
        for (int i = 0; i < n_inputs; i++) {
            int di = d - (out_ndim - ndims[i]); /* aligned right */
            bool same = di >= 0 && shapes[i][di] == out_shape[d];
            s->in[i] = same ? S(di) : R;
        }
    }
}

/* ---- reduction, permute, expand -------------------------------------------------- */

void mg_rules_reduce(mg_candidates *c, int ndim, const bool *reduced, bool keepdim) {
    c->n = 0;
    add(c);
    mg_dim_strategy *s = add(c);
    s->in[0] = P;
    s->out = P;
    int od = 0;
    for (int d = 0; d < ndim; d++) {
        s = add(c);
        if (!s) return;
        s->in[0] = S(d);
        if (reduced[d]) {
            s->out = P;
        } else {
            s->out = S(od);
        }
        if (!reduced[d] || keepdim) od++;
    }
}

void mg_rules_permute(mg_candidates *c, int ndim, const int *perm) {
    c->n = 0;
    add(c);
    mg_dim_strategy *s = add(c);
    s->in[0] = P;
    s->out = P;
    for (int i = 0; i < ndim; i++) {
        s = add(c);
        if (!s) return;
        s->in[0] = S(perm[i]);
        s->out = S(i);
    }
}

void mg_rules_expand(mg_candidates *c, int in_ndim, const int64_t *in_shape, int out_ndim,
                     const int64_t *out_shape) {
    c->n = 0;
    add(c);
    mg_dim_strategy *s = add(c);
    s->in[0] = P;
    s->out = P;
    int lead = out_ndim - in_ndim;
    for (int d = 0; d < in_ndim; d++) {
        if (in_shape[d] != out_shape[d + lead]) continue; /* broadcast dims are never sharded */
        s = add(c);
        if (!s) return;
        s->in[0] = S(d);
        s->out = S(d + lead);
    }
}

/* ---- reshape -------------------------------------------------------------------- */

/* Groups of input dims [i0, i1) and output dims [o0, o1) with equal products. */
typedef struct {
    int i0, i1, o0, o1;
} dim_group;

static int reshape_groups(int in_ndim, const int64_t *in, int out_ndim, const int64_t *out,
                          dim_group *g) {
    int n = 0, i = 0, o = 0;
    while (i < in_ndim || o < out_ndim) {
        dim_group cur = {i, i, o, o};
        int64_t pi = 1, po = 1;
        /* take at least one dim from each side (size-1 dims join the group) */
        if (i < in_ndim) pi *= in[i++];
        if (o < out_ndim) po *= out[o++];
        while (pi != po) {
            if (pi < po && i < in_ndim) pi *= in[i++];
            else if (po < pi && o < out_ndim) po *= out[o++];
            else break;
        }
        cur.i1 = i;
        cur.o1 = o;
        g[n++] = cur;
    }
    return n;
}

/* One verification round; returns true when every coordinate's blocks match
 * (nothing changed), false after replicating the offending mesh dims. */
static bool reshape_blocks_match(const mg_spec *in, int out_ndim, const int64_t *out_shape,
                                 const dim_group *g, int ng, mg_placement *keep_out, bool *ok) {
    const mg_mesh *mesh = in->mesh;
    mg_spec src = *in, out = *in;
    out.ndim = out_ndim;
    for (int d = 0; d < out_ndim; d++) out.shape[d] = out_shape[d];
    for (int m = 0; m < mesh->ndim; m++) {
        out.p[m] = ok[m] ? keep_out[m] : R;
        if (!ok[m]) src.p[m] = R;
    }
    bool match = true;
    int coord[MG_MAX_MESH_DIMS] = {0};
    for (int r = 0; r < mesh->size; r++) {
        int rest = r;
        for (int m = mesh->ndim - 1; m >= 0; m--) {
            coord[m] = rest % mesh->shape[m];
            rest /= mesh->shape[m];
        }
        int64_t ls[MG_MAX_DIMS], lo[MG_MAX_DIMS], os[MG_MAX_DIMS], oo[MG_MAX_DIMS];
        mg_spec_local(&src, coord, ls, lo);
        mg_spec_local(&out, coord, os, oo);
        for (int k = 0; k < ng; k++) {
            int64_t in_start = 0, in_len = 1, out_start = 0, out_len = 1;
            bool in_contig = true, out_contig = true;
            for (int d = g[k].i0; d < g[k].i1; d++) {
                in_start = in_start * in->shape[d] + lo[d];
                in_len *= ls[d];
                if (d > g[k].i0 && ls[d] != in->shape[d]) in_contig = false;
            }
            for (int d = g[k].o0; d < g[k].o1; d++) {
                out_start = out_start * out_shape[d] + oo[d];
                out_len *= os[d];
                if (d > g[k].o0 && os[d] != out_shape[d]) out_contig = false;
            }
            if (in_len == 0 && out_len == 0) continue;
            if (in_contig && out_contig && in_start == out_start && in_len == out_len) continue;
            for (int m = 0; m < mesh->ndim; m++) {
                if (ok[m] && in->p[m].kind == MG_PLACE_SHARD && in->p[m].dim >= g[k].i0 &&
                    in->p[m].dim < g[k].i1) {
                    ok[m] = false;
                    keep_out[m] = R;
                    match = false;
                }
            }
        }
    }
    return match;
}

void mg_rules_reshape(const mg_spec *in, int out_ndim, const int64_t *out_shape,
                      mg_placement *keep_out, bool *ok) {
    const mg_mesh *mesh = in->mesh;
    dim_group g[2 * MG_MAX_DIMS];
    int ng = reshape_groups(in->ndim, in->shape, out_ndim, out_shape, g);
    for (int m = 0; m < mesh->ndim; m++) {
        mg_placement p = in->p[m];
        keep_out[m] = p;
        ok[m] = true;
        if (p.kind != MG_PLACE_SHARD) continue;
        ok[m] = false;
        keep_out[m] = R;
        for (int k = 0; k < ng; k++) {
            if (p.dim < g[k].i0 || p.dim >= g[k].i1) continue;
            /* only the leftmost non-trivial dim of a group may stay sharded */
            int lead_in = g[k].i0, lead_out = g[k].o0;
            while (lead_in < g[k].i1 - 1 && in->shape[lead_in] == 1) lead_in++;
            while (lead_out < g[k].o1 - 1 && out_shape[lead_out] == 1) lead_out++;
            if (p.dim == lead_in && g[k].o1 > g[k].o0) {
                keep_out[m] = S(lead_out);
                ok[m] = true;
            }
        }
    }
    /* The kept shardings must give every coordinate the same elements: compare,
     * for each coordinate, the flat range of each group it holds before and
     * after. A mismatch replicates every mesh dim sharding that group; repeat
     * until nothing changes (at most one round per mesh dim). */
    for (int round = 0; round <= mesh->ndim; round++)
        if (reshape_blocks_match(in, out_ndim, out_shape, g, ng, keep_out, ok)) break;
}

/* ---- losses ------------------------------------------------------------------------ */

void mg_rules_cross_entropy(mg_candidates *c, int logits_ndim) {
    c->n = 0;
    add(c);
    for (int d = 0; d + 1 < logits_ndim; d++) { /* rows */
        mg_dim_strategy *s = add(c);
        if (!s) return;
        s->in[0] = S(d);
        s->in[1] = S(d);
        s->out = P;
    }
    mg_dim_strategy *s = add(c); /* loss parallel */
    if (!s) return;
    s->in[0] = S(logits_ndim - 1);
    s->out = R;
}

/* all Replicate, then for each of the ndim dims d: the first n_in inputs Shard(d)
 * and the output Shard(d), or Partial when `partial` */
static void shards_each_dim(mg_candidates *c, int ndim, int n_in, int partial) {
    c->n = 0;
    add(c);
    for (int d = 0; d < ndim; d++) {
        mg_dim_strategy *s = add(c);
        if (!s) return;
        for (int i = 0; i < n_in; i++) s->in[i] = S(d);
        s->out = partial ? P : S(d);
    }
}

void mg_rules_elementwise_loss(mg_candidates *c, int ndim) { shards_each_dim(c, ndim, 2, 1); }

/* ---- transformer ops ------------------------------------------------------------- */

/* all Replicate, then input 0 sharded on each of its ndim dims, the output alike */
static void shards_pass(mg_candidates *c, int ndim) { shards_each_dim(c, ndim, 1, 0); }

void mg_rules_softmax(mg_candidates *c, int ndim) { shards_pass(c, ndim); }

void mg_rules_layer_norm(mg_candidates *c, int ndim) {
    shards_pass(c, ndim); /* every shard of x passes, weight and bias Replicate ... */
    if (ndim > 0 && c->n == ndim + 1) {
        mg_dim_strategy *last = &c->c[ndim]; /* ... but along a sharded C */
        last->in[1] = last->in[2] = S(0);
    }
}

void mg_rules_embedding(mg_candidates *c, int ids_ndim) {
    shards_pass(c, ids_ndim);    /* a shard of the ids, the table Replicate */
    mg_dim_strategy *s = add(c); /* vocab parallel */
    s->in[1] = S(0);
    s->out = P;
    s = add(c);
    s->in[1] = S(1);
    s->out = S(ids_ndim);
    s = add(c);
    s->in[1] = P;
    s->out = P;
}

void mg_rules_attention(mg_candidates *c) {
    c->n = 0;
    add(c);
    for (int d = 0; d < 2; d++) { /* batch, heads */
        mg_dim_strategy *s = add(c);
        s->in[0] = s->in[1] = s->in[2] = S(d);
        s->out = S(d);
    }
    mg_dim_strategy *s = add(c); /* sequence parallel */
    s->in[0] = S(2);
    s->out = S(2);
    s = add(c);
    s->in[2] = P;
    s->out = P;
    s = add(c);
    s->in[2] = S(3);
    s->out = S(3);
}

void mg_rules_attention_gqa(mg_candidates *c, unsigned heads_on) {
    mg_rules_attention(c);
    if (heads_on) { /* candidate 2: the heads */
        c->c[2].mesh_dims = heads_on;
        return;
    }
    memmove(&c->c[2], &c->c[3], (size_t)(c->n - 3) * sizeof c->c[0]);
    c->n--;
}

void mg_rules_rope(mg_candidates *c) {
    c->n = 0;
    add(c);
    for (int d = 0; d < 3; d++) { /* batch, sequence, heads */
        mg_dim_strategy *s = add(c);
        s->in[0] = S(d);
        s->out = S(d);
    }
    mg_dim_strategy *s = add(c);
    s->in[0] = P;
    s->out = P;
}

void mg_rules_narrow(mg_candidates *c, int n_inputs, int ndim, int dim) {
    c->n = 0;
    add(c);
    mg_dim_strategy *s = add(c);
    for (int i = 0; i < n_inputs; i++) s->in[i] = P;
    s->out = P;
    for (int d = 0; d < ndim; d++) {
        if (d == dim) continue;
        s = add(c);
        if (!s) return;
        for (int i = 0; i < n_inputs; i++) s->in[i] = S(d);
        s->out = S(d);
    }
}
