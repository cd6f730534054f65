/* pipeline_exec.c: the executor of pipeline schedules (see pipeline_exec.h).
 * State: one slot per (micro-batch, stage held) with its arena, tensors and
 * transfers; a pool of arenas (shared with mg_pp_exec_share_arenas); the
 * transfers in flight. */
#include "nn/pipeline_exec.h"

#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/backward.h"
#include "backend/backend.h"
#include "array.h"
#include "context.h"
#include "dist/mesh.h"
#include "dist/reducer.h"
#include "dist/redistribute.h"
#include "nn/nn_state.h"
#include "status.h"

/* A header: magic, kind, micro-batch, stage, ndim, the global shape (two
 * words a dim), the placements (kind and dim per mesh dim). Sent as floats
 * holding the words' bits. */
enum { MAGIC = 0x4d475050, KIND_ACT = 1, KIND_GRAD = 2 };
#define HEADER_WORDS (5 + 2 * MG_MAX_DIMS + 2 * MG_MAX_MESH_DIMS)

typedef struct {
    mg_p2p_request head, data;
    float words[HEADER_WORDS];
    int head_posted, data_posted, waited;
    mg_dtensor *t; /* a receive's tensor, once its header is in */
} xfer;

typedef struct slot {
    int mb, stage;
    mg_arena *arena;
    mg_dtensor *x, *y, *dx; /* input (a leaf), output or loss, input gradient */
    mg_dtensor *now[1];
    mg_backward_weights w;
    xfer recv_act, recv_grad, send_act, send_grad;
    int backward_done, grad_to_send, sends_open, lent;
    int act_to_send; /* forward only: the output's send is yet to be posted */
    struct slot *borrowed; /* the next stage's slot whose input gradient B took */
} slot;

/* Arenas, given back to `free_` between uses; `all` owns them. One pool may
 * serve several executors (refs of them). */
typedef struct {
    mg_arena **free_, **all;
    int nfree, nall, cap, refs;
} arena_pool;

struct mg_pp_exec {
    const mg_pp_schedule *s;
    int rank, v, M, S;
    mg_comm *pp;
    const mg_mesh *mesh;
    slot *slots; /* [mb * v + chunk] */
    arena_pool *pool;
    xfer **recvs;  /* headers posted, data not yet */
    slot **recv_slot;
    int nrecvs;
    slot **sending; /* slots with sends in flight */
    int nsending;
    int live;
    int forward_only; /* mg_pp_exec_forward */
    double compute_t0; /* when the running compute's inputs were in (its wait excluded) */
    int *last_mb; /* per stage held: the micro-batch of its last backward in the list */
    size_t *stage_bytes, *stage_peak_bytes, *stage_mb_bytes;
    int *stage_live, *stage_peak_live;
    double *start, *end, t0;
    mg_pp_exec_stats st;
};

static slot *slot_of(mg_pp_exec *e, int mb, int stage) {
    return &e->slots[(size_t)mb * (size_t)e->v + (size_t)(stage / e->s->ranks)];
}

static int rank_of(const mg_pp_exec *e, int stage) { return mg_pp_stage_rank(e->s, stage); }

mg_pp_exec *mg_pp_exec_new(const mg_pp_schedule *s, int rank, mg_comm *pp,
                           const mg_mesh *stage_mesh) {
    mg_pp_exec *e = calloc(1, sizeof *e);
    if (!e) return mg_error_null(MG_ENOMEM, "pipeline executor: out of memory");
    e->s = s;
    e->rank = rank;
    e->v = s->virtual_stages;
    e->M = s->microbatches;
    e->S = s->stages;
    e->pp = pp;
    e->mesh = stage_mesh;
    size_t nslots = (size_t)e->M * (size_t)e->v, n = (size_t)s->len[rank];
    e->slots = calloc(nslots, sizeof *e->slots);
    e->pool = calloc(1, sizeof *e->pool);
    if (e->pool) e->pool->refs = 1;
    e->recvs = calloc(2 * nslots, sizeof *e->recvs);
    e->recv_slot = calloc(2 * nslots, sizeof *e->recv_slot);
    e->sending = calloc(nslots, sizeof *e->sending);
    e->stage_bytes = calloc((size_t)e->v, sizeof *e->stage_bytes);
    e->stage_peak_bytes = calloc((size_t)e->v, sizeof *e->stage_peak_bytes);
    e->stage_mb_bytes = calloc((size_t)e->v, sizeof *e->stage_mb_bytes);
    e->stage_live = calloc((size_t)e->v, sizeof *e->stage_live);
    e->stage_peak_live = calloc((size_t)e->v, sizeof *e->stage_peak_live);
    e->last_mb = calloc((size_t)e->v, sizeof *e->last_mb);
    e->start = calloc(n + 1, sizeof *e->start);
    e->end = calloc(n + 1, sizeof *e->end);
    if (!e->slots || !e->pool || !e->recvs || !e->recv_slot || !e->sending ||
        !e->stage_bytes || !e->stage_peak_bytes || !e->stage_mb_bytes || !e->stage_live ||
        !e->stage_peak_live || !e->last_mb || !e->start || !e->end) {
        mg_pp_exec_free(e);
        return mg_error_null(MG_ENOMEM, "pipeline executor: out of memory for %d micro-batches",
                             e->M);
    }
    for (size_t i = 0; i < n; i++) {
        const mg_pp_action *a = &s->actions[rank][i];
        if (a->op == MG_PP_BACKWARD || a->op == MG_PP_BACKWARD_WEIGHT)
            e->last_mb[a->stage / s->ranks] = a->mb;
    }
    return e;
}

static void pool_drop(arena_pool *p) {
    if (!p || --p->refs > 0) return;
    for (int i = 0; i < p->nall; i++) mg_arena_free(p->all[i]);
    free(p->free_);
    free(p->all);
    free(p);
}

void mg_pp_exec_free(mg_pp_exec *e) {
    if (!e) return;
    pool_drop(e->pool);
    free(e->slots);
    free(e->recvs);
    free(e->recv_slot);
    free(e->sending);
    free(e->stage_bytes);
    free(e->stage_peak_bytes);
    free(e->stage_mb_bytes);
    free(e->stage_live);
    free(e->stage_peak_live);
    free(e->last_mb);
    free(e->start);
    free(e->end);
    free(e);
}

/* ---- memory ------------------------------------------------------------------------ */

int mg_pp_exec_share_arenas(mg_pp_exec *e, mg_pp_exec *with) {
    if (e->pool->nall > 0)
        return mg_error(MG_ESTATE, "pipeline executor: arenas shared after a run");
    pool_drop(e->pool);
    e->pool = with->pool;
    e->pool->refs++;
    return MG_OK;
}

static int acquire(mg_pp_exec *e, slot *sl) {
    if (sl->arena) return MG_OK;
    arena_pool *p = e->pool;
    if (p->nfree > 0) {
        sl->arena = p->free_[--p->nfree];
        return MG_OK;
    }
    if (p->nall == p->cap) {
        int cap = p->cap ? 2 * p->cap : 8;
        mg_arena **all = realloc(p->all, (size_t)cap * sizeof *all);
        if (all) p->all = all;
        mg_arena **free_ = all ? realloc(p->free_, (size_t)cap * sizeof *free_) : NULL;
        if (free_) p->free_ = free_;
        if (!all || !free_) return mg_error(MG_ENOMEM, "pipeline executor: out of memory");
        p->cap = cap;
    }
    if (!(sl->arena = mg_micro_arena_new(1 << 20))) return mg_last_code();
    p->all[p->nall++] = sl->arena;
    return MG_OK;
}

/* A (micro-batch, stage) is live from its forward until its backward (W for
 * a split one) is done: the verifier's count (pipeline_verify.h). */
static void count_live(mg_pp_exec *e, const slot *sl, int delta) {
    int c = sl->stage / e->s->ranks;
    e->live += delta;
    e->stage_live[c] += delta;
    if (e->live > e->st.peak_live) e->st.peak_live = e->live;
    if (e->stage_live[c] > e->stage_peak_live[c]) e->stage_peak_live[c] = e->stage_live[c];
}

/* The bytes held now, into the high-water marks. */
static void measure(mg_pp_exec *e) {
    size_t total = 0;
    memset(e->stage_bytes, 0, (size_t)e->v * sizeof *e->stage_bytes);
    for (int i = 0; i < e->M * e->v; i++) {
        slot *sl = &e->slots[i];
        if (!sl->arena) continue;
        size_t b = mg_arena_data_used(sl->arena);
        total += b;
        e->stage_bytes[i % e->v] += b;
        if (b > e->st.mb_bytes) e->st.mb_bytes = b;
    }
    if (total > e->st.peak_bytes) e->st.peak_bytes = total;
    for (int c = 0; c < e->v; c++)
        if (e->stage_bytes[c] > e->stage_peak_bytes[c]) e->stage_peak_bytes[c] = e->stage_bytes[c];
}

/* Gives the slot's arena back when nothing needs its memory any more. */
static void try_release(mg_pp_exec *e, slot *sl) {
    if (!sl->arena || !sl->backward_done || sl->grad_to_send || sl->act_to_send ||
        sl->sends_open || sl->lent)
        return;
    if (sl->x) mg_reducer_forget(sl->x);
    mg_arena_reset(sl->arena);
    e->pool->free_[e->pool->nfree++] = sl->arena;
    sl->arena = NULL;
}

/* ---- transfers ----------------------------------------------------------------------- */

static void put_word(float *words, int i, int32_t v) { memcpy(&words[i], &v, sizeof v); }
static int32_t get_word(const float *words, int i) {
    int32_t v;
    memcpy(&v, &words[i], sizeof v);
    return v;
}

static void header_make(float *w, int kind, int mb, int stage, const mg_spec *spec) {
    memset(w, 0, HEADER_WORDS * sizeof *w);
    put_word(w, 0, MAGIC);
    put_word(w, 1, kind);
    put_word(w, 2, mb);
    put_word(w, 3, stage);
    put_word(w, 4, spec->ndim);
    for (int d = 0; d < spec->ndim; d++) {
        put_word(w, 5 + 2 * d, (int32_t)(spec->shape[d] & 0x7fffffff));
        put_word(w, 6 + 2 * d, (int32_t)(spec->shape[d] >> 31));
    }
    for (int m = 0; m < spec->mesh->ndim; m++) {
        put_word(w, 5 + 2 * MG_MAX_DIMS + 2 * m, (int32_t)spec->p[m].kind);
        put_word(w, 6 + 2 * MG_MAX_DIMS + 2 * m, (int32_t)spec->p[m].dim);
    }
}

static const char *kind_name(int kind) { return kind == KIND_ACT ? "activation" : "gradient"; }

/* The spec a header describes, checked against what the schedule expects. */
static int header_read(mg_pp_exec *e, const float *w, int kind, int mb, int stage, int peer,
                       mg_spec *spec) {
    int ndim = get_word(w, 4);
    if (get_word(w, 0) != MAGIC || get_word(w, 1) != kind || get_word(w, 2) != mb ||
        get_word(w, 3) != stage || ndim < 0 || ndim > MG_MAX_DIMS)
        return mg_error(MG_ECOMM, "pipeline: pipeline rank %d expected the %s of micro-batch %d, "
                                  "stage %d from rank %d, and got a header for micro-batch %d, "
                                  "stage %d (kind %d): the ranks run different schedules",
                        e->rank, kind_name(kind), mb, stage, peer, (int)get_word(w, 2),
                        (int)get_word(w, 3), (int)get_word(w, 1));
    int64_t shape[MG_MAX_DIMS];
    mg_placement p[MG_MAX_MESH_DIMS];
    for (int d = 0; d < ndim; d++)
        shape[d] = (int64_t)get_word(w, 5 + 2 * d) | ((int64_t)get_word(w, 6 + 2 * d) << 31);
    for (int m = 0; m < e->mesh->ndim; m++) {
        p[m].kind = (mg_place_kind)get_word(w, 5 + 2 * MG_MAX_DIMS + 2 * m);
        p[m].dim = get_word(w, 6 + 2 * MG_MAX_DIMS + 2 * m);
    }
    return mg_spec_make(spec, e->mesh, p, e->mesh->ndim, ndim, shape, "pipeline transfer");
}

/* ---- meta runs: headers without messages ---------------------------------------
 * On a meta comm (dist/comm_meta.c) nothing arrives. A gradient's header is
 * the receiving slot's own output's spec; an activation's is the one the
 * sending rank's run recorded: a plan estimate runs the pipeline ranks one
 * after another (train/estimate.c), and the store outlives each run, in the
 * context, until mg_pp_meta_headers_free. */
typedef struct {
    int stage, mb;
    float words[HEADER_WORDS];
} meta_header;

struct mg_pp_meta_headers {
    meta_header *h;
    int n, cap;
    int missing; /* a receive found no header yet */
};

static struct mg_pp_meta_headers *meta_store(void) {
    mg_nn_state *c = mg_nn();
    if (!c->pp_meta_headers) c->pp_meta_headers = calloc(1, sizeof *c->pp_meta_headers);
    return c->pp_meta_headers;
}

static meta_header *meta_find(struct mg_pp_meta_headers *m, int stage, int mb) {
    for (int i = 0; m && i < m->n; i++)
        if (m->h[i].stage == stage && m->h[i].mb == mb) return &m->h[i];
    return NULL;
}

static int meta_record(const float *words, int stage, int mb) {
    struct mg_pp_meta_headers *m = meta_store();
    if (!m) return mg_error(MG_ENOMEM, "pipeline: out of memory");
    meta_header *h = meta_find(m, stage, mb);
    if (!h) {
        if (mg_array_grow((void **)&m->h, &m->cap, m->n + 1, sizeof *m->h, "pipeline") != MG_OK)
            return mg_last_code();
        h = &m->h[m->n++];
        h->stage = stage;
        h->mb = mb;
    }
    memcpy(h->words, words, sizeof h->words);
    return MG_OK;
}

/* The header a meta receive would have got, into x->words. */
static int meta_header_of(slot *sl, xfer *x, int kind) {
    if (kind == KIND_GRAD) {
        if (!sl->y) return mg_error(MG_ESTATE, "pipeline: a gradient before its forward");
        header_make(x->words, kind, sl->mb, sl->stage, &sl->y->spec);
        return MG_OK;
    }
    struct mg_pp_meta_headers *m = meta_store();
    meta_header *h = meta_find(m, sl->stage, sl->mb);
    if (!h) {
        if (m) m->missing = 1;
        return mg_error(MG_ESTATE, "pipeline: stage %d's input of micro-batch %d is not known "
                        "yet (the sending rank's run comes later)", sl->stage, sl->mb);
    }
    memcpy(x->words, h->words, sizeof x->words);
    return MG_OK;
}

int mg_pp_meta_headers_missing(void) {
    struct mg_pp_meta_headers *m = mg_nn()->pp_meta_headers;
    int was = m && m->missing;
    if (m) m->missing = 0;
    return was;
}

void mg_pp_meta_headers_free(void) {
    struct mg_pp_meta_headers *m = mg_nn()->pp_meta_headers;
    if (m) free(m->h);
    free(m);
    mg_nn()->pp_meta_headers = NULL;
}

/* The header of a receive is in: its tensor (in the slot's arena) and the
 * receive of its data. */
static int post_data(mg_pp_exec *e, slot *sl, xfer *x, int kind, int peer) {
    mg_spec spec;
    int rc = e->pp->meta ? meta_header_of(sl, x, kind) : MG_OK;
    if (rc == MG_OK) rc = header_read(e, x->words, kind, sl->mb, sl->stage, peer, &spec);
    if (rc == MG_OK) rc = acquire(e, sl);
    if (rc != MG_OK) return rc;
    int64_t local[MG_MAX_DIMS];
    mg_spec_local(&spec, NULL, local, NULL);
    mg_arena *step = mg_step_arena();
    mg_arena *was = mg_arena_redirect_data(step, sl->arena);
    mg_tensor *t = mg_tensor_alloc(step, spec.ndim, local);
    mg_arena_redirect_data(step, was);
    x->t = t ? mg_dtensor_make(&spec, t, step) : NULL;
    if (!x->t) return mg_last_code() ? mg_last_code() : MG_ENOMEM;
    if (kind == KIND_ACT) x->t->requires_grad = 1; /* the stage's input: a leaf */
    x->data_posted = 1;
    measure(e);
    return mg_comm_irecv(e->pp, x->t->local->data, x->t->local->numel, peer, &x->data);
}

/* Headers that arrived: their data's receives are posted. */
static int progress(mg_pp_exec *e) {
    int rc = MG_OK;
    for (int i = 0; i < e->nrecvs && rc == MG_OK;) {
        xfer *x = e->recvs[i];
        slot *sl = e->recv_slot[i];
        if ((rc = mg_comm_p2p_test(e->pp, &x->head)) != MG_OK) break;
        if (!x->head.done) {
            i++;
            continue;
        }
        int kind = x == &sl->recv_act ? KIND_ACT : KIND_GRAD;
        rc = post_data(e, sl, x, kind, x->head.peer);
        e->recvs[i] = e->recvs[--e->nrecvs];
        e->recv_slot[i] = e->recv_slot[e->nrecvs];
    }
    for (int i = 0; i < e->nsending && rc == MG_OK;) { /* sends done: memory free to go */
        slot *sl = e->sending[i];
        int open = 0;
        xfer *xs[2] = {&sl->send_act, &sl->send_grad};
        for (int k = 0; k < 2 && rc == MG_OK; k++) {
            if (!xs[k]->head_posted || xs[k]->waited) continue;
            if ((rc = mg_comm_p2p_test(e->pp, &xs[k]->head)) == MG_OK)
                rc = mg_comm_p2p_test(e->pp, &xs[k]->data);
            if (xs[k]->head.done && xs[k]->data.done) xs[k]->waited = 1;
            else open++;
        }
        sl->sends_open = open;
        if (open) {
            i++;
            continue;
        }
        e->sending[i] = e->sending[--e->nsending];
        try_release(e, sl);
    }
    return rc;
}

/* Waits for the header of pending receive i and posts its data's receive. */
static int take_header(mg_pp_exec *e, int i) {
    xfer *x = e->recvs[i];
    slot *sl = e->recv_slot[i];
    e->recvs[i] = e->recvs[--e->nrecvs];
    e->recv_slot[i] = e->recv_slot[e->nrecvs];
    int rc = mg_comm_p2p_wait(e->pp, &x->head);
    return rc == MG_OK ? post_data(e, sl, x, x == &sl->recv_act ? KIND_ACT : KIND_GRAD,
                                   x->head.peer)
                       : rc;
}

/* A receive's header. Messages from one peer meet the receives in the order
 * both sides post them (one tag): a header's receive is posted only after the
 * data's receive of the transfer before it from that peer, so it cannot meet
 * that data. (Waiting here for an earlier header is no more than the
 * rendezvous model the schedule was proven under waits for.) */
static int post_recv(mg_pp_exec *e, slot *sl, xfer *x, int peer) {
    for (int i = 0; i < e->nrecvs; i++)
        if (e->recvs[i]->head.peer == peer) {
            int rc = take_header(e, i);
            if (rc != MG_OK) return rc;
            break; /* at most one per peer is pending */
        }
    memset(x, 0, sizeof *x);
    x->head_posted = 1;
    e->recvs[e->nrecvs] = x;
    e->recv_slot[e->nrecvs++] = sl;
    return mg_comm_irecv(e->pp, x->words, HEADER_WORDS, peer, &x->head);
}

static int post_send(mg_pp_exec *e, slot *sl, xfer *x, int kind, const mg_dtensor *t, int peer) {
    if (!t)
        return mg_error(MG_ESTATE, "pipeline: rank %d has no %s of micro-batch %d, stage %d to "
                                   "send", e->rank, kind_name(kind), sl->mb, sl->stage);
    memset(x, 0, sizeof *x);
    /* the header names the stage that receives it */
    header_make(x->words, kind, sl->mb, sl->stage + (kind == KIND_ACT ? 1 : -1), &t->spec);
    if (e->pp->meta && kind == KIND_ACT) {
        int rc = meta_record(x->words, sl->stage + 1, sl->mb);
        if (rc != MG_OK) return rc;
    }
    x->head_posted = 1;
    if (sl->sends_open++ == 0) e->sending[e->nsending++] = sl;
    int rc = mg_comm_isend(e->pp, x->words, HEADER_WORDS, peer, &x->head);
    if (rc == MG_OK) rc = mg_comm_isend(e->pp, t->local->data, t->local->numel, peer, &x->data);
    return rc;
}

/* Waits for a receive posted earlier: header, then data. */
static int finish_recv(mg_pp_exec *e, slot *sl, xfer *x, int kind) {
    if (!x->head_posted)
        return mg_error(MG_ESTATE, "pipeline: rank %d computes micro-batch %d, stage %d before "
                                   "receiving its %s", e->rank, sl->mb, sl->stage, kind_name(kind));
    (void)sl, (void)kind;
    for (int i = 0; i < e->nrecvs; i++)
        if (e->recvs[i] == x) {
            int rc = take_header(e, i);
            if (rc != MG_OK) return rc;
            break;
        }
    return mg_comm_p2p_wait(e->pp, &x->data);
}

/* ---- compute --------------------------------------------------------------------------- */

/* A leaf sharing t's data: the input of a stage whose previous stage is on
 * this rank (its graph must end where the stage begins). */
static mg_dtensor *leaf_view(const mg_dtensor *t) {
    mg_tensor *v = mg_tensor_view(mg_step_arena(), t->local, t->local->ndim, t->local->shape);
    mg_dtensor *x = v ? mg_dtensor_make(&t->spec, v, mg_step_arena()) : NULL;
    if (x) x->requires_grad = 1;
    return x;
}

/* Forward only (evaluation): nothing reads a slot's memory once its output
 * is sent (or taken by the next stage here, or, on the last stage, its loss
 * read), nor the previous stage's here once this forward has run. Both go
 * back to the pool then, so an evaluation holds a micro-batch or two per
 * stage, not all of them until its end. */
static void forward_done(mg_pp_exec *e, slot *sl, slot *prev) {
    int s = sl->stage;
    count_live(e, sl, -1);
    sl->backward_done = 1;
    if (s + 1 < e->S && rank_of(e, s + 1) == e->rank) sl->lent++;
    else if (s + 1 < e->S) sl->act_to_send = 1;
    if (prev) {
        prev->lent--;
        try_release(e, prev);
    }
    try_release(e, sl);
}

static int forward(mg_pp_exec *e, const mg_pp_stage_fns *fns, slot *sl) {
    int s = sl->stage, rc = MG_OK;
    mg_dtensor *x = NULL;
    slot *prev = NULL; /* the previous stage's slot, when this rank holds it */
    if (s > 0 && rank_of(e, s - 1) == e->rank) {
        prev = slot_of(e, sl->mb, s - 1);
        if (!prev->y || !(x = leaf_view(prev->y))) return mg_last_code() ? mg_last_code() : MG_ESTATE;
    } else if (s > 0) {
        if ((rc = finish_recv(e, sl, &sl->recv_act, KIND_ACT)) != MG_OK) return rc;
        x = sl->recv_act.t;
    }
    if ((rc = acquire(e, sl)) != MG_OK) return rc;
    e->compute_t0 = MPI_Wtime();
    mg_arena *step = mg_step_arena(), *was = mg_arena_redirect_data(step, sl->arena);
    sl->x = x;
    sl->y = fns->forward(fns->ctx, s, sl->mb, x);
    mg_arena_redirect_data(step, was);
    if (!sl->y) return mg_last_code() ? mg_last_code() : MG_ESTATE;
    count_live(e, sl, 1);
    size_t b = mg_arena_data_used(sl->arena), *fwd = &e->stage_mb_bytes[s / e->s->ranks];
    if (b > *fwd) *fwd = b;
    double loss = 0;
    if (s == e->S - 1 && (rc = mg_dtensor_item(sl->y, &loss)) == MG_OK) e->st.loss += loss;
    if (rc == MG_OK && e->forward_only) forward_done(e, sl, prev);
    return rc;
}

/* B (split == 0), Bi (1) or W (2) of a slot. */
static int backward(mg_pp_exec *e, slot *sl, int split) {
    int s = sl->stage, rc = MG_OK, last_mb = sl->mb == e->last_mb[s / e->s->ranks];
    mg_dtensor *dy = NULL;
    if (split != 2 && s + 1 < e->S) {
        if (rank_of(e, s + 1) == e->rank) {
            slot *next = slot_of(e, sl->mb, s + 1);
            if (!(dy = next->dx))
                return mg_error(MG_ESTATE, "pipeline: the input gradient of micro-batch %d, stage "
                                           "%d is missing", sl->mb, s + 1);
            next->lent++;
            sl->borrowed = next;
        } else {
            if ((rc = finish_recv(e, sl, &sl->recv_grad, KIND_GRAD)) != MG_OK) return rc;
            dy = sl->recv_grad.t;
        }
    }
    /* the data-parallel sums of a stage's weights: once, in its last backward */
    e->compute_t0 = MPI_Wtime();
    int was_sync = mg_set_grad_sync(split == 1 || last_mb);
    mg_arena *step = mg_step_arena(), *was = mg_arena_redirect_data(step, sl->arena);
    if (split == 0) {
        rc = mg_backward_with(sl->y, dy);
    } else if (split == 1) {
        sl->now[0] = sl->x;
        sl->w = (mg_backward_weights){.now = sl->now, .n_now = sl->x ? 1 : 0};
        rc = mg_backward_input(sl->y, dy, &sl->w);
    } else {
        rc = mg_backward_weight(&sl->w);
    }
    if (rc == MG_OK && split != 2 && sl->x && !(sl->dx = mg_grad(sl->x))) rc = mg_last_code();
    mg_arena_redirect_data(step, was);
    mg_set_grad_sync(was_sync);
    if (rc != MG_OK) return rc;
    if (split != 2 && sl->borrowed) {
        sl->borrowed->lent--;
        try_release(e, sl->borrowed);
        sl->borrowed = NULL;
    }
    if (split != 2 && s > 0 && rank_of(e, s - 1) != e->rank) sl->grad_to_send = 1;
    if (split != 1) {
        sl->backward_done = 1;
        count_live(e, sl, -1);
    }
    measure(e);
    try_release(e, sl);
    return MG_OK;
}

/* ---- the loop ---------------------------------------------------------------------------- */

static int run_action(mg_pp_exec *e, const mg_pp_stage_fns *fns, const mg_pp_action *a) {
    slot *sl = a->mb >= 0 ? slot_of(e, a->mb, a->stage) : NULL;
    int rc;
    if (e->forward_only && a->op != MG_PP_FORWARD && a->op != MG_PP_SEND_ACT &&
        a->op != MG_PP_RECV_ACT)
        return MG_OK;
    switch (a->op) {
    case MG_PP_RECV_ACT: return post_recv(e, sl, &sl->recv_act, a->peer);
    case MG_PP_RECV_GRAD: return post_recv(e, sl, &sl->recv_grad, a->peer);
    case MG_PP_SEND_ACT:
        sl->act_to_send = 0;
        return post_send(e, sl, &sl->send_act, KIND_ACT, sl->y, a->peer);
    case MG_PP_SEND_GRAD:
        rc = post_send(e, sl, &sl->send_grad, KIND_GRAD, sl->dx, a->peer);
        sl->grad_to_send = 0;
        return rc;
    case MG_PP_FORWARD:
        rc = forward(e, fns, sl);
        if (rc == MG_OK) measure(e);
        return rc;
    case MG_PP_BACKWARD: return backward(e, sl, 0);
    case MG_PP_BACKWARD_INPUT: return backward(e, sl, 1);
    case MG_PP_BACKWARD_WEIGHT: return backward(e, sl, 2);
    case MG_PP_REDUCE_GRAD: return fns->reduce_grad(fns->ctx, a->stage);
    default: return mg_error(MG_EINVAL, "pipeline: unknown action %d", (int)a->op);
    }
}

static int run(mg_pp_exec *e, const mg_pp_stage_fns *fns, mg_pp_exec_stats *out);

int mg_pp_exec_step(mg_pp_exec *e, const mg_pp_stage_fns *fns, mg_pp_exec_stats *out) {
    e->forward_only = 0;
    return run(e, fns, out);
}

int mg_pp_exec_forward(mg_pp_exec *e, const mg_pp_stage_fns *fns, mg_pp_exec_stats *out) {
    e->forward_only = 1;
    return run(e, fns, out);
}

static int run(mg_pp_exec *e, const mg_pp_stage_fns *fns, mg_pp_exec_stats *out) {
    const mg_pp_action *list = e->s->actions[e->rank];
    int n = e->s->len[e->rank], rc = MG_OK;
    for (int i = 0; i < e->M * e->v; i++) {
        slot *sl = &e->slots[i];
        memset(sl, 0, sizeof *sl);
        sl->mb = i / e->v;
        sl->stage = e->rank + (i % e->v) * e->s->ranks;
    }
    memset(&e->st, 0, sizeof e->st);
    memset(e->stage_peak_bytes, 0, (size_t)e->v * sizeof *e->stage_peak_bytes);
    memset(e->stage_peak_live, 0, (size_t)e->v * sizeof *e->stage_peak_live);
    memset(e->stage_mb_bytes, 0, (size_t)e->v * sizeof *e->stage_mb_bytes);
    memset(e->stage_live, 0, (size_t)e->v * sizeof *e->stage_live);
    e->nrecvs = e->nsending = e->live = 0;
    e->t0 = MPI_Wtime();
    for (int i = 0; i < n && rc == MG_OK;) {
        if (mg_pp_op_is_p2p(list[i].op)) { /* a batch of transfers, posted together */
            int end = mg_pp_batch_end(e->s, e->rank, i);
            rc = mg_comm_p2p_group_begin(e->pp);
            for (; i < end && rc == MG_OK; i++) {
                e->start[i] = MPI_Wtime() - e->t0;
                rc = run_action(e, fns, &list[i]);
                e->end[i] = MPI_Wtime() - e->t0;
            }
            int g = mg_comm_p2p_group_end(e->pp);
            if (rc == MG_OK) rc = g;
        } else {
            e->compute_t0 = MPI_Wtime();
            rc = run_action(e, fns, &list[i]);
            e->start[i] = e->compute_t0 - e->t0; /* a compute: after its receive was in */
            e->end[i] = MPI_Wtime() - e->t0;
            if (mg_pp_op_is_compute(list[i].op)) e->st.busy_s += e->end[i] - e->start[i];
            i++;
        }
        if (rc == MG_OK) rc = progress(e);
    }
    /* the step ends when every send has completed */
    for (int k = 0; k < e->nsending && rc == MG_OK; k++) {
        slot *sl = e->sending[k];
        xfer *xs[2] = {&sl->send_act, &sl->send_grad};
        for (int j = 0; j < 2 && rc == MG_OK; j++)
            if (xs[j]->head_posted && !xs[j]->waited) {
                rc = mg_comm_p2p_wait(e->pp, &xs[j]->head);
                if (rc == MG_OK) rc = mg_comm_p2p_wait(e->pp, &xs[j]->data);
                xs[j]->waited = 1;
            }
        sl->sends_open = 0;
    }
    e->nsending = 0;
    if (rc == MG_OK && e->nrecvs)
        rc = mg_error(MG_ESTATE, "pipeline: rank %d ended its step with %d receives never "
                                 "consumed", e->rank, e->nrecvs);
    for (int i = 0; i < e->M * e->v; i++) {
        slot *sl = &e->slots[i];
        if (rc == MG_OK && sl->arena && !sl->backward_done && !e->forward_only)
            rc = mg_error(MG_ESTATE, "pipeline: micro-batch %d of stage %d had no backward",
                          sl->mb, sl->stage);
        sl->backward_done = 1;
        sl->grad_to_send = sl->act_to_send = sl->sends_open = sl->lent = 0;
        try_release(e, sl);
    }
    e->st.step_s = MPI_Wtime() - e->t0;
    e->st.stage_peak_bytes = e->stage_peak_bytes;
    e->st.stage_peak_live = e->stage_peak_live;
    e->st.stage_mb_bytes = e->stage_mb_bytes;
    e->st.start = e->start;
    e->st.end = e->end;
    e->st.nactions = n;
    e->st.arenas = e->pool->nall;
    if (out) *out = e->st;
    return rc;
}
