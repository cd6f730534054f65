/* blas_core.c: which of OpenBLAS's kernels this process runs, and which it
 * should (blas_core.h says how the choice is made and acted on).
 *
 * A DYNAMIC_ARCH OpenBLAS picks its kernels once, when it loads, from the CPU or
 * from OPENBLAS_CORETYPE. The pick sets the GEMM rate (AVX2 kernels run sgemm at
 * about half the rate of the same release's AVX-512 kernels, the generic ones
 * at a sixth: docs/PERFORMANCE.md, "CPU GEMM kernels"), so `meshgrad --version`
 * and the benchmarks name it beside their figures.
 * Exports mg_blas_core (backend.h) and what blas_core.h lists. */
#include "backend/blas_core.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backend/backend.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

/* OpenBLAS's own call (declared again here in case cblas.h is not OpenBLAS's). */
char *openblas_get_corename(void);

const char *mg_blas_core(void) {
    const char *name = openblas_get_corename();
    return name && *name ? name : "unknown";
}

/* ---- the CPU ----------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
/* AMX tiles in cpuid (leaf 7, EDX bit 24) and their state enabled by the OS
 * (XCR0 bits 17 and 18). Asked only where AVX-512 runs, so XGETBV is there. */
static int amx_exposed(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24))) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & (3u << 17)) == (3u << 17);
}
#endif

mg_isa mg_cpu_isa_detect(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
#if defined(__clang__)
    int v4 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma");
#else
    int v4 = __builtin_cpu_supports("x86-64-v4");
#endif
    if (v4) {
        if (!__builtin_cpu_supports("avx512bf16")) return MG_ISA_AVX512;
        return amx_exposed() ? MG_ISA_AMX : MG_ISA_AVX512_BF16;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return MG_ISA_AVX2;
    if (__builtin_cpu_supports("avx")) return MG_ISA_AVX;
#endif
    return MG_ISA_GENERIC;
}

const char *mg_isa_name(mg_isa isa) {
    switch (isa) {
    case MG_ISA_AVX: return "AVX";
    case MG_ISA_AVX2: return "AVX2";
    case MG_ISA_AVX512: return "AVX-512";
    case MG_ISA_AVX512_BF16: return "AVX-512 + BF16";
    case MG_ISA_AMX: return "AVX-512 + BF16 + AMX";
    default: return "SSE";
    }
}

/* MG_CPU_ISA's level: -1 for auto (or unset), -2 for a value it does not take. */
static int isa_asked(const char *isa) {
    if (!isa || !*isa || strcasecmp(isa, "auto") == 0) return -1;
    if (strcasecmp(isa, "avx2") == 0) return MG_ISA_AVX2;
    if (strcasecmp(isa, "avx512") == 0) return MG_ISA_AVX512;
    return -2;
}

mg_isa mg_cpu_isa(void) {
    /* One answer for the process, as OpenBLAS's pick is: the CPU does not change,
     * MG_CPU_ISA is read as the process starts, and the kernels ask on every call
     * (from any thread, hence atomic). -1: not asked yet. */
    static atomic_int level = -1;
    int v = atomic_load_explicit(&level, memory_order_relaxed);
    if (v < 0) {
        v = (int)mg_cpu_isa_detect();
        int asked = isa_asked(getenv("MG_CPU_ISA"));
        if (asked >= 0 && asked < v) v = asked;
        atomic_store_explicit(&level, v, memory_order_relaxed);
    }
    return (mg_isa)v;
}

/* ---- OpenBLAS's cores ------------------------------------------------------------ */

/* The cores OpenBLAS 0.3.21 names (and SapphireRapids, which later releases
 * add), by the ISA of their kernels. AMD's Zen and Excavator are OpenBLAS's own
 * picks for CPUs with AVX2; Bulldozer, Piledriver and Steamroller run AVX. */
static const struct {
    const char *name;
    mg_isa isa;
} cores[] = {
    {"Katmai", MG_ISA_GENERIC}, {"Coppermine", MG_ISA_GENERIC}, {"Northwood", MG_ISA_GENERIC},
    {"Prescott", MG_ISA_GENERIC}, {"Banias", MG_ISA_GENERIC}, {"Atom", MG_ISA_GENERIC},
    {"Core2", MG_ISA_GENERIC}, {"Penryn", MG_ISA_GENERIC}, {"Dunnington", MG_ISA_GENERIC},
    {"Nehalem", MG_ISA_GENERIC}, {"Athlon", MG_ISA_GENERIC}, {"Opteron", MG_ISA_GENERIC},
    {"Opteron_SSE3", MG_ISA_GENERIC}, {"Barcelona", MG_ISA_GENERIC}, {"Nano", MG_ISA_GENERIC},
    {"Bobcat", MG_ISA_GENERIC},
    {"Sandybridge", MG_ISA_AVX}, {"Bulldozer", MG_ISA_AVX}, {"Piledriver", MG_ISA_AVX},
    {"Steamroller", MG_ISA_AVX},
    {"Haswell", MG_ISA_AVX2}, {"Zen", MG_ISA_AVX2}, {"Excavator", MG_ISA_AVX2},
    {"SkylakeX", MG_ISA_AVX512},
    {"Cooperlake", MG_ISA_AVX512_BF16},
    {"SapphireRapids", MG_ISA_AMX},
};

int mg_blas_core_rank(const char *core) {
    for (size_t i = 0; core && i < sizeof cores / sizeof cores[0]; i++)
        if (strcasecmp(core, cores[i].name) == 0) return (int)cores[i].isa;
    return -1;
}

/* The best core OpenBLAS 0.3.21 has for a CPU of this level (it has none for
 * AMX: Cooperlake's), or NULL where nothing beats the generic ones. */
static const char *best_core(mg_isa cpu) {
    switch (cpu) {
    case MG_ISA_AMX:
    case MG_ISA_AVX512_BF16: return "Cooperlake";
    case MG_ISA_AVX512: return "SkylakeX";
    case MG_ISA_AVX2: return "Haswell";
    case MG_ISA_AVX: return "Sandybridge";
    default: return NULL;
    }
}

static int set(const char *s) { return s && *s; }

mg_blas_facts mg_blas_facts_read(void) {
    mg_blas_facts f = {mg_cpu_isa_detect(), mg_blas_core(), getenv("OPENBLAS_CORETYPE"),
                       getenv("MG_CPU_ISA"), getenv("MG_BLAS_CORE_SET")};
    return f;
}

mg_blas_pick mg_blas_core_choose(const mg_blas_facts *f) {
    mg_blas_pick p = {0};
    int rank = mg_blas_core_rank(f->running);
    p.best = best_core(f->cpu);
    p.ranked = rank >= 0;
    p.running_isa = p.ranked ? (mg_isa)rank : MG_ISA_GENERIC;
    p.worse = p.ranked && p.best && rank < mg_blas_core_rank(p.best);
    /* OPENBLAS_CORETYPE set by an earlier run of this process, not by the user */
    int ours = set(f->coretype) && set(f->guard) && strcasecmp(f->coretype, f->guard) == 0;
    int asked = isa_asked(f->isa);
    if (asked == -2 || (asked >= 0 && (int)f->cpu < asked)) {
        p.isa_ignored = 1;
        asked = -1;
    }
    if (asked >= 0) { /* MG_CPU_ISA wins over everything */
        p.source = MG_BLAS_FROM_ISA;
        p.core = asked == MG_ISA_AVX2 ? "Haswell" : p.best;
        int fits = asked == MG_ISA_AVX2 ? rank == MG_ISA_AVX2 : rank >= MG_ISA_AVX512;
        p.action = fits ? MG_BLAS_KEEP : MG_BLAS_SWITCH;
        if (fits) p.core = f->running;
    } else if (set(f->coretype) && !ours) { /* the user's own setting */
        p.source = MG_BLAS_FROM_USER;
        p.core = f->running;
    } else {
        p.source = ours ? MG_BLAS_FROM_MESHGRAD : MG_BLAS_FROM_OPENBLAS;
        p.core = p.worse ? p.best : f->running;
        p.action = p.worse ? MG_BLAS_SWITCH : MG_BLAS_KEEP;
    }
    if (p.action == MG_BLAS_SWITCH && set(f->guard)) p.action = MG_BLAS_STUCK;
    return p;
}

/* ---- words ---------------------------------------------------------------------- */

/* How much faster sgemm runs on the better kernels, where it was measured
 * (docs/PERFORMANCE.md, "CPU GEMM kernels"); NULL where it was not. */
static const char *gain(mg_isa from, mg_isa to) {
    if (to < MG_ISA_AVX512) return NULL;
    if (from == MG_ISA_AVX2) return "~2x";
    if (from == MG_ISA_GENERIC) return "~6x";
    return NULL;
}

void mg_blas_core_describe(const mg_blas_facts *f, char *out, size_t len) {
    mg_blas_pick p = mg_blas_core_choose(f);
    const char *running = set(f->running) ? f->running : "unknown";
    if (!p.ranked) { /* a core meshgrad cannot judge (another architecture, a new name) */
        snprintf(out, len, "%s kernels", running);
        return;
    }
    char from[96] = "";
    if (p.source == MG_BLAS_FROM_USER && strcasecmp(f->coretype, running) == 0)
        snprintf(from, sizeof from, " from OPENBLAS_CORETYPE");
    else if (p.source == MG_BLAS_FROM_USER)
        snprintf(from, sizeof from, " (OpenBLAS's own pick: OPENBLAS_CORETYPE=%.40s not taken)",
                 f->coretype);
    else if (p.source == MG_BLAS_FROM_ISA && p.action != MG_BLAS_KEEP)
        snprintf(from, sizeof from, " (MG_CPU_ISA=%.20s asks for %s: not taken)", f->isa, p.core);
    else if (p.source == MG_BLAS_FROM_ISA)
        snprintf(from, sizeof from, " from MG_CPU_ISA=%.40s", f->isa);
    else if (p.source == MG_BLAS_FROM_MESHGRAD)
        snprintf(from, sizeof from, ", set by meshgrad over OpenBLAS's own pick");
    const char *best = p.best ? p.best : running;
    if (!p.worse && (int)p.running_isa > (int)f->cpu)
        snprintf(out, len, "%s kernels%s: above what this CPU reports (%s)", running, from,
                 mg_isa_name(f->cpu));
    else if (!p.worse)
        snprintf(out, len, "%s kernels%s: the best for this CPU, %s", running, from,
                 mg_isa_name(f->cpu));
    else if (p.running_isa >= MG_ISA_AVX512) /* SkylakeX where Cooperlake runs: sgemm alike */
        snprintf(out, len, "%s kernels%s; this CPU runs %s (the same fp32 GEMM)", running, from,
                 best);
    else {
        const char *g = gain(p.running_isa, (mg_isa)mg_blas_core_rank(best));
        char more[32];
        snprintf(more, sizeof more, "%s GEMM", g ? g : "faster");
        if (p.source == MG_BLAS_FROM_USER)
            snprintf(out, len, "%s kernels%s; this CPU runs %s: unset it for %s", running, from,
                     best, more);
        else if (p.source == MG_BLAS_FROM_ISA)
            snprintf(out, len, "%s kernels%s; this CPU runs %s", running, from, best);
        else
            snprintf(out, len, "%s kernels%s; this CPU runs %s: set OPENBLAS_CORETYPE=%s for %s",
                     running, from, best, best, more);
    }
}

int mg_blas_core_warning(const mg_blas_facts *f, char *out, size_t len) {
    mg_blas_pick p = mg_blas_core_choose(f);
    char isa[160] = "", core[256] = "";
    if (p.isa_ignored && isa_asked(f->isa) == -2)
        snprintf(isa, sizeof isa, "MG_CPU_ISA=%.40s is not avx2, avx512 or auto: ignored", f->isa);
    else if (p.isa_ignored)
        snprintf(isa, sizeof isa, "MG_CPU_ISA=%.40s asks for more than this CPU runs (%s): ignored",
                 f->isa, mg_isa_name(f->cpu));
    if (p.action != MG_BLAS_KEEP && p.core && p.source == MG_BLAS_FROM_ISA)
        snprintf(core, sizeof core, "MG_CPU_ISA=%.40s asks for %s kernels but OpenBLAS runs %s: "
                 "set OPENBLAS_CORETYPE=%s too", f->isa, p.core, f->running, p.core);
    else if (p.action != MG_BLAS_KEEP && p.core) {
        const char *g = gain(p.running_isa, (mg_isa)mg_blas_core_rank(p.core));
        snprintf(core, sizeof core, "OpenBLAS runs its %s kernels on this CPU, which runs %s "
                 "(%s): set OPENBLAS_CORETYPE=%s for %s GEMM", f->running, p.core,
                 mg_isa_name(f->cpu), p.core, g ? g : "faster");
    }
    if (!*isa && !*core) return 0;
    snprintf(out, len, "meshgrad: warning: %s%s%s", isa, *isa && *core ? "; " : "", core);
    return 1;
}

/* ---- acting on it --------------------------------------------------------------- */

int mg_blas_core_setenv(void) {
    mg_blas_facts f = mg_blas_facts_read();
    mg_blas_pick p = mg_blas_core_choose(&f);
    if (p.action != MG_BLAS_SWITCH || !p.core) return 0;
    /* the guard first: if the exec fails, the warning says what is running */
    if (setenv("MG_BLAS_CORE_SET", p.core, 1) != 0) return 0;
    return setenv("OPENBLAS_CORETYPE", p.core, 1) == 0;
}

void mg_blas_core_warn_once(FILE *out) {
    /* once per process, though a program may start the library again after
     * mg_finalize (which zeroes the context) */
    static int said;
    if (said) return;
    said = 1;
    mg_blas_facts f = mg_blas_facts_read();
    char line[512];
    if (mg_blas_core_warning(&f, line, sizeof line)) fprintf(out, "%s\n", line);
}
