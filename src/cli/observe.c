/* observe.c: --flight-dir, --trace and --trace-steps of train and bench step
 * (see observe.h); both paths pass the rule of every output (io/files.h). Exports: mg_observe_flight, mg_timeline_prepare,
 * mg_timeline_step_begin, mg_timeline_step_end, mg_timeline_finish. */
#include "cli/observe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/trace_kernels.h"
#include "dist/flight.h"
#include "status.h"
#include "trace.h"

#define TRACE_MARK "{\"otherData\":{\"generator\":\"meshgrad trace\""

/* What the flight recorder writes (dist/flight.h) begins so. */
#define DUMP_MARK "{\"meshgrad_flight\""

/* This rank's dump path under the rule of every output (io/files.h), before
 * anything is written: --flight-dir is a directory (or not there yet), and
 * DIR/rank-<r>.json is nothing, a dump, or another regular file (which the
 * recorder leaves as it is: said now, as it will be at a dump); a link, a
 * device, a FIFO, a socket or a directory there is refused (the recorder
 * would open it to see whether it is a dump). */
static int check_dump_path(const char *dir) {
    struct stat sb;
    char path[MG_PATH_MAX];
    if (!dir[0]) return MG_OK;
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return mg_error(MG_EIO, "--flight-dir %s is not a directory: give a directory for the "
                        "flight recorder's dumps", dir);
    if ((size_t)snprintf(path, sizeof path, "%s/rank-%d.json", dir, mg_rank()) >= sizeof path)
        return MG_OK; /* mg_flight_set_dir said so */
    int what, rc = mg_output_check(path, "flight recorder dump", NULL, 0, &what);
    if (rc == MG_OK && what == MG_OUTPUT_FILE && !mg_file_starts_with(path, DUMP_MARK))
        fprintf(stderr, "warning: flight recorder: %s is not a dump: it is left as it is, and "
                        "no dump of rank %d is written while it is there\n", path, mg_rank());
    return rc;
}

int mg_observe_flight(const char *dir) {
    int rc = mg_flight_set_dir(dir);
    if (rc == MG_OK && dir) rc = check_dump_path(dir);
    rc = mg_status_agree(rc);
    return rc == MG_OK ? mg_flight_install_signals() : rc;
}

/* A file this program wrote as a trace. */
static int is_trace(const char *path) { return mg_file_starts_with(path, TRACE_MARK); }

/* "A:B" into *first, *last (A <= B, both >= 1). */
static int parse_steps(const char *text, int64_t *first, int64_t *last) {
    long long a, b;
    char end;
    if (sscanf(text, "%lld:%lld%c", &a, &b, &end) != 2 || a < 1 || b < a)
        return mg_error(MG_EINVAL, "--trace-steps '%s' is not A:B with 1 <= A <= B (the steps "
                                   "to record, counted from 1, both included: e.g. 10:12)", text);
    *first = a;
    *last = b;
    return MG_OK;
}

int mg_timeline_prepare(mg_timeline *t, const char *path, const char *steps, int64_t from,
                        int64_t to, mg_comm *world) {
    memset(t, 0, sizeof *t);
    if (!path || !path[0]) {
        if (steps && steps[0])
            return mg_error(MG_EINVAL, "--trace-steps %s needs --trace FILE (where to write the "
                                       "timeline)", steps);
        return MG_OK;
    }
    int rc = mg_path_check(path, "--trace", MG_TMP_SUFFIX_MAX);
    if (rc != MG_OK) return rc;
    snprintf(t->path, sizeof t->path, "%s", path);
    if (steps && steps[0]) {
        if ((rc = parse_steps(steps, &t->first, &t->last)) != MG_OK) return rc;
        if (t->first < from || t->first > to)
            return mg_error(MG_EINVAL, "--trace-steps %s starts outside the steps this run makes "
                                       "(%lld to %lld)", steps, (long long)from, (long long)to);
    } else { /* a few steps after the first (which warms up), cut to the run */
        t->first = from + 1 <= to ? from + 1 : from;
        t->last = t->first + 2;
    }
    if (t->last > to) t->last = to;
    int exists; /* refused up front; checked again when the file is written */
    if (world->rank == 0) rc = mg_file_replaceable(path, "trace this program wrote", is_trace, &exists);
    return mg_status_agree(rc);
}

int mg_timeline_step_begin(mg_timeline *t, int64_t step, mg_comm *world) {
    if (!t->path[0] || t->recording || t->written || step != t->first) return MG_OK;
    int rc = mg_comm_barrier(world); /* the ranks start their clocks together */
    if (rc == MG_OK) rc = mg_trace_start();
    if (rc == MG_OK) rc = mg_backend_trace_kernels(true);
    t->recording = rc == MG_OK;
    return rc;
}

/* Rank 0: the file, from the ranks' parts (counts[r] bytes each, in order). */
static int write_file(const mg_timeline *t, const char *parts, const int64_t *counts, int n) {
    mg_tmp_file tmp;
    int rc = mg_tmp_create(&tmp, t->path);
    if (rc != MG_OK) return rc;
    FILE *f = fdopen(dup(tmp.fd), "w");
    if (!f) {
        mg_tmp_discard(&tmp);
        return mg_error(MG_EIO, "--trace '%s': %s", t->path, strerror(errno));
    }
    fprintf(f, TRACE_MARK ",\"steps\":\"%lld:%lld\"},\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n",
            (long long)t->first, (long long)t->last);
    for (int r = 0; r < n; r++) {
        if (r) fputs(",\n", f);
        fwrite(parts, 1, (size_t)counts[r], f);
        parts += counts[r];
    }
    fputs("\n]}\n", f);
    int bad = ferror(f) != 0;
    bad |= fclose(f) != 0;
    if (bad) {
        mg_tmp_discard(&tmp);
        return mg_error(MG_EIO, "writing --trace '%s' failed: %s", t->path, strerror(errno));
    }
    return mg_tmp_commit(&tmp, t->path, "trace this program wrote", is_trace);
}

/* Stops recording; gathers every rank's events to rank 0, which writes them. */
static int finish(mg_timeline *t, mg_comm *world) {
    mg_backend_trace_kernels(false);
    mg_trace_stop();
    t->recording = 0;
    t->written = 1;
    char *mine = NULL, *all = NULL;
    size_t len = 0;
    int rc = mg_trace_format(world->rank, &mine, &len);
    mg_trace_free();
    rc = mg_status_agree(rc);
    int64_t *counts = calloc((size_t)world->size, sizeof *counts);
    if (rc == MG_OK && !counts) rc = mg_error(MG_ENOMEM, "--trace: out of memory");
    if ((rc = mg_status_agree(rc)) == MG_OK)
        rc = mg_comm_gather_bytes(world, mine, (int64_t)len, 0, &all, counts);
    free(mine);
    if (rc == MG_OK && world->rank == 0) {
        rc = write_file(t, all, counts, world->size);
        if (rc == MG_OK) {
            printf("trace: %s, steps %lld to %lld of %d rank%s (ui.perfetto.dev or "
                   "chrome://tracing)\n",
                   t->path, (long long)t->first, (long long)t->last, world->size,
                   world->size == 1 ? "" : "s");
            fflush(stdout);
        }
    }
    free(all);
    free(counts);
    return mg_status_agree(rc);
}

int mg_timeline_step_end(mg_timeline *t, int64_t step, mg_comm *world) {
    if (!t->recording || step != t->last) return MG_OK;
    return finish(t, world);
}

int mg_timeline_finish(mg_timeline *t, mg_comm *world) {
    return t->recording ? finish(t, world) : MG_OK;
}
