/* parallel.h: the library's OpenMP loops, entered only when they split work.
 *
 * libgomp enters every parallel region through a futex system call, even one
 * that its `if` clause turns down and one of a single thread: microseconds
 * each, more in a virtual machine, and a generated token runs ~150 small
 * kernels, whose arithmetic took less time than those calls. So a loop opens
 * a region only when its work is worth splitting (`worth`, the old `if`
 * clause) and more than one OpenMP thread is set (with a pthreads OpenBLAS the
 * kernels keep one: backend/cpu_threads.c); otherwise the same loop runs on
 * this thread, in the same order:
 *
 *   MG_PAR_FOR(n > PAR_MIN, for (int64_t i = 0; i < n; i++) y[i] = 2 * x[i];);
 *
 * Exports MG_PAR_FOR (a `parallel for schedule(static)`), MG_PAR_FOR_SUM (the
 * same with `reduction(+ : vars)`, the variables in parentheses, e.g.
 * (loss, bad): each must start at 0, so that one thread's sum is the loop's,
 * bit for bit), MG_PAR_REGION (a `parallel` region whose
 * threads split the work themselves; outside one omp_get_thread_num() is 0
 * and omp_get_num_threads() 1, so the body runs whole) and mg_par_worth. */
#ifndef MG_PARALLEL_H
#define MG_PARALLEL_H

#ifdef _OPENMP
#include <omp.h>

/* Does a loop with this much work open a parallel region? */
static inline int mg_par_worth(int worth) { return worth && omp_get_max_threads() > 1; }

#define MG_PAR_PRAGMA_(...) _Pragma(#__VA_ARGS__)
#define MG_PAR_PRAGMA(...) MG_PAR_PRAGMA_(__VA_ARGS__)
#define MG_PAR_LIST(...) __VA_ARGS__
#define MG_PAR_FOR(worth, ...)                                                 \
    do {                                                                       \
        if (mg_par_worth(worth)) {                                             \
            _Pragma("omp parallel for schedule(static)") __VA_ARGS__           \
        } else {                                                               \
            __VA_ARGS__                                                        \
        }                                                                      \
    } while (0)
#define MG_PAR_FOR_SUM(worth, vars, ...)                                       \
    do {                                                                       \
        if (mg_par_worth(worth)) {                                             \
            MG_PAR_PRAGMA(omp parallel for reduction(+ : MG_PAR_LIST vars)     \
                          schedule(static))                                    \
            __VA_ARGS__                                                        \
        } else {                                                               \
            __VA_ARGS__                                                        \
        }                                                                      \
    } while (0)
#define MG_PAR_REGION(worth, ...)                                              \
    do {                                                                       \
        if (mg_par_worth(worth)) {                                             \
            _Pragma("omp parallel") { __VA_ARGS__ }                            \
        } else {                                                               \
            __VA_ARGS__                                                        \
        }                                                                      \
    } while (0)
#else
static inline int mg_par_worth(int worth) { (void)worth; return 0; }
#define MG_PAR_FOR(worth, ...) do { (void)(worth); __VA_ARGS__ } while (0)
#define MG_PAR_FOR_SUM(worth, vars, ...) do { (void)(worth); __VA_ARGS__ } while (0)
#define MG_PAR_REGION(worth, ...) do { (void)(worth); __VA_ARGS__ } while (0)
#endif

#endif
