/* machine.h: this machine, as the library sees it (machine.c). */
#ifndef MG_MACHINE_H
#define MG_MACHINE_H

/* Seconds on a monotonic clock. */
double mg_clock(void);
/* Bytes of memory this process may use: the machine's, or its cgroup's limit
 * when lower; 0 when unknown. */
double mg_machine_memory_bytes(void);
/* MG_OK, or MG_ENOMEM "WHAT needs at least ... GiB a rank, ... for this
 * machine's N ranks, more than its ... GiB of memory: FIX" when rank_bytes on
 * each of this machine's ranks exceeds its memory. */
int mg_machine_check_memory(const char *what, double rank_bytes, const char *fix);

#endif
