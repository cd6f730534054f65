/* cpu_common.c: what the CPU kernel files share and define once: the bounds
 * of mg_cpu_exp (cpu_kernels.h says why they live in a .c file) and the
 * threads' kept buffers of the GEMM kernels. It calls no other kernel file,
 * so every one may call it.
 * Exports: mg_cpu_exp_lo, mg_cpu_exp_hi, mg_cpu_thread_buffer (cpu_kernels.h). */
#include <pthread.h>
#include <stdlib.h>

#include "backend/cpu_kernels.h"

const float mg_cpu_exp_lo = -88.0f, mg_cpu_exp_hi = 88.0f; /* see mg_cpu_exp */

/* ---- a thread's kept buffers ------------------------------------------------------
 * One buffer per slot and thread, grown as needed and kept, so a steady-state
 * step allocates nothing (docs/DESIGN.md "Memory"); a thread's own, as gemm may
 * be called from several threads at once. Each is also the thread's value of
 * its slot's key, whose destructor frees it when the thread ends (a
 * _Thread_local pointer alone would lose it then). 64-byte aligned. */
static _Thread_local float *thread_buf[MG_CPU_THREAD_BUFFERS];
static _Thread_local size_t thread_cap[MG_CPU_THREAD_BUFFERS];
static pthread_key_t thread_key[MG_CPU_THREAD_BUFFERS];
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;
static int keys_made;

static void make_keys(void) {
    keys_made = 1;
    for (int i = 0; i < MG_CPU_THREAD_BUFFERS; i++)
        keys_made &= pthread_key_create(&thread_key[i], free) == 0;
}

float *mg_cpu_thread_buffer(int slot, size_t n) {
    if (n > thread_cap[slot]) {
        pthread_once(&keys_once, make_keys);
        if (!keys_made) return NULL;
        free(thread_buf[slot]);
        thread_cap[slot] = 0;
        void *p = NULL;
        if (posix_memalign(&p, 64, n * sizeof(float))) p = NULL;
        thread_buf[slot] = p;
        pthread_setspecific(thread_key[slot], p);
        if (!p) return NULL;
        thread_cap[slot] = n;
    }
    return thread_buf[slot];
}
