/* timeline.h: the timeline of `--trace` (cli/observe.h) and of mg_trace_open
 * (meshgrad.h), moved down from the meshgrad program so that both share it:
 * recorded on every rank (trace.h, with the kernels decorated:
 * backend/trace_kernels.h) from the start of step `first` to the end of step
 * `last` (both included), gathered to rank 0 through the world comm and
 * written there as one Chrome-trace JSON file, one process per rank. The
 * file, written under a temporary name and renamed (files.h), replaces only a
 * trace this program wrote: a file that starts with MG_TIMELINE_MARK.
 * Exports: mg_timeline, MG_TIMELINE_MARK, mg_timeline_is_trace,
 * mg_timeline_step_begin, mg_timeline_step_end, mg_timeline_finish. */
#ifndef MG_IO_TIMELINE_H
#define MG_IO_TIMELINE_H

#include <stdint.h>

#include "dist/comm.h"
#include "io/files.h"

#define MG_TIMELINE_MARK "{\"otherData\":{\"generator\":\"meshgrad trace\""

typedef struct mg_timeline {
    char path[MG_PATH_MAX]; /* "" when not tracing */
    int64_t first, last;    /* the steps to record */
    int recording, written;
} mg_timeline;

/* 1 when the file at path is a trace this program wrote (it starts with the mark). */
int mg_timeline_is_trace(const char *path);
/* Collective: at the start of `step`, recording starts when it is the first
 * (after a barrier, so the ranks' clocks start together). */
int mg_timeline_step_begin(mg_timeline *t, int64_t step, mg_comm *world);
/* Collective: at the end of `step`, the trace is written when it is the last;
 * rank 0 then prints "trace: PATH, steps A to B of N ranks ..." on stdout. */
int mg_timeline_step_end(mg_timeline *t, int64_t step, mg_comm *world);
/* Collective: writes what was recorded if the run ended before the last step. */
int mg_timeline_finish(mg_timeline *t, mg_comm *world);

#endif
