/* observe.c: the calls of meshgrad.h that show what a run does, for any
 * program (the meshgrad program's flags come to the same code):
 * - the flight recorder's dump directory and signal handlers (dist/flight.h;
 *   the collective watchdog, dist/watchdog.h, dumps there too), the
 *   directory and this rank's dump path checked by the rule of every output
 *   (io/files.h), and a dump on demand;
 * - the trace: io/timeline.h's timeline over the steps the program numbers,
 *   with a "step" span around each and the flight recorder told the step.
 * State (io_state.h's `observe`): whether a flight directory is set, and the
 * open trace.
 * Exports: mg_flight_recorder_set_dir, mg_flight_recorder_dump, mg_trace_open,
 * mg_trace_step_begin, mg_trace_step_end, mg_trace_close. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dist/comm.h"
#include "dist/flight.h"
#include "hash.h"
#include "io/files.h"
#include "io/h5util.h"
#include "io/io_state.h"
#include "io/timeline.h"
#include "meshgrad.h"
#include "status.h"
#include "trace.h"

struct mg_observe {
    int flight_dir; /* a dump directory is set */
    int tracing;    /* mg_trace_open ran and mg_trace_close did not */
    mg_timeline timeline;
};

/* The layer's `observe`, made on first use (NULL with a message). */
static struct mg_observe *observe(void) {
    mg_io_state *c = mg_io();
    if (!c->observe && !(c->observe = calloc(1, sizeof *c->observe)))
        mg_error(MG_ENOMEM, "out of memory");
    return c->observe;
}

/* ---- the flight recorder ------------------------------------------------------------------ */

/* What the flight recorder writes (dist/flight.h) begins so. */
#define DUMP_MARK "{\"meshgrad_flight\""

/* This rank's dump path under the rule of every output (io/files.h), before
 * anything is written: dir is a directory (or not there yet), and
 * DIR/rank-<r>.json is nothing, a dump, or another regular file (which the
 * recorder leaves as it is: said now, as it will be at a dump); a link, a
 * device, a FIFO, a socket or a directory there is refused (the recorder
 * would open it to see whether it is a dump). */
static int check_dump_path(const char *dir) {
    struct stat sb;
    char path[MG_PATH_MAX];
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return mg_error(MG_EIO, "the flight recorder's directory %s is not a directory (--flight-dir, "
                        "mg_flight_recorder_set_dir): give a directory for its dumps", dir);
    if ((size_t)snprintf(path, sizeof path, "%s/rank-%d.json", dir, mg_rank()) >= sizeof path)
        return MG_OK; /* mg_path_check said so */
    int what, rc = mg_output_check(path, "flight recorder dump", NULL, 0, &what);
    if (rc == MG_OK && what == MG_OUTPUT_FILE && !mg_file_starts_with(path, DUMP_MARK))
        fprintf(stderr, "warning: flight recorder: %s is not a dump: it is left as it is, and "
                        "no dump of rank %d is written while it is there\n", path, mg_rank());
    return rc;
}

int mg_flight_recorder_set_dir(const char *dir) {
    struct mg_observe *o = observe();
    if (!o) return MG_ENOMEM;
    int set = dir && dir[0];
    /* the recorder keeps the directory in half a path: its dump paths are formatted beforehand */
    int rc = set ? mg_path_check(dir, "the flight recorder's directory", MG_PATH_MAX / 2) : MG_OK;
    if (rc == MG_OK && set) rc = check_dump_path(dir);
    if (rc == MG_OK) rc = mg_flight_set_dir(set ? dir : NULL);
    if (rc == MG_OK) rc = mg_flight_install_signals();
    if (rc == MG_OK) o->flight_dir = set;
    return rc;
}

int mg_flight_recorder_dump(const char *reason) {
    const char *who = "mg_flight_recorder_dump";
    struct mg_observe *o = observe();
    if (!o) return MG_ENOMEM;
    if (!reason || !reason[0] || strlen(reason) > 63)
        return mg_error(MG_EINVAL, "%s: give a reason of 1 to 63 characters (it is written in the "
                        "dump)", who);
    if (!o->flight_dir)
        return mg_error(MG_ESTATE, "%s: no directory to write to: call "
                        "mg_flight_recorder_set_dir(DIR) first", who);
    if (mg_flight_dump(reason) != 0)
        return mg_error(MG_EIO, "%s: no dump written (the recorder is off with "
                        "MG_FLIGHT_ENTRIES=0, or the write failed: see the line above)", who);
    return MG_OK;
}

/* ---- the trace ------------------------------------------------------------------------------ */

int mg_trace_open(const char *path, int64_t first, int64_t last) {
    const char *who = "mg_trace_open";
    struct mg_observe *o = observe();
    mg_comm *world = mg_comm_world();
    if (!o || !world) return mg_last_code();
    int rc = MG_OK;
    if (o->tracing)
        rc = mg_error(MG_ESTATE, "%s: a trace is open already (%s): mg_trace_close it first", who,
                      o->timeline.path);
    else if (!path || !path[0])
        rc = mg_error(MG_EINVAL, "%s: give the path of the file to write", who);
    else if (first < 0 || last < first)
        rc = mg_error(MG_EINVAL, "%s: steps %lld to %lld: give 0 <= first <= last (the steps to "
                      "record, both included)", who, (long long)first, (long long)last);
    else
        rc = mg_path_check(path, who, MG_TMP_SUFFIX_MAX);
    /* every rank the same arguments: a hash of them, its smallest and largest */
    uint64_t h = mg_hash_i64(mg_hash_i64(MG_HASH_START, first), last);
    if (path) h = mg_hash_bytes(h, path, strlen(path));
    int64_t v[2] = {(int64_t)(h >> 1), -(int64_t)(h >> 1)};
    int crc = mg_comm_all_reduce_i64(world, v, 2, MG_CONTROL_MAX);
    if (crc != MG_OK) return crc;
    if (rc == MG_OK && v[0] != -v[1])
        rc = mg_error(MG_EINVAL, "%s: the ranks gave other paths or steps: every rank passes the "
                      "same", who);
    int exists; /* refused up front; checked again when the file is written */
    if (rc == MG_OK && world->rank == 0)
        rc = mg_file_replaceable(path, "trace this program wrote", mg_timeline_is_trace, &exists);
    if ((rc = mg_io_agree(world, rc)) != MG_OK) return rc;
    memset(&o->timeline, 0, sizeof o->timeline);
    snprintf(o->timeline.path, sizeof o->timeline.path, "%s", path);
    o->timeline.first = first;
    o->timeline.last = last;
    o->tracing = 1;
    return MG_OK;
}

int mg_trace_step_begin(int64_t step) {
    struct mg_observe *o = observe();
    if (!o) return MG_ENOMEM;
    mg_flight_set_step(step);
    if (!o->tracing) return MG_OK;
    mg_comm *world = mg_comm_world();
    if (!world) return mg_last_code();
    int rc = mg_timeline_step_begin(&o->timeline, step, world);
    if (rc == MG_OK && o->timeline.recording) mg_trace_begin(MG_TRACE_STEP, "step", step);
    return rc;
}

int mg_trace_step_end(int64_t step) {
    struct mg_observe *o = observe();
    if (!o) return MG_ENOMEM;
    if (!o->tracing) return MG_OK;
    mg_comm *world = mg_comm_world();
    if (!world) return mg_last_code();
    if (o->timeline.recording) mg_trace_end();
    return mg_timeline_step_end(&o->timeline, step, world);
}

int mg_trace_close(void) {
    struct mg_observe *o = observe();
    if (!o) return MG_ENOMEM;
    if (!o->tracing) return MG_OK;
    mg_comm *world = mg_comm_world();
    if (!world) return mg_last_code();
    o->tracing = 0;
    return mg_timeline_finish(&o->timeline, world);
}
