/* pipeline_sim.c: runs a pipeline schedule's action lists against each other
 * under one of the two transfer models of pipeline_sim.h, and times them.
 *
 * Every rank walks its list; a rank that cannot go on waits, and the others
 * keep going. A round gives every rank the chance to move; when a round moves
 * nobody and some list is not finished, the waiting ranks wait for each other:
 * a deadlock, reported with what each one waits for. Times follow from the
 * order alone (an action starts when its rank is free and what it waits for
 * has arrived), so which rank moves first in a round does not change them.
 * With shared cores (pipeline_sim.h) a second pass re-times the matched
 * run in global time, event by event (retime_shared).
 * The cost of one action (mg_pp_action_time) is here too.
 * Exports: mg_pp_simulate, mg_pp_sim_free, mg_pp_action_time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/pipeline_sim.h"
#include "status.h"

double mg_pp_action_time(const mg_pp_cost *c, const mg_pp_action *a) {
    if (!c) {
        switch (a->op) {
        case MG_PP_FORWARD:
        case MG_PP_BACKWARD_INPUT:
        case MG_PP_BACKWARD_WEIGHT: return 1.0;
        case MG_PP_BACKWARD: return 2.0;
        default: return 0.0;
        }
    }
    double rows = c->rows && a->mb >= 0 ? (double)c->rows[a->mb] : 1.0;
    int s = a->stage;
    switch (a->op) {
    case MG_PP_FORWARD: return rows * c->forward[s];
    case MG_PP_BACKWARD: return rows * (c->backward_input[s] + c->backward_weight[s]);
    case MG_PP_BACKWARD_INPUT: return rows * c->backward_input[s];
    case MG_PP_BACKWARD_WEIGHT: return rows * c->backward_weight[s];
    case MG_PP_REDUCE_GRAD: return c->reduce ? c->reduce[s] : 0.0;
    default: break;
    }
    /* a transfer: the output of stage s (send-act, recv-grad) or of s - 1 */
    int boundary = a->op == MG_PP_SEND_ACT || a->op == MG_PP_RECV_GRAD ? s : s - 1;
    double bytes = boundary >= 0 && c->act_bytes ? rows * c->act_bytes[boundary] : 0.0;
    return c->latency + (c->bandwidth > 0 ? bytes / c->bandwidth : 0.0);
}

/* The transfers from one rank to another, in the order each side posted them. */
typedef struct {
    int cap, nsend, nrecv;
    int *send_i, *recv_i;      /* action index on the sender / the receiver */
    double *send_t, *recv_t;   /* when each was posted */
} channel;

typedef struct {
    const mg_pp_schedule *s;
    const mg_pp_cost *cost;
    mg_pp_p2p_model model;
    channel *ch;    /* [src * ranks + dst] */
    int *pc;        /* next action of each rank */
    double *t;      /* when each rank is free */
    char *posted;   /* rendezvous: the batch at pc is posted */
    int **slot;     /* [rank][action]: a transfer's position in its channel */
    int **input;    /* [rank][action]: the receive a compute consumes, -1 none */
    mg_pp_sim *sim;
} run;

static channel *chan_of(const run *u, int r, const mg_pp_action *a) {
    int send = a->op == MG_PP_SEND_ACT || a->op == MG_PP_SEND_GRAD;
    int src = send ? r : a->peer, dst = send ? a->peer : r;
    return &u->ch[src * u->s->ranks + dst];
}

static int is_send(int op) { return op == MG_PP_SEND_ACT || op == MG_PP_SEND_GRAD; }

/* A send and a receive are one transfer: same micro-batch, the same stage
 * boundary crossed the same way. */
static int same_transfer(const mg_pp_action *snd, const mg_pp_action *rcv) {
    if (snd->mb != rcv->mb) return 0;
    if (snd->op == MG_PP_SEND_ACT) return rcv->op == MG_PP_RECV_ACT && rcv->stage == snd->stage + 1;
    return rcv->op == MG_PP_RECV_GRAD && rcv->stage == snd->stage - 1;
}

static const char *model_name(mg_pp_p2p_model m) {
    return m == MG_PP_P2P_ASYNC ? "non-blocking sends and receives"
                                : "every send waiting for its receive";
}

/* Posts transfer i of rank r at time `when`; matches it when the other side
 * is there. MG_EINVAL when the k-th send and k-th receive disagree. */
static int post(run *u, int r, int i, double when) {
    const mg_pp_action *a = &u->s->actions[r][i];
    channel *c = chan_of(u, r, a);
    int k = is_send(a->op) ? c->nsend : c->nrecv;
    if (k >= c->cap) return mg_error(MG_EINVAL, "pipeline schedule: channel overflow");
    if (is_send(a->op)) {
        c->send_i[k] = i;
        c->send_t[c->nsend++] = when;
    } else {
        c->recv_i[k] = i;
        c->recv_t[c->nrecv++] = when;
    }
    u->slot[r][i] = k;
    u->sim->start[r][i] = when;
    if (k >= c->nsend || k >= c->nrecv) return MG_OK; /* the other side is not there yet */
    int src = is_send(a->op) ? r : a->peer, dst = is_send(a->op) ? a->peer : r;
    const mg_pp_action *snd = &u->s->actions[src][c->send_i[k]];
    const mg_pp_action *rcv = &u->s->actions[dst][c->recv_i[k]];
    if (!same_transfer(snd, rcv)) {
        char x[64], y[64];
        mg_pp_action_format(x, sizeof x, snd);
        mg_pp_action_format(y, sizeof y, rcv);
        return mg_error(MG_EINVAL,
                        "%s schedule: transfer %d from rank %d to rank %d does not match: rank %d "
                        "sends (%s) while rank %d receives (%s); sends and receives between two "
                        "ranks meet in the order each side posts them",
                        mg_pp_kind_name(u->s->kind), k, src, dst, src, x, dst, y);
    }
    u->sim->match[src][c->send_i[k]] = c->recv_i[k];
    u->sim->match[dst][c->recv_i[k]] = c->send_i[k];
    return MG_OK;
}

/* When transfer i of rank r (posted) has arrived, or -1 while its other side
 * is not posted. */
static double arrival(const run *u, int r, int i) {
    const mg_pp_action *a = &u->s->actions[r][i];
    const channel *c = chan_of(u, r, a);
    int k = u->slot[r][i];
    if (k < 0 || k >= c->nsend || k >= c->nrecv) return -1;
    if (c->send_t[k] < 0 || c->recv_t[k] < 0) return -1; /* retime_shared: not posted yet */
    double both = c->send_t[k] > c->recv_t[k] ? c->send_t[k] : c->recv_t[k];
    return both + mg_pp_action_time(u->cost, a);
}

/* Moves rank r by one action (or one batch): 1 moved, 0 waits or done, < 0 error. */
static int step(run *u, int r) {
    const mg_pp_schedule *s = u->s;
    int i = u->pc[r];
    if (i >= s->len[r]) return 0;
    const mg_pp_action *a = &s->actions[r][i];
    mg_pp_sim *sim = u->sim;
    if (mg_pp_op_is_p2p(a->op) && u->model == MG_PP_P2P_ASYNC) {
        int rc = post(u, r, i, u->t[r]);
        if (rc != MG_OK) return rc;
        u->pc[r]++;
        return 1;
    }
    if (mg_pp_op_is_p2p(a->op)) { /* rendezvous: post the batch, wait for all of it */
        int end = mg_pp_batch_end(s, r, i), moved = 0;
        if (!u->posted[r]) {
            for (int j = i; j < end; j++) {
                int rc = post(u, r, j, u->t[r]);
                if (rc != MG_OK) return rc;
            }
            u->posted[r] = 1;
            moved = 1;
        }
        double done = u->t[r];
        for (int j = i; j < end; j++) {
            double when = arrival(u, r, j);
            if (when < 0) return moved;
            if (when > done) done = when;
        }
        u->t[r] = done;
        u->pc[r] = end;
        u->posted[r] = 0;
        return 1;
    }
    double ready = u->t[r];
    int in = u->input[r][i];
    if (in >= 0) {
        double when = arrival(u, r, in);
        if (when < 0) return 0;
        if (when > ready) ready = when;
    }
    double took = mg_pp_action_time(u->cost, a);
    sim->start[r][i] = ready;
    sim->end[r][i] = ready + took;
    if (a->op != MG_PP_REDUCE_GRAD) sim->busy_rank[r] += took;
    u->t[r] = ready + took;
    u->pc[r]++;
    return 1;
}

/* What rank r waits for, into buf. */
static void describe_wait(const run *u, int r, char *buf, size_t len) {
    const mg_pp_schedule *s = u->s;
    int i = u->pc[r];
    const mg_pp_action *a = &s->actions[r][i];
    int wait = i;
    if (!mg_pp_op_is_p2p(a->op) && u->input[r][i] >= 0) wait = u->input[r][i];
    else if (mg_pp_op_is_p2p(a->op)) /* the first transfer of the batch not matched yet */
        for (int j = i; j < mg_pp_batch_end(s, r, i); j++)
            if (arrival(u, r, j) < 0) {
                wait = j;
                break;
            }
    char x[64], y[64];
    mg_pp_action_format(x, sizeof x, a);
    mg_pp_action_format(y, sizeof y, &s->actions[r][wait]);
    const mg_pp_action *w = &s->actions[r][wait];
    if (wait == i)
        snprintf(buf, len, "rank %d waits in %s for rank %d", r, x, w->peer);
    else
        snprintf(buf, len, "rank %d waits in %s for %s from rank %d", r, x, y, w->peer);
}

static int deadlock(const run *u) {
    char msg[900], one[256];
    int n = snprintf(msg, sizeof msg, "%s schedule deadlocks with %s: ",
                     mg_pp_kind_name(u->s->kind), model_name(u->model));
    int shown = 0;
    for (int r = 0; r < u->s->ranks && n < (int)sizeof msg - 1; r++) {
        if (u->pc[r] >= u->s->len[r]) continue;
        if (shown == 4) {
            n += snprintf(msg + n, sizeof msg - (size_t)n, "; ...");
            break;
        }
        describe_wait(u, r, one, sizeof one);
        n += snprintf(msg + n, sizeof msg - (size_t)n, "%s%s", shown ? "; " : "", one);
        shown++;
    }
    return mg_error(MG_EINVAL, "%s", msg);
}

void mg_pp_sim_free(mg_pp_sim *sim) {
    if (!sim) return;
    for (int r = 0; r < sim->ranks; r++) {
        if (sim->start) free(sim->start[r]);
        if (sim->end) free(sim->end[r]);
        if (sim->match) free(sim->match[r]);
    }
    free(sim->start);
    free(sim->end);
    free(sim->match);
    free(sim->busy_rank);
    free(sim->done_rank);
    free(sim->peak_live);
    free(sim->peak_live_rank);
    free(sim->peak_bytes);
    free(sim->peak_stage_bytes);
    memset(sim, 0, sizeof *sim);
}

static void free_run(run *u) {
    int p = u->s->ranks;
    if (u->ch)
        for (int c = 0; c < p * p; c++) {
            free(u->ch[c].send_i);
            free(u->ch[c].recv_i);
            free(u->ch[c].send_t);
            free(u->ch[c].recv_t);
        }
    for (int r = 0; r < p; r++) {
        if (u->slot) free(u->slot[r]);
        if (u->input) free(u->input[r]);
    }
    free(u->ch);
    free(u->slot);
    free(u->input);
    free(u->pc);
    free(u->t);
    free(u->posted);
}

static void *zcalloc(size_t n, size_t size) { return calloc(n ? n : 1, size); }

/* Allocates everything; 0, -1 (out of memory) or -2 (a transfer names no rank). */
static int alloc_run(run *u, mg_pp_sim *sim) {
    const mg_pp_schedule *s = u->s;
    int p = s->ranks, S = s->stages;
    sim->ranks = p;
    sim->stages = S;
#define ALLOC(ptr, n) (((ptr) = zcalloc((size_t)(n), sizeof *(ptr))) == NULL)
    if (ALLOC(sim->start, p) || ALLOC(sim->end, p) || ALLOC(sim->match, p) ||
        ALLOC(sim->busy_rank, p) || ALLOC(sim->done_rank, p) || ALLOC(sim->peak_live, S) ||
        ALLOC(sim->peak_live_rank, p) || ALLOC(sim->peak_bytes, p) ||
        ALLOC(sim->peak_stage_bytes, S) || ALLOC(u->ch, p * p) ||
        ALLOC(u->slot, p) || ALLOC(u->input, p) || ALLOC(u->pc, p) || ALLOC(u->t, p) ||
        ALLOC(u->posted, p))
        return -1;
    for (int r = 0; r < p; r++) {
        int n = s->len[r];
        if (ALLOC(sim->start[r], n) || ALLOC(sim->end[r], n) || ALLOC(sim->match[r], n) ||
            ALLOC(u->slot[r], n) || ALLOC(u->input[r], n))
            return -1;
        for (int i = 0; i < n; i++) {
            sim->match[r][i] = u->slot[r][i] = u->input[r][i] = -1;
            if (mg_pp_op_is_p2p(s->actions[r][i].op)) {
                int peer = s->actions[r][i].peer;
                if (peer < 0 || peer >= p) return -2;
                chan_of(u, r, &s->actions[r][i])->cap++;
            }
        }
    }
    for (int c = 0; c < p * p; c++)
        if (ALLOC(u->ch[c].send_i, u->ch[c].cap) || ALLOC(u->ch[c].recv_i, u->ch[c].cap) ||
            ALLOC(u->ch[c].send_t, u->ch[c].cap) || ALLOC(u->ch[c].recv_t, u->ch[c].cap))
            return -1;
#undef ALLOC
    return 0;
}

/* input[r][i]: the latest receive before compute i of the value it consumes.
 * The latest receive of each (stage, micro-batch) of the rank is kept as the
 * actions go by, so that a compute with nothing to receive (stage 0's
 * forwards, the last stage's backwards) costs no scan back to the start: that
 * made 65536 micro-batches take a minute. A stage the rank does not hold
 * (stage % ranks), or no memory for the table, falls back to the scan. */
static void find_inputs(run *u) {
    const mg_pp_schedule *s = u->s;
    int64_t M = s->microbatches > 0 ? s->microbatches : 0;
    size_t n = (size_t)((s->stages + s->ranks - 1) / s->ranks) * (size_t)M;
    int *last = n > 0 ? malloc(2 * n * sizeof *last) : NULL; /* RECV_ACT's, then RECV_GRAD's */
    for (int r = 0; r < s->ranks; r++) {
        for (size_t k = 0; last && k < 2 * n; k++) last[k] = -1;
        for (int i = 0; i < s->len[r]; i++) {
            const mg_pp_action *a = &s->actions[r][i];
            int known = last && a->stage >= 0 && a->stage < s->stages &&
                        a->stage % s->ranks == r && a->mb >= 0 && a->mb < M;
            size_t at = known ? (size_t)(a->stage / s->ranks) * (size_t)M + (size_t)a->mb : 0;
            if (a->op == MG_PP_RECV_ACT || a->op == MG_PP_RECV_GRAD) {
                if (known) last[(a->op == MG_PP_RECV_GRAD ? n : 0) + at] = i;
                continue;
            }
            int want = a->op == MG_PP_FORWARD ? MG_PP_RECV_ACT
                       : a->op == MG_PP_BACKWARD || a->op == MG_PP_BACKWARD_INPUT ? MG_PP_RECV_GRAD
                                                                                   : -1;
            if (want >= 0 && known) {
                u->input[r][i] = last[(want == MG_PP_RECV_GRAD ? n : 0) + at];
                continue;
            }
            for (int j = i - 1; want >= 0 && j >= 0; j--) {
                const mg_pp_action *b = &s->actions[r][j];
                if (b->op == want && b->mb == a->mb && b->stage == a->stage) {
                    u->input[r][i] = j;
                    break;
                }
            }
        }
    }
    free(last);
}

/* Re-times a finished MG_PP_P2P_ASYNC run (transfers matched, slots known)
 * with its ranks sharing ranks * cost->core_share cores, in global time. At each event
 * every rank first moves as far as it can: it posts its sends and receives,
 * and starts its next compute once the receive it consumes has arrived. Then
 * time runs to the next event, the first compute to finish at the present
 * rates or the first awaited transfer to arrive. */
static void retime_shared(run *u) {
    const mg_pp_schedule *s = u->s;
    mg_pp_sim *sim = u->sim;
    int p = s->ranks;
    double cores = p * u->cost->core_share;
    for (int c = 0; c < p * p; c++)
        for (int k = 0; k < u->ch[c].nsend; k++) u->ch[c].send_t[k] = u->ch[c].recv_t[k] = -1;
    double *left = malloc(sizeof(double) * (size_t)p); /* work left (seconds at a whole core) */
    if (!left) return; /* keep the unshared times */
    double now = 0;
    for (int r = 0; r < p; r++) {
        u->pc[r] = 0;
        u->t[r] = 0;
        left[r] = -1;
        sim->busy_rank[r] = 0;
    }
    for (;;) {
        for (int r = 0; r < p; r++)
            while (left[r] < 0 && u->pc[r] < s->len[r]) {
                int i = u->pc[r];
                const mg_pp_action *a = &s->actions[r][i];
                sim->start[r][i] = now;
                if (mg_pp_op_is_p2p(a->op)) {
                    channel *c = chan_of(u, r, a);
                    *(is_send(a->op) ? &c->send_t[u->slot[r][i]] : &c->recv_t[u->slot[r][i]]) = now;
                    u->t[r] = now;
                    u->pc[r]++;
                    continue;
                }
                int in = u->input[r][i];
                double when = in >= 0 ? arrival(u, r, in) : now;
                if (when < 0 || when > now) break; /* waits for its input */
                left[r] = mg_pp_action_time(u->cost, a);
            }
        int active = 0, running = 0;
        for (int r = 0; r < p; r++)
            if (left[r] >= 0) {
                running++;
                active += mg_pp_op_is_compute(s->actions[r][u->pc[r]].op);
            }
        double share = active > cores ? cores / active : 1.0;
        double next = INFINITY;
        for (int r = 0; r < p; r++) {
            if (left[r] >= 0) {
                double rate = mg_pp_op_is_compute(s->actions[r][u->pc[r]].op) ? share : 1.0;
                next = fmin(next, now + left[r] / rate);
            } else if (u->pc[r] < s->len[r]) {
                int in = u->input[r][u->pc[r]];
                double when = in >= 0 ? arrival(u, r, in) : -1;
                if (when > now) next = fmin(next, when);
            }
        }
        if (!running && next == INFINITY) break; /* done (the order-based run proved it ends) */
        for (int r = 0; r < p; r++) {
            if (left[r] < 0) continue;
            int i = u->pc[r];
            double rate = mg_pp_op_is_compute(s->actions[r][i].op) ? share : 1.0;
            if (now + left[r] / rate <= next * (1 + 1e-12)) { /* finishes at this event */
                sim->end[r][i] = next;
                if (mg_pp_op_is_compute(s->actions[r][i].op)) sim->busy_rank[r] += next - sim->start[r][i];
                u->t[r] = next;
                u->pc[r]++;
                left[r] = -1;
            } else {
                left[r] -= (next - now) * rate;
            }
        }
        now = next;
    }
    free(left);
}

/* Ends of transfers, when each rank was done, the bubble and the peaks. */
static void finish(run *u) {
    const mg_pp_schedule *s = u->s;
    mg_pp_sim *sim = u->sim;
    sim->step_time = sim->busy = 0;
    int *live = calloc((size_t)s->stages, sizeof *live);
    double *stage_bytes = calloc((size_t)s->stages, sizeof *stage_bytes);
    for (int r = 0; r < s->ranks; r++) {
        double done = u->t[r], bytes = 0, peak_bytes = 0;
        int live_rank = 0, peak_rank = 0;
        for (int i = 0; i < s->len[r]; i++) {
            const mg_pp_action *a = &s->actions[r][i];
            if (mg_pp_op_is_p2p(a->op)) {
                sim->end[r][i] = arrival(u, r, i);
                if (sim->end[r][i] > done) done = sim->end[r][i];
                continue;
            }
            double b = u->cost && u->cost->saved_bytes
                           ? (u->cost->rows ? (double)u->cost->rows[a->mb] : 1.0) *
                                 u->cost->saved_bytes[a->stage]
                           : 0.0;
            int d = a->op == MG_PP_FORWARD                                          ? 1
                    : a->op == MG_PP_BACKWARD || a->op == MG_PP_BACKWARD_WEIGHT ? -1
                                                                                    : 0;
            if (!d || !live || !stage_bytes) continue;
            live[a->stage] += d;
            live_rank += d;
            bytes += d * b;
            stage_bytes[a->stage] += d * b;
            if (stage_bytes[a->stage] > sim->peak_stage_bytes[a->stage])
                sim->peak_stage_bytes[a->stage] = stage_bytes[a->stage];
            if (live[a->stage] > sim->peak_live[a->stage]) sim->peak_live[a->stage] = live[a->stage];
            if (live_rank > peak_rank) peak_rank = live_rank;
            if (bytes > peak_bytes) peak_bytes = bytes;
        }
        sim->done_rank[r] = done;
        sim->peak_live_rank[r] = peak_rank;
        sim->peak_bytes[r] = peak_bytes;
        sim->busy += sim->busy_rank[r];
        if (done > sim->step_time) sim->step_time = done;
    }
    free(live);
    free(stage_bytes);
    sim->bubble = sim->step_time > 0 ? 1.0 - sim->busy / (s->ranks * sim->step_time) : 0.0;
}

int mg_pp_simulate(const mg_pp_schedule *s, const mg_pp_cost *cost, mg_pp_p2p_model model,
                   mg_pp_sim *out) {
    if (out) memset(out, 0, sizeof *out);
    mg_pp_sim sim = {0};
    run u = {.s = s, .cost = cost, .model = model, .sim = &sim};
    int rc = MG_OK, a = alloc_run(&u, &sim);
    if (a == -1) rc = mg_error(MG_ENOMEM, "pipeline schedule run: out of memory");
    if (a == -2) rc = mg_error(MG_EINVAL, "pipeline schedule run: a transfer names no rank");
    if (rc == MG_OK) {
        find_inputs(&u);
        int moved = 1;
        while (moved && rc == MG_OK) {
            moved = 0;
            for (int r = 0; r < s->ranks && rc == MG_OK; r++) {
                int m;
                while ((m = step(&u, r)) > 0) moved = 1;
                if (m < 0) rc = m;
            }
        }
        for (int r = 0; r < s->ranks && rc == MG_OK; r++)
            if (u.pc[r] < s->len[r]) rc = deadlock(&u);
        for (int c = 0; c < s->ranks * s->ranks && rc == MG_OK; c++)
            if (u.ch[c].nsend != u.ch[c].nrecv)
                rc = mg_error(MG_EINVAL, "%s schedule: rank %d sends %d transfers to rank %d, "
                                         "which receives %d",
                              mg_pp_kind_name(s->kind), c / s->ranks, u.ch[c].nsend,
                              c % s->ranks, u.ch[c].nrecv);
    }
    if (rc == MG_OK && cost && cost->core_share > 0 && cost->core_share < 1 &&
        model == MG_PP_P2P_ASYNC)
        retime_shared(&u);
    if (rc == MG_OK) finish(&u);
    free_run(&u);
    if (rc == MG_OK && out) *out = sim;
    else mg_pp_sim_free(&sim);
    return rc;
}
