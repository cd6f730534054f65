/* comm_nccl.h: the NCCL implementation of the comm iface (comm_nccl.c), built
 * only with CUDA (MG_HAVE_CUDA). Collectives on device buffers run on the
 * backend's compute stream; host buffers fall back to MPI on the same
 * communicator. Exports mg_comm_nccl_new, mg_nccl_version. */
#ifndef MG_COMM_NCCL_H
#define MG_COMM_NCCL_H

#include <mpi.h>

#include "dist/comm.h"

/* Collective over `mpi` (not duplicated, not freed): rank 0 makes the NCCL
 * unique id and broadcasts it over `mpi`, then every rank joins. Needs the CUDA
 * backend (mg_set_device(MG_DEVICE_CUDA)). NULL with a message on failure;
 * the outcome is agreed over `mpi`. */
mg_comm *mg_comm_nccl_new(MPI_Comm mpi);
/* The NCCL library version as an integer (e.g. 22809 for 2.28.9), 0 if unknown. */
int mg_nccl_version(void);

#endif
