/* trace.c: `meshgrad trace analyze DIR`: reads the flight recorder's dumps
 * (DIR/rank-<r>.json, dist/flight.h) and says in one paragraph what the job
 * was doing: a collective mismatch (ranks that entered different ops, sizes
 * or types at one sequence number of one communicator), which rank is behind
 * (one that the others wait for and that waits for nobody: not in a
 * collective, stuck elsewhere, or gone without a dump, as a stopped or killed
 * rank is), on which op and sequence number, and what each waiting rank waits
 * in. The dumps are read by trace_dump.c.
 * Exports mg_cli_trace (cli.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/trace_dump.h"
#include "status.h"

static const char usage_text[] =
    "usage: meshgrad trace analyze DIR\n\n"
    "Reads the flight recorder's dumps DIR/rank-<r>.json (written on a collective\n"
    "timeout, a fatal signal, or kill -USR2 of a rank; --flight-dir of train and\n"
    "bench, default meshgrad-flight/) and says which rank is behind, on which op\n"
    "and sequence number, what the others wait in, and any collective mismatch.\n";

/* ---- what each rank has done on a comm -------------------------------------------- */

/* Where the dump stands on global comm g, or NULL (it never used it). */
static const dcomm_t *dcomm(const dump_t *d, int g) {
    for (int i = 0; i < d->ncomm; i++)
        if (d->comms[i].g == g) return &d->comms[i];
    return NULL;
}

/* Collectives rank d posted on g (0 when it never used g). */
static int64_t posted(const dump_t *d, int g) {
    const dcomm_t *c = dcomm(d, g);
    return c ? c->seq : 0;
}

/* Transfers d made on g to (sends 1) or from (0) world rank `other`. */
static int64_t transfers(const job_t *job, const dump_t *d, int g, int sends, int other) {
    const dcomm_t *dc = dcomm(d, g);
    const comm_t *c = &job->comms[g];
    int i = 0;
    while (i < c->nranks && c->ranks[i] != other) i++;
    for (int k = 0; dc && i < c->nranks && k < dc->nt; k++)
        if (dc->member[k] == i) return sends ? dc->sends[k] : dc->recvs[k];
    return 0;
}

/* What rank d waits in, or NULL (no dump, or it waits in nothing). */
static const entry_t *wait_of(const dump_t *d) { return d && d->waiting ? &d->wait : NULL; }

/* "all_reduce #42 on mesh dim 0 (ranks 0,1)" or "recv #3 from rank 2 on ..." */
static void what(char *buf, size_t len, const job_t *job, const entry_t *e) {
    if (e->io)
        snprintf(buf, len, "%s on %s", e->op, job->comms[e->comm].desc);
    else if (e->peer >= 0)
        snprintf(buf, len, "%s #%lld %s rank %d on %s", e->op, (long long)e->seq,
                 strcmp(e->op, "send") == 0 ? "to" : "from", e->peer, job->comms[e->comm].desc);
    else
        snprintf(buf, len, "%s #%lld on %s", e->op, (long long)e->seq, job->comms[e->comm].desc);
}

/* The ranks that waiting entry e of rank w waits for: blockers[r] = 1. */
static void blockers_of(const job_t *job, int w, const entry_t *e, char *blockers) {
    const comm_t *c = &job->comms[e->comm];
    if (e->io) { /* members not in it too (no sequence numbers to say more) */
        for (int i = 0; i < c->nranks; i++) {
            int m = c->ranks[i];
            if (m == w || m < 0 || m >= job->world) continue;
            const entry_t *o = wait_of(job->d[m]);
            if (!o || !o->io || o->comm != e->comm) blockers[m] = 1;
        }
        return;
    }
    if (e->peer >= 0) { /* a transfer: the peer has not made its side yet */
        const dump_t *p = e->peer < job->world ? job->d[e->peer] : NULL;
        int send = strcmp(e->op, "send") == 0;
        if (e->peer != w &&
            (!p || transfers(job, p, e->comm, !send, w) < e->seq))
            blockers[e->peer] = 1;
        return;
    }
    for (int i = 0; i < c->nranks; i++) {
        int m = c->ranks[i];
        if (m == w || m < 0 || m >= job->world) continue;
        const dump_t *d = job->d[m];
        if (!d || posted(d, e->comm) < e->seq) blockers[m] = 1;
    }
}

/* ---- the paragraph ---------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t n, cap;
} para;

static void say(para *p, const char *fmt, ...) MG_PRINTF(2, 3);
static void say(para *p, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k >= sizeof buf) k = (int)sizeof buf - 1;
    if (p->n + (size_t)k + 1 > p->cap) {
        size_t cap = 2 * p->cap + (size_t)k + 256;
        char *s = realloc(p->s, cap);
        if (!s) return;
        p->s = s;
        p->cap = cap;
    }
    memcpy(p->s + p->n, buf, (size_t)k + 1);
    p->n += (size_t)k;
}

/* "0,2,3" of the ranks whose flag is set; returns how many. */
static int list_ranks(char *buf, size_t len, const char *flags, int n) {
    int k = 0;
    size_t used = 0;
    buf[0] = '\0';
    for (int r = 0; r < n; r++) {
        if (!flags[r]) continue;
        if (used + 16 < len) used += (size_t)snprintf(buf + used, len - used, "%s%d", k ? "," : "", r);
        k++;
    }
    return k;
}

static int same_call(const entry_t *a, const entry_t *b) {
    return strcmp(a->op, b->op) == 0 && a->bytes == b->bytes && strcmp(a->dtype, b->dtype) == 0;
}

/* The lowest sequence number of comm g at which its members' collectives
 * differ in op, size or type (-1: none), as the reading found it. */
static int64_t first_mismatch(const job_t *job, int g) { return job->comms[g].mismatch; }

/* Every mismatch, one sentence each: the members grouped by what they entered
 * at that sequence number, the smaller group (the odd ones out) first. */
static int mismatches(const job_t *job, para *p) {
    int found = 0;
    char *group = calloc((size_t)job->world + 1, 1), list[256];
    for (int g = 0; group && g < job->ncomms; g++) {
        int64_t seq = first_mismatch(job, g);
        if (seq < 0) continue;
        found++;
        const comm_t *c = &job->comms[g];
        const entry_t *kinds[8];
        int counts[8], nk = 0;
        for (int i = 0; i < c->nranks; i++) { /* the different calls, and how many made each */
            const entry_t *e = c->have && c->have[i] ? &c->at[i] : NULL;
            if (!e) continue;
            int k = 0;
            while (k < nk && !same_call(kinds[k], e)) k++;
            if (k == nk && nk == 8) continue;
            if (k == nk) counts[nk] = 0, kinds[nk++] = e;
            counts[k]++;
        }
        say(p, "Collective mismatch on %s at sequence number %lld:", c->desc, (long long)seq);
        for (int pass = 0; pass < nk; pass++) { /* fewest first */
            int k = 0;
            for (int j = 1; j < nk; j++)
                if (counts[j] >= 0 && (counts[k] < 0 || counts[j] < counts[k])) k = j;
            memset(group, 0, (size_t)job->world);
            for (int i = 0; i < c->nranks; i++) {
                const entry_t *e = c->have && c->have[i] ? &c->at[i] : NULL;
                if (e && same_call(e, kinds[k])) group[c->ranks[i]] = 1;
            }
            int n = list_ranks(list, sizeof list, group, job->world);
            say(p, "%s rank%s %s entered %s (%lld bytes of %s, step %lld)",
                pass == 0 ? "" : pass == 1 ? " where" : " and", n == 1 ? "" : "s", list,
                kinds[k]->op, (long long)kinds[k]->bytes, kinds[k]->dtype,
                (long long)kinds[k]->step);
            counts[k] = -1;
        }
        say(p, ". ");
    }
    free(group);
    return found;
}

/* Where rank r stands, for "Rank r is behind: ...". */
static void state_of(const job_t *job, int r, char *buf, size_t len) {
    const dump_t *d = job->d[r];
    char op[256];
    if (!d) {
        snprintf(buf, len, "it left no dump (a stopped, killed or hung process cannot write one)");
        return;
    }
    if (d->waiting) {
        const entry_t *e = &d->wait;
        what(op, sizeof op, job, e);
        snprintf(buf, len, "it waits in %s (step %lld, for %.1f s)", op, (long long)e->step,
                 (double)(d->now - e->start) * 1e-9);
        return;
    }
    if (d->has_io) {
        snprintf(buf, len, "it is in %s, not a collective of the comm layer (step %lld, for %.1f s)",
                 d->io_op, (long long)d->step, (double)(d->now - d->io_since) * 1e-9);
        return;
    }
    if (d->n == 0) {
        snprintf(buf, len, "it has made no collective yet (step %lld)", (long long)d->step);
        return;
    }
    const entry_t *last = &d->last;
    what(op, sizeof op, job, last);
    snprintf(buf, len, "it is in no collective (computing, or blocked elsewhere) at step %lld; its "
                       "last was %s (%s, %.1f s before its dump)",
             (long long)d->step, op, last->state,
             (double)(d->now - (last->end ? last->end : last->post)) * 1e-9);
}

/* Two waiting ranks wait in one collective or transfer (of one step). */
static int same_wait(const entry_t *a, const entry_t *b) {
    return a->comm == b->comm && a->seq == b->seq && a->peer == b->peer && a->step == b->step &&
           same_call(a, b);
}

/* "Ranks 0,1,3 wait for it in ..." for the ranks that wait for m (flags
 * blk[w * W + m]), those waiting in one thing together. */
static void waiters(const job_t *job, para *p, const char *blk, int m) {
    int W = job->world;
    char *done = calloc((unsigned)W, 1), *group = calloc((unsigned)W, 1), op[256], list[256];
    for (int w = 0; done && group && w < W; w++) {
        if (!blk[(size_t)w * W + m] || done[w]) continue;
        const entry_t *e = &job->d[w]->wait;
        double longest = 0;
        memset(group, 0, (unsigned)W);
        for (int v = w; v < W; v++) {
            if (!blk[(size_t)v * W + m] || done[v]) continue;
            const dump_t *d = job->d[v];
            if (!same_wait(&d->wait, e)) continue;
            done[v] = group[v] = 1;
            double s = (double)(d->now - d->wait.start) * 1e-9;
            longest = s > longest ? s : longest;
        }
        int n = list_ranks(list, sizeof list, group, W);
        what(op, sizeof op, job, e);
        say(p, "Rank%s %s wait%s for it in %s (", n == 1 ? "" : "s", list, n == 1 ? "s" : "", op);
        if (!e->io) say(p, "%lld bytes of %s, ", (long long)e->bytes, e->dtype);
        say(p, "step %lld, for %.1f s)", (long long)e->step, longest);
        if (e->peer < 0 && !e->io && job->d[m])
            say(p, ", where rank %d has posted %lld", m, (long long)posted(job->d[m], e->comm));
        say(p, ". ");
    }
    free(done);
    free(group);
}

/* The largest step of the things the ranks waiting for m wait in. */
static int64_t waited_step(const job_t *job, const char *blk, int m) {
    int64_t most = -1;
    for (int w = 0; w < job->world; w++)
        if (blk[(size_t)w * job->world + m]) {
            const dump_t *d = job->d[w];
            if (d->wait.step > most) most = d->wait.step;
        }
    return most;
}

/* What rank r's dump waits in, or NULL (no dump, or it waits in nothing). */
static const entry_t *waiting_entry(const job_t *job, int r) { return wait_of(job->d[r]); }

/* Who waits for whom, and what the paragraph has said: blk[w * W + m] = 1
 * when waiting rank w waits for rank m; waited[m] counts the ranks that wait
 * for m, blocked[w] the ranks w waits for; said[w] = 1 once the paragraph
 * says what w waits in. */
typedef struct {
    const job_t *job;
    para *p;
    char *blk;
    int *waited, *blocked;
    char *said;
} waits_t;

/* Fills blk for every waiting rank; returns how many ranks wait. */
static int find_blockers(const job_t *job, char *blk) {
    int W = job->world, nwait = 0;
    for (int w = 0; w < W; w++) {
        const entry_t *e = waiting_entry(job, w);
        if (!e) continue;
        nwait++;
        blockers_of(job, w, e, blk + (size_t)w * W);
    }
    return nwait;
}

/* The ranks waited for that wait for nobody: "Rank m is behind" (or out of
 * step, when it is past the step they wait in), and who waits for it in
 * what. Returns how many. */
static int say_behind(waits_t *g) {
    const job_t *job = g->job;
    int W = job->world, behind = 0;
    char buf[512];
    for (int m = 0; m < W; m++) {
        if (!g->waited[m] || g->blocked[m]) continue;
        behind++;
        state_of(job, m, buf, sizeof buf);
        int64_t theirs = waited_step(job, g->blk, m);
        if (job->d[m] && theirs >= 0 && job->d[m]->step > theirs)
            say(g->p, "Rank %d is out of step with the others: it is at step %lld, past step %lld "
                      "of the collective they wait in, which it has not entered: it skipped a "
                      "collective or took them in another order (a collective mismatch); now %s. ",
                m, (long long)job->d[m]->step, (long long)theirs, buf);
        else
            say(g->p, "Rank %d is behind: %s. ", m, buf);
        waiters(job, g->p, g->blk, m);
        for (int w = 0; w < W; w++) g->said[w] |= g->blk[(size_t)w * W + m];
    }
    return behind;
}

/* The rank the most wait for (of them, the one at the latest step), or -1. */
static int most_waited(const waits_t *g) {
    int best = -1;
    for (int m = 0; m < g->job->world; m++) {
        if (!g->waited[m]) continue;
        const entry_t *e = waiting_entry(g->job, m);
        const entry_t *b = best >= 0 ? waiting_entry(g->job, best) : NULL;
        int64_t step = e ? e->step : -1, best_step = b ? b->step : -1;
        if (best < 0 || g->waited[m] > g->waited[best] ||
            (g->waited[m] == g->waited[best] && step > best_step))
            best = m;
    }
    return best;
}

/* Every waiting rank waits for another that waits (a circle): the rank the
 * most wait for went its own way, when one stands out; else the circle is
 * named. */
static void say_circle(waits_t *g) {
    const job_t *job = g->job;
    int W = job->world, best = most_waited(g), unique = best >= 0;
    const entry_t *b = best >= 0 ? waiting_entry(job, best) : NULL;
    for (int m = 0; m < W && best >= 0; m++) {
        const entry_t *e = waiting_entry(job, m);
        if (m != best && g->waited[m] == g->waited[best] && e && e->step == b->step) unique = 0;
    }
    char buf[512], op[256];
    if (unique) {
        what(op, sizeof op, job, b);
        say(g->p, "Rank %d is out of step with the others: it went on to %s (step %lld), which "
                  "they have not reached, without entering the collective they wait in: it "
                  "skipped a collective or took them in another order (a collective mismatch). ",
            best, op, (long long)b->step);
        waiters(job, g->p, g->blk, best);
        g->said[best] = 1;
        for (int w = 0; w < W; w++) g->said[w] |= g->blk[(size_t)w * W + best];
    } else if (best >= 0) {
        for (int m = 0; m < W; m++) buf[m < (int)sizeof buf ? m : 0] = g->blocked[m] > 0;
        list_ranks(op, sizeof op, buf, W < (int)sizeof buf ? W : (int)sizeof buf);
        say(g->p, "Ranks %s wait for one another, each in a collective another has not entered: "
                  "one of them skipped a collective or took them in another order (a collective "
                  "mismatch; with more ranks, the odd one out is named). ", op);
    }
}

/* Waiting rank w, which waits in e for ranks that wait. */
static void say_chained(waits_t *g, int w, const entry_t *e) {
    int W = g->job->world;
    char buf[512], op[256];
    g->said[w] = 1;
    what(op, sizeof op, g->job, e);
    list_ranks(buf, sizeof buf, g->blk + (size_t)w * W, W);
    say(g->p, "Rank %d waits in %s (step %lld) for rank%s %s. ", w, op, (long long)e->step,
        strchr(buf, ',') ? "s" : "", buf);
}

/* Waiting rank w, in e, a collective every member has reached, with the
 * ranks waiting in the same one. */
static void say_reached(waits_t *g, int w, const entry_t *e) {
    const job_t *job = g->job;
    int W = job->world;
    const comm_t *c = &job->comms[e->comm];
    char *group = g->blk + (size_t)w * W; /* no blockers: its row is free to use */
    group[w] = 1; /* w itself, even when its dump leaves it out of the members */
    int together = e->peer < 0;
    for (int i = 0; i < c->nranks; i++) {
        int m = c->ranks[i];
        const entry_t *o = m >= 0 && m < W && !g->said[m] ? waiting_entry(job, m) : NULL;
        int in = o && same_wait(o, e);
        if (in) group[m] = 1;
        together &= in;
    }
    for (int m = 0; m < W; m++) g->said[m] |= group[m];
    char buf[512], op[256];
    int n = list_ranks(buf, sizeof buf, group, W);
    what(op, sizeof op, job, e);
    if (together)
        say(g->p, "Ranks %s are all in %s (step %lld): it was in progress when the dumps were "
                  "taken; nobody is behind there. ", buf, op, (long long)e->step);
    else
        say(g->p, "Rank%s %s wait%s in %s (step %lld), which every member has reached%s. ",
            n == 1 ? "" : "s", buf, n == 1 ? "s" : "", op, (long long)e->step,
            e->peer < 0 && first_mismatch(job, e->comm) >= 0 ? ", some with another call "
                                                               "(the mismatch above)" : "");
}

/* say_one(g, w, e) for each waiting rank w not said yet (blocked: only those
 * that wait for a rank), in rank order, e what w waits in. */
static void say_rest(waits_t *g, int blocked,
                     void (*say_one)(waits_t *g, int w, const entry_t *e)) {
    for (int w = 0; w < g->job->world; w++) {
        const entry_t *e = waiting_entry(g->job, w);
        if (e && !g->said[w] && (!blocked || g->blocked[w])) say_one(g, w, e);
    }
}

/* The paragraph about ranks blocked in collectives: who is behind (waited for,
 * waiting for nobody), who is out of step (waited for by the most ranks in a
 * circle of waits: it skipped or reordered a collective), and what every
 * waiting rank waits in. Returns how many ranks wait. */
static int waits(const job_t *job, para *p, char *blk) {
    int W = job->world, nwait = find_blockers(job, blk);
    size_t nw = (unsigned)W;
    waits_t g = {job, p, blk, calloc(nw, sizeof(int)), calloc(nw, sizeof(int)), calloc(nw, 1)};
    if (g.waited && g.blocked && g.said) {
        for (int w = 0; w < W; w++)
            for (int m = 0; m < W; m++)
                if (blk[(size_t)w * W + m]) g.waited[m]++, g.blocked[w]++;
        if (!say_behind(&g)) say_circle(&g);
        say_rest(&g, 1, say_chained);
        say_rest(&g, 0, say_reached);
    }
    free(g.waited), free(g.blocked), free(g.said);
    return nwait;
}

/* " 0, 2, 3": the ranks that left a dump (have 1) or none (have 0); returns how many. */
static int say_ranks(para *p, const job_t *job, int have) {
    int n = 0;
    for (int r = 0; r < job->world; r++)
        if (!job->d[r] == !have) say(p, "%s %d", n++ ? "," : "", r);
    return n;
}

static int analyze(job_t *job, const char *dir) {
    para p = {0};
    int W = job->world;
    char *blk = calloc((size_t)W * (size_t)W + 1, 1);
    if (!blk) return mg_error(MG_ENOMEM, "trace analyze: out of memory");
    say(&p, "%s: dumps of rank", dir);
    int have = say_ranks(&p, job, 1);
    say(&p, " of %d", W);
    if (have < W) {
        say(&p, " (none of rank");
        say_ranks(&p, job, 0);
        say(&p, ")");
    }
    for (int r = 0; r < W; r++)
        if (job->d[r]) {
            say(&p, ", written on %s", job->d[r]->reason);
            break;
        }
    say(&p, ".\n");
    int nm = mismatches(job, &p), nw = waits(job, &p, blk);
    if (!nm && !nw) {
        say(&p, "No rank is blocked in a collective or a transfer: ");
        char buf[512];
        for (int r = 0; r < W; r++) {
            state_of(job, r, buf, sizeof buf);
            say(&p, "rank %d: %s%s", r, buf, r + 1 < W ? "; " : ".");
        }
    }
    printf("%s\n", p.s ? p.s : "");
    free(p.s);
    free(blk);
    return MG_OK;
}

static int trace_analyze(const char *dir) {
    job_t *job;
    int rc = mg_trace_job_load(dir, &job);
    if (rc == MG_OK) rc = analyze(job, dir);
    mg_trace_job_free(job);
    return rc;
}

int mg_cli_trace(int argc, char **argv) {
    const char *last = argc >= 2 ? argv[argc - 1] : "";
    if (argc >= 2 && argc <= 3 && (strcmp(last, "--help") == 0 || strcmp(last, "-h") == 0)) {
        if (mg_rank() == 0) printf("%s", usage_text);
        return 0;
    }
    if (argc != 3 || strcmp(argv[1], "analyze") != 0) {
        if (mg_rank() == 0) fprintf(stderr, "%s", usage_text);
        mg_error(MG_EINVAL, "trace: give 'analyze DIR'");
        return 2;
    }
    if (mg_rank() != 0) return 0; /* one reader is enough */
    return trace_analyze(argv[2]) == MG_OK ? 0 : 1;
}
