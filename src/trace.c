/* trace.c: the timeline recorder (see trace.h): the event buffer, the stack
 * of open spans, the soft op span, and the Chrome-trace JSON of a rank's
 * events. State: the context's `trace` (and its `tracing` flag).
 * Exports: mg_trace_start, mg_trace_stop, mg_trace_now, mg_trace_begin,
 * mg_trace_end, mg_trace_op_begin, mg_trace_op_cost, mg_trace_op_end, mg_trace_kernel,
 * mg_trace_comm, mg_trace_format, mg_trace_free. */
#include "trace.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "array.h"
#include "context.h"
#include "hash.h"
#include "status.h"

#define MAX_DEPTH 32 /* open spans */
#define MAX_LANES 64 /* lanes of a rank for things in flight */

typedef struct {
    const char *name;
    int64_t t0, t1;       /* ns */
    int64_t a, b, c, d;   /* arguments: see args() */
    unsigned char cat, lane;
} event;

struct mg_trace {
    int64_t origin; /* ns at mg_trace_start */
    event *ev;
    int n, cap;
    struct {
        const char *name;
        int cat;
        int64_t t0, arg;
    } open[MAX_DEPTH];
    int depth;
    /* the soft op span: open from its begin until its end, or until the end
     * of the last kernel or collective seen while open */
    const char *op;
    int64_t op_t0, op_last;
    int64_t op_flops, op_bytes; /* its kernel's cost (mg_trace_op_cost) */
};

static const char *const cat_names[MG_TRACE_CATS] = {
    "step", "phase", "op", "backward", "kernel", "comm", "wait", "comm_async", "send", "recv"};

static int64_t clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int mg_trace_start(void) {
    mg_context *c = mg_ctx();
    mg_context_on_reset(mg_trace_free);
    if (!c->trace && !(c->trace = calloc(1, sizeof *c->trace)))
        return mg_error(MG_ENOMEM, "trace: out of memory");
    c->trace->n = c->trace->depth = 0;
    c->trace->op = NULL;
    c->trace->origin = clock_ns();
    c->tracing = 1;
    return MG_OK;
}

void mg_trace_stop(void) { mg_ctx()->tracing = 0; }

int64_t mg_trace_now(void) { return mg_ctx()->tracing ? clock_ns() : 0; }

/* Appends an event; on out of memory the event is lost (the trace is a view,
 * never a reason to stop the run). */
static void emit(struct mg_trace *t, int cat, const char *name, int64_t t0, int64_t t1, int64_t a,
                 int64_t b, int64_t c, int64_t d) {
    if (t->n == t->cap && mg_array_grow((void **)&t->ev, &t->cap, t->n + 1, sizeof *t->ev,
                                        "trace events") != MG_OK) {
        mg_clear_error();
        return;
    }
    t->ev[t->n++] = (event){name, t0, t1 > t0 ? t1 : t0, a, b, c, d, (unsigned char)cat, 0};
}

/* Ends the soft op span at the end of the last thing it ran (at `now` when
 * closed by its own end). */
static void close_op(struct mg_trace *t, int64_t now) {
    if (!t->op) return;
    emit(t, MG_TRACE_OP, t->op, t->op_t0, now ? now : t->op_last, t->op_flops, t->op_bytes, 0,
         0);
    t->op = NULL;
}

void mg_trace_begin(mg_trace_cat cat, const char *name, int64_t arg) {
    mg_context *c = mg_ctx();
    if (!c->tracing) return;
    struct mg_trace *t = c->trace;
    close_op(t, 0);
    if (t->depth == MAX_DEPTH) { /* deeper than any program goes: counted, not kept */
        t->depth++;
        return;
    }
    t->open[t->depth].name = name;
    t->open[t->depth].cat = cat;
    t->open[t->depth].arg = arg;
    t->open[t->depth++].t0 = clock_ns();
}

/* Closes the innermost open span now. */
static void pop(struct mg_trace *t) {
    close_op(t, 0);
    if (--t->depth >= MAX_DEPTH) return;
    emit(t, t->open[t->depth].cat, t->open[t->depth].name, t->open[t->depth].t0, clock_ns(),
         t->open[t->depth].arg, 0, 0, 0);
}

void mg_trace_end(void) {
    mg_context *c = mg_ctx();
    if (c->tracing && c->trace->depth > 0) pop(c->trace);
}

void mg_trace_op_begin(const char *who) {
    mg_context *c = mg_ctx();
    if (!c->tracing) return;
    struct mg_trace *t = c->trace;
    close_op(t, 0);
    t->op = who;
    t->op_t0 = t->op_last = clock_ns();
    t->op_flops = t->op_bytes = 0;
}

void mg_trace_op_cost(double flops, double bytes) {
    mg_context *c = mg_ctx();
    if (!c->tracing || !c->trace->op) return;
    c->trace->op_flops += (int64_t)flops;
    c->trace->op_bytes += (int64_t)bytes;
}

void mg_trace_op_end(void) {
    mg_context *c = mg_ctx();
    if (c->tracing) close_op(c->trace, clock_ns());
}

void mg_trace_kernel(const char *name, int64_t t0, int64_t a, int64_t b, int64_t c_) {
    mg_context *c = mg_ctx();
    if (!c->tracing || !t0) return;
    struct mg_trace *t = c->trace;
    int64_t t1 = clock_ns();
    emit(t, MG_TRACE_KERNEL, name, t0, t1, a, b, c_, 0);
    if (t->op) t->op_last = t1;
}

void mg_trace_comm(const char *op, int way, int dim, int peer, int64_t seq, int64_t bytes,
                   int64_t post, int64_t start, int64_t end) {
    mg_context *c = mg_ctx();
    if (!c->tracing) return;
    struct mg_trace *t = c->trace;
    if (post < t->origin) post = t->origin; /* posted before the trace started */
    if (start && start < t->origin) start = t->origin;
    if (way == 0 && start == post) { /* blocking: on the main thread */
        emit(t, MG_TRACE_COMM, op, start, end, dim, seq, bytes, -1);
        if (t->op) t->op_last = end;
        return;
    }
    emit(t, way == 1 ? MG_TRACE_SEND : way == 2 ? MG_TRACE_RECV : MG_TRACE_ASYNC, op, post, end,
         dim, seq, bytes, peer);
    if (start) {
        emit(t, MG_TRACE_WAIT, op, start, end, dim, seq, bytes, peer);
        if (t->op) t->op_last = end;
    }
}

/* ---- JSON ---------------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t n, cap;
    int failed;
} text;

static void add(text *x, const char *fmt, ...) {
    if (x->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(x->s + x->n, x->cap - x->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            x->failed = 1;
            return;
        }
        if ((size_t)k < x->cap - x->n) {
            x->n += (size_t)k;
            return;
        }
        size_t cap = 2 * x->cap + (size_t)k + 4096;
        char *s = realloc(x->s, cap);
        if (!s) {
            x->failed = 1;
            return;
        }
        x->s = s;
        x->cap = cap;
    }
}

/* The flow id of a transfer, the same on both ends (FNV-1a, 53 bits: JSON
 * numbers are doubles). */
static int64_t flow_id(int64_t dim, int64_t from, int64_t to, int64_t seq) {
    uint64_t h = mg_hash_i64(mg_hash_i64(mg_hash_i64(mg_hash_i64(MG_HASH_START, dim), from), to),
                             seq);
    return (int64_t)(h & ((1ULL << 53) - 1));
}

static int lane_first(const void *a, const void *b) {
    const event *x = *(event *const *)a, *y = *(event *const *)b;
    return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

/* Things in flight on lanes 1, 2, ...: each on the first lane free at its start. */
static int assign_lanes(struct mg_trace *t) {
    event **in_flight = malloc((size_t)(t->n + 1) * sizeof *in_flight);
    if (!in_flight) return mg_error(MG_ENOMEM, "trace: out of memory");
    int n = 0;
    for (int i = 0; i < t->n; i++)
        if (t->ev[i].cat == MG_TRACE_ASYNC || t->ev[i].cat == MG_TRACE_SEND ||
            t->ev[i].cat == MG_TRACE_RECV)
            in_flight[n++] = &t->ev[i];
    qsort(in_flight, (size_t)n, sizeof *in_flight, lane_first);
    int64_t free_at[MAX_LANES];
    int used = 0;
    for (int i = 0; i < n; i++) {
        int l = 0;
        while (l < used && free_at[l] > in_flight[i]->t0) l++;
        if (l == MAX_LANES) l = MAX_LANES - 1; /* more at once: they share the last */
        if (l == used) used++;
        free_at[l] = in_flight[i]->t1;
        in_flight[i]->lane = (unsigned char)(l + 1);
    }
    free(in_flight);
    return used;
}

static void span(text *x, const event *e, int rank, int64_t origin) {
    double ts = (double)(e->t0 - origin) / 1e3, dur = (double)(e->t1 - e->t0) / 1e3;
    add(x, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
           "\"dur\":%.3f,\"args\":{",
        e->name, cat_names[e->cat], rank, e->lane, ts, dur);
    switch (e->cat) {
    case MG_TRACE_STEP: add(x, "\"step\":%lld", (long long)e->a); break;
    case MG_TRACE_BACKWARD: add(x, "\"node\":%lld", (long long)e->a); break;
    case MG_TRACE_OP:
        add(x, "\"flops\":%lld,\"bytes\":%lld", (long long)e->a, (long long)e->b);
        break;
    case MG_TRACE_KERNEL:
        add(x, "\"m\":%lld,\"n\":%lld,\"k\":%lld", (long long)e->a, (long long)e->b,
            (long long)e->c);
        break;
    case MG_TRACE_COMM:
    case MG_TRACE_WAIT:
    case MG_TRACE_ASYNC:
    case MG_TRACE_SEND:
    case MG_TRACE_RECV:
        add(x, "\"dim\":%lld,\"seq\":%lld,\"bytes\":%lld", (long long)e->a, (long long)e->b,
            (long long)e->c);
        if (e->d >= 0) add(x, ",\"peer\":%lld", (long long)e->d);
        break;
    default: break;
    }
    add(x, "}}");
    if (e->cat != MG_TRACE_SEND && e->cat != MG_TRACE_RECV) return;
    /* the arrow: from the start of the send to the end of its receive */
    int send = e->cat == MG_TRACE_SEND;
    int64_t id = flow_id(e->a, send ? rank : e->d, send ? e->d : rank, e->b);
    add(x, ",\n{\"name\":\"transfer\",\"cat\":\"flow\",\"ph\":\"%s\",%s\"id\":%lld,\"pid\":%d,"
           "\"tid\":%d,\"ts\":%.3f}",
        send ? "s" : "f", send ? "" : "\"bp\":\"e\",", (long long)id, rank, e->lane,
        send ? ts : ts + dur);
}

int mg_trace_format(int rank, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    struct mg_trace *t = mg_ctx()->trace;
    text x = {0};
    add(&x, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n"
            "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}},\n"
            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":"
            "\"main\"}}",
        rank, rank, rank, rank, rank);
    if (t) {
        while (t->depth > 0) pop(t); /* spans the run left open */
        close_op(t, 0);
        int lanes = assign_lanes(t);
        if (lanes < 0) {
            free(x.s);
            return lanes;
        }
        for (int l = 1; l <= lanes; l++)
            add(&x, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{"
                    "\"name\":\"in flight %d\"}}",
                rank, l, l);
        for (int i = 0; i < t->n; i++) span(&x, &t->ev[i], rank, t->origin);
    }
    if (x.failed) {
        free(x.s);
        return mg_error(MG_ENOMEM, "trace: out of memory formatting the events");
    }
    *out = x.s;
    *len = x.n;
    return MG_OK;
}

void mg_trace_free(void) {
    mg_context *c = mg_ctx();
    c->tracing = 0;
    if (!c->trace) return;
    free(c->trace->ev);
    free(c->trace);
    c->trace = NULL;
}
