/* llama2c.c: llama2.c's version-0 model file read and written (see
 * llama2c.h). Exports mg_l2c_floats, mg_l2c_header_check, mg_l2c_open,
 * mg_l2c_read, mg_l2c_close, mg_l2c_is_one, mg_l2c_write. */
#include "io/llama2c.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"

int64_t mg_l2c_floats(const mg_l2c_header *h) {
    int64_t C = h->dim, F = h->hidden, L = h->layers, D = h->heads ? C / h->heads : 0;
    int64_t kv = h->kv_heads * D, per = 0, t, total = 0;
    /* per layer: two norms, wq, wk, wv, wo, w1, w2, w3 */
    int bad = __builtin_mul_overflow(C, 2 * C + 2 * kv + 2, &per);
    bad |= __builtin_mul_overflow(C, F, &t) || __builtin_mul_overflow(t, (int64_t)3, &t) ||
           __builtin_add_overflow(per, t, &per);
    bad |= __builtin_mul_overflow(per, L, &total);
    /* embedding and classifier, final norm, freq_cis */
    bad |= __builtin_mul_overflow(h->vocab, C, &t) ||
           __builtin_mul_overflow(t, (int64_t)(h->shared ? 1 : 2), &t) ||
           __builtin_add_overflow(total, t, &total);
    bad |= __builtin_mul_overflow(h->seq_len, D, &t) || __builtin_add_overflow(total, t, &total) ||
           __builtin_add_overflow(total, C, &total);
    return bad || total > INT64_MAX / 4 - MG_L2C_HEADER_BYTES ? -1 : total;
}

int mg_l2c_header_check(const mg_l2c_header *h, const char *path) {
    const struct {
        const char *name;
        int64_t v;
    } s[] = {{"dim", h->dim},       {"hidden_dim", h->hidden},     {"n_layers", h->layers},
             {"n_heads", h->heads}, {"n_kv_heads", h->kv_heads},  {"vocab_size", h->vocab},
             {"max_seq_len", h->seq_len}};
    for (int i = 0; i < 7; i++)
        if (s[i].v < 1)
            return mg_error(MG_EFORMAT, "llama2.c file %s: %s is %lld in its header, not a size: "
                            "the file is not a llama2.c (version 0) model", path, s[i].name,
                            (long long)(i == 5 && !h->shared ? -s[i].v : s[i].v));
    if (h->dim % h->heads != 0 || (h->dim / h->heads) % 2 != 0)
        return mg_error(MG_EFORMAT, "llama2.c file %s: n_heads %lld does not divide dim %lld into "
                        "heads of an even size (RoPE rotates pairs)", path, (long long)h->heads,
                        (long long)h->dim);
    if (h->heads % h->kv_heads != 0)
        return mg_error(MG_EFORMAT, "llama2.c file %s: n_kv_heads %lld does not divide n_heads "
                        "%lld", path, (long long)h->kv_heads, (long long)h->heads);
    return MG_OK;
}

static uint32_t le32(const unsigned char *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* The header of the file open at fd (size bytes) into *h, checked against
 * the length. */
static int read_header(int fd, uint64_t size, const char *path, mg_l2c_header *h) {
    unsigned char b[MG_L2C_HEADER_BYTES];
    if (size < MG_L2C_HEADER_BYTES || pread(fd, b, sizeof b, 0) != (ssize_t)sizeof b)
        return mg_error(MG_EFORMAT, "llama2.c file %s has %llu bytes: too short for the 7-int "
                        "header", path, (unsigned long long)size);
    int32_t v[7];
    for (int i = 0; i < 7; i++) {
        uint32_t u = le32(b + 4 * i);
        memcpy(&v[i], &u, 4);
    }
    *h = (mg_l2c_header){v[0], v[1], v[2], v[3], v[4], v[5] < 0 ? -(int64_t)v[5] : v[5], v[6],
                         v[5] > 0};
    int rc = mg_l2c_header_check(h, path);
    if (rc != MG_OK) return rc;
    int64_t floats = mg_l2c_floats(h);
    if (floats < 0 || (uint64_t)floats * 4 + MG_L2C_HEADER_BYTES != size)
        return mg_error(MG_EFORMAT, "llama2.c file %s has %llu bytes but its header (dim %lld, "
                        "hidden %lld, %lld layers, %lld heads, %lld kv heads, vocab %lld%s, "
                        "seq_len %lld) asks for %s%lld: the file is truncated or not a llama2.c "
                        "(version 0) model", path, (unsigned long long)size, (long long)h->dim,
                        (long long)h->hidden, (long long)h->layers, (long long)h->heads,
                        (long long)h->kv_heads, (long long)h->vocab,
                        h->shared ? "" : " untied", (long long)h->seq_len,
                        floats < 0 ? "more than " : "",
                        floats < 0 ? (long long)INT64_MAX : (long long)(floats * 4 + 28));
    return MG_OK;
}

int mg_l2c_open(mg_l2c_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    struct stat sb;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = MG_OK;
    if (f->fd < 0 || fstat(f->fd, &sb) != 0)
        rc = mg_error(MG_EIO, "cannot open llama2.c file %s: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        rc = mg_error(MG_EIO, "llama2.c file %s is not a regular file", path);
    if (rc == MG_OK) {
        f->size = (uint64_t)sb.st_size;
        rc = read_header(f->fd, f->size, path, &f->h);
    }
    if (rc != MG_OK) mg_l2c_close(f);
    return rc;
}

int mg_l2c_read(const mg_l2c_file *f, int64_t at, int64_t n, float *out) {
    int64_t floats = (int64_t)(f->size - MG_L2C_HEADER_BYTES) / 4;
    if (at < 0 || n < 0 || at > floats || n > floats - at)
        return mg_error(MG_EFORMAT, "llama2.c file %s: floats [%lld, %lld) are past its end",
                        f->path, (long long)at, (long long)(at + n));
    unsigned char *p = (unsigned char *)out;
    size_t len = (size_t)n * 4;
    off_t off = MG_L2C_HEADER_BYTES + (off_t)at * 4;
    while (len > 0) {
        ssize_t got = pread(f->fd, p, len, off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return mg_error(MG_EIO, "llama2.c file %s: cannot read it: %s", f->path,
                            got < 0 ? strerror(errno) : "it is shorter than it was");
        p += got, len -= (size_t)got, off += got;
    }
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = le32((unsigned char *)&out[i]);
        memcpy(&out[i], &u, 4);
        if (!isfinite(out[i]))
            return mg_error(MG_EFORMAT, "llama2.c file %s holds %s at float %lld: meshgrad takes "
                            "finite values only", f->path, isnan(out[i]) ? "nan" : "an infinity",
                            (long long)(at + i));
    }
    return MG_OK;
}

void mg_l2c_close(mg_l2c_file *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

int mg_l2c_is_one(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat sb;
    mg_l2c_header h;
    int ok = fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
             read_header(fd, (uint64_t)sb.st_size, path, &h) == MG_OK;
    if (fd >= 0) close(fd);
    mg_clear_error(); /* a test, not a failure */
    return ok;
}

int mg_l2c_write(const char *target, const mg_l2c_header *h, const mg_l2c_part *parts, int n) {
    int64_t want = mg_l2c_floats(h), have = 0;
    for (int i = 0; i < n; i++) have += parts[i].n;
    if (want != have)
        return mg_error(MG_EINVAL, "llama2.c file %s: %lld floats given, the header asks for %lld",
                        target, (long long)have, (long long)want);
    int exists;
    int rc = mg_file_replaceable(target, "llama2.c model file", mg_l2c_is_one, &exists);
    mg_tmp_file tmp = {.fd = -1};
    if (rc == MG_OK) rc = mg_tmp_create(&tmp, target);
    if (rc == MG_OK) rc = mg_tmp_reserve(&tmp, target, MG_L2C_HEADER_BYTES + 4 * want);
    if (rc == MG_OK) {
        int64_t v[7] = {h->dim, h->hidden, h->layers, h->heads, h->kv_heads,
                        h->shared ? h->vocab : -h->vocab, h->seq_len};
        unsigned char b[MG_L2C_HEADER_BYTES];
        for (int i = 0; i < 7; i++) {
            uint32_t u = (uint32_t)(int32_t)v[i];
            for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)(u >> (8 * k));
        }
        int bad = mg_file_write_all(tmp.fd, b, sizeof b) != 0;
        for (int i = 0; !bad && i < n; i++)
            bad = mg_file_write_f32le(tmp.fd, parts[i].data, parts[i].n);
        if (bad) rc = mg_error(MG_EIO, "cannot write %s: %s", target, strerror(errno ? errno : EIO));
    }
    if (rc == MG_OK) return mg_tmp_commit(&tmp, target, "llama2.c model file", mg_l2c_is_one);
    mg_tmp_discard(&tmp);
    return rc;
}
