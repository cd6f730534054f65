/* pipeline_verify.c: the structure check of a pipeline schedule and
 * mg_pp_verify (structure, then both transfer models; see pipeline_verify.h).
 * The runs themselves, and the cost of one action, are in pipeline_sim.c.
 * Exports: mg_pp_check, mg_pp_verify. */
#include "dist/pipeline_verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

/* ---- structure --------------------------------------------------------------- */

enum { AT_F, AT_B, AT_W, AT_SEND_ACT, AT_RECV_ACT, AT_SEND_GRAD, AT_RECV_GRAD, AT_KINDS };

typedef struct {
    const mg_pp_schedule *s;
    int r;          /* the rank being checked */
    int *at;        /* [AT_KINDS][stages][M]: index of the action on rank r, -1 none */
    char *fused;    /* [stages][M]: its backward was a full B */
    int *reduce_at; /* [stages] */
    int *done_back; /* [stages]: micro-batches whose backward is complete */
} checker;

static int *slot(checker *k, int kind, int mb, int stage) {
    return &k->at[((size_t)kind * k->s->stages + stage) * k->s->microbatches + mb];
}

static int bad(const checker *k, int i, const char *what) {
    char a[64];
    mg_pp_action_format(a, sizeof a, &k->s->actions[k->r][i]);
    return mg_error(MG_EINVAL, "%s schedule: rank %d, action %d (%s): %s",
                    mg_pp_kind_name(k->s->kind), k->r, i, a, what);
}

/* Marks action i as the one of its kind for (mb, stage); twice is an error. */
static int once(checker *k, int i, int kind, int mb, int stage) {
    int *p = slot(k, kind, mb, stage);
    if (*p >= 0) {
        char msg[96];
        snprintf(msg, sizeof msg, "the same action already ran as action %d", *p);
        return bad(k, i, msg);
    }
    *p = i;
    return MG_OK;
}

/* The peer a transfer must name, or -1 when the stage boundary has none. */
static int want_peer(const mg_pp_schedule *s, int op, int stage) {
    int other = op == MG_PP_SEND_ACT || op == MG_PP_RECV_GRAD ? stage + 1 : stage - 1;
    if (other < 0 || other >= s->stages) return -1;
    int peer = mg_pp_stage_rank(s, other);
    return peer == mg_pp_stage_rank(s, stage) ? -1 : peer;
}

static int check_action(checker *k, int i) {
    const mg_pp_schedule *s = k->s;
    const mg_pp_action *a = &s->actions[k->r][i];
    int st = a->stage, mb = a->mb, M = s->microbatches;
    if (a->op >= MG_PP_OP_COUNT) return bad(k, i, "unknown action");
    if (st < 0 || st >= s->stages) return bad(k, i, "no such stage");
    if (mg_pp_stage_rank(s, st) != k->r) return bad(k, i, "the stage is held by another rank");
    if (a->op == MG_PP_REDUCE_GRAD) {
        if (k->reduce_at[st] >= 0) return bad(k, i, "the stage's gradients are reduced twice");
        if (k->done_back[st] < M)
            return bad(k, i, "reduces the gradients before every micro-batch's backward is done");
        k->reduce_at[st] = i;
        return MG_OK;
    }
    if (mb < 0 || mb >= M) return bad(k, i, "no such micro-batch");
    if (k->reduce_at[st] >= 0) return bad(k, i, "comes after the stage's reduce-grad");
    int prev_local = st > 0 && mg_pp_stage_rank(s, st - 1) == k->r;
    int next_local = st + 1 < s->stages && mg_pp_stage_rank(s, st + 1) == k->r;
    if (mg_pp_op_is_p2p(a->op)) {
        int peer = want_peer(s, a->op, st);
        if (peer < 0) return bad(k, i, "this stage boundary has no transfer between ranks");
        if (a->peer != peer) {
            char msg[96];
            snprintf(msg, sizeof msg, "the peer must be rank %d", peer);
            return bad(k, i, msg);
        }
    }
    switch (a->op) {
    case MG_PP_FORWARD:
        if (st > 0 && prev_local && *slot(k, AT_F, mb, st - 1) < 0)
            return bad(k, i, "its input, the forward of the stage before, has not run");
        if (st > 0 && !prev_local && *slot(k, AT_RECV_ACT, mb, st) < 0)
            return bad(k, i, "its input has not been received (no recv-act before it)");
        return once(k, i, AT_F, mb, st);
    case MG_PP_BACKWARD:
    case MG_PP_BACKWARD_INPUT:
        if (*slot(k, AT_F, mb, st) < 0) return bad(k, i, "a backward before its forward");
        if (st + 1 < s->stages && next_local && *slot(k, AT_B, mb, st + 1) < 0)
            return bad(k, i, "its output gradient, the backward of the next stage, has not run");
        if (st + 1 < s->stages && !next_local && *slot(k, AT_RECV_GRAD, mb, st) < 0)
            return bad(k, i, "its output gradient has not been received (no recv-grad before it)");
        k->fused[(size_t)st * M + mb] = a->op == MG_PP_BACKWARD;
        if (a->op == MG_PP_BACKWARD) k->done_back[st]++;
        return once(k, i, AT_B, mb, st);
    case MG_PP_BACKWARD_WEIGHT:
        if (*slot(k, AT_B, mb, st) < 0) return bad(k, i, "a W before its backward-input");
        if (k->fused[(size_t)st * M + mb])
            return bad(k, i, "a W after a full backward, which made the weight gradient already");
        k->done_back[st]++;
        return once(k, i, AT_W, mb, st);
    case MG_PP_SEND_ACT:
        if (*slot(k, AT_F, mb, st) < 0) return bad(k, i, "sends an output its forward has not made");
        return once(k, i, AT_SEND_ACT, mb, st);
    case MG_PP_SEND_GRAD:
        if (*slot(k, AT_B, mb, st) < 0)
            return bad(k, i, "sends an input gradient its backward has not made");
        return once(k, i, AT_SEND_GRAD, mb, st);
    case MG_PP_RECV_ACT: return once(k, i, AT_RECV_ACT, mb, st);
    case MG_PP_RECV_GRAD: return once(k, i, AT_RECV_GRAD, mb, st);
    default: return bad(k, i, "unknown action");
    }
}

/* After rank r's list: everything that must have happened did. */
static int check_complete(checker *k) {
    const mg_pp_schedule *s = k->s;
    for (int st = k->r; st < s->stages; st += s->ranks) {
        int remote_prev = want_peer(s, MG_PP_RECV_ACT, st) >= 0;
        int remote_next = want_peer(s, MG_PP_SEND_ACT, st) >= 0;
        for (int mb = 0; mb < s->microbatches; mb++) {
            const char *missing = NULL;
            if (*slot(k, AT_F, mb, st) < 0) missing = "its forward";
            else if (*slot(k, AT_B, mb, st) < 0) missing = "its backward";
            else if (!k->fused[(size_t)st * s->microbatches + mb] && *slot(k, AT_W, mb, st) < 0)
                missing = "its W";
            else if (remote_next && *slot(k, AT_SEND_ACT, mb, st) < 0) missing = "the send-act";
            else if (remote_prev && *slot(k, AT_SEND_GRAD, mb, st) < 0) missing = "the send-grad";
            if (missing)
                return mg_error(MG_EINVAL, "%s schedule: rank %d never runs %s of micro-batch %d "
                                           "on stage %d",
                                mg_pp_kind_name(s->kind), k->r, missing, mb, st);
        }
        if (k->reduce_at[st] < 0)
            return mg_error(MG_EINVAL, "%s schedule: rank %d never reduces stage %d's gradients",
                            mg_pp_kind_name(s->kind), k->r, st);
    }
    return MG_OK;
}

int mg_pp_check(const mg_pp_schedule *s) {
    if (!s || s->ranks < 1 || s->stages != s->ranks * s->virtual_stages || s->microbatches < 1 ||
        !s->len || !s->actions)
        return mg_error(MG_EINVAL, "pipeline schedule: not made by mg_pp_schedule_make");
    size_t cells = (size_t)s->stages * (size_t)s->microbatches;
    checker k = {.s = s};
    k.at = malloc(AT_KINDS * cells * sizeof *k.at);
    k.fused = malloc(cells);
    k.reduce_at = malloc((size_t)s->stages * sizeof *k.reduce_at);
    k.done_back = malloc((size_t)s->stages * sizeof *k.done_back);
    int rc = MG_OK;
    if (!k.at || !k.fused || !k.reduce_at || !k.done_back)
        rc = mg_error(MG_ENOMEM, "pipeline schedule check: out of memory");
    for (int r = 0; r < s->ranks && rc == MG_OK; r++) {
        k.r = r;
        memset(k.at, 0xff, AT_KINDS * cells * sizeof *k.at); /* -1 everywhere */
        memset(k.fused, 0, cells);
        memset(k.reduce_at, 0xff, (size_t)s->stages * sizeof *k.reduce_at);
        memset(k.done_back, 0, (size_t)s->stages * sizeof *k.done_back);
        for (int i = 0; i < s->len[r] && rc == MG_OK; i++) rc = check_action(&k, i);
        if (rc == MG_OK) rc = check_complete(&k);
    }
    free(k.at);
    free(k.fused);
    free(k.reduce_at);
    free(k.done_back);
    return rc;
}

int mg_pp_verify(const mg_pp_schedule *s, const mg_pp_cost *cost, mg_pp_sim *out) {
    int rc = mg_pp_check(s);
    if (rc == MG_OK) rc = mg_pp_simulate(s, cost, MG_PP_P2P_ASYNC, out);
    if (rc == MG_OK) {
        rc = mg_pp_simulate(s, cost, MG_PP_P2P_RENDEZVOUS, NULL);
        if (rc != MG_OK) mg_pp_sim_free(out);
    }
    return rc;
}
