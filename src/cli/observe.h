/* observe.h: what `meshgrad train` and `meshgrad bench step` share to show
 * what a run does:
 * - the flight recorder (dist/flight.h): its directory (--flight-dir, default
 *   meshgrad-flight) and its signal handlers (SIGUSR2 dumps and the job goes
 *   on; SIGSEGV, SIGBUS, SIGFPE, SIGABRT dump, then end it as before);
 * - the timeline (--trace FILE --trace-steps A:B): recorded on every rank
 *   (trace.h, with the kernels decorated: backend/trace_kernels.h) from the
 *   start of step A to the end of step B (steps counted from 1, both
 *   included; default 2:4, cut to the run), gathered to rank 0 through the
 *   world comm and written there as one Chrome-trace JSON file, one process
 *   per rank. FILE is replaced only when it is a trace this program wrote.
 * Exports: mg_observe_flight, mg_timeline, mg_timeline_prepare,
 * mg_timeline_step_begin, mg_timeline_step_end, mg_timeline_finish. */
#ifndef MG_CLI_OBSERVE_H
#define MG_CLI_OBSERVE_H

#include <stdint.h>

#include "dist/comm.h"
#include "io/files.h"

/* Collective: --flight-dir, where dumps go ("" none), and the signal
 * handlers. Refuses (the same on every rank) a DIR that is not a directory
 * and a rank's DIR/rank-<r>.json that is a link, device, FIFO, socket or
 * directory; warns of a regular file there that is not a dump (it stays). */
int mg_observe_flight(const char *dir);

typedef struct {
    char path[MG_PATH_MAX]; /* "" when not tracing */
    int64_t first, last;    /* the steps to record */
    int recording, written;
} mg_timeline;

/* Collective over `world`: `path` ("" for none) and `steps` ("A:B" or "" for
 * the default) for a run of steps from..to; refuses (MG_EINVAL / MG_EIO, the
 * same on every rank) a bad range and a path that is not ours to replace. */
int mg_timeline_prepare(mg_timeline *t, const char *path, const char *steps, int64_t from,
                        int64_t to, mg_comm *world);
/* Collective: at the start of `step`, recording starts when it is the first
 * (after a barrier, so the ranks' clocks start together). */
int mg_timeline_step_begin(mg_timeline *t, int64_t step, mg_comm *world);
/* Collective: at the end of `step`, the trace is written when it is the last. */
int mg_timeline_step_end(mg_timeline *t, int64_t step, mg_comm *world);
/* Collective: writes what was recorded if the run ended before the last step. */
int mg_timeline_finish(mg_timeline *t, mg_comm *world);

#endif
