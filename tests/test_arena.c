/* test_arena.c: the step arena: alignment, accounting, reuse without growth
 * (a second identical step after reset gets the same addresses and no new
 * block), merging after a step that overflowed, tensors made in an arena. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "context.h"
#include "status.h"
#include "tensor.h"
#include "testutil.h"

/* a "step": allocations of assorted sizes, each written to end to end */
#define STEP_ALLOCS 12
static const size_t step_sizes[STEP_ALLOCS] = {1, 64, 100, 0, 4096, 3, 777, 65, 2048, 1, 500, 63};

/* bytes an allocation takes: a multiple of 64, at least 64 */
static size_t rounded(size_t n) { return n ? (n + 63) / 64 * 64 : 64; }

static void run_step(mg_arena *a, void **ptrs) {
    for (int i = 0; i < STEP_ALLOCS; i++) {
        ptrs[i] = mg_arena_alloc(a, step_sizes[i]);
        ck_assert_ptr_nonnull(ptrs[i]);
        memset(ptrs[i], i, step_sizes[i]);
    }
    for (int i = 0; i < STEP_ALLOCS; i++) /* nothing overlapped */
        for (size_t j = 0; j < step_sizes[i]; j++)
            ck_assert_int_eq(((unsigned char *)ptrs[i])[j], i);
}

START_TEST(test_alignment) {
    mg_arena *a = mg_arena_new(0);
    ck_assert_ptr_nonnull(a);
    for (size_t n = 0; n < 300; n += 7) {
        void *p = mg_arena_alloc(a, n);
        ck_assert_ptr_nonnull(p);
        ck_assert_msg((uintptr_t)p % 64 == 0, "%zu bytes at %p", n, p);
    }
    mg_arena_free(a);
}
END_TEST

START_TEST(test_accounting) {
    mg_arena *a = mg_arena_new(1 << 16);
    ck_assert_uint_eq(mg_arena_capacity(a), 1 << 16);
    ck_assert_uint_eq(mg_arena_used(a), 0);
    mg_arena_alloc(a, 10);
    ck_assert_uint_eq(mg_arena_used(a), 64);
    mg_arena_alloc(a, 65);
    ck_assert_uint_eq(mg_arena_used(a), 64 + 128);
    mg_arena_reset(a);
    ck_assert_uint_eq(mg_arena_used(a), 0);
    ck_assert_uint_eq(mg_arena_peak(a), 192);
    mg_arena_alloc(a, 1);
    ck_assert_uint_eq(mg_arena_peak(a), 192);
    mg_arena_free(a);
}
END_TEST

/* consecutive allocations in one block are laid out back to back */
START_TEST(test_bump_layout) {
    mg_arena *a = mg_arena_new(1 << 16);
    char *p = mg_arena_alloc(a, 100), *q = mg_arena_alloc(a, 1), *r = mg_arena_alloc(a, 0);
    ck_assert_int_eq(q - p, 128);
    ck_assert_int_eq(r - q, 64);
    mg_arena_free(a);
}
END_TEST

START_TEST(test_reuse_without_growth) {
    mg_arena *a = mg_arena_new(1 << 16);
    void *first[STEP_ALLOCS], *second[STEP_ALLOCS];
    int grows = mg_arena_grow_count(a);
    size_t cap = mg_arena_capacity(a);
    run_step(a, first);
    size_t used = mg_arena_used(a);
    mg_arena_reset(a);
    run_step(a, second);
    ck_assert_int_eq(mg_arena_grow_count(a), grows);
    ck_assert_uint_eq(mg_arena_capacity(a), cap);
    ck_assert_uint_eq(mg_arena_used(a), used);
    for (int i = 0; i < STEP_ALLOCS; i++) ck_assert_ptr_eq(first[i], second[i]);
    mg_arena_free(a);
}
END_TEST

/* a step larger than the arena grows it; reset merges the blocks into one, and
 * from then on the same step costs no malloc and returns the same addresses */
START_TEST(test_merge_after_overflow) {
    mg_arena *a = mg_arena_new(4096);
    void *p1[STEP_ALLOCS], *p2[STEP_ALLOCS], *p3[STEP_ALLOCS];
    int grows0 = mg_arena_grow_count(a);
    run_step(a, p1); /* ~8 KiB: overflows 4 KiB */
    int grows1 = mg_arena_grow_count(a);
    ck_assert_int_gt(grows1, grows0);
    size_t cap = mg_arena_capacity(a), used = mg_arena_used(a);
    ck_assert_uint_ge(cap, used);
    mg_arena_reset(a); /* merge: one block of the total size */
    int grows2 = mg_arena_grow_count(a);
    ck_assert_uint_eq(mg_arena_capacity(a), cap);
    run_step(a, p2);
    ck_assert_int_eq(mg_arena_grow_count(a), grows2); /* the step fit in the merged block */
    ck_assert_uint_eq(mg_arena_used(a), used);
    for (int i = 1; i < STEP_ALLOCS; i++) /* one block: back to back */
        ck_assert_int_eq((char *)p2[i] - (char *)p2[i - 1], (int)rounded(step_sizes[i - 1]));
    mg_arena_reset(a);
    ck_assert_int_eq(mg_arena_grow_count(a), grows2); /* nothing to merge now */
    run_step(a, p3);
    ck_assert_int_eq(mg_arena_grow_count(a), grows2);
    for (int i = 0; i < STEP_ALLOCS; i++) ck_assert_ptr_eq(p2[i], p3[i]);
    mg_arena_free(a);
}
END_TEST

START_TEST(test_single_large_alloc) {
    mg_arena *a = mg_arena_new(4096);
    char *big = mg_arena_alloc(a, 1 << 20);
    ck_assert_ptr_nonnull(big);
    memset(big, 1, 1 << 20);
    ck_assert_uint_ge(mg_arena_capacity(a), (1 << 20) + 4096);
    mg_arena_reset(a);
    int grows = mg_arena_grow_count(a);
    char *again = mg_arena_alloc(a, 1 << 20);
    ck_assert_ptr_nonnull(again);
    ck_assert_int_eq(mg_arena_grow_count(a), grows);
    mg_arena_free(a);
}
END_TEST

START_TEST(test_impossible_alloc_refused) {
    mg_arena *a = mg_arena_new(4096);
    mg_clear_error();
    ck_assert_ptr_null(mg_arena_alloc(a, SIZE_MAX - 10));
    ck_assert_int_eq(mg_last_code(), MG_ENOMEM);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "arena"));
    ck_assert_ptr_nonnull(mg_arena_alloc(a, 10)); /* still usable */
    mg_arena_free(a);
}
END_TEST

/* tensors from an arena: aligned, freed by reset (mg_tensor_free ignores them),
 * and the same step of tensors lands at the same addresses */
START_TEST(test_tensors_in_arena) {
    mg_arena *a = mg_arena_new(1 << 16);
    int64_t shape[2] = {3, 5};
    mg_tensor *t = mg_tensor_zeros(a, 2, shape);
    ck_assert_ptr_nonnull(t);
    ck_assert((t->flags & MG_TENSOR_IN_ARENA) != 0);
    ck_assert((uintptr_t)t->data % 64 == 0);
    for (int i = 0; i < 15; i++) ck_assert_float_eq(t->data[i], 0.0f);
    float *data = t->data;
    mg_tensor_free(t); /* no-op for arena tensors */
    int grows = mg_arena_grow_count(a);
    mg_arena_reset(a);
    mg_tensor *u = mg_tensor_alloc(a, 2, shape);
    ck_assert_ptr_eq(u->data, data);
    ck_assert_int_eq(mg_arena_grow_count(a), grows);
    mg_arena_free(a);
}
END_TEST

START_TEST(test_step_arena_singleton) {
    mg_arena *a = mg_step_arena();
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_eq(a, mg_step_arena());
    ck_assert_uint_ge(mg_arena_capacity(a), 1 << 20);
    /* the two arenas of the context are two */
    ck_assert_ptr_nonnull(mg_scratch_arena());
    ck_assert_ptr_ne(a, mg_scratch_arena());
    /* a context reset frees them; the next use makes them again */
    mg_context_reset();
    ck_assert_ptr_nonnull(mg_step_arena());
    ck_assert_uint_eq(mg_arena_used(mg_step_arena()), 0);
}
END_TEST

int main(void) {
    const TTest *tests[] = {test_alignment, test_accounting, test_bump_layout,
                            test_reuse_without_growth, test_merge_after_overflow,
                            test_single_large_alloc, test_impossible_alloc_refused,
                            test_tensors_in_arena, test_step_arena_singleton, NULL};
    return mg_test_run(mg_test_suite("arena", tests));
}
