/* trace_dump.h: the flight recorder's dumps of a job as `meshgrad trace
 * analyze` reads them (trace_dump.c): each rank's records on each
 * communicator, communicators matched across dumps by name, members and
 * ordinal. Exports comm_t, entry_t, dump_t, job_t, mg_trace_job_load,
 * mg_trace_job_free. */
#ifndef MG_CLI_TRACE_DUMP_H
#define MG_CLI_TRACE_DUMP_H

#include <stdint.h>

#include "cli/json.h"

#define MAX_RANKS 4096
#define MAX_COMMS 1024

typedef struct {
    const char *name;
    int dim, nranks, ordinal;
    int *ranks; /* world ranks (points into a dump's tree: copied) */
    char desc[160];
} comm_t;

typedef struct {
    int comm; /* global comm index */
    int64_t seq, bytes, step, post, start, end;
    const char *op, *dtype, *state;
    int peer; /* world rank, -1 for a collective */
    int io;   /* the watchdog's operation in progress, not a flight record
               * (HDF5's collective I/O): no sequence number */
} entry_t;

typedef struct {
    mg_json *root;
    int rank;
    const char *reason;
    int64_t now, step;
    int *comm_of;            /* local comm index -> global */
    int ncomm;
    const mg_json **comm_js; /* the local comm objects */
    entry_t *e;
    int n;
    int waiting;             /* index of the entry it blocks in, -1 */
} dump_t;

typedef struct {
    dump_t *d[MAX_RANKS]; /* by world rank; NULL: no dump */
    int world;
    comm_t comms[MAX_COMMS];
    int ncomms;
} job_t;

/* Reads every DIR/rank-<r>.json into a new *job (MG_OK), or says why not
 * (a missing directory, no dump in it, a dump that cannot be read). */
int mg_trace_job_load(const char *dir, job_t **job);
void mg_trace_job_free(job_t *job);

#endif
