/* observe.h: what `meshgrad train` and `meshgrad bench step` share to show
 * what a run does:
 * - the flight recorder (dist/flight.h): its directory (--flight-dir, default
 *   meshgrad-flight) and its signal handlers (SIGUSR2 dumps and the job goes
 *   on; SIGSEGV, SIGBUS, SIGFPE, SIGABRT dump, then end it as before), set by
 *   the library's mg_flight_recorder_set_dir (meshgrad.h, io/observe.c);
 * - the timeline (--trace FILE --trace-steps A:B): steps A to B (counted from
 *   1, both included; default 2:4, cut to the run), recorded and written by
 *   io/timeline.h, whose mg_timeline_step_begin, mg_timeline_step_end and
 *   mg_timeline_finish the loops call (included here). FILE is replaced only
 *   when it is a trace this program wrote.
 * Exports: mg_observe_flight, mg_timeline_prepare. */
#ifndef MG_CLI_OBSERVE_H
#define MG_CLI_OBSERVE_H

#include <stdint.h>

#include "dist/comm.h"
#include "io/timeline.h"

/* Collective: --flight-dir, where dumps go ("" none), and the signal
 * handlers. Refuses (the same on every rank) a DIR that is not a directory
 * and a rank's DIR/rank-<r>.json that is a link, device, FIFO, socket or
 * directory; warns of a regular file there that is not a dump (it stays). */
int mg_observe_flight(const char *dir);

/* Collective over `world`: `path` ("" for none) and `steps` ("A:B" or "" for
 * the default) for a run of steps from..to; refuses (MG_EINVAL / MG_EIO, the
 * same on every rank) a bad range and a path that is not ours to replace. */
int mg_timeline_prepare(mg_timeline *t, const char *path, const char *steps, int64_t from,
                        int64_t to, mg_comm *world);

#endif
