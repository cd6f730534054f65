/* trace_dump.c: reads the flight recorder's dumps of a job, one record at a
 * time (see trace_dump.h). Exports mg_trace_job_load, mg_trace_job_free. */
#include "cli/trace_dump.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"
#include "io/files.h"
#include "status.h"
#include "text.h"

#define MAX_DUMP_BYTES ((off_t)4 << 30) /* 2^24 entries (the recorder's most) fit */
#define NO_SEQ INT64_MIN                /* an empty slot of a comm's calls */

/* ---- communicators ------------------------------------------------------------- */

static void describe(comm_t *c) {
    char list[96];
    size_t k = 0;
    list[0] = '\0';
    for (int i = 0; i < c->nranks && k + 16 < sizeof list; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", i ? "," : "", c->ranks[i]);
    if (k + 16 >= sizeof list) snprintf(list + k, sizeof list - k, ",...");
    if (c->dim >= 0)
        snprintf(c->desc, sizeof c->desc, "mesh dim %d (ranks %s)", c->dim, list);
    else if (strcmp(c->name, "MPI_COMM_WORLD") == 0)
        snprintf(c->desc, sizeof c->desc, "the world (ranks %s)", list);
    else if (c->dim == -1)
        snprintf(c->desc, sizeof c->desc, "the whole mesh (ranks %s)", list);
    else {
        char name[sizeof c->name];
        memcpy(name, c->name, sizeof name);
        snprintf(c->desc, sizeof c->desc, "communicator '%.60s' (ranks %s)", name, list);
    }
    if (c->ordinal > 0) {
        size_t n = strlen(c->desc);
        snprintf(c->desc + n, sizeof c->desc - n, " #%d", c->ordinal + 1);
    }
}

/* The global comm of this name, ordinal and members (the list `ranks`, checked
 * to hold numbers), made when `make` and there is none: its index, or -1. */
static int find_comm(job_t *job, const char *name, int ordinal, int dim, const mg_json *ranks,
                     int make) {
    int n = ranks && ranks->type == MG_JSON_ARRAY ? ranks->n : 0;
    char cut[sizeof job->comms[0].name];
    mg_text_safe(name, cut, sizeof cut);
    for (int g = 0; g < job->ncomms; g++) {
        comm_t *k = &job->comms[g];
        if (k->nranks != n || k->ordinal != ordinal || strcmp(k->name, cut) != 0) continue;
        int i = 0;
        for (const mg_json *r = ranks->child; r && r->integer == k->ranks[i]; r = r->next) i++;
        if (i == n) return g;
    }
    if (!make || job->ncomms == MAX_COMMS) return -1;
    comm_t *k = &job->comms[job->ncomms];
    memset(k, 0, sizeof *k);
    if (!(k->ranks = malloc((size_t)(n + 1) * sizeof(int)))) return -1;
    snprintf(k->name, sizeof k->name, "%s", cut);
    k->dim = dim;
    k->nranks = n;
    k->ordinal = ordinal < 0 ? 0 : ordinal; /* for the description */
    k->mismatch = -1;
    int i = 0;
    for (const mg_json *r = ranks ? ranks->child : NULL; r; r = r->next) k->ranks[i++] = (int)r->integer;
    describe(k);
    k->ordinal = ordinal;
    return job->ncomms++;
}

/* The index of world rank r among comm g's members, or -1. */
static int member_index(const job_t *job, int g, int r) {
    const comm_t *c = &job->comms[g];
    for (int i = 0; i < c->nranks; i++)
        if (c->ranks[i] == r) return i;
    return -1;
}

/* The slot of `seq` in c's calls (an empty one where it is not): -1 when no
 * room could be made. */
static int call_slot(comm_t *c, int64_t seq) {
    if (2 * (c->ncalls + 1) > c->cap) { /* at most half full */
        int cap = c->cap ? 2 * c->cap : 64;
        call_t *calls = malloc((size_t)cap * sizeof *calls);
        if (!calls) return -1;
        for (int i = 0; i < cap; i++) calls[i].seq = NO_SEQ;
        for (int i = 0; i < c->cap; i++) {
            if (c->calls[i].seq == NO_SEQ) continue;
            uint64_t h = (uint64_t)c->calls[i].seq * 0x9E3779B97F4A7C15ull;
            int j = (int)(h >> 40) & (cap - 1);
            while (calls[j].seq != NO_SEQ) j = (j + 1) & (cap - 1);
            calls[j] = c->calls[i];
        }
        free(c->calls);
        c->calls = calls;
        c->cap = cap;
    }
    uint64_t h = (uint64_t)seq * 0x9E3779B97F4A7C15ull;
    int j = (int)(h >> 40) & (c->cap - 1);
    while (c->calls[j].seq != NO_SEQ && c->calls[j].seq != seq) j = (j + 1) & (c->cap - 1);
    return j;
}

/* ---- one dump ------------------------------------------------------------------- */

typedef struct {
    job_t *job;
    int pass;         /* 1: the summary; 2: what each member entered at a mismatch */
    const char *path;
    mg_json_reader r;
    dump_t *d;        /* pass 1: the summary being made */
    int rank;         /* -1 until read */
    int *g;           /* the dump's comms: global index (-1: none) */
    int *member;      /* and the dump's rank's place among its members (-1: none) */
    int ncomm, cap;
    int top;          /* the largest rank the dump names */
    int nentries;
    mg_json *waiting_in;
    char why[200];    /* why the dump is damaged */
} loader;

static int damaged(loader *l) {
    return mg_error(MG_EFORMAT, "trace analyze: %s: %s: the dump is damaged (remove it, or "
                    "analyze the others)", l->path, l->why);
}

/* The members of a list `ranks` are world ranks 0..MAX_RANKS-1 (the analysis
 * indexes by them): 0, or -1 with why. */
static int check_members(loader *l, const mg_json *ranks, const char *who) {
    for (const mg_json *r = ranks ? ranks->child : NULL; r; r = r->next) {
        if (r->type != MG_JSON_NUMBER) {
            snprintf(l->why, sizeof l->why, "%s lists a rank that is not a number", who);
            return -1;
        }
        if (r->integer < 0 || r->integer >= MAX_RANKS) {
            snprintf(l->why, sizeof l->why, "%s lists rank %lld, not a rank 0..%d", who,
                     (long long)r->integer, MAX_RANKS - 1);
            return -1;
        }
        if (r->integer > l->top) l->top = (int)r->integer;
    }
    return 0;
}

/* The transfers of comm object c with its members: only those that are not 0. */
static int take_transfers(dcomm_t *dc, const mg_json *c) {
    const mg_json *s = mg_json_get(c, "sends"), *v = mg_json_get(c, "recvs");
    const mg_json *a = s && s->type == MG_JSON_ARRAY ? s->child : NULL;
    const mg_json *b = v && v->type == MG_JSON_ARRAY ? v->child : NULL;
    int n = 0;
    for (const mg_json *x = a, *y = b; x || y; x = x ? x->next : NULL, y = y ? y->next : NULL)
        n += (x && x->integer) || (y && y->integer);
    if (n == 0) return 0;
    dc->member = malloc((size_t)n * sizeof *dc->member);
    dc->sends = malloc((size_t)n * sizeof *dc->sends);
    dc->recvs = malloc((size_t)n * sizeof *dc->recvs);
    if (!dc->member || !dc->sends || !dc->recvs) return -1;
    int i = 0;
    for (const mg_json *x = a, *y = b; x || y; x = x ? x->next : NULL, y = y ? y->next : NULL, i++)
        if ((x && x->integer) || (y && y->integer)) {
            dc->member[dc->nt] = i;
            dc->sends[dc->nt] = x ? x->integer : 0;
            dc->recvs[dc->nt++] = y ? y->integer : 0;
        }
    return 0;
}

/* One element of "comms". */
static int take_comm(loader *l, const mg_json *c) {
    int i = l->ncomm;
    const mg_json *ranks = mg_json_get(c, "ranks");
    if (!ranks || ranks->type != MG_JSON_ARRAY) {
        snprintf(l->why, sizeof l->why, "comm %d has no \"ranks\" list", i);
        return damaged(l);
    }
    if (check_members(l, ranks, "a comm") < 0) return damaged(l);
    if (i == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        int *g = realloc(l->g, (size_t)cap * sizeof *g);
        if (g) l->g = g;
        int *m = realloc(l->member, (size_t)cap * sizeof *m);
        if (m) l->member = m;
        if (!g || !m) return mg_error(MG_ENOMEM, "trace analyze: out of memory");
        l->cap = cap;
        if (l->pass == 1) {
            dcomm_t *dc = realloc(l->d->comms, (size_t)cap * sizeof *dc);
            if (!dc) return mg_error(MG_ENOMEM, "trace analyze: out of memory");
            l->d->comms = dc;
        }
    }
    int g = find_comm(l->job, mg_json_str(c, "name", "?"), (int)mg_json_int(c, "ordinal", 0),
                      (int)mg_json_int(c, "dim", -2), ranks, l->pass == 1);
    l->g[i] = g;
    l->member[i] = g >= 0 ? member_index(l->job, g, l->rank) : -1;
    l->ncomm++;
    if (l->pass != 1) return MG_OK;
    dcomm_t *dc = &l->d->comms[i];
    memset(dc, 0, sizeof *dc);
    dc->g = g;
    dc->seq = mg_json_int(c, "seq", 0);
    l->d->ncomm = l->ncomm;
    if (take_transfers(dc, c) < 0) return mg_error(MG_ENOMEM, "trace analyze: out of memory");
    return MG_OK;
}

/* Pass 1: the collective e of member `m` on comm c against the first seen at
 * its sequence number. */
static int compare_call(comm_t *c, const entry_t *e) {
    if (e->seq == NO_SEQ) return MG_OK;
    int j = call_slot(c, e->seq);
    if (j < 0) return mg_error(MG_ENOMEM, "trace analyze: out of memory");
    call_t *k = &c->calls[j];
    if (k->seq == NO_SEQ) {
        k->seq = e->seq;
        k->bytes = e->bytes;
        memcpy(k->op, e->op, sizeof k->op);
        memcpy(k->dtype, e->dtype, sizeof k->dtype);
        c->ncalls++;
    } else if (strcmp(k->op, e->op) != 0 || k->bytes != e->bytes || strcmp(k->dtype, e->dtype) != 0) {
        if (c->mismatch < 0 || e->seq < c->mismatch) c->mismatch = e->seq;
    }
    return MG_OK;
}

/* One element of "entries". */
static int take_entry(loader *l, const mg_json *x) {
    int i = l->nentries++;
    int64_t peer = mg_json_int(x, "peer", -1);
    if (peer < -1 || peer >= MAX_RANKS) {
        snprintf(l->why, sizeof l->why, "entry %d has peer %lld, not -1 or a rank 0..%d", i,
                 (long long)peer, MAX_RANKS - 1);
        return damaged(l);
    }
    if (peer > l->top) l->top = (int)peer;
    int local = (int)mg_json_int(x, "comm", -1);
    if (local < 0 || local >= l->ncomm || l->g[local] < 0) return MG_OK; /* not described */
    entry_t e = {.comm = l->g[local],
                 .seq = mg_json_int(x, "seq", 0),
                 .bytes = mg_json_int(x, "bytes", 0),
                 .step = mg_json_int(x, "step", -1),
                 .post = mg_json_int(x, "post_ns", 0),
                 .start = mg_json_int(x, "start_ns", 0),
                 .end = mg_json_int(x, "end_ns", 0),
                 .peer = (int)peer};
    mg_text_safe(mg_json_str(x, "op", "?"), e.op, sizeof e.op);
    mg_text_safe(mg_json_str(x, "dtype", "?"), e.dtype, sizeof e.dtype);
    mg_text_safe(mg_json_str(x, "state", "?"), e.state, sizeof e.state);
    int m = l->member[local];
    comm_t *c = &l->job->comms[e.comm];
    if (l->pass == 2) { /* the newest record of a member at the mismatch */
        if (m >= 0 && e.peer < 0 && c->at && e.seq == c->mismatch) {
            c->at[m] = e;
            c->have[m] = 1;
        }
        return MG_OK;
    }
    dump_t *d = l->d;
    d->n++;
    d->last = e;
    if (strcmp(e.state, "started") == 0) { /* the newest one blocking */
        d->waiting = 1;
        d->wait = e;
    }
    return m >= 0 && e.peer < 0 ? compare_call(c, &e) : MG_OK;
}

/* Walks the elements of the array member just entered through `take`. */
static int walk_array(loader *l, int (*take)(loader *l, const mg_json *v)) {
    if (!mg_json_enter(&l->r, '[')) return MG_EFORMAT;
    int more, rc = MG_OK;
    while (rc == MG_OK && (more = mg_json_next(&l->r, NULL, 0)) == 1) {
        mg_json *v = mg_json_read(&l->r);
        if (!v) return MG_EFORMAT;
        rc = take(l, v);
        mg_json_free(v);
    }
    return rc != MG_OK ? rc : more < 0 ? MG_EFORMAT : MG_OK;
}

/* A header member that must come before `what`. */
static int needs_rank(loader *l, const char *what) {
    if (l->rank >= 0) return MG_OK;
    snprintf(l->why, sizeof l->why, "\"%s\" comes before \"rank\"", what);
    return damaged(l);
}

/* The members of the dump's object, in order. */
static int walk_dump(loader *l) {
    char key[64];
    int more, first = 1, rc = MG_OK;
    mg_json_reader *r = &l->r;
    if (!mg_json_enter(r, '{')) return MG_EFORMAT;
    while (rc == MG_OK && (more = mg_json_next(r, key, sizeof key)) == 1) {
        if (first && strcmp(key, "meshgrad_flight") != 0) return MG_EINVAL;
        if (strcmp(key, "comms") == 0) {
            if ((rc = needs_rank(l, key)) == MG_OK) rc = walk_array(l, take_comm);
            continue;
        }
        if (strcmp(key, "entries") == 0) {
            if ((rc = needs_rank(l, key)) == MG_OK) rc = walk_array(l, take_entry);
            continue;
        }
        mg_json *v = mg_json_read(r);
        if (!v) return MG_EFORMAT;
        if (first && !(v->type == MG_JSON_NUMBER && v->integer == 1)) rc = MG_EINVAL;
        first = 0;
        if (strcmp(key, "rank") == 0) {
            int64_t rank = v->type == MG_JSON_NUMBER ? v->integer : -1;
            if (rank < 0 || rank >= MAX_RANKS || (l->pass == 1 && l->job->d[rank]))
                rc = mg_error(MG_EFORMAT, "trace analyze: %s: rank %lld is out of range or "
                              "given twice", l->path, (long long)rank);
            else
                l->rank = (int)rank;
            if (rank > l->top) l->top = (int)rank;
        } else if (l->pass == 1 && strcmp(key, "waiting_in") == 0) {
            if (check_members(l, mg_json_get(v, "ranks"), "waiting_in") < 0) rc = damaged(l);
            mg_json_free(l->waiting_in);
            l->waiting_in = v;
            continue;
        } else if (l->pass == 1 && strcmp(key, "reason") == 0 && v->type == MG_JSON_STRING) {
            mg_text_safe(v->string, l->d->reason, sizeof l->d->reason);
        } else if (l->pass == 1 && strcmp(key, "now_ns") == 0) {
            l->d->now = v->integer;
        } else if (l->pass == 1 && strcmp(key, "step") == 0) {
            l->d->step = v->integer;
        } else if (l->pass == 1 && strcmp(key, "world") == 0 && v->type == MG_JSON_NUMBER) {
            if (v->integer > l->job->world) l->job->world = v->integer < MAX_RANKS ? (int)v->integer : MAX_RANKS;
        }
        mg_json_free(v);
    }
    if (rc != MG_OK) return rc;
    if (more < 0 || !mg_json_finish(r)) return MG_EFORMAT;
    if (first) return MG_EINVAL; /* {} */
    return l->rank >= 0 ? MG_OK : needs_rank(l, "the end");
}

/* The operation the watchdog saw this rank in (the dump's "waiting_in"),
 * when no flight record is started: the rank's wait, on a comm named after
 * the operation with ordinal -1 (no recorded comm matches it). */
static void take_waiting_in(loader *l) {
    dump_t *d = l->d;
    const mg_json *w = l->waiting_in;
    if (!w) return;
    d->has_io = 1;
    mg_text_safe(mg_json_str(w, "op", "?"), d->io_op, sizeof d->io_op);
    d->io_since = mg_json_int(w, "since_ns", d->now);
    const mg_json *ranks = mg_json_get(w, "ranks");
    if (d->waiting || !ranks || ranks->type != MG_JSON_ARRAY || ranks->n == 0) return;
    int g = find_comm(l->job, d->io_op, -1, (int)mg_json_int(w, "dim", -2), ranks, 1);
    if (g < 0) return;
    d->waiting = 1;
    d->wait = (entry_t){.comm = g, .step = d->step, .start = d->io_since, .dtype = "-",
                        .state = "started", .peer = -1, .io = 1};
    snprintf(d->wait.op, sizeof d->wait.op, "%s", l->job->comms[g].name);
}

static void dump_free(dump_t *d) {
    if (!d) return;
    for (int i = 0; i < d->ncomm; i++) {
        free(d->comms[i].member);
        free(d->comms[i].sends);
        free(d->comms[i].recvs);
    }
    free(d->comms);
    free(d);
}

/* Reads DIR/FILE in pass 1 (its summary into job->d) or 2. */
static int load(job_t *job, const char *dir, const char *file, int pass) {
    char path[MG_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd;
    struct stat sb;
    if (mg_file_open_read(path, "flight recorder dump", &fd) != MG_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", mg_last_error());
        return mg_error(MG_EIO, "trace analyze: %s", msg);
    }
    if (fstat(fd, &sb) == 0 && sb.st_size > MAX_DUMP_BYTES) {
        close(fd);
        return mg_error(MG_EIO, "trace analyze: cannot read %s: larger than 4 GiB, more than any "
                        "dump (remove it)", path);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return mg_error(MG_EIO, "trace analyze: cannot read %s: %s", path, strerror(errno));
    }
    loader l = {.job = job, .pass = pass, .path = path, .rank = -1, .top = -1};
    mg_json_reader_init(&l.r, f);
    if (pass == 1 && !(l.d = calloc(1, sizeof *l.d))) {
        fclose(f);
        return mg_error(MG_ENOMEM, "trace analyze: out of memory");
    }
    if (l.d) snprintf(l.d->reason, sizeof l.d->reason, "?"), l.d->step = -1;
    int rc = walk_dump(&l);
    if (rc == MG_EFORMAT && l.r.failed)
        rc = mg_error(MG_EFORMAT, "trace analyze: %s is not a flight recorder dump: %s", path,
                      l.r.err);
    else if (rc == MG_EINVAL)
        rc = mg_error(MG_EFORMAT, "trace analyze: %s is not a flight recorder dump", path);
    if (rc == MG_OK && pass == 1) {
        take_waiting_in(&l);
        l.d->rank = l.rank;
        job->d[l.rank] = l.d;
        l.d = NULL;
        if (l.top + 1 > job->world) job->world = l.top + 1; /* every rank named can be indexed */
    }
    dump_free(l.d);
    mg_json_free(l.waiting_in);
    free(l.g);
    free(l.member);
    mg_json_reader_free(&l.r);
    fclose(f);
    return rc;
}

void mg_trace_job_free(job_t *job) {
    if (!job) return;
    for (int r = 0; r < MAX_RANKS; r++) dump_free(job->d[r]);
    for (int g = 0; g < job->ncomms; g++) {
        free(job->comms[g].ranks);
        free(job->comms[g].calls);
        free(job->comms[g].at);
        free(job->comms[g].have);
    }
    free(job);
}

/* The names DIR holds that are rank-<r>.json, in the order readdir gives. */
static int list_dumps(const char *dir, char (**names)[32], int *n) {
    *names = NULL;
    *n = 0;
    DIR *dp = opendir(dir);
    if (!dp)
        return mg_error(MG_EIO, "trace analyze: cannot open the directory '%s': %s (give the "
                                "--flight-dir of the run, default meshgrad-flight)",
                        dir, strerror(errno));
    int cap = 0, rc = MG_OK;
    struct dirent *de;
    while (rc == MG_OK && (de = readdir(dp))) {
        int r;
        char tail[8], want[32];
        if (sscanf(de->d_name, "rank-%d.jso%1[n]", &r, tail) != 2) continue;
        snprintf(want, sizeof want, "rank-%d.json", r);
        if (strcmp(want, de->d_name) != 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char(*more)[32] = realloc(*names, (size_t)cap * sizeof **names);
            if (!more) {
                rc = mg_error(MG_ENOMEM, "trace analyze: out of memory");
                break;
            }
            *names = more;
        }
        memcpy((*names)[(*n)++], want, sizeof want);
    }
    closedir(dp);
    return rc;
}

int mg_trace_job_load(const char *dir, job_t **out) {
    *out = NULL;
    char(*names)[32];
    int n, rc = list_dumps(dir, &names, &n);
    job_t *job = rc == MG_OK ? calloc(1, sizeof *job) : NULL;
    if (rc == MG_OK && !job) rc = mg_error(MG_ENOMEM, "trace analyze: out of memory");
    for (int i = 0; rc == MG_OK && i < n; i++) rc = load(job, dir, names[i], 1);
    if (rc == MG_OK && !n)
        rc = mg_error(MG_EINVAL, "trace analyze: '%s' holds no flight recorder dump (rank-<r>.json): "
                                 "dumps are written on a collective timeout, a fatal signal, or "
                                 "kill -USR2 of a rank", dir);
    /* a mismatch: what each member entered there, from a second reading */
    int again = 0;
    for (int g = 0; rc == MG_OK && g < job->ncomms; g++) {
        comm_t *c = &job->comms[g];
        if (c->mismatch < 0) continue;
        c->at = calloc((size_t)c->nranks + 1, sizeof *c->at);
        c->have = calloc((size_t)c->nranks + 1, 1);
        if (!c->at || !c->have) rc = mg_error(MG_ENOMEM, "trace analyze: out of memory");
        again = 1;
    }
    for (int i = 0; rc == MG_OK && again && i < n; i++) rc = load(job, dir, names[i], 2);
    free(names);
    if (rc != MG_OK) {
        mg_trace_job_free(job);
        return rc;
    }
    *out = job;
    return MG_OK;
}
