/* trace_dump.c: reads the flight recorder's dumps of a job (see
 * trace_dump.h). Exports mg_trace_job_load, mg_trace_job_free. */
#include "cli/trace_dump.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "status.h"

/* ---- reading -------------------------------------------------------------------- */

#define MAX_DUMP_BYTES ((off_t)4 << 30) /* 2^24 entries (the recorder's most) fit */

/* The whole file, or NULL with errno set (EINVAL: not a regular file, EFBIG:
 * larger than any dump: neither is read, a FIFO would block for ever). */
static char *slurp(const char *path, size_t *len) {
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    if (S_ISDIR(st.st_mode)) return errno = EISDIR, NULL;
    if (!S_ISREG(st.st_mode)) return errno = EINVAL, NULL;
    if (st.st_size > MAX_DUMP_BYTES) return errno = EFBIG, NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *more = realloc(buf, cap *= 2);
        if (!more) free(buf);
        buf = more;
    }
    if (ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

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
    else
        snprintf(c->desc, sizeof c->desc, "communicator '%s' (ranks %s)", c->name, list);
    if (c->ordinal > 0) {
        size_t n = strlen(c->desc);
        snprintf(c->desc + n, sizeof c->desc - n, " #%d", c->ordinal + 1);
    }
}

/* The global index of a dump's comm object: the same name, members and ordinal. */
static int global_comm(job_t *job, const mg_json *c) {
    const mg_json *ranks = mg_json_get(c, "ranks");
    const char *name = mg_json_str(c, "name", "?");
    int n = ranks && ranks->type == MG_JSON_ARRAY ? ranks->n : 0;
    int ordinal = (int)mg_json_int(c, "ordinal", 0);
    for (int g = 0; g < job->ncomms; g++) {
        comm_t *k = &job->comms[g];
        if (k->nranks != n || k->ordinal != ordinal || strcmp(k->name, name) != 0) continue;
        int i = 0;
        for (const mg_json *r = ranks->child; r && r->integer == k->ranks[i]; r = r->next) i++;
        if (i == n) return g;
    }
    if (job->ncomms == MAX_COMMS) return -1;
    comm_t *k = &job->comms[job->ncomms];
    k->ranks = malloc((size_t)(n + 1) * sizeof(int));
    if (!k->ranks) return -1;
    k->name = name;
    k->dim = (int)mg_json_int(c, "dim", -2);
    k->nranks = n;
    k->ordinal = ordinal;
    int i = 0;
    for (const mg_json *r = ranks ? ranks->child : NULL; r; r = r->next) k->ranks[i++] = (int)r->integer;
    describe(k);
    return job->ncomms++;
}

/* The comm of an operation the flight recorder does not see (the dump's
 * "waiting_in"): named after the operation, with ordinal -1 so that no
 * recorded comm matches it. */
static int io_comm(job_t *job, const mg_json *w) {
    const mg_json *ranks = mg_json_get(w, "ranks");
    const char *op = mg_json_str(w, "op", "?");
    int n = ranks && ranks->type == MG_JSON_ARRAY ? ranks->n : 0;
    for (int g = 0; g < job->ncomms; g++) {
        comm_t *k = &job->comms[g];
        if (k->ordinal != -1 || k->nranks != n || strcmp(k->name, op) != 0) continue;
        int i = 0;
        for (const mg_json *r = ranks->child; r && r->integer == k->ranks[i]; r = r->next) i++;
        if (i == n) return g;
    }
    if (job->ncomms == MAX_COMMS || n == 0) return -1;
    comm_t *k = &job->comms[job->ncomms];
    if (!(k->ranks = malloc((size_t)n * sizeof(int)))) return -1;
    k->name = op;
    k->dim = (int)mg_json_int(w, "dim", -2);
    k->nranks = n;
    k->ordinal = 0; /* for the description */
    int i = 0;
    for (const mg_json *r = ranks->child; r; r = r->next) k->ranks[i++] = (int)r->integer;
    describe(k);
    k->ordinal = -1;
    return job->ncomms++;
}

/* The ranks a dump names (members of comms and of waiting_in, peers) are world
 * ranks 0..MAX_RANKS-1 (the analysis indexes by them); *top: the largest.
 * 0, or -1 with the problem in why. */
static int check_ranks(const mg_json *root, int *top, char *why, size_t len) {
    const mg_json *comms = mg_json_get(root, "comms"), *entries = mg_json_get(root, "entries");
    const mg_json *w = mg_json_get(root, "waiting_in");
    int i = 0;
    for (const mg_json *c = comms && comms->type == MG_JSON_ARRAY ? comms->child : NULL; c;
         c = c->next, i++) {
        const mg_json *ranks = mg_json_get(c, "ranks");
        if (!ranks || ranks->type != MG_JSON_ARRAY) {
            snprintf(why, len, "comm %d has no \"ranks\" list", i);
            return -1;
        }
    }
    for (int pass = 0; pass < 2; pass++) { /* the members of comms, then of waiting_in */
        const mg_json *list = pass == 0 ? comms : w;
        for (const mg_json *c = list && list->type == MG_JSON_ARRAY ? list->child : list; c;
             c = pass == 0 ? c->next : NULL) {
            const mg_json *ranks = mg_json_get(c, "ranks");
            for (const mg_json *r = ranks && ranks->type == MG_JSON_ARRAY ? ranks->child : NULL; r;
                 r = r->next) {
                if (r->type != MG_JSON_NUMBER || r->integer < 0 || r->integer >= MAX_RANKS) {
                    const char *who = pass == 0 ? "a comm" : "waiting_in";
                    if (r->type != MG_JSON_NUMBER)
                        snprintf(why, len, "%s lists a rank that is not a number", who);
                    else
                        snprintf(why, len, "%s lists rank %lld, not a rank 0..%d", who,
                                 (long long)r->integer, MAX_RANKS - 1);
                    return -1;
                }
                if (r->integer > *top) *top = (int)r->integer;
            }
        }
    }
    i = 0;
    for (const mg_json *x = entries && entries->type == MG_JSON_ARRAY ? entries->child : NULL; x;
         x = x->next, i++) {
        int64_t peer = mg_json_int(x, "peer", -1);
        if (peer < -1 || peer >= MAX_RANKS) {
            snprintf(why, len, "entry %d has peer %lld, not -1 or a rank 0..%d", i,
                     (long long)peer, MAX_RANKS - 1);
            return -1;
        }
        if (peer > *top) *top = (int)peer;
    }
    return 0;
}

static int load(job_t *job, const char *dir, const char *file) {
    char path[4096], err[200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    size_t len = 0;
    char *text = slurp(path, &len);
    if (!text)
        return mg_error(MG_EIO, "trace analyze: cannot read %s: %s", path,
                        errno == EINVAL ? "not a regular file (a dump is a file the recorder "
                                          "writes)"
                        : errno == EFBIG ? "larger than 4 GiB, more than any dump (remove it)"
                                         : strerror(errno));
    mg_json *root = mg_json_parse(text, len, err, sizeof err);
    free(text);
    if (!root || mg_json_int(root, "meshgrad_flight", 0) != 1) {
        mg_json_free(root);
        return mg_error(MG_EFORMAT, "trace analyze: %s is not a flight recorder dump%s%s", path,
                        root ? "" : ": ", root ? "" : err);
    }
    int rank = (int)mg_json_int(root, "rank", -1);
    if (rank < 0 || rank >= MAX_RANKS || job->d[rank]) {
        mg_json_free(root);
        return mg_error(MG_EFORMAT, "trace analyze: %s: rank %d is out of range or given twice",
                        path, rank);
    }
    int top = rank;
    if (check_ranks(root, &top, err, sizeof err) < 0) {
        mg_json_free(root);
        return mg_error(MG_EFORMAT, "trace analyze: %s: %s: the dump is damaged (remove it, or "
                        "analyze the others)", path, err);
    }
    dump_t *d = calloc(1, sizeof *d);
    const mg_json *comms = mg_json_get(root, "comms"), *entries = mg_json_get(root, "entries");
    int nc = comms && comms->type == MG_JSON_ARRAY ? comms->n : 0;
    int ne = entries && entries->type == MG_JSON_ARRAY ? entries->n : 0;
    if (d) {
        d->comm_of = calloc((size_t)nc + 1, sizeof *d->comm_of);
        d->comm_js = calloc((size_t)nc + 1, sizeof *d->comm_js);
        d->e = calloc((size_t)ne + 1, sizeof *d->e);
    }
    if (!d || !d->comm_of || !d->comm_js || !d->e) {
        if (d) free(d->comm_of), free(d->comm_js), free(d->e);
        free(d);
        mg_json_free(root);
        return mg_error(MG_ENOMEM, "trace analyze: out of memory");
    }
    d->root = root;
    d->rank = rank;
    d->reason = mg_json_str(root, "reason", "?");
    d->now = mg_json_int(root, "now_ns", 0);
    d->step = mg_json_int(root, "step", -1);
    d->ncomm = nc;
    d->waiting = -1;
    int i = 0;
    for (const mg_json *c = comms ? comms->child : NULL; c; c = c->next, i++) {
        d->comm_js[i] = c;
        d->comm_of[i] = global_comm(job, c);
    }
    for (const mg_json *x = entries ? entries->child : NULL; x; x = x->next) {
        int local = (int)mg_json_int(x, "comm", -1);
        entry_t *e = &d->e[d->n];
        e->comm = local >= 0 && local < nc ? d->comm_of[local] : -1;
        e->seq = mg_json_int(x, "seq", 0);
        e->bytes = mg_json_int(x, "bytes", 0);
        e->step = mg_json_int(x, "step", -1);
        e->post = mg_json_int(x, "post_ns", 0);
        e->start = mg_json_int(x, "start_ns", 0);
        e->end = mg_json_int(x, "end_ns", 0);
        e->op = mg_json_str(x, "op", "?");
        e->dtype = mg_json_str(x, "dtype", "?");
        e->state = mg_json_str(x, "state", "?");
        e->peer = (int)mg_json_int(x, "peer", -1);
        if (e->comm < 0) continue; /* a comm this dump does not describe */
        if (strcmp(e->state, "started") == 0) d->waiting = d->n; /* the newest one blocking */
        d->n++;
    }
    const mg_json *w = mg_json_get(root, "waiting_in");
    int g = w && d->waiting < 0 ? io_comm(job, w) : -1;
    if (g >= 0) { /* blocked in something the recorder does not see */
        entry_t *e = &d->e[d->n];
        *e = (entry_t){.comm = g, .step = d->step, .start = mg_json_int(w, "since_ns", d->now),
                       .op = job->comms[g].name, .dtype = "-", .state = "started", .peer = -1,
                       .io = 1};
        d->waiting = d->n++;
    }
    job->d[rank] = d;
    int world = (int)mg_json_int(root, "world", 0);
    if (world > job->world) job->world = world < MAX_RANKS ? world : MAX_RANKS;
    if (top + 1 > job->world) job->world = top + 1; /* every rank named can be indexed */
    return MG_OK;
}

void mg_trace_job_free(job_t *job) {
    if (!job) return;
    for (int r = 0; r < MAX_RANKS; r++) {
        dump_t *d = job->d[r];
        if (!d) continue;
        mg_json_free(d->root);
        free(d->comm_of);
        free(d->comm_js);
        free(d->e);
        free(d);
    }
    for (int g = 0; g < job->ncomms; g++) free(job->comms[g].ranks);
    free(job);
}

int mg_trace_job_load(const char *dir, job_t **out) {
    *out = NULL;
    DIR *dp = opendir(dir);
    if (!dp)
        return mg_error(MG_EIO, "trace analyze: cannot open the directory '%s': %s (give the "
                                "--flight-dir of the run, default meshgrad-flight)",
                        dir, strerror(errno));
    job_t *job = calloc(1, sizeof *job);
    int rc = job ? MG_OK : mg_error(MG_ENOMEM, "trace analyze: out of memory"), found = 0;
    struct dirent *de;
    while (rc == MG_OK && (de = readdir(dp))) {
        int r;
        char tail[8];
        if (sscanf(de->d_name, "rank-%d.jso%1[n]", &r, tail) != 2) continue;
        char want[64];
        snprintf(want, sizeof want, "rank-%d.json", r);
        if (strcmp(want, de->d_name) != 0) continue;
        rc = load(job, dir, de->d_name);
        found++;
    }
    closedir(dp);
    if (rc == MG_OK && !found)
        rc = mg_error(MG_EINVAL, "trace analyze: '%s' holds no flight recorder dump (rank-<r>.json): "
                                 "dumps are written on a collective timeout, a fatal signal, or "
                                 "kill -USR2 of a rank", dir);
    if (rc != MG_OK) {
        if (job) mg_trace_job_free(job);
        return rc;
    }
    *out = job;
    return MG_OK;
}

