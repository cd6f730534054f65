/* init.c: starting and stopping meshgrad. mg_init starts MPI unless the program
 * already did (then mg_finalize leaves it running), and sets MPI_ERRORS_RETURN on
 * MPI_COMM_WORLD so that MPI failures come back as MG_ECOMM instead of aborting.
 * mg_finalize prints the collective counters on rank 0 when MG_COMM_DEBUG=1.
 * Exports (public): mg_init, mg_finalize, mg_rank, mg_world_size, mg_version. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "meshgrad.h"
#include "status.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

static int started;        /* mg_init succeeded */
static int we_started_mpi; /* ... and called MPI_Init itself */

int mg_init(int *argc, char ***argv) {
    int initialized = 0, finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
        return mg_error(MG_ESTATE, "mg_init: MPI was already finalized; call mg_init once, "
                                   "before mg_finalize");
    if (started) return MG_OK;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        int err = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (err != MPI_SUCCESS)
            return mg_error(MG_ECOMM, "mg_init: MPI_Init failed (error %d)", err);
        we_started_mpi = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    started = 1;
    return MG_OK;
}

void mg_finalize(void) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) return;
    const char *debug = getenv("MG_COMM_DEBUG");
    if (debug && strcmp(debug, "1") == 0 && mg_rank() == 0) mg_comm_stats_print(stderr);
    if (we_started_mpi) MPI_Finalize();
    started = 0;
    we_started_mpi = 0;
}

int mg_rank(void) {
    int initialized = 0, finalized = 0, rank = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

int mg_world_size(void) {
    int initialized = 0, finalized = 0, size = 1;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

const char *mg_version(void) { return PACKAGE_VERSION; }
