/* safetensors.c: safetensors files read and written (see safetensors.h).
 * Exports mg_st_open, mg_st_find, mg_st_read, mg_st_close, mg_st_write,
 * mg_st_is_ours. */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"

/* What a file meshgrad wrote begins with, after the 8-byte length. */
#define ST_MARK "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"meshgrad\""

/* The dtypes of the format (safetensors' Dtype), with their bytes. */
static const struct {
    const char *name;
    int bytes;
} dtypes[] = {{"F32", 4}, {"BF16", 2}, {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1},
              {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2}, {"I32", 4}, {"U32", 4},
              {"F64", 8}, {"I64", 8}, {"U64", 8}};

/* Reads len bytes at offset; MG_OK or MG_EIO naming the file. */
static int read_at(const mg_st_file *f, void *buf, size_t len, uint64_t offset) {
    char *p = buf;
    while (len > 0) {
        ssize_t got = pread(f->fd, p, len, (off_t)offset);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return mg_error(MG_EIO, "safetensors file %s: cannot read %zu bytes at offset %llu: %s",
                            f->path, len, (unsigned long long)offset,
                            got < 0 ? strerror(errno) : "the file is shorter than it was");
        p += got, len -= (size_t)got, offset += (uint64_t)got;
    }
    return MG_OK;
}

static uint64_t le64(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

/* One tensor's entry of the header into *t: MG_OK or MG_EFORMAT. */
static int parse_tensor(const mg_st_file *f, const mg_json *v, uint64_t data_len, mg_st_tensor *t) {
    const char *name = v->key;
    if (v->type != MG_JSON_OBJECT)
        return mg_error(MG_EFORMAT, "safetensors file %s: the header's entry \"%s\" is not an "
                        "object of dtype, shape and data_offsets", f->path, name);
    const char *dtype = mg_json_str(v, "dtype", NULL);
    const mg_json *shape = mg_json_get(v, "shape"), *off = mg_json_get(v, "data_offsets");
    if (!dtype || !shape || shape->type != MG_JSON_ARRAY || !off || off->type != MG_JSON_ARRAY)
        return mg_error(MG_EFORMAT, "safetensors file %s: tensor \"%s\" lacks a dtype (text), a "
                        "shape or data_offsets (arrays)", f->path, name);
    int d = 0, nd = (int)(sizeof dtypes / sizeof dtypes[0]);
    while (d < nd && strcmp(dtypes[d].name, dtype) != 0) d++;
    if (d == nd)
        return mg_error(MG_EFORMAT, "safetensors file %s: tensor \"%s\" has dtype \"%.32s\", which "
                        "is no safetensors dtype", f->path, name, dtype);
    if (d > 1)
        return mg_error(MG_EFORMAT, "safetensors file %s: tensor \"%s\" is %s: meshgrad reads F32 "
                        "and BF16 tensors (convert the file to one of them)", f->path, name, dtype);
    if (shape->n > MG_ST_MAX_DIMS)
        return mg_error(MG_EFORMAT, "safetensors file %s: tensor \"%s\" has %d dims, more than %d",
                        f->path, name, shape->n, MG_ST_MAX_DIMS);
    t->name = name;
    t->dtype = d == 0 ? MG_ST_F32 : MG_ST_BF16;
    t->ndim = shape->n;
    t->numel = 1;
    int k = 0, overflow = 0;
    for (const mg_json *s = shape->child; s; s = s->next, k++) {
        if (!mg_json_count(s, &t->shape[k]))
            return mg_error(MG_EFORMAT, "safetensors file %s: tensor \"%s\": shape[%d] is not a "
                            "whole number >= 0", f->path, name, k);
        overflow |= __builtin_mul_overflow(t->numel, t->shape[k], &t->numel);
    }
    int64_t bytes = 0, b, e;
    overflow |= __builtin_mul_overflow(t->numel, (int64_t)dtypes[d].bytes, &bytes);
    if (overflow)
        return mg_error(MG_EFORMAT, "safetensors file %s: tensor \"%s\": its shape holds more "
                        "elements than any file", f->path, name);
    if (off->n != 2 || !mg_json_count(off->child, &b) || !mg_json_count(off->child->next, &e) ||
        b > e)
        return mg_error(MG_EFORMAT, "safetensors file %s: tensor \"%s\": data_offsets is not "
                        "[begin, end] with 0 <= begin <= end", f->path, name);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    if (t->end > data_len)
        return mg_error(MG_EFORMAT, "safetensors file %s: tensor \"%s\" ends at byte %llu of the "
                        "data, past its end (%llu bytes): the file is truncated or lies", f->path,
                        name, (unsigned long long)t->end, (unsigned long long)data_len);
    if (t->end - t->begin != (uint64_t)bytes)
        return mg_error(MG_EFORMAT, "safetensors file %s: tensor \"%s\": data_offsets [%llu, %llu) "
                        "hold %llu bytes but its shape and %s need %lld", f->path, name,
                        (unsigned long long)t->begin, (unsigned long long)t->end,
                        (unsigned long long)(t->end - t->begin), dtype, (long long)bytes);
    return MG_OK;
}

static int by_begin(const void *a, const void *b) {
    const mg_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The header's tensors: each parsed, no name twice, no two overlapping. */
static int parse_header(mg_st_file *f, uint64_t data_len) {
    const mg_json *root = f->header;
    if (root->type != MG_JSON_OBJECT)
        return mg_error(MG_EFORMAT, "safetensors file %s: the header is not a JSON object",
                        f->path);
    if (!(f->t = calloc((size_t)root->n + 1, sizeof *f->t)))
        return mg_error(MG_ENOMEM, "safetensors file %s: out of memory for %d tensors", f->path,
                        root->n);
    for (const mg_json *v = root->child; v; v = v->next) {
        for (const mg_json *w = root->child; w != v; w = w->next)
            if (strcmp(w->key, v->key) == 0)
                return mg_error(MG_EFORMAT, "safetensors file %s: the header names \"%s\" twice",
                                f->path, v->key);
        if (strcmp(v->key, "__metadata__") == 0) {
            if (v->type != MG_JSON_OBJECT)
                return mg_error(MG_EFORMAT, "safetensors file %s: __metadata__ is not an object",
                                f->path);
            f->meta = v;
            continue;
        }
        int rc = parse_tensor(f, v, data_len, &f->t[f->n]);
        if (rc != MG_OK) return rc;
        f->n++;
    }
    /* no two tensors share a byte: sorted by begin, each starts at or after
     * the end of the one before (empty tensors share nothing) */
    mg_st_tensor *s = malloc(sizeof *s * ((size_t)f->n + 1));
    if (!s) return mg_error(MG_ENOMEM, "safetensors file %s: out of memory", f->path);
    memcpy(s, f->t, sizeof *s * (size_t)f->n);
    qsort(s, (size_t)f->n, sizeof *s, by_begin);
    int rc = MG_OK;
    for (int i = 1, last = -1; rc == MG_OK && i <= f->n; i++) {
        if (s[i - 1].end > s[i - 1].begin) last = i - 1;
        if (i < f->n && last >= 0 && s[i].begin < s[last].end && s[i].end > s[i].begin)
            rc = mg_error(MG_EFORMAT, "safetensors file %s: tensors \"%s\" [%llu, %llu) and \"%s\" "
                          "[%llu, %llu) overlap", f->path, s[last].name,
                          (unsigned long long)s[last].begin, (unsigned long long)s[last].end,
                          s[i].name, (unsigned long long)s[i].begin, (unsigned long long)s[i].end);
    }
    free(s);
    return rc;
}

int mg_st_open(mg_st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    snprintf(f->path, sizeof f->path, "%s", path);
    struct stat sb;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0 || fstat(f->fd, &sb) != 0) {
        int e = errno;
        mg_st_close(f);
        return mg_error(MG_EIO, "cannot open safetensors file %s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        mg_st_close(f);
        return mg_error(MG_EIO, "safetensors file %s is not a regular file", path);
    }
    f->size = (uint64_t)sb.st_size;
    unsigned char len8[8];
    int rc = f->size < 8 ? mg_error(MG_EFORMAT, "safetensors file %s has %llu bytes: too short "
                                    "for the 8-byte header length it starts with", path,
                                    (unsigned long long)f->size)
                         : read_at(f, len8, 8, 0);
    uint64_t n = rc == MG_OK ? le64(len8) : 0;
    if (rc == MG_OK && n > f->size - 8)
        rc = mg_error(MG_EFORMAT, "safetensors file %s: its header length %llu is past the end of "
                      "the file (%llu bytes): it is truncated or not a safetensors file", path,
                      (unsigned long long)n, (unsigned long long)f->size);
    else if (rc == MG_OK && (n == 0 || n > MG_ST_HEADER_MAX))
        rc = mg_error(MG_EFORMAT, "safetensors file %s: its header length %llu is not from 1 to "
                      "%d bytes: it is not a safetensors file", path, (unsigned long long)n,
                      MG_ST_HEADER_MAX);
    char *text = rc == MG_OK ? malloc(n) : NULL;
    if (rc == MG_OK && !text)
        rc = mg_error(MG_ENOMEM, "safetensors file %s: out of memory for a header of %llu bytes",
                      path, (unsigned long long)n);
    if (rc == MG_OK) rc = read_at(f, text, n, 8);
    if (rc == MG_OK) {
        char err[256];
        if (!(f->header = mg_json_parse(text, n, err, sizeof err)))
            rc = mg_error(MG_EFORMAT, "safetensors file %s: its header is not JSON: %s", path, err);
    }
    free(text);
    f->data_at = 8 + n;
    if (rc == MG_OK) rc = parse_header(f, f->size - f->data_at);
    if (rc != MG_OK) mg_st_close(f);
    return rc;
}

const mg_st_tensor *mg_st_find(const mg_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

int mg_st_read(const mg_st_file *f, const mg_st_tensor *t, float *out) {
    size_t n = (size_t)t->numel, bytes = (size_t)(t->end - t->begin);
    unsigned char *raw = t->dtype == MG_ST_F32 ? (unsigned char *)out : malloc(bytes + 1);
    if (!raw) return mg_error(MG_ENOMEM, "safetensors file %s: out of memory for \"%s\"", f->path,
                              t->name);
    int rc = read_at(f, raw, bytes, f->data_at + t->begin);
    for (size_t i = n; rc == MG_OK && i-- > 0;) { /* backwards: F32 converts in place */
        const unsigned char *b = raw + i * (t->dtype == MG_ST_F32 ? 4 : 2);
        uint32_t bits = t->dtype == MG_ST_F32
                            ? (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                  (uint32_t)b[3] << 24
                            : ((uint32_t)b[0] | (uint32_t)b[1] << 8) << 16;
        memcpy(&out[i], &bits, 4);
    }
    for (size_t i = 0; rc == MG_OK && i < n; i++)
        if (!isfinite(out[i]))
            rc = mg_error(MG_EFORMAT, "safetensors file %s: tensor \"%s\" holds %s at element %zu: "
                          "meshgrad takes finite values only", f->path, t->name,
                          isnan(out[i]) ? "nan" : "an infinity", i);
    if (raw != (unsigned char *)out) free(raw);
    return rc;
}

void mg_st_close(mg_st_file *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    mg_json_free(f->header);
    free(f->t);
    f->header = NULL;
    f->meta = NULL;
    f->t = NULL;
    f->n = 0;
}

/* ---- writing ------------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t len, cap;
    int failed;
} text;

static void put(text *t, const char *s, size_t n) {
    if (t->failed) return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *p = realloc(t->s, cap);
        if (!p) {
            t->failed = 1;
            return;
        }
        t->s = p, t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

static void puts_(text *t, const char *s) { put(t, s, strlen(s)); }

/* s as a JSON string */
static void put_string(text *t, const char *s) {
    puts_(t, "\"");
    for (; *s; s++) {
        char esc[8];
        if (*s == '"' || *s == '\\')
            snprintf(esc, sizeof esc, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned char)*s);
        else
            esc[0] = *s, esc[1] = '\0';
        puts_(t, esc);
    }
    puts_(t, "\"");
}

/* The header: the mark and the metadata, then each tensor; spaces to a
 * multiple of 8 bytes with the length before it, as the format's writer pads. */
static int make_header(text *h, const mg_st_entry *e, int n, const char *const *meta, int nmeta,
                       uint64_t *data_bytes) {
    char buf[64];
    puts_(h, ST_MARK);
    for (int i = 0; i < nmeta; i++) {
        puts_(h, ",");
        put_string(h, meta[2 * i]);
        puts_(h, ":");
        put_string(h, meta[2 * i + 1]);
    }
    puts_(h, "}");
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        puts_(h, ",");
        put_string(h, e[i].name);
        puts_(h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < e[i].ndim; d++) {
            snprintf(buf, sizeof buf, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
            puts_(h, buf);
            numel *= e[i].shape[d];
        }
        snprintf(buf, sizeof buf, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                 (unsigned long long)(at + 4 * (uint64_t)numel));
        puts_(h, buf);
        at += 4 * (uint64_t)numel;
    }
    puts_(h, "}");
    while (!h->failed && (h->len + 8) % 8 != 0) puts_(h, " ");
    *data_bytes = at;
    return h->failed ? mg_error(MG_ENOMEM, "safetensors: out of memory for the header") : MG_OK;
}

/* The values of e as little-endian float32. */
static int write_values(int fd, const mg_st_entry *e) {
    int64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) numel *= e->shape[d];
    return mg_file_write_f32le(fd, e->data, numel);
}

int mg_st_is_ours(const char *path) {
    char head[8 + sizeof ST_MARK];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return 0;
    ssize_t got = read(fd, head, sizeof head - 1);
    close(fd);
    return got == (ssize_t)sizeof head - 1 && memcmp(head + 8, ST_MARK, sizeof ST_MARK - 1) == 0;
}

int mg_st_write(const char *target, const mg_st_entry *e, int n, const char *const *meta,
                int nmeta) {
    int exists;
    int rc = mg_file_replaceable(target, "safetensors file meshgrad wrote", mg_st_is_ours, &exists);
    text h = {0};
    uint64_t data = 0;
    if (rc == MG_OK) rc = make_header(&h, e, n, meta, nmeta, &data);
    mg_tmp_file tmp = {.fd = -1};
    if (rc == MG_OK) rc = mg_tmp_create(&tmp, target);
    if (rc == MG_OK) rc = mg_tmp_reserve(&tmp, target, (int64_t)(8 + h.len + data));
    if (rc == MG_OK) {
        unsigned char len8[8];
        for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)h.len >> (8 * b));
        int bad = mg_file_write_all(tmp.fd, len8, 8) != 0 ||
                  mg_file_write_all(tmp.fd, h.s, h.len) != 0;
        for (int i = 0; !bad && i < n; i++) bad = write_values(tmp.fd, &e[i]) != 0;
        if (bad)
            rc = mg_error(MG_EIO, "cannot write %s: %s", target, strerror(errno ? errno : EIO));
    }
    free(h.s);
    if (rc == MG_OK)
        return mg_tmp_commit(&tmp, target, "safetensors file meshgrad wrote", mg_st_is_ours);
    mg_tmp_discard(&tmp);
    return rc;
}
