/* comm_info.h: what a communicator is, worked out once and cached on it (an
 * MPI attribute): its name, the mesh dim it runs along, the world ranks of its
 * members, and its ordinal among the communicators of that name and those
 * members that this rank has seen (communicators are made collectively, in
 * one order on every member, so the ranks of a communicator agree on its
 * ordinal: the flight recorder's dumps match communicators across ranks by
 * name, members and ordinal). It also holds the flight recorder's counters:
 * collectives posted on it, and transfers to and from each member.
 *
 * The records live in a table of the context (`comm_info`) until mg_finalize,
 * also after their communicator is freed, so a dump can still name it. The
 * table has room for MG_COMM_INFO_MAX records and never moves (a signal
 * handler may read it); a communicator beyond that gets a record of its own
 * with index -1, freed with the communicator.
 *
 * The mesh dim comes from the name mesh.c gives its communicators ("meshgrad
 * mesh dim <d>", "meshgrad mesh"); MPI_COMM_WORLD is the whole mesh.
 *
 * Exports: mg_comm_info, mg_comm_info_of, mg_comm_info_free, MG_COMM_INFO_MAX,
 * MG_COMM_WHOLE_MESH, MG_COMM_UNKNOWN_DIM. */
#ifndef MG_DIST_COMM_INFO_H
#define MG_DIST_COMM_INFO_H

#include <mpi.h>
#include <stdint.h>

#define MG_COMM_INFO_MAX 1024

/* mesh_dim of a communicator over every rank of a mesh or the world, and of
 * any other communicator */
#define MG_COMM_WHOLE_MESH (-1)
#define MG_COMM_UNKNOWN_DIM (-2)

typedef struct mg_comm_info {
    char name[48];   /* MPI's name of it ("meshgrad mesh dim 1"; "comm" when unnamed) */
    int mesh_dim;    /* >= 0, MG_COMM_WHOLE_MESH or MG_COMM_UNKNOWN_DIM */
    int nranks;      /* members */
    int rank;        /* this rank's place among them */
    int *ranks;      /* world ranks of the members, in communicator order */
    int ordinal;     /* among this rank's communicators of this name and members */
    int index;       /* in the context's table; -1 when it was full */
    int64_t seq;     /* flight recorder: collectives posted on it so far */
    int64_t *p2p;    /* flight recorder: [2 * nranks] transfers so far, sends to
                      * member i at [2i], receives from it at [2i + 1] */
} mg_comm_info;

/* The record of `comm`, made on first use; NULL only when out of memory. */
mg_comm_info *mg_comm_info_of(MPI_Comm comm);
/* Frees the table and the attribute key (mg_finalize). */
void mg_comm_info_free(void);

#endif
