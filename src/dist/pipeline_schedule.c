/* pipeline_schedule.c: the schedule generators (see pipeline_schedule.h).
 *
 * Each generator only orders the compute of one rank (forwards, backwards and
 * weight-gradient passes of its stages) and cuts it into groups: one compute
 * each, except interleaved-1f1b's steady state, where a forward and the
 * backward after it form one group (as in Megatron-LM). One shared pass then
 * places the communication the same way for every schedule: between two
 * groups, one batch of transfers: first the sends of what the group before
 * made (outputs, input gradients), then the receives of what the group after
 * consumes; the receives of the first group before it, the sends of the last
 * after it, and one reduce-grad per stage held at the end, last stage first.
 * A batch is posted at once (Megatron's send_forward_recv_backward), which is
 * what keeps the lists free of deadlock even where every send waits for its
 * receive (pipeline_sim.h's MG_PP_P2P_RENDEZVOUS).
 * Exports: see pipeline_schedule.h. */
#include "dist/pipeline_schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

static const char *const kind_names[MG_PP_KIND_COUNT] = {"gpipe", "1f1b", "interleaved-1f1b",
                                                         "zb-h1"};
_Static_assert(MG_PP_KIND_COUNT == 4, "mg_pp_kind changed: update kind_names");

static const char *const op_names[MG_PP_OP_COUNT] = {
    "F", "B", "Bi", "W", "send-act", "recv-act", "send-grad", "recv-grad", "reduce-grad",
};
_Static_assert(MG_PP_OP_COUNT == 9, "mg_pp_op changed: update op_names");

int mg_pp_kind_parse(const char *text, mg_pp_kind *kind) {
    for (int k = 0; k < MG_PP_KIND_COUNT; k++)
        if (strcmp(text, kind_names[k]) == 0) {
            *kind = (mg_pp_kind)k;
            return MG_OK;
        }
    return mg_error(MG_EINVAL,
                    "unknown pipeline schedule '%s': use gpipe, 1f1b, interleaved-1f1b or zb-h1",
                    text);
}

const char *mg_pp_kind_name(mg_pp_kind kind) {
    return (int)kind >= 0 && kind < MG_PP_KIND_COUNT ? kind_names[kind] : "unknown";
}

const char *mg_pp_op_name(int op) {
    return op >= 0 && op < MG_PP_OP_COUNT ? op_names[op] : "unknown";
}

char *mg_pp_action_format(char *buf, size_t len, const mg_pp_action *a) {
    const char *name = mg_pp_op_name(a->op);
    switch (a->op) {
    case MG_PP_SEND_ACT:
    case MG_PP_SEND_GRAD:
        snprintf(buf, len, "%s %d s%d -> %d", name, (int)a->mb, (int)a->stage, (int)a->peer);
        break;
    case MG_PP_RECV_ACT:
    case MG_PP_RECV_GRAD:
        snprintf(buf, len, "%s %d s%d <- %d", name, (int)a->mb, (int)a->stage, (int)a->peer);
        break;
    case MG_PP_REDUCE_GRAD: snprintf(buf, len, "%s s%d", name, (int)a->stage); break;
    default: snprintf(buf, len, "%s %d s%d", name, (int)a->mb, (int)a->stage); break;
    }
    return buf;
}

int mg_pp_schedule_check(mg_pp_kind kind, int p, int v, int m) {
    const char *name = mg_pp_kind_name(kind);
    if ((int)kind < 0 || kind >= MG_PP_KIND_COUNT)
        return mg_error(MG_EINVAL, "unknown pipeline schedule %d", (int)kind);
    if (p < 1 || p > MG_PP_MAX_RANKS)
        return mg_error(MG_EINVAL, "%s: %d pipeline ranks; give 1 to %d", name, p, MG_PP_MAX_RANKS);
    if (m < 1 || m > MG_PP_MAX_MICROBATCHES)
        return mg_error(MG_EINVAL, "%s: %d micro-batches; give 1 to %d", name, m,
                        MG_PP_MAX_MICROBATCHES);
    if (v < 1 || (long)p * v > MG_PP_MAX_STAGES)
        return mg_error(MG_EINVAL, "%s: %d virtual stages per rank; give 1 or more, at most %d "
                                   "stages in all", name, v, MG_PP_MAX_STAGES);
    if (v > 1 && kind != MG_PP_INTERLEAVED_1F1B)
        return mg_error(MG_EINVAL, "%s holds one stage per rank: %d virtual stages need the "
                                   "interleaved-1f1b schedule (or give 1)", name, v);
    if (kind != MG_PP_GPIPE && m < p)
        return mg_error(MG_EINVAL, "%s needs at least as many micro-batches as pipeline ranks: "
                                   "%d micro-batches on %d ranks is too few; use %d or more "
                                   "(or the gpipe schedule)", name, m, p, p);
    if (kind == MG_PP_INTERLEAVED_1F1B && v > 1 && m % p != 0)
        return mg_error(MG_EINVAL, "%s runs the micro-batches in groups of the pipeline ranks: "
                                   "%d micro-batches on %d ranks is not a multiple of %d; use "
                                   "%d or %d", name, m, p, p, m / p * p, (m / p + 1) * p);
    return MG_OK;
}

/* ---- compute order per rank ----------------------------------------------- */

typedef struct {
    mg_pp_action *a;
    char *joined; /* joined[i]: compute i + 1 is in the same group as compute i */
    int n;
} list;

static void emit(list *l, int op, int mb, int stage) {
    l->joined[l->n] = 0;
    l->a[l->n++] = (mg_pp_action){.op = (uint8_t)op, .stage = (int16_t)stage, .peer = -1, .mb = mb};
}

/* The next compute joins the group of the last one. */
static void join(list *l) { l->joined[l->n - 1] = 1; }

/* gpipe: every forward, then every backward, both in micro-batch order. */
static void gen_gpipe(list *l, int p, int r, int m) {
    (void)p;
    for (int i = 0; i < m; i++) emit(l, MG_PP_FORWARD, i, r);
    for (int i = 0; i < m; i++) emit(l, MG_PP_BACKWARD, i, r);
}

/* 1f1b: p - r - 1 warm-up forwards, then one forward one backward, then the
 * remaining backwards. At most p - r micro-batches are in flight on rank r. */
static void gen_1f1b(list *l, int p, int r, int m) {
    int warm = p - r - 1 < m ? p - r - 1 : m, f = 0, b = 0;
    while (f < warm) emit(l, MG_PP_FORWARD, f++, r);
    while (b < m) {
        if (f < m) emit(l, MG_PP_FORWARD, f++, r);
        emit(l, MG_PP_BACKWARD, b++, r);
    }
}

/* zb-h1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): 1f1b's order
 * of forwards and backwards, the backward split into Bi and W. Rank r keeps r
 * weight passes pending (a W runs after a Bi only while more than r are), so
 * the ranks that wait longest at the end of the step fill that wait with W.
 * At unit F = Bi = W the step takes 3M + p - 1, a third of 1f1b's bubble,
 * with at most p micro-batches in flight per rank. */
static void gen_zb_h1(list *l, int p, int r, int m) {
    int warm = p - r < m ? p - r : m, f = 0, b = 0, w = 0;
    while (f < warm) emit(l, MG_PP_FORWARD, f++, r);
    while (b < m) {
        emit(l, MG_PP_BACKWARD_INPUT, b++, r);
        if (b - w > r) emit(l, MG_PP_BACKWARD_WEIGHT, w++, r);
        if (f < m) emit(l, MG_PP_FORWARD, f++, r);
    }
    while (w < m) emit(l, MG_PP_BACKWARD_WEIGHT, w++, r);
}

/* interleaved-1f1b (Narayanan et al. 2021, Megatron-LM): rank r holds stages
 * r + c p for chunks c = 0 .. v-1. Its k-th forward is micro-batch
 * (k / (p v)) p + k % p of chunk (k / p) % v; its k-th backward the same with
 * the chunks in reverse. (p - r - 1) 2 + (v - 1) p warm-up forwards, then one
 * forward one backward. With v == 1 it is exactly 1f1b. */
static void gen_interleaved(list *l, int p, int r, int m, int v) {
    if (v == 1) {
        gen_1f1b(l, p, r, m);
        return;
    }
    int total = m * v, f = 0, b = 0;
    int warm = (p - r - 1) * 2 + (v - 1) * p;
    if (warm > total) warm = total;
#define CHUNK_MB(k) ((k) / (p * v) * p + (k) % p)
#define CHUNK(k) (((k) / p) % v)
    while (f < warm) {
        emit(l, MG_PP_FORWARD, CHUNK_MB(f), CHUNK(f) * p + r);
        f++;
    }
    while (b < total) {
        if (f < total) { /* one group with the backward: their transfers in one batch */
            emit(l, MG_PP_FORWARD, CHUNK_MB(f), CHUNK(f) * p + r);
            join(l);
            f++;
        }
        emit(l, MG_PP_BACKWARD, CHUNK_MB(b), (v - 1 - CHUNK(b)) * p + r);
        b++;
    }
#undef CHUNK_MB
#undef CHUNK
}

/* ---- communication, placed the same way for every schedule ---------------- */

static int pp_rank(int stage, int p) { return stage % p; }

static void emit_p2p(list *l, int op, int mb, int stage, int peer) {
    l->a[l->n++] = (mg_pp_action){
        .op = (uint8_t)op, .stage = (int16_t)stage, .peer = (int16_t)peer, .mb = mb};
}

static int is_backward(int op) { return op == MG_PP_BACKWARD || op == MG_PP_BACKWARD_INPUT; }

/* The sends of compute a of rank r (its output, its input gradient). */
static void sends_of(list *out, mg_pp_action a, int p, int r, int stages) {
    int s = a.stage, prev = s > 0 ? pp_rank(s - 1, p) : -1;
    int next = s + 1 < stages ? pp_rank(s + 1, p) : -1;
    if (a.op == MG_PP_FORWARD && next >= 0 && next != r) emit_p2p(out, MG_PP_SEND_ACT, a.mb, s, next);
    if (is_backward(a.op) && prev >= 0 && prev != r) emit_p2p(out, MG_PP_SEND_GRAD, a.mb, s, prev);
}

/* The receives compute a of rank r consumes (its input, its output gradient). */
static void recvs_of(list *out, mg_pp_action a, int p, int r, int stages) {
    int s = a.stage, prev = s > 0 ? pp_rank(s - 1, p) : -1;
    int next = s + 1 < stages ? pp_rank(s + 1, p) : -1;
    if (a.op == MG_PP_FORWARD && prev >= 0 && prev != r) emit_p2p(out, MG_PP_RECV_ACT, a.mb, s, prev);
    if (is_backward(a.op) && next >= 0 && next != r) emit_p2p(out, MG_PP_RECV_GRAD, a.mb, s, next);
}

/* `compute` (rank r's compute order, cut into groups) into `out` with its
 * sends, receives and reduce-grads. */
static void place_comm(const list *compute, list *out, int p, int r, int stages) {
    int g = 0; /* the first compute of the current group */
    while (g < compute->n) {
        int e = g; /* its last */
        while (e + 1 < compute->n && compute->joined[e]) e++;
        if (g == 0)
            for (int i = g; i <= e; i++) recvs_of(out, compute->a[i], p, r, stages);
        for (int i = g; i <= e; i++) out->a[out->n++] = compute->a[i];
        for (int i = g; i <= e; i++) sends_of(out, compute->a[i], p, r, stages);
        int ng = e + 1, ne = ng; /* the next group */
        while (ne + 1 < compute->n && compute->joined[ne]) ne++;
        for (int i = ng; i <= ne && ng < compute->n; i++) recvs_of(out, compute->a[i], p, r, stages);
        g = ng;
    }
    for (int s = stages - 1; s >= 0; s--)
        if (pp_rank(s, p) == r)
            out->a[out->n++] = (mg_pp_action){.op = MG_PP_REDUCE_GRAD, .stage = (int16_t)s,
                                              .peer = -1, .mb = -1};
}

void mg_pp_schedule_free(mg_pp_schedule *s) {
    if (!s) return;
    if (s->actions)
        for (int r = 0; r < s->ranks; r++) free(s->actions[r]);
    free(s->actions);
    free(s->len);
    memset(s, 0, sizeof *s);
}

int mg_pp_schedule_make(mg_pp_schedule *s, mg_pp_kind kind, int p, int v, int m) {
    memset(s, 0, sizeof *s);
    int rc = mg_pp_schedule_check(kind, p, v, m);
    if (rc != MG_OK) return rc;
    s->kind = kind;
    s->ranks = p;
    s->virtual_stages = v;
    s->stages = p * v;
    s->microbatches = m;
    /* per rank: at most 3 compute and 4 transfers per (micro-batch, stage held) */
    size_t cap = (size_t)7 * (size_t)m * (size_t)v + (size_t)v;
    s->len = calloc((size_t)p, sizeof *s->len);
    s->actions = calloc((size_t)p, sizeof *s->actions);
    list compute = {malloc(cap * sizeof(mg_pp_action)), malloc(cap), 0};
    if (!s->len || !s->actions || !compute.a || !compute.joined) goto nomem;
    for (int r = 0; r < p; r++) {
        compute.n = 0;
        switch (kind) {
        case MG_PP_GPIPE: gen_gpipe(&compute, p, r, m); break;
        case MG_PP_1F1B: gen_1f1b(&compute, p, r, m); break;
        case MG_PP_INTERLEAVED_1F1B: gen_interleaved(&compute, p, r, m, v); break;
        case MG_PP_ZB_H1: gen_zb_h1(&compute, p, r, m); break;
        default: break;
        }
        list out = {malloc(cap * sizeof(mg_pp_action)), NULL, 0};
        if (!out.a) goto nomem;
        place_comm(&compute, &out, p, r, s->stages);
        s->actions[r] = out.a;
        s->len[r] = out.n;
    }
    free(compute.a);
    free(compute.joined);
    return MG_OK;
nomem:
    free(compute.a);
    free(compute.joined);
    mg_pp_schedule_free(s);
    return mg_error(MG_ENOMEM, "%s: out of memory for the action lists of %d ranks x %d "
                               "micro-batches", mg_pp_kind_name(kind), p, m);
}

int mg_pp_microbatch_rows(int64_t batch, int m, int64_t *rows) {
    if (m < 1 || batch < 1)
        return mg_error(MG_EINVAL, "a batch of %lld rows in %d micro-batches: both must be >= 1",
                        (long long)batch, m);
    int64_t chunk = (batch + m - 1) / m;
    if (chunk * (m - 1) >= batch)
        return mg_error(MG_EINVAL,
                        "a batch of %lld rows in %d micro-batches of %lld rows (torch.chunk's "
                        "split) leaves the last ones empty: use %lld micro-batches, or a batch "
                        "that %d divides",
                        (long long)batch, m, (long long)chunk,
                        (long long)((batch + chunk - 1) / chunk), m);
    for (int i = 0; i < m; i++) rows[i] = i < m - 1 ? chunk : batch - chunk * (m - 1);
    return MG_OK;
}
