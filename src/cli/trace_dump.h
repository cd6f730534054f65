/* trace_dump.h: the flight recorder's dumps of a job as `meshgrad trace
 * analyze` reads them (trace_dump.c): communicators matched across dumps by
 * name, members and ordinal, and of each rank's dump only what the analysis
 * asks: where each of its communicators stands (collectives posted,
 * transfers with each member), the record it waits in, its last record, and
 * for the lowest sequence number at which the members of a communicator
 * entered different collectives (a mismatch), what each member entered there.
 *
 * A dump is read as a stream (io/json.h), one record at a time, and nothing
 * of it but that summary is kept, so memory is about one record and a few
 * numbers per communicator and rank, and time is linear in the bytes of the
 * dumps (a second reading of them, only when there is a mismatch, finds what
 * each member entered at it). Every string taken from a dump (op, data type,
 * state, reason, communicator name) is kept with its control bytes escaped
 * (text.h: the analysis prints them), cut to the size of its field.
 * Exports comm_t, entry_t, dump_t, job_t, mg_trace_job_load,
 * mg_trace_job_free. */
#ifndef MG_CLI_TRACE_DUMP_H
#define MG_CLI_TRACE_DUMP_H

#include <stdint.h>

#define MAX_RANKS 4096
#define MAX_COMMS 1024

typedef struct {
    int comm; /* global comm index */
    int64_t seq, bytes, step, post, start, end;
    char op[48], dtype[16], state[16];
    int peer; /* world rank, -1 for a collective */
    int io;   /* the watchdog's operation in progress, not a flight record
               * (HDF5's collective I/O): no sequence number */
} entry_t;

/* The first collective seen at one sequence number of a comm (what the
 * others are compared with). */
typedef struct {
    int64_t seq, bytes;
    char op[48], dtype[16];
} call_t;

typedef struct {
    char name[64];
    int dim, nranks, ordinal;
    int *ranks; /* world ranks */
    char desc[160];
    call_t *calls;    /* open addressing by seq, ncalls of cap (a power of two) */
    int ncalls, cap;
    int64_t mismatch; /* the lowest seq where a member entered another call, -1 */
    entry_t *at;      /* [nranks]: what each member entered at `mismatch` */
    char *have;       /* [nranks]: at[i] was found */
} comm_t;

/* Where a dump's rank stands on one of its comms. */
typedef struct {
    int g;       /* global comm index */
    int64_t seq; /* collectives posted */
    int nt;      /* members with a transfer: */
    int *member; /* their index in the comm's ranks */
    int64_t *sends, *recvs;
} dcomm_t;

typedef struct {
    int rank;
    char reason[32];
    int64_t now, step;
    dcomm_t *comms;
    int ncomm;
    int n;         /* records on described comms */
    entry_t last;  /* the newest of them (n > 0) */
    int waiting;   /* 1: it blocks in wait (the newest record started and
                    * not done, or else the watchdog's operation) */
    entry_t wait;
    int has_io;    /* the dump names the watchdog's operation in progress: */
    char io_op[48];
    int64_t io_since;
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
