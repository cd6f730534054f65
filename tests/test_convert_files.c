/* test_convert_files.c: the readers of other programs' model files, on
 * files that lie (a serial suite, also run under valgrind by
 * tests/test_ckpt_convert.sh and `make check-valgrind`):
 * - safetensors (io/safetensors.h): a file too short, a header length past
 *   the end or of zero, a header that is not JSON or not an object, a tensor
 *   entry without dtype, shape or offsets, an unknown dtype, F16, a negative,
 *   fractional, huge or too long shape, offsets reversed, past the end, of
 *   the wrong size or overlapping, a name twice, __metadata__ not an object,
 *   a NaN value: each refused with its line, nothing read out of bounds; a
 *   good file with F32, BF16, an empty tensor and a padded header reads back;
 * - llama2.c (io/llama2c.h): too short, sizes that cannot be, heads not
 *   dividing, an odd head size, a length one float short, sizes whose
 *   product overflows; a good file reads back, a read past its end is refused;
 * - config.json (nn/hf.h): missing, not JSON, another model type, a missing
 *   or bad key, a llama with biases or rope scaling, an untied GPT; HF's
 *   defaults for what is absent;
 * - the layouts of nn/hf.h are permutations (to and back is the identity)
 *   and put q, k rows and qkv columns where HF's conventions do.
 * With `--write DIR` it only writes its lying safetensors and llama2.c
 * files into DIR (CASE.safetensors, CASE.bin), for the shell test to give
 * to `meshgrad ckpt import`. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/llama2c.h"
#include "io/safetensors.h"
#include "nn/hf.h"
#include "status.h"
#include "testutil.h"

static char dir[256];

static const char *path_of(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* The files are written outside tests too (--write): a failure ends the program. */
static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "test_convert_files: cannot write %s\n", path);
        exit(99);
    }
}

/* A safetensors file: the 8-byte length `len` (the header's own when
 * UINT64_MAX), the header text, then `data` bytes of values 0x3f800000
 * (1.0f) repeated. */
static void st_file(const char *path, uint64_t len, const char *header, size_t data) {
    size_t h = strlen(header), n = 8 + h + data;
    unsigned char *b = calloc(1, n + 1);
    if (!b) exit(99);
    if (len == UINT64_MAX) len = h;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(len >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i + 4 <= data; i += 4) {
        uint32_t one = 0x3f800000;
        memcpy(b + 8 + h + i, &one, 4);
    }
    write_bytes(path, b, n);
    free(b);
}

/* The lying safetensors files: name, length (UINT64_MAX: the header's),
 * header, data bytes, and what the refusal says. */
static const struct {
    const char *name;
    uint64_t len;
    const char *header;
    size_t data;
    const char *says;
} lies[] = {
    {"len-past-end", 1000, "{}", 0, "past the end of the file"},
    {"len-huge", UINT64_MAX - 1, "{}", 0, "past the end of the file"},
    {"len-zero", 0, "{}", 0, "not from 1 to"},
    {"not-json", UINT64_MAX, "{\"a\": {\"dtype\": ", 0, "is not JSON"},
    {"not-object", UINT64_MAX, "[1, 2]", 0, "not a JSON object"},
    {"entry-not-object", UINT64_MAX, "{\"w\": 3}", 0, "is not an object"},
    {"no-dtype", UINT64_MAX, "{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
     "lacks a dtype"},
    {"no-offsets", UINT64_MAX, "{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "lacks a dtype"},
    {"dtype-unknown", UINT64_MAX, "{\"w\": {\"dtype\": \"F33\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
     4, "no safetensors dtype"},
    {"dtype-f16", UINT64_MAX, "{\"w\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 4]}}",
     4, "reads F32 and BF16"},
    {"shape-negative", UINT64_MAX,
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, "not a whole number"},
    {"shape-fraction", UINT64_MAX,
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4, "not a whole number"},
    {"shape-9-dims", UINT64_MAX,
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4,
     "more than 8"},
    {"shape-overflow", UINT64_MAX,
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904, 8], \"data_offsets\": [0, 4]}}", 4,
     "more elements than any file"},
    {"shape-beyond-int64", UINT64_MAX,
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [99999999999999999999], \"data_offsets\": [0, 4]}}", 4,
     "not a whole number"},
    {"offsets-reversed", UINT64_MAX,
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4, "not [begin, end]"},
    {"offsets-past-end", UINT64_MAX,
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8, "past its end"},
    {"offsets-huge", UINT64_MAX,
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [18446744073709551612, 18446744073709551616]}}",
     4, "data_offsets is not"},
    {"offsets-wrong-size", UINT64_MAX,
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 8, "need 8"},
    {"offsets-overlap", UINT64_MAX,
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
     " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
     12, "overlap"},
    {"name-twice", UINT64_MAX,
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
     " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
     8, "twice"},
    {"metadata-not-object", UINT64_MAX, "{\"__metadata__\": 7}", 0, "__metadata__"},
};
enum { NLIES = sizeof lies / sizeof lies[0] };

START_TEST(test_st_lies_refused) {
    for (int i = 0; i < NLIES; i++) {
        const char *p = path_of("lie.safetensors");
        st_file(p, lies[i].len, lies[i].header, lies[i].data);
        mg_st_file f;
        mg_clear_error();
        int rc = mg_st_open(&f, p);
        if (rc == MG_OK || !strstr(mg_last_error(), lies[i].says))
            ck_abort_msg("%s: rc %d, \"%s\", want \"%s\"", lies[i].name, rc, mg_last_error(),
                         lies[i].says);
        ck_assert_int_eq(f.fd, -1); /* nothing left open */
        ck_assert(!strchr(mg_last_error(), '\n'));
    }
    /* too short for the length itself */
    write_bytes(path_of("short.safetensors"), "abc", 3);
    mg_st_file f;
    ck_assert_int_eq(mg_st_open(&f, path_of("short.safetensors")), MG_EFORMAT);
    ck_assert(strstr(mg_last_error(), "too short"));
    ck_assert_int_eq(mg_st_open(&f, path_of("none.safetensors")), MG_EIO);
}
END_TEST

START_TEST(test_st_good_file) {
    /* F32 (2, 2), BF16 (3), an empty tensor, metadata, a header padded with spaces */
    const char *h = "{\"__metadata__\": {\"format\": \"pt\"}, "
                    "\"b\": {\"dtype\": \"BF16\", \"shape\": [3], \"data_offsets\": [16, 22]}, "
                    "\"e\": {\"dtype\": \"F32\", \"shape\": [0, 5], \"data_offsets\": [16, 16]}, "
                    "\"a\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}   ";
    size_t hl = strlen(h);
    unsigned char buf[1024] = {0};
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, h, hl);
    float a[4] = {1.5f, -2.0f, 3.25f, 1e-3f};
    memcpy(buf + 8 + hl, a, 16);
    uint16_t b[3] = {0x3f80, 0xc000, 0x4049}; /* 1, -2, 3.140625 */
    memcpy(buf + 8 + hl + 16, b, 6);
    write_bytes(path_of("good.safetensors"), buf, 8 + hl + 22);
    mg_st_file f;
    ck_assert_int_eq(mg_st_open(&f, path_of("good.safetensors")), MG_OK);
    ck_assert_int_eq(f.n, 3);
    ck_assert_ptr_nonnull(f.meta);
    const mg_st_tensor *ta = mg_st_find(&f, "a"), *tb = mg_st_find(&f, "b"), *te = mg_st_find(&f, "e");
    ck_assert(ta && tb && te && !mg_st_find(&f, "c"));
    ck_assert_int_eq(ta->ndim, 2);
    ck_assert_int_eq(te->numel, 0);
    float out[4];
    ck_assert_int_eq(mg_st_read(&f, ta, out), MG_OK);
    ck_assert_mem_eq(out, a, sizeof a);
    ck_assert_int_eq(mg_st_read(&f, tb, out), MG_OK);
    ck_assert(out[0] == 1.0f && out[1] == -2.0f && out[2] == 3.140625f);
    ck_assert_int_eq(mg_st_read(&f, te, out), MG_OK);
    mg_st_close(&f);
    ck_assert(!mg_st_is_ours(path_of("good.safetensors")));
    /* a NaN value is refused on reading, naming the element */
    float nan_at[4] = {0, 0, NAN, 0};
    memcpy(buf + 8 + hl, nan_at, 16);
    write_bytes(path_of("nan.safetensors"), buf, 8 + hl + 22);
    ck_assert_int_eq(mg_st_open(&f, path_of("nan.safetensors")), MG_OK);
    ck_assert_int_eq(mg_st_read(&f, mg_st_find(&f, "a"), out), MG_EFORMAT);
    ck_assert(strstr(mg_last_error(), "nan at element 2"));
    mg_st_close(&f);
}
END_TEST

START_TEST(test_st_write_read_back) {
    float w[6] = {1, 2, 3, 4, 5, 6}, v[2] = {-1, 0.5f};
    int64_t ws[2] = {2, 3}, vs[1] = {2};
    mg_st_entry e[2] = {{"w \"quoted\"", 2, ws, w}, {"v", 1, vs, v}};
    const char *meta[] = {"model", "test"};
    const char *p = path_of("mine.safetensors");
    ck_assert_int_eq(mg_st_write(p, e, 2, meta, 1), MG_OK);
    ck_assert(mg_st_is_ours(p));
    ck_assert_int_eq(mg_st_write(p, e, 2, meta, 1), MG_OK); /* over its own */
    mg_st_file f;
    ck_assert_int_eq(mg_st_open(&f, p), MG_OK);
    ck_assert_int_eq(f.data_at % 8, 0);
    ck_assert_str_eq(mg_json_str(f.meta, "producer", ""), "meshgrad");
    float out[6];
    ck_assert_int_eq(mg_st_read(&f, mg_st_find(&f, "w \"quoted\""), out), MG_OK);
    ck_assert_mem_eq(out, w, sizeof w);
    ck_assert_int_eq(mg_st_read(&f, mg_st_find(&f, "v"), out), MG_OK);
    ck_assert_mem_eq(out, v, sizeof v);
    mg_st_close(&f);
    /* not over a file of another kind */
    write_bytes(path_of("other.safetensors"), "not mine", 8);
    ck_assert_int_eq(mg_st_write(path_of("other.safetensors"), e, 2, meta, 1), MG_EIO);
    ck_assert(strstr(mg_last_error(), "will not replace"));
}
END_TEST

/* ---- llama2.c ----------------------------------------------------------------- */

/* A llama2.c file of header h (7 ints) and `floats` floats (i * 0.001). */
static void l2c_file(const char *path, const int32_t *h, int64_t floats) {
    float *x = malloc(sizeof(float) * (size_t)floats + 28);
    if (!x) exit(99);
    memcpy(x, h, 28);
    for (int64_t i = 0; i < floats; i++) x[7 + i] = (float)i * 0.001f;
    write_bytes(path, x, 28 + 4 * (size_t)floats);
    free(x);
}

/* dim 8, hidden 16, 2 layers, 2 heads, 1 kv head, vocab 10 (negative: untied), seq 4 */
static int64_t small_floats(int untied) {
    int64_t C = 8, F = 16, L = 2, D = 4, kv = 4;
    return 10 * C * (1 + untied) + L * (2 * C + C * C + 2 * kv * C + C * C + 3 * C * F) + C + 4 * D;
}

static const struct {
    const char *name;
    int32_t h[7];
    int64_t floats; /* -1: the small file's, -2: one less */
    const char *says;
} l2c_lies[] = {
    {"l2c-zero-dim", {0, 16, 2, 2, 1, 10, 4}, 0, "dim is 0"},
    {"l2c-negative-layers", {8, 16, -2, 2, 1, 10, 4}, 0, "n_layers is -2"},
    {"l2c-zero-vocab", {8, 16, 2, 2, 1, 0, 4}, 0, "vocab_size is 0"},
    {"l2c-heads-not-dividing", {8, 16, 2, 3, 1, 10, 4}, 0, "does not divide dim"},
    {"l2c-odd-head", {6, 16, 2, 2, 1, 10, 4}, 0, "even size"},
    {"l2c-kv-not-dividing", {8, 16, 2, 2, 3, 10, 4}, 0, "n_kv_heads 3 does not divide"},
    {"l2c-one-float-short", {8, 16, 2, 2, 1, 10, 4}, -2, "asks for"},
    {"l2c-huge", {2147483644, 2147483647, 2147483647, 2, 1, 2147483647, 2147483647}, 16, "asks for"},
};
enum { NL2C = sizeof l2c_lies / sizeof l2c_lies[0] };

START_TEST(test_l2c_lies_refused) {
    mg_l2c_file f;
    write_bytes(path_of("short.bin"), "\1\0\0\0", 4);
    ck_assert_int_eq(mg_l2c_open(&f, path_of("short.bin")), MG_EFORMAT);
    ck_assert(strstr(mg_last_error(), "too short"));
    for (int i = 0; i < NL2C; i++) {
        int64_t n = l2c_lies[i].floats == -2 ? small_floats(0) - 1 : l2c_lies[i].floats;
        l2c_file(path_of("lie.bin"), l2c_lies[i].h, n);
        mg_clear_error();
        int rc = mg_l2c_open(&f, path_of("lie.bin"));
        if (rc == MG_OK || !strstr(mg_last_error(), l2c_lies[i].says))
            ck_abort_msg("%s: rc %d, \"%s\", want \"%s\"", l2c_lies[i].name, rc, mg_last_error(),
                         l2c_lies[i].says);
        ck_assert(!mg_l2c_is_one(path_of("lie.bin")));
    }
}
END_TEST

START_TEST(test_l2c_good_file) {
    for (int untied = 0; untied < 2; untied++) {
        int32_t h[7] = {8, 16, 2, 2, 1, untied ? -10 : 10, 4};
        int64_t n = small_floats(untied);
        l2c_file(path_of("good.bin"), h, n);
        mg_l2c_file f;
        ck_assert_int_eq(mg_l2c_open(&f, path_of("good.bin")), MG_OK);
        ck_assert_int_eq(f.h.vocab, 10);
        ck_assert_int_eq(f.h.shared, !untied);
        ck_assert_int_eq(mg_l2c_floats(&f.h), n);
        float x[3];
        ck_assert_int_eq(mg_l2c_read(&f, n - 3, 3, x), MG_OK);
        ck_assert(x[2] == (float)(n - 1) * 0.001f);
        ck_assert_int_eq(mg_l2c_read(&f, n - 2, 3, x), MG_EFORMAT); /* past the end */
        ck_assert_int_eq(mg_l2c_read(&f, -1, 1, x), MG_EFORMAT);
        mg_l2c_close(&f);
        ck_assert(mg_l2c_is_one(path_of("good.bin")));
    }
}
END_TEST

/* ---- config.json ---------------------------------------------------------------- */

static int config(const char *text, mg_arch *a) {
    write_bytes(path_of("config.json"), text, strlen(text));
    mg_clear_error();
    return mg_hf_config_read(a, path_of("config.json"));
}

START_TEST(test_config_json) {
    mg_arch a;
    ck_assert_int_eq(mg_hf_config_read(&a, path_of("missing.json")), MG_EIO);
    ck_assert(strstr(mg_last_error(), "config.json"));
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"{\"model_type\": ", "is not JSON"},
        {"[]", "not a JSON object"},
        {"{\"model_type\": \"bert\"}", "imports gpt2"},
        {"{\"model_type\": \"gpt2\", \"n_head\": 2, \"n_layer\": 1, \"vocab_size\": 9, "
         "\"n_positions\": 4}", "\"n_embd\" is missing"},
        {"{\"model_type\": \"gpt2\", \"n_embd\": 10, \"n_head\": 3, \"n_layer\": 1, "
         "\"vocab_size\": 9, \"n_positions\": 4}", "do not divide embd"},
        {"{\"model_type\": \"gpt2\", \"n_embd\": 8, \"n_head\": 2, \"n_layer\": 1, "
         "\"vocab_size\": 9, \"n_positions\": 4, \"tie_word_embeddings\": false}", "ties its head"},
        {"{\"model_type\": \"gpt2\", \"n_embd\": 8, \"n_head\": 2, \"n_layer\": 1, "
         "\"vocab_size\": 9, \"n_positions\": 4, \"activation_function\": \"relu\"}", "tanh"},
        {"{\"model_type\": \"gpt2\", \"n_embd\": 8, \"n_head\": 2, \"n_layer\": 1.5, "
         "\"vocab_size\": 9, \"n_positions\": 4}", "n_layer"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, "
         "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 9, "
         "\"max_position_embeddings\": 4, \"attention_bias\": true}", "biases"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, "
         "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 9, "
         "\"max_position_embeddings\": 4, \"rope_scaling\": {\"type\": \"linear\"}}", "rope_scaling"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, "
         "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 3, "
         "\"vocab_size\": 9, \"max_position_embeddings\": 4}", "kv_heads 3 do not divide"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = config(bad[i].text, &a);
        if (rc == MG_OK || !strstr(mg_last_error(), bad[i].says))
            ck_abort_msg("config %zu: rc %d, \"%s\", want \"%s\"", i, rc, mg_last_error(), bad[i].says);
    }
    /* LlamaConfig's defaults: kv heads = heads, rms 1e-6, theta 10000, untied */
    ck_assert_int_eq(config("{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": "
                            "16, \"num_hidden_layers\": 3, \"num_attention_heads\": 2, "
                            "\"vocab_size\": 9, \"max_position_embeddings\": 4}", &a), MG_OK);
    ck_assert(a.kind == MG_ARCH_LLAMA && a.kv_heads == 2 && a.layers == 3 && a.hidden == 16);
    ck_assert(a.norm_eps == 1e-6 && a.rope_theta == 10000.0 && !a.tied);
    ck_assert_int_eq(config("{\"model_type\": \"gpt2\", \"n_embd\": 8, \"n_head\": 2, \"n_layer\": "
                            "1, \"vocab_size\": 9, \"n_positions\": 4, \"n_inner\": null}", &a), MG_OK);
    ck_assert(a.kind == MG_ARCH_GPT && a.tied && a.hidden == 32 && a.ctx == 4);
    /* what meshgrad writes, it reads back */
    mg_arch l = {.kind = MG_ARCH_LLAMA, .layers = 2, .heads = 4, .kv_heads = 2, .embd = 16,
                 .ctx = 8, .vocab = 11, .hidden = 40, .rope_theta = 500000, .norm_eps = 1e-5};
    unlink(path_of("config.json"));
    ck_assert_int_eq(mg_hf_config_write(&l, path_of("config.json")), MG_OK);
    ck_assert(mg_hf_config_is_ours(path_of("config.json")));
    ck_assert_int_eq(mg_hf_config_read(&a, path_of("config.json")), MG_OK);
    ck_assert(a.kind == l.kind && a.layers == l.layers && a.heads == l.heads &&
              a.kv_heads == l.kv_heads && a.embd == l.embd && a.ctx == l.ctx &&
              a.vocab == l.vocab && a.hidden == l.hidden && a.rope_theta == l.rope_theta &&
              a.norm_eps == l.norm_eps && a.tied == l.tied);
}
END_TEST

/* ---- layouts ------------------------------------------------------------------------ */

START_TEST(test_hf_layouts) {
    mg_arch models[2] = {
        {.kind = MG_ARCH_GPT, .layers = 2, .heads = 2, .kv_heads = 2, .embd = 8, .ctx = 4,
         .vocab = 5, .hidden = 32, .tied = 1},
        {.kind = MG_ARCH_LLAMA, .layers = 2, .heads = 4, .kv_heads = 2, .embd = 16, .ctx = 4,
         .vocab = 5, .hidden = 24, .rope_theta = 10000, .norm_eps = 1e-5, .tied = 0},
    };
    for (int m = 0; m < 2; m++) {
        const mg_arch *a = &models[m];
        ck_assert_int_eq(mg_arch_check(a, "test"), MG_OK);
        for (int k = 0; k < mg_arch_param_count(a); k++) {
            mg_arch_param_desc d;
            mg_hf_tensor t;
            mg_arch_param(a, k, &d);
            mg_hf_tensor_of(a, k, &t);
            int64_t n = d.ndim == 2 ? d.shape[0] * d.shape[1] : d.shape[0];
            float *x = malloc(sizeof(float) * (size_t)n), *h = malloc(sizeof(float) * (size_t)n),
                  *y = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n; i++) x[i] = (float)i;
            mg_hf_to(a, k, x, h);
            mg_hf_from(a, k, h, y);
            ck_assert_mem_eq(x, y, sizeof(float) * (size_t)n); /* a permutation */
            if (t.layout == MG_HF_ROPE) { /* HF row h D + j D/2 + i is row h D + 2 i + j */
                int64_t C = d.shape[1], D = a->embd / a->heads;
                for (int64_t r = 0; r < d.shape[0]; r++) {
                    int64_t hh = r / D, j = (r % D) / (D / 2), i = r % (D / 2);
                    ck_assert(h[r * C + 1] == x[(hh * D + 2 * i + j) * C + 1]);
                }
            }
            if (t.layout == MG_HF_QKV && d.ndim == 2) { /* c_attn[c, s C + h D + e] */
                int64_t C = a->embd, D = C / a->heads, H = a->heads;
                for (int64_t s = 0; s < 3; s++)
                    for (int64_t hh = 0; hh < H; hh++)
                        ck_assert(h[1 * 3 * C + s * C + hh * D + 1] ==
                                  x[(hh * 3 * D + s * D + 1) * C + 1]);
            }
            if (t.layout == MG_HF_TRANSPOSE) ck_assert(h[1 * d.shape[0] + 2] == x[2 * d.shape[1] + 1]);
            free(x), free(h), free(y);
        }
    }
    mg_hf_tensor t;
    mg_hf_tensor_of(&models[1], 3, &t); /* layers.0.attention.wk */
    ck_assert_str_eq(t.name, "model.layers.0.self_attn.k_proj.weight");
    ck_assert_int_eq(t.heads, 2);
    mg_hf_tensor_of(&models[0], 4, &t); /* h.0.attn.qkv.weight */
    ck_assert_str_eq(t.name, "transformer.h.0.attn.c_attn.weight");
    ck_assert(t.shape[0] == 8 && t.shape[1] == 24);
}
END_TEST

/* --write DIR: the lying files, for the shell test */
static int write_lies(const char *to) {
    snprintf(dir, sizeof dir, "%s", to);
    for (int i = 0; i < NLIES; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s.safetensors", lies[i].name);
        st_file(path_of(name), lies[i].len, lies[i].header, lies[i].data);
    }
    for (int i = 0; i < NL2C; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s.bin", l2c_lies[i].name);
        int64_t n = l2c_lies[i].floats == -2 ? small_floats(0) - 1 : l2c_lies[i].floats;
        l2c_file(path_of(name), l2c_lies[i].h, n);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write") == 0) return write_lies(argv[2]);
    snprintf(dir, sizeof dir, "/tmp/mg-test-convert-XXXXXX");
    if (!mkdtemp(dir)) return 99;
    const TTest *tests[] = {test_st_lies_refused, test_st_good_file, test_st_write_read_back,
                            test_l2c_lies_refused, test_l2c_good_file, test_config_json,
                            test_hf_layouts, NULL};
    int rc = mg_test_run(mg_test_suite("convert_files", tests));
    mg_test_remove_tree(dir, 0);
    return rc;
}
