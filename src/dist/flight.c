/* flight.c: the flight recorder (see flight.h): the ring and its records, the
 * dump writer (async-signal-safe: a buffered writer over write(2) and integer
 * formatting of its own), and the signal handlers.
 * State: the context's `flight`.
 * Exports: mg_flight_post, mg_flight_wait_begin, mg_flight_done,
 * mg_flight_set_step, mg_flight_set_dir, mg_flight_dump,
 * mg_flight_install_signals, mg_flight_wait_ns, mg_flight_free. */
#include "dist/flight.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm_info.h"
#include "dist/dist_state.h"
#include "dist/watchdog.h"
#include "status.h"
#include "trace.h"

#define DEFAULT_ENTRIES 2048
#define MAGIC "{\"meshgrad_flight\""

enum { QUEUED = 1, STARTED, DONE };
static const char *const state_names[] = {"empty", "queued", "started", "done"};
static const char *const dtype_names[MG_FLIGHT_DTYPES] = {"float32", "int64", "float64", "byte",
                                                          "status"};
static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGUSR2};
#define NSIGNALS ((int)(sizeof fatal_signals / sizeof fatal_signals[0]))

typedef struct {
    int64_t id; /* 1, 2, ...; 0: an empty slot */
    int64_t seq, step, bytes;
    int64_t post_ns, start_ns, end_ns;
    const char *op;
    int comm; /* index in the comm table, -1: none */
    int dim, peer;
    unsigned char dtype, send;
    volatile unsigned char state;
} entry;

struct mg_flight {
    int capacity; /* 0: off */
    entry *ring;
    int64_t last_id; /* records made so far */
    int64_t step;
    int64_t wait_ns;
    int skip_rank;            /* the test hook: -1 off */
    int64_t skip_at, collectives;
    int rank, world;
    volatile sig_atomic_t dumping;
    char dir[PATH_MAX / 2];   /* "" until set */
    char path[PATH_MAX];      /* dir/rank-<r>.json */
    char tmp[PATH_MAX];       /* dir/.rank-<r>.json.<pid> */
    char host[64];
    int installed;
    struct sigaction old[NSIGNALS];
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* "RANK:K" of MG_TEST_SKIP_COLLECTIVE */
static void read_hook(struct mg_flight *f) {
    f->skip_rank = -1;
    const char *env = getenv("MG_TEST_SKIP_COLLECTIVE");
    int rank;
    long long k;
    if (env && *env && sscanf(env, "%d:%lld", &rank, &k) == 2 && k > 0) {
        f->skip_rank = rank;
        f->skip_at = k;
    }
}

/* The context's recorder, made on first use; NULL when out of memory. */
static struct mg_flight *flight(void) {
    mg_dist_state *c = mg_dist();
    if (c->flight) return c->flight;
    struct mg_flight *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->capacity = DEFAULT_ENTRIES;
    const char *env = getenv("MG_FLIGHT_ENTRIES");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 0 && v <= (1 << 24)) f->capacity = (int)v;
        else
            fprintf(stderr, "meshgrad: warning: MG_FLIGHT_ENTRIES='%s' is not a count from 0 to "
                            "16777216; keeping %d\n", env, DEFAULT_ENTRIES);
    }
    if (f->capacity > 0 && !(f->ring = calloc((size_t)f->capacity, sizeof *f->ring)))
        f->capacity = 0;
    f->step = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &f->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &f->world);
    read_hook(f);
    c->flight = f;
    mg_watchdog_on_timeout(mg_flight_dump); /* a timeout dumps the ring before the job ends */
    return f;
}

static entry *find(const struct mg_flight *f, int64_t id) {
    if (!f || id <= 0 || f->capacity == 0) return NULL;
    entry *e = &f->ring[(id - 1) % f->capacity];
    return e->id == id ? e : NULL;
}

int64_t mg_flight_post(MPI_Comm comm, const char *op, int64_t bytes, mg_flight_dtype dtype,
                       int peer, bool send, bool started) {
    struct mg_flight *f = flight();
    if (!f) return -1;
    if (peer < 0 && f->skip_rank == f->rank && ++f->collectives == f->skip_at) return MG_FLIGHT_SKIP;
    if (f->capacity == 0) return -1;
    mg_comm_info *info = mg_comm_info_of(comm);
    if (!info) return -1;
    int64_t id = f->last_id + 1, t = now_ns();
    entry *e = &f->ring[(id - 1) % f->capacity];
    e->id = 0; /* a dump skips the slot while it changes */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (peer >= 0 && peer < info->nranks)
        e->seq = ++info->p2p[2 * peer + (send ? 0 : 1)];
    else
        e->seq = ++info->seq;
    e->step = f->step;
    e->bytes = bytes;
    e->post_ns = t;
    e->start_ns = started ? t : 0;
    e->end_ns = 0;
    e->op = op;
    e->comm = info->index;
    e->dim = info->mesh_dim;
    e->peer = peer >= 0 && peer < info->nranks ? info->ranks[peer] : -1;
    e->dtype = (unsigned char)dtype;
    e->send = send;
    e->state = started ? STARTED : QUEUED;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&e->id, id, __ATOMIC_RELEASE);
    f->last_id = id;
    return id;
}

void mg_flight_wait_begin(int64_t id) {
    entry *e = find(mg_dist()->flight, id);
    if (!e || e->state != QUEUED) return;
    e->start_ns = now_ns();
    e->state = STARTED;
}

void mg_flight_done(int64_t id) {
    struct mg_flight *f = mg_dist()->flight;
    entry *e = find(f, id);
    if (!e || e->state == DONE) return;
    e->end_ns = now_ns();
    if (e->state == STARTED) f->wait_ns += e->end_ns - e->start_ns;
    e->state = DONE;
    mg_trace_comm(e->op, e->peer >= 0 ? (e->send ? 1 : 2) : 0, e->dim, e->peer, e->seq, e->bytes,
                  e->post_ns, e->start_ns, e->end_ns);
}

void mg_flight_set_step(int64_t step) {
    struct mg_flight *f = flight();
    if (f) f->step = step;
}

int64_t mg_flight_wait_ns(void) {
    struct mg_flight *f = mg_dist()->flight;
    return f ? f->wait_ns : 0;
}

int mg_flight_set_dir(const char *dir) {
    struct mg_flight *f = flight();
    if (!f) return mg_error(MG_ENOMEM, "flight recorder: out of memory");
    if (!dir || !*dir) {
        f->dir[0] = '\0';
        return MG_OK;
    }
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--; /* "dir/" is "dir" */
    if (n + 1 > sizeof f->dir)
        return mg_error(MG_EINVAL, "--flight-dir: the path is longer than %zu characters",
                        sizeof f->dir - 1);
    memcpy(f->dir, dir, n);
    f->dir[n] = '\0';
    snprintf(f->path, sizeof f->path, "%s/rank-%d.json", f->dir, f->rank);
    snprintf(f->tmp, sizeof f->tmp, "%s/.rank-%d.json.%ld", f->dir, f->rank, (long)getpid());
    if (gethostname(f->host, sizeof f->host) != 0) snprintf(f->host, sizeof f->host, "?");
    f->host[sizeof f->host - 1] = '\0';
    return MG_OK;
}

/* ---- the writer: async-signal-safe ------------------------------------------------ */

typedef struct {
    int fd, failed;
    size_t n;
    char buf[4096];
} writer;

static void flush_out(writer *w) {
    size_t done = 0;
    while (done < w->n && !w->failed) {
        ssize_t k = write(w->fd, w->buf + done, w->n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) w->failed = 1;
        else done += (size_t)k;
    }
    w->n = 0;
}

static void put_mem(writer *w, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (w->n == sizeof w->buf) flush_out(w);
        w->buf[w->n++] = s[i];
    }
}

static void put(writer *w, const char *s) { put_mem(w, s, strlen(s)); }

static void put_i64(writer *w, int64_t v) {
    char tmp[24];
    int i = (int)sizeof tmp;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) tmp[--i] = '-';
    put_mem(w, tmp + i, sizeof tmp - (size_t)i);
}

/* "key": */
static void key(writer *w, const char *k) {
    put(w, "\"");
    put(w, k);
    put(w, "\":");
}

static void put_string(writer *w, const char *s) {
    put(w, "\"");
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') put_mem(w, "\\", 1);
        put_mem(w, (unsigned char)*s < 0x20 ? "?" : s, 1);
    }
    put(w, "\"");
}

static void field_i64(writer *w, const char *k, int64_t v, int comma) {
    if (comma) put(w, ",");
    key(w, k);
    put_i64(w, v);
}

static void field_string(writer *w, const char *k, const char *v, int comma) {
    if (comma) put(w, ",");
    key(w, k);
    put_string(w, v);
}

static void write_comms(writer *w, const mg_dist_state *c) {
    int n = __atomic_load_n(&c->n_comm_info, __ATOMIC_ACQUIRE);
    put(w, ",\n\"comms\":[");
    for (int i = 0; i < n; i++) {
        const mg_comm_info *info = c->comm_info[i];
        put(w, i ? ",\n{" : "\n{");
        field_i64(w, "index", i, 0);
        field_string(w, "name", info->name, 1);
        field_i64(w, "dim", info->mesh_dim, 1);
        field_i64(w, "ordinal", info->ordinal, 1);
        put(w, ",\"ranks\":[");
        for (int r = 0; r < info->nranks; r++) {
            if (r) put(w, ",");
            put_i64(w, info->ranks[r]);
        }
        put(w, "]");
        field_i64(w, "seq", info->seq, 1);
        for (int way = 0; way < 2; way++) { /* transfers to and from each member */
            put(w, way ? ",\"recvs\":[" : ",\"sends\":[");
            for (int r = 0; r < info->nranks; r++) {
                if (r) put(w, ",");
                put_i64(w, info->p2p[2 * r + way]);
            }
            put(w, "]");
        }
        put(w, "}");
    }
    put(w, "]");
}

static void write_entries(writer *w, const struct mg_flight *f) {
    put(w, ",\n\"entries\":[");
    int64_t first = f->last_id - f->capacity + 1;
    int any = 0;
    for (int64_t id = first > 1 ? first : 1; id <= f->last_id; id++) {
        const entry *e = find(f, id);
        if (!e) continue;
        entry x = *e; /* a copy: the slot may change under us */
        if (x.id != id || x.state < QUEUED || x.state > DONE) continue;
        put(w, any ? ",\n{" : "\n{");
        any = 1;
        field_i64(w, "id", x.id, 0);
        field_i64(w, "comm", x.comm, 1);
        field_i64(w, "seq", x.seq, 1);
        field_string(w, "op", x.op, 1);
        field_i64(w, "dim", x.dim, 1);
        field_i64(w, "peer", x.peer, 1);
        field_i64(w, "bytes", x.bytes, 1);
        field_string(w, "dtype", x.dtype < MG_FLIGHT_DTYPES ? dtype_names[x.dtype] : "?", 1);
        field_i64(w, "step", x.step, 1);
        field_string(w, "state", state_names[x.state], 1);
        field_i64(w, "post_ns", x.post_ns, 1);
        field_i64(w, "start_ns", x.start_ns, 1);
        field_i64(w, "end_ns", x.end_ns, 1);
        put(w, "}");
    }
    put(w, "]}\n");
}

static void write_dump(writer *w, const struct mg_flight *f, const char *reason) {
    const mg_dist_state *c = mg_dist();
    put(w, MAGIC ":1");
    field_string(w, "reason", reason, 1);
    field_i64(w, "rank", f->rank, 1);
    field_i64(w, "world", f->world, 1);
    field_i64(w, "pid", (int64_t)getpid(), 1);
    field_string(w, "host", f->host, 1);
    field_i64(w, "now_ns", now_ns(), 1);
    field_i64(w, "step", f->step, 1);
    field_i64(w, "recorded", f->last_id, 1);
    field_i64(w, "capacity", f->capacity, 1);
    int dim = 0, nranks = 0;
    double since = 0;
    const int *ranks = NULL;
    const char *op = mg_watchdog_current(&dim, &since, &ranks, &nranks);
    if (op) {
        put(w, ",\n\"waiting_in\":{");
        field_string(w, "op", op, 0);
        field_i64(w, "dim", dim, 1);
        field_i64(w, "since_ns", (int64_t)(since * 1e9), 1);
        put(w, ",\"ranks\":[");
        for (int r = 0; r < nranks && r < 4096; r++) {
            if (r) put(w, ",");
            put_i64(w, ranks[r]);
        }
        put(w, "]}");
    }
    write_comms(w, c);
    write_entries(w, f);
}

/* One line on stderr: "meshgrad: flight recorder: " a b c d */
static void say(const char *a, const char *b, const char *c, const char *d) {
    writer w = {.fd = 2};
    put(&w, "meshgrad: flight recorder: ");
    put(&w, a);
    put(&w, b);
    put(&w, c);
    put(&w, d);
    put(&w, "\n");
    flush_out(&w);
}

/* The final path may be replaced: absent, or a regular file this recorder wrote. */
static int ours_or_absent(const char *path) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT;
    struct stat st;
    char head[sizeof MAGIC];
    ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, head, sizeof head - 1) : -1;
    close(fd);
    return n == (ssize_t)sizeof head - 1 && memcmp(head, MAGIC, sizeof head - 1) == 0;
}

int mg_flight_dump(const char *reason) {
    struct mg_flight *f = mg_dist()->flight;
    if (!f || !f->dir[0] || f->capacity == 0 || f->dumping) return -1;
    f->dumping = 1;
    int rc = -1;
    if (mkdir(f->dir, 0777) != 0 && errno != EEXIST) {
        say("cannot make the directory ", f->dir, ": no dump written", "");
        goto out;
    }
    writer w = {.fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)};
    if (w.fd < 0) {
        say("cannot write ", f->tmp, ": no dump written", "");
        goto out;
    }
    write_dump(&w, f, reason);
    flush_out(&w);
    if (close(w.fd) != 0) w.failed = 1;
    if (w.failed || !ours_or_absent(f->path)) {
        unlink(f->tmp);
        say(f->path, w.failed ? ": writing failed" : " exists and is not a flight recorder dump",
            ": left as it was, no dump written", "");
        goto out;
    }
    if (rename(f->tmp, f->path) != 0) {
        unlink(f->tmp);
        say("cannot rename the dump to ", f->path, "", "");
        goto out;
    }
    say("wrote ", f->path, " on ", reason);
    rc = 0;
out:
    f->dumping = 0;
    return rc;
}

/* ---- signals ------------------------------------------------------------------ */

static const char *signal_reason(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    case SIGUSR2: return "SIGUSR2";
    default: return "signal";
    }
}

static void on_signal(int sig) {
    int saved = errno;
    mg_flight_dump(signal_reason(sig));
    struct mg_flight *f = mg_dist()->flight;
    if (sig != SIGUSR2 && f) { /* on to what was there before; it runs once we return */
        for (int i = 0; i < NSIGNALS; i++)
            if (fatal_signals[i] == sig) sigaction(sig, &f->old[i], NULL);
        raise(sig);
    }
    errno = saved;
}

int mg_flight_install_signals(void) {
    struct mg_flight *f = flight();
    if (!f) return mg_error(MG_ENOMEM, "flight recorder: out of memory");
    if (f->installed) return MG_OK;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < NSIGNALS; i++) {
        sa.sa_flags = fatal_signals[i] == SIGUSR2 ? SA_RESTART : 0;
        if (sigaction(fatal_signals[i], &sa, &f->old[i]) != 0)
            return mg_error(MG_ESTATE, "flight recorder: cannot install a signal handler: %s",
                            strerror(errno));
    }
    f->installed = 1;
    return MG_OK;
}

void mg_flight_free(void) {
    struct mg_flight *f = mg_dist()->flight;
    if (!f) return;
    if (f->installed)
        for (int i = 0; i < NSIGNALS; i++) sigaction(fatal_signals[i], &f->old[i], NULL);
    free(f->ring);
    free(f);
    mg_dist()->flight = NULL;
    mg_watchdog_on_timeout(NULL);
}
