/* watchdog.h: the collective watchdog. A blocking collective that has not
 * completed after MG_COLLECTIVE_TIMEOUT seconds (default 300; 0 disables; read
 * once) means a rank is stalled or gone: the watchdog prints
 *   meshgrad: error: collective all_reduce on mesh dim 1 (ranks 0,1) has not
 *   completed after 300 s: rank(s) 1 are not answering (rank 0 waits for them)
 * on stderr and ends the whole job with MPI_Abort, instead of a silent hang.
 *
 * The comm layer brackets every blocking collective with begin/end. Both are
 * cheap: a clock read (vDSO, no syscall) and an uncontended mutex; a thread
 * started on the first collective of more than one rank looks at the clock
 * once a second.
 * The ranks named are the other members of the collective, seen from the rank
 * that reports: each rank still waiting prints its own line (the watchdog waits
 * a moment before aborting so they all get out), and the stalled rank is the
 * one every line names and none prints.
 *
 * On a timeout, between the report and the end, the watchdog runs what a file
 * above it registered (mg_watchdog_on_timeout: the flight recorder's dump).
 *
 * Exports: mg_watchdog_begin, mg_watchdog_begin_comm, mg_watchdog_end,
 * mg_watchdog_timeout, mg_watchdog_current, mg_watchdog_on_timeout,
 * mg_watchdog_free. */
#ifndef MG_WATCHDOG_H
#define MG_WATCHDOG_H

#include <mpi.h>

#include "dist/comm_info.h"

/* mesh_dim: the mesh dimension the collective runs along; MG_WATCHDOG_WHOLE_MESH
 * for a collective over every rank of a mesh or the world, MG_WATCHDOG_UNKNOWN_DIM
 * for any other communicator. */
#define MG_WATCHDOG_WHOLE_MESH MG_COMM_WHOLE_MESH
#define MG_WATCHDOG_UNKNOWN_DIM MG_COMM_UNKNOWN_DIM

/* The timeout in seconds (MG_COLLECTIVE_TIMEOUT, parsed on the first call);
 * 0 when the watchdog is disabled. */
double mg_watchdog_timeout(void);
/* Stops the watchdog's thread and frees its state (mg_finalize). */
void mg_watchdog_free(void);

/* Arms the watchdog for one collective. `op` must be a string literal (it is
 * kept); `ranks` (world ranks of the members, nranks of them) is copied only
 * when a report is printed, so it must stay valid until mg_watchdog_end().
 * Nested begins keep the outermost collective. */
void mg_watchdog_begin(const char *op, int mesh_dim, const int *ranks, int nranks);
/* Disarms it (the collective completed, or failed and returned). */
void mg_watchdog_end(void);

/* mg_watchdog_begin for a collective over `comm`: the mesh dim and the world
 * ranks come from the communicator's record (comm_info.h). Does nothing when
 * the watchdog is disabled or the communicator has one rank (nothing to wait
 * for). */
void mg_watchdog_begin_comm(const char *op, MPI_Comm comm);

/* The operation in progress (the outermost), its mesh dim, since when
 * (seconds, monotonic clock) and its members (world ranks); NULL when none.
 * Reads without the lock: a signal handler calls it (flight.c), and may see
 * the one before or after. */
const char *mg_watchdog_current(int *mesh_dim, double *since, const int **ranks, int *nranks);

/* What a timeout runs after its report and before it ends the job, with the
 * reason "watchdog timeout" (its answer is not used); NULL: nothing. The flight
 * recorder registers its dump when it starts (flight.c). */
void mg_watchdog_on_timeout(int (*fn)(const char *reason));

#endif
