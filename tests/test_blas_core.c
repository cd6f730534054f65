/* test_blas_core.c: the choice of OpenBLAS kernels (backend/blas_core.h) as a
 * table: a CPU's ISA, the core OpenBLAS runs and the variables, against the
 * action (keep, switch and run again, stuck), the core, the words of
 * `meshgrad --version` and the warning; the ranks of OpenBLAS's core names;
 * and the ISA level meshgrad's own kernels take from the CPU and MG_CPU_ISA. */
#include <stdlib.h>
#include <string.h>

#include "backend/blas_core.h"
#include "testutil.h"

enum { KEEP = MG_BLAS_KEEP, SWITCH = MG_BLAS_SWITCH, STUCK = MG_BLAS_STUCK };

typedef struct {
    const char *what;
    mg_isa cpu;
    const char *running, *coretype, *isa, *guard; /* the facts (NULL: unset) */
    int action;
    const char *core;     /* what should run (NULL: none better is known) */
    const char *describe; /* the --version words, exactly */
    const char *warning;  /* in the warning line; NULL: no warning */
} pick_case;

static const pick_case cases[] = {
    /* OpenBLAS does not know the CPU and falls back to its generic kernels */
    {"Prescott on an AVX-512 CPU", MG_ISA_AVX512, "Prescott", NULL, NULL, NULL, SWITCH,
     "SkylakeX",
     "Prescott kernels; this CPU runs SkylakeX: set OPENBLAS_CORETYPE=SkylakeX for ~6x GEMM",
     "OpenBLAS runs its Prescott kernels on this CPU, which runs SkylakeX (AVX-512): set "
     "OPENBLAS_CORETYPE=SkylakeX for ~6x GEMM"},
    {"Prescott on AVX-512 + BF16 + AMX (no SapphireRapids core)", MG_ISA_AMX, "Prescott", NULL,
     NULL, NULL, SWITCH, "Cooperlake", NULL, "set OPENBLAS_CORETYPE=Cooperlake"},
    {"Haswell on AVX-512 + BF16, nothing set", MG_ISA_AVX512_BF16, "Haswell", NULL, NULL, NULL,
     SWITCH, "Cooperlake", NULL, "OPENBLAS_CORETYPE=Cooperlake for ~2x GEMM"},
    {"SkylakeX on AVX-512 + BF16, nothing set", MG_ISA_AVX512_BF16, "SkylakeX", NULL, NULL, NULL,
     SWITCH, "Cooperlake", NULL, "OPENBLAS_CORETYPE=Cooperlake for faster GEMM"},
    {"Sandybridge on AVX2", MG_ISA_AVX2, "Sandybridge", NULL, NULL, NULL, SWITCH, "Haswell",
     NULL, "OPENBLAS_CORETYPE=Haswell"},
    /* after the run again */
    {"run again, the set core took", MG_ISA_AVX512, "SkylakeX", "SkylakeX", NULL, "SkylakeX",
     KEEP, "SkylakeX",
     "SkylakeX kernels, set by meshgrad over OpenBLAS's own pick: the best for this CPU, AVX-512",
     NULL},
    {"run again, still Prescott: stuck", MG_ISA_AVX512, "Prescott", "SkylakeX", NULL, "SkylakeX",
     STUCK, "SkylakeX", NULL, "set OPENBLAS_CORETYPE=SkylakeX"},
    {"guard names another core than OPENBLAS_CORETYPE: the user's", MG_ISA_AVX512_BF16,
     "Haswell", "Haswell", NULL, "SkylakeX", KEEP, "Haswell", NULL, NULL},
    /* the best already runs */
    {"Cooperlake on AVX-512 + BF16", MG_ISA_AVX512_BF16, "Cooperlake", NULL, NULL, NULL, KEEP,
     "Cooperlake", "Cooperlake kernels: the best for this CPU, AVX-512 + BF16", NULL},
    {"Cooperlake on AMX", MG_ISA_AMX, "Cooperlake", NULL, NULL, NULL, KEEP, "Cooperlake",
     "Cooperlake kernels: the best for this CPU, AVX-512 + BF16 + AMX", NULL},
    {"SapphireRapids (a later OpenBLAS) on AMX", MG_ISA_AMX, "SapphireRapids", NULL, NULL, NULL,
     KEEP, "SapphireRapids", NULL, NULL},
    {"Zen on AVX2", MG_ISA_AVX2, "Zen", NULL, NULL, NULL, KEEP, "Zen",
     "Zen kernels: the best for this CPU, AVX2", NULL},
    {"Excavator on AVX2", MG_ISA_AVX2, "Excavator", NULL, NULL, NULL, KEEP, "Excavator", NULL,
     NULL},
    {"Prescott on an SSE CPU", MG_ISA_GENERIC, "Prescott", NULL, NULL, NULL, KEEP, "Prescott",
     "Prescott kernels: the best for this CPU, SSE", NULL},
    {"OPENBLAS_CORETYPE set empty: unset", MG_ISA_AVX512_BF16, "Haswell", "", NULL, NULL, SWITCH,
     "Cooperlake", NULL, "Cooperlake"},
    /* a user's OPENBLAS_CORETYPE is respected, and said */
    {"the user's Haswell on AVX-512 + BF16", MG_ISA_AVX512_BF16, "Haswell", "Haswell", NULL,
     NULL, KEEP, "Haswell",
     "Haswell kernels from OPENBLAS_CORETYPE; this CPU runs Cooperlake: unset it for ~2x GEMM",
     NULL},
    {"the user's Prescott on AVX-512", MG_ISA_AVX512, "Prescott", "PRESCOTT", NULL, NULL, KEEP,
     "Prescott",
     "Prescott kernels from OPENBLAS_CORETYPE; this CPU runs SkylakeX: unset it for ~6x GEMM",
     NULL},
    {"the user's SkylakeX on AVX-512 + BF16", MG_ISA_AVX512_BF16, "SkylakeX", "SkylakeX", NULL,
     NULL, KEEP, "SkylakeX",
     "SkylakeX kernels from OPENBLAS_CORETYPE; this CPU runs Cooperlake (the same fp32 GEMM)",
     NULL},
    {"the user's Cooperlake", MG_ISA_AVX512_BF16, "Cooperlake", "Cooperlake", NULL, NULL, KEEP,
     "Cooperlake",
     "Cooperlake kernels from OPENBLAS_CORETYPE: the best for this CPU, AVX-512 + BF16", NULL},
    {"the user's name OpenBLAS does not know", MG_ISA_AVX512_BF16, "Cooperlake", "Bogus", NULL,
     NULL, KEEP, "Cooperlake",
     "Cooperlake kernels (OpenBLAS's own pick: OPENBLAS_CORETYPE=Bogus not taken): the best for "
     "this CPU, AVX-512 + BF16",
     NULL},
    /* MG_CPU_ISA forces a level, over OPENBLAS_CORETYPE too */
    {"avx2 where Cooperlake runs", MG_ISA_AVX512_BF16, "Cooperlake", NULL, "avx2", NULL, SWITCH,
     "Haswell", NULL, "MG_CPU_ISA=avx2 asks for Haswell kernels but OpenBLAS runs Cooperlake"},
    {"avx2 after the run again", MG_ISA_AVX512_BF16, "Haswell", "Haswell", "avx2", "Haswell",
     KEEP, "Haswell", "Haswell kernels from MG_CPU_ISA=avx2; this CPU runs Cooperlake", NULL},
    {"avx2 where Zen runs", MG_ISA_AVX2, "Zen", NULL, "AVX2", NULL, KEEP, "Zen", NULL, NULL},
    {"avx2 over the user's SkylakeX", MG_ISA_AVX512, "SkylakeX", "SkylakeX", "avx2", NULL,
     SWITCH, "Haswell", NULL, NULL},
    {"avx512 over the user's Haswell", MG_ISA_AVX512_BF16, "Haswell", "Haswell", "avx512", NULL,
     SWITCH, "Cooperlake", NULL, NULL},
    {"avx512 after the run again", MG_ISA_AVX512_BF16, "Cooperlake", "Cooperlake", "avx512",
     "Cooperlake", KEEP, "Cooperlake",
     "Cooperlake kernels from MG_CPU_ISA=avx512: the best for this CPU, AVX-512 + BF16", NULL},
    {"avx512 where SkylakeX runs on AVX-512", MG_ISA_AVX512, "SkylakeX", NULL, "avx512", NULL,
     KEEP, "SkylakeX", NULL, NULL},
    {"avx2, run again, still Cooperlake: stuck", MG_ISA_AVX512_BF16, "Cooperlake", "Haswell",
     "avx2", "Haswell", STUCK, "Haswell",
     "Cooperlake kernels (MG_CPU_ISA=avx2 asks for Haswell: not taken): the best for this CPU, "
     "AVX-512 + BF16",
     "set OPENBLAS_CORETYPE=Haswell too"},
    {"avx512 on an AVX2 CPU: ignored", MG_ISA_AVX2, "Haswell", NULL, "avx512", NULL, KEEP,
     "Haswell", "Haswell kernels: the best for this CPU, AVX2",
     "MG_CPU_ISA=avx512 asks for more than this CPU runs (AVX2): ignored"},
    {"a value MG_CPU_ISA does not take", MG_ISA_AVX512_BF16, "Haswell", NULL, "sse9", NULL,
     SWITCH, "Cooperlake", NULL,
     "MG_CPU_ISA=sse9 is not avx2, avx512 or auto: ignored; OpenBLAS runs its Haswell"},
    {"auto: as unset", MG_ISA_AVX512_BF16, "Haswell", NULL, "Auto", NULL, SWITCH, "Cooperlake",
     NULL, NULL},
    {"auto with the user's Haswell", MG_ISA_AVX512_BF16, "Haswell", "Haswell", "auto", NULL,
     KEEP, "Haswell", NULL, NULL},
    /* names meshgrad does not rank are left alone */
    {"an unknown core on AVX-512 + BF16", MG_ISA_AVX512_BF16, "Zen5", NULL, NULL, NULL, KEEP,
     "Zen5", "Zen5 kernels", NULL},
    {"another architecture's core", MG_ISA_GENERIC, "NEOVERSEN1", NULL, NULL, NULL, KEEP,
     "NEOVERSEN1", "NEOVERSEN1 kernels", NULL},
    {"an unknown core, MG_CPU_ISA=avx2", MG_ISA_AVX2, "Zen5", NULL, "avx2", NULL, SWITCH,
     "Haswell", NULL, NULL},
    {"no name at all", MG_ISA_AVX2, NULL, NULL, NULL, NULL, KEEP, NULL, "unknown kernels", NULL},
};

static int same(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

START_TEST(test_choice_table) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const pick_case *c = &cases[i];
        mg_blas_facts f = {c->cpu, c->running, c->coretype, c->isa, c->guard};
        mg_blas_pick p = mg_blas_core_choose(&f);
        ck_assert_msg((int)p.action == c->action, "%s: action %d, want %d", c->what,
                      (int)p.action, c->action);
        ck_assert_msg(same(p.core, c->core), "%s: core %s, want %s", c->what,
                      p.core ? p.core : "(none)", c->core ? c->core : "(none)");
        char text[512];
        mg_blas_core_describe(&f, text, sizeof text);
        ck_assert_msg(!c->describe || strcmp(text, c->describe) == 0,
                      "%s: described as '%s', want '%s'", c->what, text, c->describe);
        int warns = mg_blas_core_warning(&f, text, sizeof text);
        if (c->warning) {
            ck_assert_msg(warns && strncmp(text, "meshgrad: warning: ", 19) == 0 &&
                              strstr(text, c->warning),
                          "%s: warning '%s', want one with '%s'", c->what, warns ? text : "(none)",
                          c->warning);
            ck_assert_msg(!strchr(text, '\n'), "%s: the warning is one line", c->what);
        } else if (c->action == KEEP) {
            ck_assert_msg(!warns, "%s: warns '%s'", c->what, text);
        }
    }
}
END_TEST

/* every action other than KEEP warns: a library's program cannot run again */
START_TEST(test_switch_warns) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const pick_case *c = &cases[i];
        mg_blas_facts f = {c->cpu, c->running, c->coretype, c->isa, c->guard};
        char text[512];
        ck_assert_msg(c->action == KEEP || mg_blas_core_warning(&f, text, sizeof text),
                      "%s: no warning", c->what);
    }
}
END_TEST

START_TEST(test_core_ranks) {
    static const char *const generic[] = {"Katmai", "Coppermine", "Northwood", "Prescott",
                                          "Banias", "Atom", "Core2", "Penryn", "Dunnington",
                                          "Nehalem", "Athlon", "Opteron", "Opteron_SSE3",
                                          "Barcelona", "Nano", "Bobcat"};
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        ck_assert_int_eq(mg_blas_core_rank(generic[i]), MG_ISA_GENERIC);
    ck_assert_int_eq(mg_blas_core_rank("Sandybridge"), MG_ISA_AVX);
    ck_assert_int_eq(mg_blas_core_rank("Piledriver"), MG_ISA_AVX);
    ck_assert_int_eq(mg_blas_core_rank("Haswell"), MG_ISA_AVX2);
    ck_assert_int_eq(mg_blas_core_rank("zen"), MG_ISA_AVX2);
    ck_assert_int_eq(mg_blas_core_rank("SKYLAKEX"), MG_ISA_AVX512);
    ck_assert_int_eq(mg_blas_core_rank("Cooperlake"), MG_ISA_AVX512_BF16);
    ck_assert_int_eq(mg_blas_core_rank("SapphireRapids"), MG_ISA_AMX);
    ck_assert_int_eq(mg_blas_core_rank("Unknown"), -1);
    ck_assert_int_eq(mg_blas_core_rank("Skylake"), -1);
    ck_assert_int_eq(mg_blas_core_rank(""), -1);
    ck_assert_int_eq(mg_blas_core_rank(NULL), -1);
}
END_TEST

/* the level of meshgrad's own kernels: the CPU's, lowered by MG_CPU_ISA (read
 * on the first call, so this test sets it first: each test is a fresh process
 * in Check's fork mode, and the only caller in this one) */
START_TEST(test_kernel_level) {
    mg_isa cpu = mg_cpu_isa_detect();
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    ck_assert_int_eq(cpu >= MG_ISA_AVX512, __builtin_cpu_supports("x86-64-v4") != 0);
    ck_assert_int_eq(cpu >= MG_ISA_AVX2,
                     __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
#endif
    setenv("MG_CPU_ISA", "avx2", 1);
    mg_isa level = mg_cpu_isa();
    ck_assert_int_eq(level, cpu < MG_ISA_AVX2 ? cpu : MG_ISA_AVX2);
    setenv("MG_CPU_ISA", "avx512", 1);
    ck_assert_int_eq(mg_cpu_isa(), level); /* one answer per process */
    unsetenv("MG_CPU_ISA");
}
END_TEST

int main(void) {
    /* the table's facts are its own: none of this process's variables */
    unsetenv("MG_CPU_ISA");
    const TTest *tests[] = {test_kernel_level, test_choice_table, test_switch_warns,
                            test_core_ranks, NULL};
    return mg_test_run(mg_test_suite("blas_core", tests));
}
