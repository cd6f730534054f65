/* watchdog.c: the collective watchdog (see watchdog.h).
 * State (the context's `watchdog`): the outermost collective in progress (op,
 * mesh dim, member ranks, start time), behind one mutex. A thread, started on
 * the first collective with more than one rank, wakes once a second (every
 * quarter of a shorter timeout); when the collective in progress has run past
 * the timeout (not counting time the process spent stopped) it prints the
 * report, gives the other waiting ranks a moment to print theirs, and calls
 * MPI_Abort on MPI_COMM_WORLD (then _exit, should that return); before the
 * pause it runs what was registered for a timeout (the context's
 * `watchdog_on_timeout`: the flight recorder's dump, flight.h).
 * mg_watchdog_free stops the thread.
 * Exports: mg_watchdog_begin, mg_watchdog_begin_comm, mg_watchdog_end,
 * mg_watchdog_timeout, mg_watchdog_current, mg_watchdog_on_timeout,
 * mg_watchdog_free. */
#include "dist/watchdog.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm_info.h"
#include "dist/dist_state.h"

#define DEFAULT_TIMEOUT 300.0
#define MAX_REPORT 4096 /* the report line */
#define MAX_LIST 1024   /* one list of ranks in it */

/* The watchdog's state (the context's `watchdog`): the outermost collective in
 * progress, behind `lock`, and the thread that watches it. */
struct mg_watchdog {
    double timeout_s; /* 0 = disabled */
    pthread_mutex_t lock;
    pthread_cond_t wake; /* mg_watchdog_free wakes the thread to stop it */
    pthread_t thread;
    int thread_started, stopping;
    int depth; /* nesting of begin/end */
    int armed; /* the outermost collective has peers to wait for */
    int fired; /* the report was printed; the job is ending */
    const char *op;
    int dim;
    const int *ranks;
    int nranks;
    double start;
};

static double read_timeout(void) {
    const char *env = getenv("MG_COLLECTIVE_TIMEOUT");
    if (!env || !*env) return DEFAULT_TIMEOUT;
    char *end;
    errno = 0;
    double v = strtod(env, &end);
    while (*end == ' ') end++;
    if (*end == 's' && end[1] == '\0') end++;
    if (errno || *end || !(v >= 0) || v > 1e9) {
        fprintf(stderr,
                "meshgrad: warning: MG_COLLECTIVE_TIMEOUT='%s' is not a number of seconds "
                "(0 disables the watchdog); using %g s\n",
                env, DEFAULT_TIMEOUT);
        return DEFAULT_TIMEOUT;
    }
    return v;
}

/* The context's watchdog, made on first use (NULL when out of memory). */
static struct mg_watchdog *watchdog(void) {
    mg_dist_state *c = mg_dist();
    if (c->watchdog) return c->watchdog;
    struct mg_watchdog *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->timeout_s = read_timeout();
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    return c->watchdog = w;
}

double mg_watchdog_timeout(void) {
    struct mg_watchdog *w = watchdog();
    return w ? w->timeout_s : 0;
}

void mg_watchdog_free(void) {
    struct mg_watchdog *w = mg_dist()->watchdog;
    if (!w) return;
    if (w->thread_started) {
        pthread_mutex_lock(&w->lock);
        w->stopping = 1;
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
    }
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
    mg_dist()->watchdog = NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "0,1,2" into buf, skipping `skip` (-1: none); "..." when it does not fit. */
static void format_ranks(char *buf, size_t len, const int *ranks, int n, int skip) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (ranks[i] == skip) continue;
        char one[24];
        int k = snprintf(one, sizeof one, "%s%d", used ? "," : "", ranks[i]);
        if (used + (size_t)k + 4 >= len) {
            snprintf(buf + used, len - used, ",...");
            return;
        }
        memcpy(buf + used, one, (size_t)k + 1);
        used += (size_t)k;
    }
}

/* Called with the lock held, while the collective is still armed (its ranks
 * array is alive: the caller is blocked inside the collective). */
static void format_report(const struct mg_watchdog *w, char *out, size_t len, double waited) {
    int me = 0;
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &me);
    char members[MAX_LIST], others[MAX_LIST], where[64];
    format_ranks(members, sizeof members, w->ranks, w->nranks, -1);
    format_ranks(others, sizeof others, w->ranks, w->nranks, me);
    if (w->dim >= 0)
        snprintf(where, sizeof where, "on mesh dim %d", w->dim);
    else if (w->dim == MG_WATCHDOG_WHOLE_MESH)
        snprintf(where, sizeof where, "on the whole mesh");
    else
        snprintf(where, sizeof where, "on a communicator of %d ranks", w->nranks);
    snprintf(out, len,
             "meshgrad: error: collective %s %s (ranks %s) has not completed after %.0f s: "
             "rank(s) %s are not answering (rank %d waits for them; MG_COLLECTIVE_TIMEOUT=%g)\n",
             w->op, where, members, waited, others[0] ? others : "?", me, w->timeout_s);
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Waits up to s seconds for mg_watchdog_free; called with the lock held. */
static void wait_s(struct mg_watchdog *w, double s) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double ns = (double)until.tv_nsec + s * 1e9;
    until.tv_sec += (time_t)(ns / 1e9);
    until.tv_nsec = (long)(ns - (double)(time_t)(ns / 1e9) * 1e9);
    while (!w->stopping && pthread_cond_timedwait(&w->wake, &w->lock, &until) == 0) {
    }
}

static void *watch(void *arg) {
    struct mg_watchdog *w = arg;
    double poll = w->timeout_s / 4 < 1.0 ? w->timeout_s / 4 : 1.0;
    if (poll < 0.05) poll = 0.05;
    double last = now_s();
    pthread_mutex_lock(&w->lock);
    for (;;) {
        wait_s(w, poll);
        if (w->stopping) break;
        double now = now_s(), stopped = now - last - poll;
        last = now;
        /* woken far later than asked: this process was stopped (SIGSTOP, a
         * debugger, a suspended machine). That time was not spent waiting for
         * the others, so it does not count: a rank resumed after a stop never
         * blames the ranks that waited for it. */
        if (stopped > 1.0) w->start += stopped;
        double waited = now - w->start;
        if (!w->armed || w->fired || waited < w->timeout_s) continue;
        char report[MAX_REPORT];
        format_report(w, report, sizeof report, waited);
        w->fired = 1;
        int (*on_timeout)(const char *) = mg_dist()->watchdog_on_timeout;
        pthread_mutex_unlock(&w->lock);
        fputs(report, stderr);
        fflush(stderr);
        if (on_timeout) on_timeout("watchdog timeout"); /* the flight recorder's dump */
        /* the other waiting ranks time out about now too (each within a poll):
         * let their lines and dumps out */
        sleep_s(poll + (w->timeout_s < 1.0 ? w->timeout_s : 1.0));
        MPI_Abort(MPI_COMM_WORLD, 1);
        _exit(1);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

void mg_watchdog_begin(const char *op, int mesh_dim, const int *ranks, int nranks) {
    struct mg_watchdog *w = watchdog();
    if (!w || w->timeout_s <= 0) return;
    pthread_mutex_lock(&w->lock);
    if (!w->thread_started && nranks > 1) { /* a one-rank job never needs it */
        if (pthread_create(&w->thread, NULL, watch, w) == 0)
            w->thread_started = 1;
        else
            fprintf(stderr, "meshgrad: warning: cannot start the collective watchdog thread; a "
                            "stalled collective will hang instead of ending the job\n");
    }
    if (w->depth++ == 0) {
        w->op = op;
        w->dim = mesh_dim;
        w->ranks = ranks;
        w->nranks = nranks;
        w->start = now_s();
        w->armed = nranks > 1;
    }
    pthread_mutex_unlock(&w->lock);
}

void mg_watchdog_end(void) {
    struct mg_watchdog *w = mg_dist()->watchdog;
    if (!w || w->timeout_s <= 0) return;
    pthread_mutex_lock(&w->lock);
    if (w->depth > 0 && --w->depth == 0) w->armed = 0;
    pthread_mutex_unlock(&w->lock);
}

void mg_watchdog_begin_comm(const char *op, MPI_Comm comm) {
    struct mg_watchdog *w = watchdog();
    if (!w || w->timeout_s <= 0) return;
    const mg_comm_info *info = mg_comm_info_of(comm);
    if (info)
        mg_watchdog_begin(op, info->mesh_dim, info->ranks, info->nranks);
    else /* out of memory: not watched, but begin/end stay paired */
        mg_watchdog_begin(op, MG_WATCHDOG_UNKNOWN_DIM, NULL, 0);
}

/* Set under the lock when the thread may be running: it reads it under the lock. */
void mg_watchdog_on_timeout(int (*fn)(const char *reason)) {
    mg_dist_state *c = mg_dist();
    struct mg_watchdog *w = c->watchdog;
    if (w) pthread_mutex_lock(&w->lock);
    c->watchdog_on_timeout = fn;
    if (w) pthread_mutex_unlock(&w->lock);
}

const char *mg_watchdog_current(int *mesh_dim, double *since, const int **ranks, int *nranks) {
    const struct mg_watchdog *w = mg_dist()->watchdog;
    if (!w || w->depth <= 0) return NULL;
    const char *op = w->op;
    *mesh_dim = w->dim;
    *since = w->start;
    *ranks = w->ranks;
    *nranks = w->ranks ? w->nranks : 0;
    return op;
}
