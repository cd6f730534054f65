/* estimate_gpt.c: the GPT's training step walked at the level of specs (see
 * estimate.h, gpt.h), with estimate.c's steps (estimate_walk.h). The GPT is
 * not a chain: the residual stream feeds a block's branch and its sum, and
 * qkv splits into q, k and v. So this walk keeps a small tape of its own:
 * each step reads slots (activations) and writes one, and the backward walk
 * takes the steps in reverse, summing a slot's gradients as the autograd
 * engine does (at the first contribution's spec). Linear layers, reshapes,
 * permutes, GELU and the loss are estimate.c's ops; embedding, the position
 * add, layer norm, narrow, attention, residual adds and the plan's
 * redistributions are here. Exports mg_estimate_gpt. */
#include <stdlib.h>
#include <string.h>

#include "nn/estimate.h"
#include "nn/estimate_walk.h"
#include "ops/ops.h"
#include "status.h"

#define STEPS_PER_BLOCK 40 /* at most: a block takes 24 steps, each writes a slot */

typedef enum { S_CHAIN, S_TO, S_EMBED, S_ADD, S_LN, S_NARROW, S_ATTN } step_kind;

typedef struct {
    step_kind kind;
    int in[3], out, param[2]; /* slots read; slot written; parameters (-1 none) */
    int nin;
    mg_spec to[3], out_spec;  /* the inputs as the op took them */
    mg_est_layer layer;       /* S_CHAIN */
    op_record r;              /* S_CHAIN */
    int64_t at;               /* S_NARROW: the offset along dim 3 */
} gstep;

typedef struct {
    mg_spec store, use;
} gparam;

typedef struct {
    walk *w;
    gstep *steps;       /* each step writes one slot: as many slots as steps (+ the ids) */
    int nsteps, nslots;
    mg_spec *slot, *grad; /* per slot: its spec, its gradient's */
    bool *wants, *has;
    bool *own;            /* the gradient is one the engine made for the slot alone */
    gparam *param;
    int nparams;
    mg_gpt_config g;
} gwalk;

static int new_slot(gwalk *t, const mg_spec *s, bool wants) {
    t->slot[t->nslots] = *s;
    t->wants[t->nslots] = wants;
    return t->nslots++;
}

static gstep *new_step(gwalk *t, step_kind kind) {
    gstep *s = &t->steps[t->nsteps++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->param[0] = s->param[1] = -1;
    return s;
}

/* A parameter of `role` and shape (d0, d1) (d1 0: a vector); its memory counted. */
static int add_param(gwalk *t, mg_gpt_role role, int ndim, int64_t d0, int64_t d1) {
    mg_placement s[MG_MAX_MESH_DIMS], u[MG_MAX_MESH_DIMS];
    mg_plan_gpt_param(&t->w->cfg->plan, role, s, u);
    int64_t shape[2] = {d0, d1};
    gparam *p = &t->param[t->nparams];
    int rc = mg_est_spec(t->w, &p->store, s, ndim, shape);
    if (rc == MG_OK) rc = mg_est_spec(t->w, &p->use, u, ndim, shape);
    if (rc != MG_OK) return rc;
    mg_est_param_memory(t->w, &p->store);
    return t->nparams++;
}

/* mg_params_use: a parameter at its use placements (gathered when stored
 * elsewhere); returns the gathered bytes. */
static double use_param(gwalk *t, int i) {
    return mg_est_gather(t->w, &t->param[i].store, &t->param[i].use);
}

static void held(gwalk *t, double bytes) {
    if (bytes > t->w->e->gathered) t->w->e->gathered = bytes;
}

/* An op of estimate.c on slot x: returns the output slot or a status < 0. */
static int chain(gwalk *t, int x, mg_est_layer layer) {
    gstep *s = new_step(t, S_CHAIN);
    s->layer = layer;
    s->r.layer = &s->layer;
    s->r.in_grad = t->wants[x];
    s->in[0] = x;
    s->nin = 1;
    mg_spec y = t->slot[x];
    int rc = mg_est_forward(t->w, &s->r, &y);
    if (rc != MG_OK) return rc;
    return s->out = new_slot(t, &y, true);
}

static int linear(gwalk *t, int x, mg_gpt_role role, int64_t in, int64_t out, bool no_bias) {
    return chain(t, x, (mg_est_layer){.kind = MG_EST_LINEAR, .in = in, .out = out, .gpt = true,
                                      .role = role, .no_bias = no_bias});
}

/* x brought to placements p (gpt.c's to(): a recorded redistribution). */
static int to(gwalk *t, int x, const mg_placement *p) {
    mg_spec s;
    const mg_spec *src = &t->slot[x];
    int rc = mg_est_spec(t->w, &s, p, src->ndim, src->shape);
    if (rc != MG_OK) return rc;
    if (mg_spec_equal(src, &s)) return x;
    gstep *st = new_step(t, S_TO);
    st->in[0] = x;
    st->nin = 1;
    st->to[0] = s;
    mg_est_redistribute(t->w, src, &s, t->wants[x]);
    return st->out = new_slot(t, &s, t->wants[x]);
}

/* The op's choice for its inputs (slots, or parameters' use specs), their
 * moves made (recorded when they want gradients), its output made. */
static int apply(gwalk *t, gstep *s, const mg_candidates *c, const mg_spec *const *in, int n,
                 int out_ndim, const int64_t *out_shape, bool grad) {
    int rc = mg_est_choose(c, n, in, out_ndim, out_shape, s->to, &s->out_spec);
    if (rc != MG_OK) return rc;
    for (int i = 0; i < n; i++) mg_est_redistribute(t->w, in[i], &s->to[i], grad);
    mg_est_made(t->w, &s->out_spec, true, grad);
    return new_slot(t, &s->out_spec, grad);
}

/* wte[ids] + wpe: x (B, T, C) */
static int embed(gwalk *t, int ids, int wte, int wpe) {
    double bytes = use_param(t, wte) + use_param(t, wpe);
    held(t, bytes);
    mg_candidates c;
    gstep *s = new_step(t, S_EMBED);
    s->in[0] = ids;
    s->param[0] = wte;
    mg_rules_embedding(&c, 2);
    int64_t shape[3] = {t->slot[ids].shape[0], t->g.ctx, t->g.embd};
    int x = apply(t, s, &c, (const mg_spec *const[]){&t->slot[ids], &t->param[wte].use}, 2, 3, shape,
                  true);
    if (x < 0) return x;
    s->out = x;
    /* the ids' check, agreed over the mesh dims that shard them (ops_vocab.c) */
    for (int m = 0; m < t->w->mesh.ndim; m++)
        if (s->to[0].p[m].kind == MG_PLACE_SHARD && t->w->mesh.shape[m] > 1)
            mg_est_count(t->w, MG_COLL_ALL_REDUCE, t->w->mesh.shape[m], 1);
    s = new_step(t, S_ADD);
    s->in[0] = x;
    s->param[1] = wpe;
    int nd[2] = {3, 2};
    mg_rules_pointwise(&c, 2, nd, (const int64_t *const[]){shape, shape + 1}, 3, shape,
                       MG_LINEARITY_SUM);
    x = apply(t, s, &c, (const mg_spec *const[]){&t->slot[x], &t->param[wpe].use}, 2, 3, shape, true);
    return x < 0 ? x : (s->out = x);
}

static int add(gwalk *t, int a, int b) {
    mg_candidates c;
    gstep *s = new_step(t, S_ADD);
    s->in[0] = a;
    s->in[1] = b;
    const mg_spec *x = &t->slot[a];
    int nd[2] = {x->ndim, x->ndim};
    mg_rules_pointwise(&c, 2, nd, (const int64_t *const[]){x->shape, x->shape}, x->ndim, x->shape,
                       MG_LINEARITY_SUM);
    int y = apply(t, s, &c, (const mg_spec *const[]){&t->slot[a], &t->slot[b]}, 2, x->ndim,
                  x->shape, true);
    return y < 0 ? y : (s->out = y);
}

static int layer_norm(gwalk *t, int x, int pw, int pb) {
    held(t, use_param(t, pw) + use_param(t, pb));
    mg_candidates c;
    gstep *s = new_step(t, S_LN);
    s->in[0] = x;
    s->param[0] = pw;
    s->param[1] = pb;
    const mg_spec *xs = &t->slot[x];
    mg_rules_layer_norm(&c, xs->ndim);
    int y = apply(t, s, &c,
                  (const mg_spec *const[]){xs, &t->param[pw].use, &t->param[pb].use}, 3, xs->ndim,
                  xs->shape, true);
    if (y < 0) return y;
    /* the saved statistics: mean and 1/std per row */
    mg_spec stats = s->out_spec;
    stats.shape[stats.ndim - 1] = 1;
    mg_est_made(t->w, &stats, true, false);
    mg_est_made(t->w, &stats, true, false);
    return s->out = y;
}

static int narrow(gwalk *t, int x, int64_t at, int64_t len) {
    mg_candidates c;
    gstep *s = new_step(t, S_NARROW);
    s->in[0] = x;
    s->at = at;
    const mg_spec *xs = &t->slot[x];
    int64_t shape[MG_MAX_DIMS];
    memcpy(shape, xs->shape, sizeof shape);
    shape[3] = len;
    mg_rules_narrow(&c, 1, xs->ndim, 3);
    int y = apply(t, s, &c, (const mg_spec *const[]){xs}, 1, xs->ndim, shape, true);
    return y < 0 ? y : (s->out = y);
}

static int attention(gwalk *t, const int *qkv) {
    mg_candidates c;
    gstep *s = new_step(t, S_ATTN);
    s->nin = 3;
    memcpy(s->in, qkv, 3 * sizeof *qkv);
    mg_rules_attention(&c);
    const mg_spec *q = &t->slot[qkv[0]];
    int y = apply(t, s, &c, (const mg_spec *const[]){q, &t->slot[qkv[1]], &t->slot[qkv[2]]}, 3, 4,
                  q->shape, true);
    if (y < 0) return y;
    mg_spec lse = s->out_spec; /* the saved log-sum-exp per query (B, H, T) */
    lse.shape[3] = 1;
    mg_est_made(t->w, &lse, true, false);
    return s->out = y;
}

/* ---- the forward pass, as gpt.c runs it ------------------------------------------ */

#define TRY(x)                   \
    do {                         \
        if ((rc = (x)) < 0) return rc; \
    } while (0)

static int block(gwalk *t, int x, const mg_placement *resid, const mg_placement *region) {
    const int64_t C = t->g.embd, H = t->g.heads, D = C / H;
    int rc, p[12];
    TRY(p[0] = add_param(t, MG_GPT_REPLICATED, 1, C, 0));
    TRY(p[1] = add_param(t, MG_GPT_REPLICATED, 1, C, 0));
    TRY(p[2] = add_param(t, MG_GPT_REPLICATED, 1, C, 0));
    TRY(p[3] = add_param(t, MG_GPT_REPLICATED, 1, C, 0));
    int h;
    TRY(h = layer_norm(t, x, p[0], p[1]));
    TRY(h = to(t, h, region));
    TRY(h = linear(t, h, MG_GPT_COLUMN, C, 3 * C, false));
    TRY(h = chain(t, h, (mg_est_layer){.kind = MG_EST_RESHAPE, .ndim = 4,
                                       .shape = {0, t->g.ctx, H, 3 * D}}));
    int qkv[3];
    for (int i = 0; i < 3; i++) {
        TRY(qkv[i] = narrow(t, h, i * D, D));
        TRY(qkv[i] = chain(t, qkv[i], (mg_est_layer){.kind = MG_EST_PERMUTE, .ndim = 4,
                                                     .perm = {0, 2, 1, 3}}));
    }
    TRY(h = attention(t, qkv));
    TRY(h = chain(t, h, (mg_est_layer){.kind = MG_EST_PERMUTE, .ndim = 4, .perm = {0, 2, 1, 3}}));
    TRY(h = chain(t, h, (mg_est_layer){.kind = MG_EST_RESHAPE, .ndim = 3, .shape = {0, t->g.ctx, C}}));
    TRY(h = linear(t, h, MG_GPT_ROW, C, C, false));
    TRY(x = add(t, x, h));
    TRY(x = to(t, x, resid));
    TRY(h = layer_norm(t, x, p[2], p[3]));
    TRY(h = to(t, h, region));
    TRY(h = linear(t, h, MG_GPT_COLUMN, C, 4 * C, false));
    TRY(h = chain(t, h, (mg_est_layer){.kind = MG_EST_RELU})); /* GELU: the same rules */
    TRY(h = linear(t, h, MG_GPT_ROW, 4 * C, C, false));
    TRY(x = add(t, x, h));
    return to(t, x, resid);
}

static int forward(gwalk *t, int ids, int labels, int *loss) {
    const int64_t C = t->g.embd;
    mg_placement resid[MG_MAX_MESH_DIMS], region[MG_MAX_MESH_DIMS];
    mg_plan_residual(&t->w->cfg->plan, resid);
    mg_plan_region_input(&t->w->cfg->plan, region);
    int rc, wte, wpe, x;
    TRY(wte = add_param(t, MG_GPT_EMBEDDING, 2, t->g.vocab, C));
    TRY(wpe = add_param(t, MG_GPT_REPLICATED, 2, t->g.ctx, C));
    TRY(x = embed(t, ids, wte, wpe));
    TRY(x = to(t, x, resid));
    for (int l = 0; l < t->g.layers; l++) {
        /* the block's matrices and biases counted as gpt.c adds them: after its
         * layer norms here, the same bytes */
        TRY(x = block(t, x, resid, region));
    }
    int lw, lb;
    TRY(lw = add_param(t, MG_GPT_REPLICATED, 1, C, 0));
    TRY(lb = add_param(t, MG_GPT_REPLICATED, 1, C, 0));
    TRY(x = layer_norm(t, x, lw, lb));
    TRY(x = to(t, x, region));
    /* the head: wte used again (gathered again under fsdp, by the linear) */
    TRY(x = linear(t, x, MG_GPT_EMBEDDING, C, t->g.vocab, true));
    (void)labels;
    TRY(x = chain(t, x, (mg_est_layer){.kind = MG_EST_CROSS_ENTROPY}));
    *loss = x;
    return MG_OK;
}
#undef TRY

/* ---- the backward pass ----------------------------------------------------------- */

/* g summed into slot i's gradient (at the first contribution's spec), as the
 * engine does: into a sum it made (or a narrow's gradient) in place, else
 * into a new sum. own: g was made for the slot alone. */
static void accumulate(gwalk *t, int i, const mg_spec *g, bool own) {
    if (!t->wants[i]) return;
    if (!t->has[i]) {
        t->grad[i] = *g;
        t->has[i] = true;
        t->own[i] = own;
        return;
    }
    mg_est_redistribute(t->w, g, &t->grad[i], false);
    if (!t->own[i]) mg_est_made(t->w, &t->grad[i], true, false);
    t->own[i] = true;
}


/* The mirror of input i's move into the op: g back to its placements. */
static void mirror_in(gwalk *t, const gstep *s, int i, mg_spec *g) {
    const mg_spec *from = &t->slot[s->in[i]];
    if (mg_spec_equal(from, &s->to[i])) return;
    mg_spec back = mg_est_replicated(from);
    mg_est_redistribute(t->w, g, &back, false);
    *g = back;
}

/* A parameter's gradient g computed at the spec the op took it at, then as
 * the engine moves it (ops.c's parameter copies):
 *   - an op that took the parameter itself (use == store) took a copy of it,
 *     whose gradient goes straight to the reducer: no mirror of the op's move,
 *     a Partial dim of g stays Partial for the reducer's buckets, once a step;
 *   - an op that moved a copy (fsdp's gathered one) recorded the move, and the
 *     mirror takes g back to the use placements, a Partial dim made Replicate
 *     there: a sum per micro-batch.
 * Then to the placements of its gradient buffer but for Partial dims (the
 * reducer's), then to the buffer. */
static double param_grad(gwalk *t, int p, mg_spec g, const mg_spec *taken) {
    const gparam *gp = &t->param[p];
    if (!mg_spec_equal(taken, &gp->use) && !mg_spec_equal(&gp->use, &gp->store)) {
        mg_spec back = mg_est_replicated(&gp->use);
        mg_est_redistribute(t->w, &g, &back, false);
        g = back;
    }
    mg_spec at = gp->use;
    for (int m = 0; m < at.mesh->ndim; m++)
        if (g.p[m].kind == MG_PLACE_PARTIAL) at.p[m] = g.p[m];
    mg_est_redistribute(t->w, &g, &at, false);
    return mg_est_contribute(t->w, &at, &gp->use, &gp->store);
}

/* An op's backward takes parameter p again: gathered again under fsdp. */
static void regather(gwalk *t, int p) {
    held(t, mg_est_gather(t->w, &t->param[p].store, &t->param[p].use));
}

/* s with Partial on each mesh dim that shards one of x's dims below `keep`
 * (a sum over those dims: a gradient of a broadcast parameter). */
static mg_spec summed(const mg_spec *s, const mg_spec *x, int keep) {
    mg_spec r = mg_est_replicated(s); /* the gradient of a Partial value is Replicate */
    for (int m = 0; m < r.mesh->ndim; m++)
        if (x->p[m].kind == MG_PLACE_SHARD && x->p[m].dim < keep) r.p[m] = MG_PARTIAL_SUM;
    return r;
}

static void scratch(gwalk *t, double bytes) {
    if (bytes > t->w->e->scratch) t->w->e->scratch = bytes;
}

static int backward_step(gwalk *t, gstep *s) {
    mg_spec g = t->grad[s->out];
    walk *w = t->w;
    switch (s->kind) {
    case S_CHAIN: {
        /* the head's contribution to wte is summed with the embedding's and
         * reduced once, after that last use */
        double kept[MG_MAX_MESH_DIMS];
        memcpy(kept, w->bucket_floats, sizeof kept);
        int rc = mg_est_backward(w, &s->r, &g);
        if (rc != MG_OK) return rc;
        if (s->layer.no_bias) memcpy(w->bucket_floats, kept, sizeof kept);
        if (s->r.in_grad) accumulate(t, s->in[0], &g, false);
        break;
    }
    case S_TO: {
        mg_spec back = mg_est_replicated(&t->slot[s->in[0]]);
        mg_est_redistribute(w, &g, &back, false);
        accumulate(t, s->in[0], &back, false);
        break;
    }
    case S_EMBED: { /* the table's gradient: a scatter-add of the rows, summed
                     * over the shards of the ids */
        mg_spec at = mg_est_replicated(&s->out_spec);
        mg_est_redistribute(w, &g, &at, false);
        mg_spec gw = summed(&s->to[1], &s->to[0], s->to[0].ndim);
        mg_est_made(w, &gw, true, false);
        scratch(t, param_grad(t, s->param[0], gw, &s->to[1]));
        break;
    }
    case S_ADD: {
        mg_spec at = mg_est_replicated(&s->out_spec);
        mg_est_redistribute(w, &g, &at, false);
        for (int i = 0; i < 2; i++) {
            mg_spec gi = at;
            if (s->param[i] >= 0) { /* wpe (T, C): summed over the batch */
                mg_candidates c;
                mg_spec t1[1];
                mg_rules_reduce(&c, at.ndim, (const bool[]){true, false, false}, false);
                int rc = mg_est_choose(&c, 1, (const mg_spec *const[]){&at}, 2, s->to[i].shape, t1, &gi);
                if (rc != MG_OK) return rc;
                mg_est_redistribute(w, &at, &t1[0], false);
                mg_est_made(w, &gi, true, false);
                regather(t, s->param[i]);
                scratch(t, param_grad(t, s->param[i], gi, &s->to[i]));
                continue;
            }
            if (!t->wants[s->in[i]]) continue;
            mirror_in(t, s, i, &gi);
            accumulate(t, s->in[i], &gi, false);
        }
        break;
    }
    case S_LN: {
        regather(t, s->param[0]);
        mg_spec at = mg_est_replicated(&s->out_spec);
        mg_est_redistribute(w, &g, &at, false);
        mg_spec dx = s->to[0];
        mg_est_made(w, &dx, true, false);
        double sc = 0;
        for (int i = 1; i < 3; i++) {
            mg_spec gp = summed(&s->to[i], &s->to[0], s->to[0].ndim - 1);
            mg_est_made(w, &gp, true, false);
            sc += param_grad(t, s->param[i - 1], gp, &s->to[i]);
        }
        scratch(t, sc);
        mirror_in(t, s, 0, &dx);
        accumulate(t, s->in[0], &dx, false);
        break;
    }
    case S_NARROW: {
        int x = s->in[0];
        if (t->has[x] && t->own[x] && !mg_ops_shard_mask(&t->grad[x], 3)) { /* into its slice */
            mg_spec at = t->grad[x];
            at.shape[3] = g.shape[3];
            mg_est_redistribute(w, &g, &at, false);
            break;
        }
        mg_spec dx = s->to[0]; /* zeros around g: the input's shape */
        mg_est_made(w, &dx, true, false);
        mirror_in(t, s, 0, &dx);
        accumulate(t, x, &dx, true);
        break;
    }
    case S_ATTN: {
        mg_spec at = mg_est_replicated(&s->out_spec);
        mg_est_redistribute(w, &g, &at, false);
        for (int i = 0; i < 3; i++) {
            /* k and v taken whole against a sequence shard of q: Partial there */
            mg_spec gi = s->to[i];
            for (int m = 0; i && m < gi.mesh->ndim; m++)
                if (s->to[0].p[m].kind == MG_PLACE_SHARD && s->to[0].p[m].dim == 2 &&
                    s->to[i].p[m].kind != MG_PLACE_SHARD)
                    gi.p[m] = MG_PARTIAL_SUM;
            mg_est_made(w, &gi, true, false);
            mirror_in(t, s, i, &gi);
            accumulate(t, s->in[i], &gi, false);
        }
        break;
    }
    }
    return MG_OK;
}

/* ---- the step -------------------------------------------------------------------- */

int mg_estimate_gpt(const mg_gpt_config *g, const mg_est_config *cfg, mg_estimate *e) {
    memset(e, 0, sizeof *e);
    if (cfg->plan.ndim != cfg->mesh_ndim)
        return mg_error(MG_EINVAL, "estimate: %d plans for a %d-d mesh: give one per mesh dim",
                        cfg->plan.ndim, cfg->mesh_ndim);
    size_t cap = (size_t)(g->layers + 1) * STEPS_PER_BLOCK;
    gwalk *t = calloc(1, sizeof *t);
    walk *w = calloc(1, sizeof *w);
    gstep *steps = calloc(cap, sizeof *steps);
    if (t) {
        t->slot = calloc(cap, sizeof *t->slot);
        t->grad = calloc(cap, sizeof *t->grad);
        t->wants = calloc(cap, sizeof *t->wants);
        t->has = calloc(cap, sizeof *t->has);
        t->own = calloc(cap, sizeof *t->own);
        t->param = calloc(cap, sizeof *t->param);
    }
    int rc = !t || !w || !steps || !t->slot || !t->grad || !t->wants || !t->has || !t->own ||
                     !t->param
                 ? mg_error(MG_ENOMEM, "estimate: out of memory for a GPT of %lld layers",
                            (long long)g->layers)
                 : MG_OK;
    if (rc != MG_OK) goto done;
    t->w = w;
    t->steps = steps;
    t->g = *g;
    w->cfg = cfg;
    w->e = e;
    w->mesh.ndim = cfg->mesh_ndim;
    for (int m = 0; m < cfg->mesh_ndim; m++) w->mesh.shape[m] = cfg->mesh[m];
    /* the batch, as the loader makes it in the step arena: ids and labels (B, T) */
    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(&cfg->plan, bp);
    mg_spec ids;
    int loss = -1;
    int64_t micro = cfg->micro > 1 ? cfg->micro : 1;
    if (cfg->batch % micro != 0)
        rc = mg_error(MG_EINVAL, "estimate: %lld micro-batches do not divide batch %lld",
                      (long long)micro, (long long)cfg->batch);
    if (rc == MG_OK) rc = mg_est_spec(w, &ids, bp, 2, (int64_t[]){cfg->batch / micro, g->ctx});
    double ids_data = w->data;
    if (rc == MG_OK) {
        mg_est_made(w, &ids, true, false);
        mg_est_made(w, &ids, true, false);
        ids_data = w->data - ids_data;
        mg_est_control(w, MG_COLL_ALL_REDUCE, 8); /* the loader's agreement */
        int x = new_slot(t, &ids, false);
        rc = forward(t, x, x, &loss);
    }
    if (rc == MG_OK) { /* the seed, d loss / d loss = 1, Replicate */
        mg_spec seed = mg_est_replicated(&t->slot[loss]);
        for (int m = 0; m < cfg->mesh_ndim; m++) seed.p[m] = MG_REPLICATE;
        if (micro > 1) { /* the loss scaled by 1 / micro, and its gradient */
            mg_est_made(w, &t->slot[loss], true, true);
            mg_est_made(w, &seed, true, false);
        }
        mg_est_made(w, &seed, true, false);
        t->grad[loss] = seed;
        t->has[loss] = true;
    }
    for (int i = t->nsteps - 1; i >= 0 && rc == MG_OK; i--)
        if (t->has[steps[i].out]) rc = backward_step(t, &steps[i]);
    if (rc == MG_OK && micro > 1) {
        /* train.c: each micro-batch's tensor data in an arena of its own, reset
         * after its backward; its ids and labels, and every tensor's headers,
         * in the step arena until the step ends. Its collectives, but for the
         * gradients' sums, once a micro-batch. */
        double headers = w->step - w->data, data = w->data - ids_data;
        w->step = (double)micro * (headers + ids_data) + data;
        for (int k = 0; k < MG_COLL_COUNT; k++) {
            e->bytes[k] = (double)micro * (e->bytes[k] - w->sync_bytes[k]) + w->sync_bytes[k];
            e->calls[k] = (double)micro * (e->calls[k] - w->sync_calls[k]) + w->sync_calls[k];
        }
    }
    if (rc == MG_OK) {
        mg_spec *stores = calloc((size_t)t->nparams, sizeof *stores);
        if (!stores) rc = mg_error(MG_ENOMEM, "estimate: out of memory");
        for (int i = 0; stores && i < t->nparams; i++) stores[i] = t->param[i].store;
        if (stores) mg_est_finish(w, &t->slot[loss], stores, t->nparams);
        free(stores);
    }
done:
    if (t) free(t->slot), free(t->grad), free(t->wants), free(t->has), free(t->own), free(t->param);
    free(steps), free(w), free(t);
    return rc < 0 ? rc : MG_OK;
}
