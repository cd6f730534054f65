/* train_report.c: the progress line's figures and the end-of-run report of
 * memory and communication (see train_report.h, train.h).
 * Exports: mg_window_init, mg_window_free, mg_window_step_begin,
 * mg_window_step_end, mg_window_slowest_pack, mg_window_slowest_add,
 * mg_window_format, mg_train_report_end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/train.h"
#include "context.h"
#include "dist/flight.h"
#include "dist/mesh.h"
#include "status.h"

#define RANK_BITS 20 /* the agreement's value: step time in microseconds, then the rank */

int mg_window_init(mg_train_window *w, int world) {
    memset(w, 0, sizeof *w);
    w->world = world;
    w->slow_steps = calloc((size_t)world, sizeof *w->slow_steps);
    w->slow_s = calloc((size_t)world, sizeof *w->slow_s);
    if (!w->slow_steps || !w->slow_s) {
        mg_window_free(w);
        return mg_error(MG_ENOMEM, "train: out of memory");
    }
    return MG_OK;
}

void mg_window_free(mg_train_window *w) {
    free(w->slow_steps);
    free(w->slow_s);
    w->slow_steps = NULL;
    w->slow_s = NULL;
}

void mg_window_step_begin(mg_train_window *w) {
    w->t0 = mg_clock();
    w->comm_ns0 = mg_flight_wait_ns();
}

void mg_window_step_end(mg_train_window *w, int64_t step, double data_s) {
    double s = mg_clock() - w->t0;
    w->step_s += s;
    w->data_s += data_s;
    w->comm_s += (double)(mg_flight_wait_ns() - w->comm_ns0) * 1e-9;
    w->steps++;
    w->last_step_s = s;
    if (!w->first_step) { /* the figures per step count from the end of the first */
        mg_comm_stats_get(w->at_first);
        w->first_step = step;
    }
}

int64_t mg_window_slowest_pack(const mg_train_window *w, int rank) {
    int64_t us = (int64_t)(w->last_step_s * 1e6);
    if (us > ((int64_t)1 << 40)) us = (int64_t)1 << 40;
    return us << RANK_BITS | (rank & ((1 << RANK_BITS) - 1));
}

void mg_window_slowest_add(mg_train_window *w, int64_t agreed) {
    int rank = (int)(agreed & ((1 << RANK_BITS) - 1));
    double s = (double)(agreed >> RANK_BITS) * 1e-6;
    if (s <= 0 || rank >= w->world) return; /* the first step has no step before it */
    w->slow_steps[rank]++;
    w->slow_s[rank] += s;
}

void mg_window_format(mg_train_window *w, char *buf, size_t len, int64_t batch, const char *unit) {
    double n = w->steps > 0 ? (double)w->steps : 1;
    double ms = w->step_s * 1e3 / n, data = w->data_s * 1e3 / n, comm = w->comm_s * 1e3 / n;
    double compute = ms - data - comm > 0 ? ms - data - comm : 0;
    int k = snprintf(buf, len, "%.2f ms/step (compute %.2f, comm %.2f, data %.2f) | %.0f %s/s", ms,
                     compute, comm, data, ms > 0 ? (double)batch * 1e3 / ms : 0.0, unit);
    int slow = -1;
    for (int r = 0; r < w->world; r++)
        if (w->slow_steps[r] > 0 && (slow < 0 || w->slow_steps[r] > w->slow_steps[slow])) slow = r;
    if (slow >= 0 && k > 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, " | slowest rank %d (%.2f ms)", slow,
                 w->slow_s[slow] * 1e3 / w->slow_steps[slow]);
    w->step_s = w->data_s = w->comm_s = 0;
    w->steps = 0;
    memset(w->slow_steps, 0, (size_t)w->world * sizeof *w->slow_steps);
    memset(w->slow_s, 0, (size_t)w->world * sizeof *w->slow_s);
}

/* ---- the end of the run ----------------------------------------------------------- */

#define MIB (1024.0 * 1024.0)

int mg_train_report_end(trainer *tr, int64_t last_step, char *json, size_t len) {
    json[0] = '\0';
    mg_comm *world = tr->mesh->world;
    mg_train_window *w = &tr->window;
    /* bytes and calls per step and collective, the largest rank's */
    double per_step[2 * MG_COLL_COUNT] = {0};
    int64_t nsteps = w->first_step ? last_step - w->first_step : 0;
    if (nsteps > 0) {
        mg_comm_stats now[MG_COLL_COUNT];
        mg_comm_stats_get(now);
        for (int k = 0; k < MG_COLL_COUNT; k++) {
            per_step[k] = (double)(now[k].bytes - w->at_first[k].bytes) / (double)nsteps;
            per_step[MG_COLL_COUNT + k] = (double)(now[k].calls - w->at_first[k].calls) / (double)nsteps;
        }
    }
    /* the memory of the largest rank: which one, then its parts */
    mg_train_memory m;
    mg_trainer_memory_get(tr->run, &m);
    double most = mg_train_memory_total(&m);
    int64_t who = INT64_MAX;
    int rc = mg_comm_all_reduce_f64(world, per_step, 2 * MG_COLL_COUNT, MG_CONTROL_MAX);
    if (rc == MG_OK) rc = mg_comm_all_reduce_f64(world, &most, 1, MG_CONTROL_MAX);
    if (rc == MG_OK) {
        who = mg_train_memory_total(&m) >= most ? tr->rank : INT64_MAX;
        rc = mg_comm_all_reduce_i64(world, &who, 1, MG_CONTROL_MIN);
    }
    if (rc == MG_OK) rc = mg_comm_broadcast_bytes(world, &m, sizeof m, (int)who);
    if (rc != MG_OK || tr->rank != 0) return rc;
    char casts[64] = "";
    if (m.casts > 0) snprintf(casts, sizeof casts, ", bf16 copies of the weights %.2f", m.casts / MIB);
    printf("memory: peak %.2f MiB on rank %lld: parameters %.2f, gradients %.2f, optimizer %.2f, "
           "activations %.2f, scratch (gathered weights, gradients) %.2f, buffers %.2f%s (MiB)\n",
           mg_train_memory_total(&m) / MIB, (long long)who, m.params / MIB, m.grads / MIB,
           m.optim / MIB, m.activations / MIB, m.scratch / MIB, m.buffers / MIB, casts);
    if (nsteps > 0) {
        printf("comm per step (steps %lld-%lld, the largest rank's):", (long long)w->first_step + 1,
               (long long)last_step);
        const char *sep = " ";
        for (int k = 0; k < MG_COLL_COUNT; k++)
            if (per_step[MG_COLL_COUNT + k] > 0) {
                printf("%s%s %.0f B in %.1f calls", sep, mg_coll_name((mg_coll_kind)k), per_step[k],
                       per_step[MG_COLL_COUNT + k]);
                sep = ", ";
            }
        printf("%s\n", sep[0] == ' ' ? " none" : "");
    }
    mg_train_log_flush();
    char *line = json;
    size_t size = len;
    int n = snprintf(line, size,
                     "{\"step\":%lld,\"memory\":{\"rank\":%lld,\"peak\":%.0f,\"params\":%.0f,"
                     "\"grads\":%.0f,\"optim\":%.0f,\"activations\":%.0f,\"scratch\":%.0f,"
                     "\"buffers\":%.0f,\"casts\":%.0f},\"comm_per_step\":{",
                     (long long)last_step, (long long)who, mg_train_memory_total(&m), m.params,
                     m.grads, m.optim, m.activations, m.scratch, m.buffers, m.casts);
    for (int k = 0; k < MG_COLL_COUNT && n > 0 && (size_t)n < size; k++)
        n += snprintf(line + n, size - (size_t)n, "%s\"%s\":{\"bytes\":%.1f,\"calls\":%.2f}",
                      k ? "," : "", mg_coll_name((mg_coll_kind)k), per_step[k],
                      per_step[MG_COLL_COUNT + k]);
    if (n > 0 && (size_t)n < size) snprintf(line + n, size - (size_t)n, "}}\n");
    return MG_OK;
}

void mg_train_log_flush(void) {
    static int warned;
    if (fflush(stdout) == 0 && !ferror(stdout)) return;
    int err = errno;
    clearerr(stdout);
    if (warned) return;
    warned = 1;
    fprintf(stderr, "warning: the log cannot be written to stdout (%s); the run goes on: its "
                    "checkpoints are saved as before, and --metrics FILE keeps each step's figures\n",
            strerror(err));
    fflush(stderr);
}
