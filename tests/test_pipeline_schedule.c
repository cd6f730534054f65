/* test_pipeline_schedule.c: pipeline schedules as data (src/dist/pipeline_*).
 * - every schedule for every p <= 8, M <= 32 and (interleaved) v <= 4 passes
 *   the verifier under both transfer models, or is refused by the schedule's
 *   own rule with a message; at unit time the bubble is the papers' formula
 *   and the peak of live micro-batches per stage is the known bound;
 * - a cost with transfer times gives gpipe's step time in closed form, and
 *   micro-batches of different sizes give the saved bytes they should;
 * - mutated lists (a receive or send dropped, a backward before its forward,
 *   W before Bi, sends swapped out of order, orders that deadlock under one
 *   model or both, wrong peers, a missing reduce-grad) are caught, each with
 *   its message;
 * - interleaved-1f1b with v = 1 is 1f1b; the torch.chunk micro-batch split.
 * Serial: schedules are plain data. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dist/pipeline_schedule.h"
#include "dist/pipeline_verify.h"
#include "meshgrad.h"
#include "status.h"
#include "testutil.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The rule each generator must refuse by (mg_pp_schedule_check's doc). */
static int should_refuse(mg_pp_kind k, int p, int v, int m) {
    if (k == MG_PP_GPIPE) return 0;
    if (m < p) return 1;
    return k == MG_PP_INTERLEAVED_1F1B && v > 1 && m % p != 0;
}

/* The unit-time bubble the papers give, or -1 where there is no formula. */
static double bubble_formula(mg_pp_kind k, int p, int v, int m) {
    switch (k) {
    case MG_PP_GPIPE:
    case MG_PP_1F1B: return (double)(p - 1) / (m + p - 1);
    case MG_PP_INTERLEAVED_1F1B: return (double)(p - 1) / ((double)v * m + p - 1);
    case MG_PP_ZB_H1: return (double)(p - 1) / (3.0 * m + p - 1);
    default: return -1;
    }
}

START_TEST(every_schedule_verifies) {
    int verified = 0, refused = 0;
    double t0 = now_s();
    for (int k = 0; k < MG_PP_KIND_COUNT; k++)
        for (int p = 1; p <= 8; p++)
            for (int v = 1; v <= (k == MG_PP_INTERLEAVED_1F1B ? 4 : 1); v++)
                for (int m = 1; m <= 32; m++) {
                    mg_pp_schedule s;
                    int rc = mg_pp_schedule_make(&s, (mg_pp_kind)k, p, v, m);
                    if (should_refuse((mg_pp_kind)k, p, v, m)) {
                        ck_assert_msg(rc == MG_EINVAL, "%s p=%d v=%d M=%d was not refused",
                                      mg_pp_kind_name(k), p, v, m);
                        ck_assert_msg(strstr(mg_last_error(), "micro-batches"), "%s",
                                      mg_last_error());
                        refused++;
                        continue;
                    }
                    ck_assert_msg(rc == MG_OK, "%s p=%d v=%d M=%d: %s", mg_pp_kind_name(k), p, v,
                                  m, mg_last_error());
                    mg_pp_sim sim;
                    rc = mg_pp_verify(&s, NULL, &sim);
                    ck_assert_msg(rc == MG_OK, "%s p=%d v=%d M=%d: %s", mg_pp_kind_name(k), p, v,
                                  m, mg_last_error());
                    double want = bubble_formula((mg_pp_kind)k, p, v, m);
                    ck_assert_msg(fabs(sim.bubble - want) < 1e-12,
                                  "%s p=%d v=%d M=%d: bubble %.15g, the formula says %.15g",
                                  mg_pp_kind_name(k), p, v, m, sim.bubble, want);
                    /* the same under the strict model: a send waits for its receive */
                    mg_pp_sim strict;
                    ck_assert(mg_pp_simulate(&s, NULL, MG_PP_P2P_RENDEZVOUS, &strict) == MG_OK);
                    ck_assert_msg(strict.step_time >= sim.step_time - 1e-12,
                                  "%s p=%d v=%d M=%d: strict model faster", mg_pp_kind_name(k), p,
                                  v, m);
                    mg_pp_sim_free(&strict);
                    for (int st = 0; st < s.stages; st++) {
                        int r = st % p, live = sim.peak_live[st];
                        if (k == MG_PP_GPIPE)
                            ck_assert_msg(live == m, "gpipe p=%d M=%d stage %d holds %d, want M",
                                          p, m, st, live);
                        if (k == MG_PP_1F1B || (k == MG_PP_INTERLEAVED_1F1B && v == 1))
                            ck_assert_msg(live == (p - r < m ? p - r : m) && live <= p,
                                          "1f1b p=%d M=%d stage %d holds %d, want p - r", p, m, st,
                                          live);
                        if (k == MG_PP_ZB_H1)
                            ck_assert_msg(live <= p, "zb-h1 p=%d M=%d stage %d holds %d > p", p, m,
                                          st, live);
                    }
                    if (k == MG_PP_INTERLEAVED_1F1B && v > 1)
                        for (int r = 0; r < p; r++) {
                            int bound = 2 * (p - r - 1) + (v - 1) * p + 1;
                            if (bound > v * m) bound = v * m;
                            ck_assert_msg(sim.peak_live_rank[r] <= bound,
                                          "interleaved p=%d v=%d M=%d rank %d holds %d > %d", p, v,
                                          m, r, sim.peak_live_rank[r], bound);
                        }
                    mg_pp_sim_free(&sim);
                    mg_pp_schedule_free(&s);
                    verified++;
                }
    printf("pipeline schedules: %d configurations verified under both transfer models and %d "
           "refused by their schedule's rule, in %.0f ms\n",
           verified, refused, 1e3 * (now_s() - t0));
    ck_assert_int_eq(verified + refused, 3 * 8 * 32 + 4 * 8 * 32);
}
END_TEST

/* gpipe with equal stages and a time c per transfer. A receive is posted
 * right before the compute that consumes it and a transfer starts when both
 * ends are posted, so a stage waits c before each forward that follows its
 * previous one (and each backward likewise): stage r >= 1 starts F(j) at
 * (r + j)(F + c), and the step ends after (M + p - 1)(F + B) + 2 (M + p - 2) c.
 * Micro-batches of different sizes scale every time. */
START_TEST(cost_gives_closed_forms) {
    enum { P = 4, M = 6 };
    double f[P], bi[P], bw[P], act[P], saved[P];
    for (int i = 0; i < P; i++) {
        f[i] = 1.0;
        bi[i] = 1.0;
        bw[i] = 0.5;
        act[i] = 1000.0;
        saved[i] = 10.0 * (i + 1);
    }
    mg_pp_cost cost = {.forward = f, .backward_input = bi, .backward_weight = bw,
                       .act_bytes = act, .saved_bytes = saved, .latency = 0.25};
    mg_pp_schedule s;
    ck_assert(mg_pp_schedule_make(&s, MG_PP_GPIPE, P, 1, M) == MG_OK);
    mg_pp_sim sim;
    ck_assert_msg(mg_pp_verify(&s, &cost, &sim) == MG_OK, "%s", mg_last_error());
    double want = (M + P - 1) * (1.0 + 1.5) + 2 * (M + P - 2) * 0.25;
    ck_assert_msg(fabs(sim.step_time - want) < 1e-9, "step %.9g, want %.9g", sim.step_time, want);
    /* bandwidth: 1000 bytes at 4000 B/s adds 0.25 per transfer */
    cost.latency = 0;
    cost.bandwidth = 4000;
    mg_pp_sim_free(&sim);
    ck_assert(mg_pp_verify(&s, &cost, &sim) == MG_OK);
    ck_assert_msg(fabs(sim.step_time - want) < 1e-9, "step %.9g, want %.9g", sim.step_time, want);
    /* gpipe keeps every micro-batch: rows 3,3,3,3,3,1 of 10 * (r + 1) bytes */
    int64_t rows[M] = {3, 3, 3, 3, 3, 1};
    cost.rows = rows;
    mg_pp_sim_free(&sim);
    ck_assert(mg_pp_verify(&s, &cost, &sim) == MG_OK);
    for (int r = 0; r < P; r++)
        ck_assert_msg(fabs(sim.peak_bytes[r] - 16 * 10.0 * (r + 1)) < 1e-9, "rank %d: %g bytes", r,
                      sim.peak_bytes[r]);
    /* compute of rank 0: 16 rows of F + Bi + W */
    ck_assert(fabs(sim.busy_rank[0] - 16 * 2.5) < 1e-9);
    mg_pp_sim_free(&sim);
    mg_pp_schedule_free(&s);
}
END_TEST

/* Shared cores: on one core for all ranks (core_share 1/p) with free
 * transfers some rank can always compute, so the step is the sum of all the
 * work, whatever the schedule; a pipeline that never computes on two ranks at
 * once (M = 1) keeps its unshared times on a single core; in between, the step
 * lies between the unshared one and the sum of the work. */
START_TEST(shared_cores_processor_sharing) {
    enum { P = 4, M = 8 };
    double f[2 * P], bi[2 * P], bw[2 * P];
    for (int i = 0; i < 2 * P; i++) {
        f[i] = 1.0 + 0.25 * (i % 3);
        bi[i] = 1.0;
        bw[i] = 0.5 + 0.125 * i;
    }
    mg_pp_kind kinds[] = {MG_PP_GPIPE, MG_PP_1F1B, MG_PP_INTERLEAVED_1F1B, MG_PP_ZB_H1};
    for (int k = 0; k < 4; k++) {
        int v = kinds[k] == MG_PP_INTERLEAVED_1F1B ? 2 : 1;
        mg_pp_schedule s;
        ck_assert(mg_pp_schedule_make(&s, kinds[k], P, v, M) == MG_OK);
        double work = 0;
        for (int st = 0; st < P * v; st++) work += M * (f[st] + bi[st] + bw[st]);
        mg_pp_cost cost = {.forward = f, .backward_input = bi, .backward_weight = bw};
        mg_pp_sim alone, one, two;
        ck_assert(mg_pp_verify(&s, &cost, &alone) == MG_OK);
        cost.core_share = 1.0 / P;
        ck_assert_msg(mg_pp_verify(&s, &cost, &one) == MG_OK, "%s", mg_last_error());
        ck_assert_msg(fabs(one.step_time - work) < 1e-9 * work, "%s on one core: step %.9g, work %.9g",
                      mg_pp_kind_name(kinds[k]), one.step_time, work);
        cost.core_share = 2.0 / P;
        ck_assert(mg_pp_verify(&s, &cost, &two) == MG_OK);
        ck_assert_msg(two.step_time >= alone.step_time - 1e-9 && two.step_time <= work + 1e-9 &&
                          two.step_time >= work / 2 - 1e-9,
                      "%s on two cores: step %.9g, unshared %.9g, work %.9g",
                      mg_pp_kind_name(kinds[k]), two.step_time, alone.step_time, work);
        printf("%s p=%d M=%d: step %.2f unshared, %.2f on 2 cores, %.2f on 1 (work %.2f)\n",
               mg_pp_kind_name(kinds[k]), P, M, alone.step_time, two.step_time, one.step_time,
               work);
        mg_pp_sim_free(&alone);
        mg_pp_sim_free(&one);
        mg_pp_sim_free(&two);
        mg_pp_schedule_free(&s);
    }
    /* M = 1: one rank computes at a time, so a single core changes nothing */
    mg_pp_schedule s;
    ck_assert(mg_pp_schedule_make(&s, MG_PP_GPIPE, P, 1, 1) == MG_OK);
    mg_pp_cost cost = {.forward = f, .backward_input = bi, .backward_weight = bw, .latency = 0.1};
    mg_pp_sim alone, one;
    ck_assert(mg_pp_verify(&s, &cost, &alone) == MG_OK);
    cost.core_share = 1.0 / P;
    ck_assert(mg_pp_verify(&s, &cost, &one) == MG_OK);
    ck_assert_msg(fabs(one.step_time - alone.step_time) < 1e-9, "M=1: %.9g against %.9g",
                  one.step_time, alone.step_time);
    for (int r = 0; r < P; r++)
        ck_assert(fabs(one.busy_rank[r] - alone.busy_rank[r]) < 1e-9);
    mg_pp_sim_free(&alone);
    mg_pp_sim_free(&one);
    mg_pp_schedule_free(&s);
}
END_TEST

START_TEST(interleaved_v1_is_1f1b) {
    for (int p = 1; p <= 8; p++)
        for (int m = p; m <= 32; m++) {
            mg_pp_schedule a, b;
            ck_assert(mg_pp_schedule_make(&a, MG_PP_1F1B, p, 1, m) == MG_OK);
            ck_assert(mg_pp_schedule_make(&b, MG_PP_INTERLEAVED_1F1B, p, 1, m) == MG_OK);
            for (int r = 0; r < p; r++) {
                ck_assert_int_eq(a.len[r], b.len[r]);
                for (int i = 0; i < a.len[r]; i++) {
                    const mg_pp_action *x = &a.actions[r][i], *y = &b.actions[r][i];
                    ck_assert(x->op == y->op && x->mb == y->mb && x->stage == y->stage &&
                              x->peer == y->peer);
                }
            }
            mg_pp_schedule_free(&a);
            mg_pp_schedule_free(&b);
        }
}
END_TEST

/* ---- mutations -------------------------------------------------------------- */

/* Index of the n-th action of rank r with op/mb/stage (-1: any). */
static int find(const mg_pp_schedule *s, int r, int op, int mb, int n) {
    for (int i = 0; i < s->len[r]; i++)
        if (s->actions[r][i].op == op && (mb < 0 || s->actions[r][i].mb == mb) && n-- == 0) return i;
    ck_abort_msg("no such action");
    return -1;
}

static void drop(mg_pp_schedule *s, int r, int i) {
    memmove(&s->actions[r][i], &s->actions[r][i + 1],
            (size_t)(s->len[r] - i - 1) * sizeof(mg_pp_action));
    s->len[r]--;
}

/* Moves action `from` of rank r to position `to` (the others shift). */
static void move(mg_pp_schedule *s, int r, int from, int to) {
    mg_pp_action a = s->actions[r][from];
    drop(s, r, from);
    memmove(&s->actions[r][to + 1], &s->actions[r][to], (size_t)(s->len[r] - to) * sizeof a);
    s->actions[r][to] = a;
    s->len[r]++;
}

/* The schedule fails mg_pp_verify with a message containing `want`. */
static void assert_caught(mg_pp_schedule *s, const char *want, const char *what) {
    int rc = mg_pp_verify(s, NULL, NULL);
    ck_assert_msg(rc == MG_EINVAL, "%s was not caught", what);
    ck_assert_msg(strstr(mg_last_error(), want), "%s: message '%s' lacks '%s'", what,
                  mg_last_error(), want);
    printf("caught %s: %s\n", what, mg_last_error());
    mg_pp_schedule_free(s);
}

static void make(mg_pp_schedule *s, mg_pp_kind k, int p, int v, int m) {
    ck_assert(mg_pp_schedule_make(s, k, p, v, m) == MG_OK);
    ck_assert_msg(mg_pp_verify(s, NULL, NULL) == MG_OK, "%s", mg_last_error());
}

START_TEST(mutations_are_caught) {
    /* one send or receive dropped from a list: (schedule, p, M) rank op mb */
    static const struct {
        mg_pp_kind kind;
        int p, m, rank, op, mb;
        const char *want, *what;
    } drops[] = {
        {MG_PP_1F1B, 4, 8, 2, MG_PP_RECV_ACT, 5, "rank 2, action", "a dropped recv-act"},
        {MG_PP_1F1B, 4, 8, 1, MG_PP_SEND_ACT, 3, "never runs the send-act of micro-batch 3 on stage 1",
         "a dropped send-act"},
        {MG_PP_1F1B, 4, 8, 2, MG_PP_RECV_GRAD, 6, "no recv-grad before it", "a dropped recv-grad"},
        {MG_PP_ZB_H1, 4, 8, 1, MG_PP_SEND_GRAD, 7,
         "never runs the send-grad of micro-batch 7 on stage 1", "a dropped send-grad"},
        {MG_PP_INTERLEAVED_1F1B, 2, 4, 0, MG_PP_RECV_ACT, 2, "no recv-act before it",
         "a dropped recv-act (interleaved)"},
    };
    for (size_t i = 0; i < sizeof drops / sizeof drops[0]; i++) {
        mg_pp_schedule s;
        make(&s, drops[i].kind, drops[i].p, drops[i].kind == MG_PP_INTERLEAVED_1F1B ? 2 : 1,
             drops[i].m);
        drop(&s, drops[i].rank, find(&s, drops[i].rank, drops[i].op, drops[i].mb, 0));
        assert_caught(&s, drops[i].want, drops[i].what);
    }
}
END_TEST

START_TEST(mutations_order) {
    mg_pp_schedule s;
    /* a backward before its forward */
    make(&s, MG_PP_GPIPE, 2, 1, 2);
    move(&s, 0, find(&s, 0, MG_PP_BACKWARD, 0, 0), 0);
    assert_caught(&s, "a backward before its forward", "B before F");

    /* W before Bi */
    make(&s, MG_PP_ZB_H1, 4, 1, 4);
    int w = find(&s, 3, MG_PP_BACKWARD_WEIGHT, 2, 0), b = find(&s, 3, MG_PP_BACKWARD_INPUT, 2, 0);
    move(&s, 3, w, b);
    assert_caught(&s, "a W before its backward-input", "W before Bi");

    /* a send moved behind a wait for what its receiver can send only later:
     * rank 0 keeps mb 1's activation until it has mb 0's gradient, which
     * rank 1 makes only after the forward of mb 1 */
    make(&s, MG_PP_GPIPE, 2, 1, 2);
    int snd = find(&s, 0, MG_PP_SEND_ACT, 1, 0), back = find(&s, 0, MG_PP_BACKWARD, 0, 0);
    move(&s, 0, snd, back);
    assert_caught(&s, "deadlocks", "a swap that deadlocks");

    /* the same, only under the strict model: a receive posted first on rank 0 */
    make(&s, MG_PP_GPIPE, 2, 1, 2);
    move(&s, 0, find(&s, 0, MG_PP_RECV_GRAD, 0, 0), 0);
    ck_assert(mg_pp_check(&s) == MG_OK);
    ck_assert_msg(mg_pp_simulate(&s, NULL, MG_PP_P2P_ASYNC, NULL) == MG_OK, "%s", mg_last_error());
    assert_caught(&s, "deadlocks with every send waiting for its receive: rank 0 waits in recv-grad",
                  "an early receive under the strict model");

    /* two sends to one rank swapped: the k-th transfers disagree */
    make(&s, MG_PP_GPIPE, 2, 1, 3);
    move(&s, 0, find(&s, 0, MG_PP_SEND_ACT, 0, 0), find(&s, 0, MG_PP_SEND_ACT, 1, 0));
    ck_assert(mg_pp_check(&s) == MG_OK);
    assert_caught(&s, "does not match", "sends out of order");
}
END_TEST

START_TEST(mutations_structure) {
    mg_pp_schedule s;
    make(&s, MG_PP_1F1B, 3, 1, 3);
    s.actions[1][find(&s, 1, MG_PP_SEND_ACT, 0, 0)].peer = 0;
    assert_caught(&s, "the peer must be rank 2", "a wrong peer");

    make(&s, MG_PP_1F1B, 3, 1, 3);
    drop(&s, 2, s.len[2] - 1);
    assert_caught(&s, "never reduces stage 2's gradients", "a missing reduce-grad");

    make(&s, MG_PP_1F1B, 3, 1, 3);
    move(&s, 0, s.len[0] - 1, 0);
    assert_caught(&s, "reduces the gradients before", "reduce-grad first");

    make(&s, MG_PP_GPIPE, 2, 1, 2);
    s.actions[1][find(&s, 1, MG_PP_FORWARD, 1, 0)].mb = 0;
    assert_caught(&s, "already ran", "a forward twice");

    make(&s, MG_PP_ZB_H1, 2, 1, 2);
    s.actions[0][find(&s, 0, MG_PP_BACKWARD_INPUT, 0, 0)].op = MG_PP_BACKWARD;
    assert_caught(&s, "a W after a full backward", "W after a full B");

    make(&s, MG_PP_INTERLEAVED_1F1B, 2, 2, 4);
    s.actions[0][find(&s, 0, MG_PP_FORWARD, 0, 1)].stage = 1;
    assert_caught(&s, "held by another rank", "a stage of another rank");
}
END_TEST

START_TEST(refusals_and_names) {
    mg_pp_schedule s;
    ck_assert(mg_pp_schedule_make(&s, MG_PP_1F1B, 4, 1, 2) == MG_EINVAL);
    ck_assert_msg(strstr(mg_last_error(), "1f1b needs at least as many micro-batches as pipeline "
                                          "ranks: 2 micro-batches on 4 ranks is too few; use 4"),
                  "%s", mg_last_error());
    ck_assert(mg_pp_schedule_make(&s, MG_PP_1F1B, 4, 2, 8) == MG_EINVAL);
    ck_assert_msg(strstr(mg_last_error(), "interleaved-1f1b"), "%s", mg_last_error());
    ck_assert(mg_pp_schedule_make(&s, MG_PP_INTERLEAVED_1F1B, 4, 2, 6) == MG_EINVAL);
    ck_assert_msg(strstr(mg_last_error(), "use 4 or 8"), "%s", mg_last_error());
    mg_pp_kind k;
    ck_assert(mg_pp_kind_parse("zb-h1", &k) == MG_OK && k == MG_PP_ZB_H1);
    ck_assert(mg_pp_kind_parse("1F1B", &k) == MG_EINVAL);
    ck_assert_msg(strstr(mg_last_error(), "use gpipe, 1f1b, interleaved-1f1b or zb-h1"), "%s",
                  mg_last_error());
    char buf[64];
    mg_pp_action a = {.op = MG_PP_RECV_GRAD, .stage = 2, .peer = 3, .mb = 7};
    ck_assert_str_eq(mg_pp_action_format(buf, sizeof buf, &a), "recv-grad 7 s2 <- 3");
}
END_TEST

START_TEST(microbatch_split) {
    int64_t rows[8];
    ck_assert(mg_pp_microbatch_rows(10, 4, rows) == MG_OK);
    ck_assert(rows[0] == 3 && rows[1] == 3 && rows[2] == 3 && rows[3] == 1);
    ck_assert(mg_pp_microbatch_rows(8, 4, rows) == MG_OK);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(rows[i], 2);
    ck_assert(mg_pp_microbatch_rows(10, 6, rows) == MG_EINVAL);
    ck_assert_msg(strstr(mg_last_error(), "use 5 micro-batches"), "%s", mg_last_error());
    ck_assert(mg_pp_microbatch_rows(3, 4, rows) == MG_EINVAL);
}
END_TEST

int main(void) {
    const TTest *tests[] = {every_schedule_verifies, cost_gives_closed_forms,
                            shared_cores_processor_sharing,
                            interleaved_v1_is_1f1b, mutations_are_caught, mutations_order,
                            mutations_structure, refusals_and_names, microbatch_split, NULL};
    return mg_test_run(mg_test_suite("pipeline_schedule", tests));
}
