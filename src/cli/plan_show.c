/* plan_show.c: the text report and the Chrome-trace JSON of `meshgrad plan`
 * (see plan_show.h). Times are printed in milliseconds; the trace is in
 * microseconds, as the format wants.
 * Exports mg_plan_print, mg_plan_write_trace. */
#include "cli/plan_show.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/files.h"
#include "status.h"

#define GANTT_COLS 96
#define MIB (1024.0 * 1024.0)

/* "F3" (one stage per rank) or "F3s5" */
static void short_name(char *buf, size_t len, const mg_pp_schedule *s, const mg_pp_action *a) {
    static const char letter[] = {'F', 'B', 'B', 'W'};
    if (s->virtual_stages > 1)
        snprintf(buf, len, "%c%ds%d", letter[a->op], (int)a->mb, (int)a->stage);
    else
        snprintf(buf, len, "%c%d", letter[a->op], (int)a->mb);
}

static void print_header(FILE *out, const mg_plan_report *r) {
    const mg_pp_schedule *s = r->schedule;
    double params = 0;
    for (int i = 0; i < r->split->layers; i++) params += r->layers[i].params;
    fprintf(out, "meshgrad plan: %s (%d layers, %.1f M parameters), batch %lld in %d micro-batches (rows",
            r->model, r->split->layers, params * 1e-6, (long long)r->batch, s->microbatches);
    for (int i = 0; i < s->microbatches && i < 8; i++) fprintf(out, " %lld", (long long)r->rows[i]);
    fprintf(out, "%s)\n", s->microbatches > 8 ? " ..." : "");
    fprintf(out, "mesh %s (%s): %d pipeline ranks%s, schedule %s", r->mesh, r->parallel, s->ranks,
            r->dp > 1 ? " x data parallel" : "", mg_pp_kind_name(s->kind));
    if (s->virtual_stages > 1)
        fprintf(out, " with %d virtual stages per rank (stage s on rank s %% %d)", s->virtual_stages,
                s->ranks);
    fprintf(out, "\nmachine: %s\n\n", r->calibration);
}

static void print_stages(FILE *out, const mg_plan_report *r) {
    const mg_pp_schedule *s = r->schedule;
    const mg_pp_stage_costs *c = r->costs;
    int64_t rows = 0; /* the largest micro-batch, per rank */
    for (int i = 0; i < s->microbatches; i++) rows = c->rows[i] > rows ? c->rows[i] : rows;
    fprintf(out, "stage rank  layers      params  ---- ms per micro-batch of %lld rows ----  "
                 "out KiB  peak live  peak act\n", (long long)rows);
    fprintf(out, "                           MiB        F       Bi        W   transfer           "
                 "mbs        MiB\n");
    for (int st = 0; st < s->stages; st++) {
        char names[56];
        int a = r->split->first[st], b = r->split->first[st + 1] - 1;
        if (a == b) snprintf(names, sizeof names, "%s", r->layers[a].name);
        else snprintf(names, sizeof names, "%s-%s", r->layers[a].name, r->layers[b].name);
        double xfer = 0;
        if (st + 1 < s->stages) { /* the transfer of the largest micro-batch's output */
            mg_pp_action send = {.op = MG_PP_SEND_ACT, .stage = (int16_t)st, .peer = 0, .mb = 0};
            mg_pp_cost one = c->cost;
            one.rows = &rows;
            xfer = mg_pp_action_time(&one, &send) * 1e3;
        }
        fprintf(out, "%5d %4d  %-10s %7.1f %8.3f %8.3f %8.3f %10.3f %8.1f %10d %10.2f\n", st,
                st % s->ranks, names, c->param_bytes[st] / MIB, c->forward[st] * rows * 1e3,
                c->backward_input[st] * rows * 1e3, c->backward_weight[st] * rows * 1e3, xfer,
                c->act_bytes[st] * rows / 1024.0, r->sim->peak_live[st],
                r->sim->peak_stage_bytes[st] / MIB);
    }
}

/* One line per rank: the compute action under each column's middle. */
static void print_gantt(FILE *out, const mg_plan_report *r) {
    const mg_pp_schedule *s = r->schedule;
    const mg_pp_sim *sim = r->sim;
    double col = sim->step_time / GANTT_COLS;
    fprintf(out, "\ntimeline (one column = %.3f ms; F forward, B backward, W weight gradient, R "
                 "reduce-grad, . idle or waiting):\n", col * 1e3);
    for (int rk = 0; rk < s->ranks; rk++) {
        char line[GANTT_COLS + 1];
        memset(line, '.', GANTT_COLS);
        line[GANTT_COLS] = '\0';
        for (int i = 0; i < s->len[rk]; i++) {
            const mg_pp_action *a = &s->actions[rk][i];
            if (!mg_pp_op_is_compute(a->op) && a->op != MG_PP_REDUCE_GRAD) continue;
            for (int k = 0; k < GANTT_COLS; k++) {
                double mid = (k + 0.5) * col;
                if (mid >= sim->start[rk][i] && mid < sim->end[rk][i])
                    line[k] = mg_pp_op_is_compute(a->op) ? "FBBW"[a->op] : 'R';
            }
        }
        fprintf(out, "  rank %-3d |%s|\n", rk, line);
    }
    fprintf(out, "\nactions in order (start ms):\n");
    for (int rk = 0; rk < s->ranks; rk++) {
        int used = fprintf(out, "  rank %-3d", rk);
        for (int i = 0; i < s->len[rk]; i++) {
            const mg_pp_action *a = &s->actions[rk][i];
            if (!mg_pp_op_is_compute(a->op)) continue;
            char name[24], item[48];
            short_name(name, sizeof name, s, a);
            int n = snprintf(item, sizeof item, " %s %.2f", name, sim->start[rk][i] * 1e3);
            if (used + n > 100) used = fprintf(out, "\n           ");
            used += fprintf(out, "%s", item);
        }
        fprintf(out, "\n");
    }
}

void mg_plan_print(FILE *out, const mg_plan_report *r) {
    const mg_pp_schedule *s = r->schedule;
    const mg_pp_sim *sim = r->sim;
    print_header(out, r);
    print_stages(out, r);
    print_gantt(out, r);
    double busy = 0, most = 0;
    int worst = 0;
    for (int rk = 0; rk < s->ranks; rk++) {
        busy += sim->busy_rank[rk] / s->ranks;
        if (sim->peak_bytes[rk] > most) {
            most = sim->peak_bytes[rk];
            worst = rk;
        }
    }
    fprintf(out, "\npredicted step time: %.2f ms (compute %.2f ms per rank on average; bubble %.1f%% "
                 "with these costs, %.1f%% at unit time)\n",
            sim->step_time * 1e3, busy * 1e3, 100 * sim->bubble, 100 * r->unit->bubble);
    fprintf(out, "peak activation memory per stage (MiB):");
    for (int st = 0; st < s->stages; st++)
        fprintf(out, " s%d %.2f (%d mbs)", st, sim->peak_stage_bytes[st] / MIB, sim->peak_live[st]);
    fprintf(out, "\npeak activation memory per rank: largest on rank %d, %.2f MiB\n", worst,
            most / MIB);
}

/* ---- Chrome trace --------------------------------------------------------------- */

#define TRACE_MARK "{\"otherData\":{\"generator\":\"meshgrad plan\"}"

/* 1 for a trace `meshgrad plan` wrote (mg_file_replaceable's test) */
static int is_plan_trace(const char *path) { return mg_file_starts_with(path, TRACE_MARK); }

static void span(FILE *f, int *first, const char *name, const char *cat, int pid, int tid,
                 double start, double end, int mb, int stage) {
    double dur = (end - start) * 1e6;
    fprintf(f, "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
               "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"mb\":%d,\"stage\":%d}}",
            *first ? "" : ",", name, cat, pid, tid, start * 1e6, dur > 0.001 ? dur : 0.001, mb,
            stage);
    *first = 0;
}

/* The events: per rank its name, its threads, its spans and the flows of its sends. */
static void write_events(FILE *f, const mg_pp_schedule *s, const mg_pp_sim *sim, int **lanes) {
    static const char *const cats[] = {"forward", "backward", "backward-input", "backward-weight"};
    fprintf(f, TRACE_MARK ",\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
    int first = 1, flow = 0;
    for (int rk = 0; rk < s->ranks; rk++) {
        fprintf(f, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":"
                   "\"rank %d\"}},\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                   "\"args\":{\"name\":\"compute\"}}",
                first ? "" : ",", rk, rk, rk);
        first = 0;
        int most = 0;
        for (int i = 0; i < s->len[rk]; i++) most = lanes[rk][i] > most ? lanes[rk][i] : most;
        for (int l = 1; l <= most; l++)
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"name\":\"transfers %d\"}}", rk, l, l);
        for (int i = 0; i < s->len[rk]; i++) {
            const mg_pp_action *a = &s->actions[rk][i];
            char name[64];
            mg_pp_action_format(name, sizeof name, a);
            if (mg_pp_op_is_compute(a->op) || a->op == MG_PP_REDUCE_GRAD) {
                span(f, &first, name, a->op == MG_PP_REDUCE_GRAD ? "reduce-grad" : cats[a->op], rk,
                     0, sim->start[rk][i], sim->end[rk][i], a->mb, a->stage);
                continue;
            }
            span(f, &first, name, "transfer", rk, lanes[rk][i], sim->start[rk][i], sim->end[rk][i],
                 a->mb, a->stage);
            if (a->op != MG_PP_SEND_ACT && a->op != MG_PP_SEND_GRAD) continue;
            int j = sim->match[rk][i], peer = a->peer; /* the receive on the peer */
            double recv_mid = 0.5 * (sim->start[peer][j] + sim->end[peer][j]);
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"flow\",\"ph\":\"s\",\"id\":%d,\"pid\":%d,"
                       "\"tid\":%d,\"ts\":%.3f},\n{\"name\":\"%s\",\"cat\":\"flow\",\"ph\":\"f\","
                       "\"bp\":\"e\",\"id\":%d,\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
                    name, flow, rk, lanes[rk][i], sim->start[rk][i] * 1e6, name, flow, peer,
                    lanes[peer][j], recv_mid * 1e6);
            flow++;
        }
    }
    fprintf(f, "\n]}\n");
}

#define MAX_LANES 15 /* threads for transfers in flight at once, per rank */

/* Transfers of one rank on threads 1, 2, ...: each on the first whose last
 * transfer has ended, so spans on one thread never overlap (posts come in
 * list order, which is time order). lane[i] for transfer i. */
static void assign_lanes(const mg_pp_schedule *s, const mg_pp_sim *sim, int rk, int *lane) {
    double lane_end[MAX_LANES];
    int used = 0;
    for (int i = 0; i < s->len[rk]; i++) {
        if (!mg_pp_op_is_p2p(s->actions[rk][i].op)) continue;
        int l = 0;
        while (l < used && lane_end[l] > sim->start[rk][i]) l++;
        if (l == MAX_LANES) l = MAX_LANES - 1; /* more in flight: they share the last */
        if (l == used) used++;
        lane_end[l] = sim->end[rk][i];
        lane[i] = 1 + l;
    }
}

/* Written as every save is (io/files.h): to a temporary file beside it,
 * renamed over the path only where nothing is or a trace of the plan's
 * (never through a link). */
int mg_plan_write_trace(const char *path, const mg_plan_report *r) {
    int exists = 0;
    int rc = mg_file_replaceable(path, "trace meshgrad plan wrote", is_plan_trace, &exists);
    if (rc != MG_OK) return rc;
    const mg_pp_schedule *s = r->schedule;
    const mg_pp_sim *sim = r->sim;
    int *lanes[MG_PP_MAX_RANKS];
    for (int rk = 0; rk < s->ranks; rk++) {
        lanes[rk] = calloc((size_t)s->len[rk] + 1, sizeof(int));
        if (lanes[rk]) assign_lanes(s, sim, rk, lanes[rk]);
        else rc = mg_error(MG_ENOMEM, "--trace: out of memory");
    }
    mg_tmp_file tmp = {.fd = -1};
    if (rc == MG_OK) rc = mg_tmp_create(&tmp, path);
    FILE *f = rc == MG_OK ? fdopen(dup(tmp.fd), "w") : NULL;
    if (rc == MG_OK && !f) rc = mg_error(MG_EIO, "cannot write --trace '%s'", path);
    if (rc == MG_OK) write_events(f, s, sim, lanes);
    if (f && (ferror(f) | fclose(f)) != 0 && rc == MG_OK)
        rc = mg_error(MG_EIO, "writing --trace '%s' failed: %s", path,
                      strerror(errno ? errno : EIO));
    if (rc == MG_OK) rc = mg_tmp_commit(&tmp, path, "trace meshgrad plan wrote", is_plan_trace);
    else mg_tmp_discard(&tmp);
    for (int rk = 0; rk < s->ranks; rk++) free(lanes[rk]);
    return rc;
}
