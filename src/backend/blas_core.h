/* blas_core.h: which OpenBLAS kernels a process should run, and which of
 * meshgrad's own AVX-512 kernels it may. blas_core.c holds it.
 *
 * A DYNAMIC_ARCH OpenBLAS picks its kernels ("core") once, when it loads:
 * from OPENBLAS_CORETYPE when set, else from the CPU, and on a CPU it does not
 * know it falls back to generic ones (Prescott) several times slower. The
 * choice is made here from facts (the CPU's ISA, the core that runs, the
 * variables) by a pure function, so that a table can test it; the meshgrad
 * program acts on it before MPI starts (mg_blas_core_setenv: OPENBLAS_CORETYPE
 * set and the program run again), a library user gets one warning from mg_init.
 *
 * Variables: OPENBLAS_CORETYPE (OpenBLAS's: a user's setting is respected),
 * MG_CPU_ISA=avx2|avx512|auto (meshgrad's: forces the level of the OpenBLAS
 * core and of meshgrad's explicit AVX-512 kernels; auto, the default, takes
 * the best the CPU has), MG_BLAS_CORE_SET (the core an earlier run of this
 * process set before it ran itself again: the guard against a loop).
 *
 * Exports: mg_isa, mg_cpu_isa_detect, mg_cpu_isa, mg_isa_name, mg_blas_facts,
 * mg_blas_facts_read, mg_blas_pick, mg_blas_core_choose, mg_blas_core_rank,
 * mg_blas_core_describe, mg_blas_core_warning, mg_blas_core_setenv,
 * mg_blas_core_warn_once (and mg_blas_core, in backend.h). */
#ifndef MG_BACKEND_BLAS_CORE_H
#define MG_BACKEND_BLAS_CORE_H

#include <stddef.h>
#include <stdio.h>

/* ISA levels, each including those below it. */
typedef enum {
    MG_ISA_GENERIC,     /* SSE and older (or not x86-64) */
    MG_ISA_AVX,         /* AVX */
    MG_ISA_AVX2,        /* AVX2 + FMA (x86-64-v3) */
    MG_ISA_AVX512,      /* AVX-512 F, BW, CD, DQ, VL (x86-64-v4) */
    MG_ISA_AVX512_BF16, /* and AVX512-BF16 */
    MG_ISA_AMX,         /* and AMX tiles that the OS enabled */
} mg_isa;

/* What this CPU runs (cpuid, once per call). */
mg_isa mg_cpu_isa_detect(void);
/* The level meshgrad's own kernels may use: the CPU's, lowered by MG_CPU_ISA
 * (read once per process). The explicit AVX-512 kernels run where it is
 * >= MG_ISA_AVX512; GCC's target_clones pick by the CPU alone. */
mg_isa mg_cpu_isa(void);
/* "AVX-512 + BF16" and the like. */
const char *mg_isa_name(mg_isa isa);

/* The facts the choice is made from. Strings may be NULL (unset). */
typedef struct {
    mg_isa cpu;           /* mg_cpu_isa_detect() */
    const char *running;  /* the core OpenBLAS runs (openblas_get_corename) */
    const char *coretype; /* OPENBLAS_CORETYPE */
    const char *isa;      /* MG_CPU_ISA */
    const char *guard;    /* MG_BLAS_CORE_SET */
} mg_blas_facts;

/* This process's facts (the strings are the environment's and OpenBLAS's). */
mg_blas_facts mg_blas_facts_read(void);

typedef enum {
    MG_BLAS_KEEP,   /* nothing to change */
    MG_BLAS_SWITCH, /* set OPENBLAS_CORETYPE=core and run the program again */
    MG_BLAS_STUCK,  /* the wrong core runs and running again did not change it */
} mg_blas_action;

typedef enum {
    MG_BLAS_FROM_OPENBLAS, /* OpenBLAS's own pick */
    MG_BLAS_FROM_USER,     /* the user's OPENBLAS_CORETYPE */
    MG_BLAS_FROM_ISA,      /* set from MG_CPU_ISA */
    MG_BLAS_FROM_MESHGRAD, /* set by meshgrad in place of OpenBLAS's worse pick */
} mg_blas_source;

typedef struct {
    mg_blas_action action;
    const char *core;      /* the core that should run (SWITCH: the one to set); NULL: no
                            * better one than what runs is known */
    const char *best;      /* the best core for this CPU that OpenBLAS 0.3.21 has, or NULL */
    mg_blas_source source; /* where the running core came from */
    int ranked;            /* the running core is one meshgrad knows the level of */
    mg_isa running_isa;    /* its level (when ranked) */
    int worse;             /* it is below the best for this CPU (when ranked) */
    int isa_ignored;       /* MG_CPU_ISA names no level, or one this CPU lacks: ignored */
} mg_blas_pick;

/* The choice, a pure function of the facts:
 * - MG_CPU_ISA=avx2 or avx512 (a level the CPU has) wins: a core of that level
 *   must run (avx2: Haswell; avx512: SkylakeX, or Cooperlake with BF16);
 * - else a user's OPENBLAS_CORETYPE is kept, whatever it is;
 * - else a core below the best for this CPU is replaced by the best;
 * - a core meshgrad does not know is kept (unless MG_CPU_ISA asks for a level).
 * SWITCH becomes STUCK when the guard says this process already ran again. */
mg_blas_pick mg_blas_core_choose(const mg_blas_facts *facts);
/* The level of an OpenBLAS core name (any case); -1 for one meshgrad does not know. */
int mg_blas_core_rank(const char *core);

/* The CPU backend's words in `meshgrad --version`, after "cpu (OpenBLAS, ":
 * "Cooperlake kernels: the best for this CPU, AVX-512 + BF16" and the like. */
void mg_blas_core_describe(const mg_blas_facts *facts, char *out, size_t len);
/* The one-line warning (no newline) for a process that runs other kernels than
 * it should and did not run itself again with the right ones (a library's
 * program cannot; the program's exec failed or did not take), or whose
 * MG_CPU_ISA was ignored: 1 with the line in out, else 0. */
int mg_blas_core_warning(const mg_blas_facts *facts, char *out, size_t len);

/* For the meshgrad program, first thing in main: when the choice is SWITCH,
 * sets OPENBLAS_CORETYPE and the guard and returns 1: the program must run
 * itself again for OpenBLAS to see it (if that exec fails, the guard is set,
 * so mg_init's warning says so); else 0. */
int mg_blas_core_setenv(void);
/* Prints mg_blas_core_warning's line, if any, to `out` the first time it is
 * called in this process (mg_init, on rank 0). */
void mg_blas_core_warn_once(FILE *out);

#endif
