/* observe.c: --flight-dir, --trace and --trace-steps of train and bench step
 * (see observe.h): the flags and the checks of the trace's file before the
 * run; the recording and the writing are io/timeline.c's, the flight
 * recorder's directory io/observe.c's. Exports: mg_observe_flight,
 * mg_timeline_prepare. */
#include "cli/observe.h"

#include <stdio.h>
#include <string.h>

#include "meshgrad.h"
#include "status.h"

int mg_observe_flight(const char *dir) {
    return mg_status_agree(mg_flight_recorder_set_dir(dir));
}

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
    if (world->rank == 0)
        rc = mg_file_replaceable(path, "trace this program wrote", mg_timeline_is_trace, &exists);
    return mg_status_agree(rc);
}

