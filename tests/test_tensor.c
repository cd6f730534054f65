/* test_tensor.c: local tensors: constructors, 0-d and zero-size tensors, views,
 * clones, shape helpers, bad shapes refused with a message, and a tensor
 * freed twice (the second free does nothing). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "status.h"
#include "tensor.h"
#include "testutil.h"

START_TEST(test_new_is_zeros) {
    int64_t shape[3] = {2, 3, 4};
    mg_tensor *t = mg_tensor_new(3, shape);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(mg_tensor_ndim(t), 3);
    ck_assert_int_eq(mg_tensor_numel(t), 24);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(mg_tensor_shape(t)[i], shape[i]);
    for (int i = 0; i < 24; i++) ck_assert_float_eq(mg_tensor_data(t)[i], 0.0f);
    ck_assert_int_eq(t->device, MG_DEVICE_CPU);
    ck_assert((uintptr_t)t->data % 64 == 0);
    shape[0] = 99; /* the tensor kept its own copy of the shape */
    ck_assert_int_eq(mg_tensor_shape(t)[0], 2);
    mg_tensor_free(t);
}
END_TEST

START_TEST(test_from_data_copies) {
    int64_t shape[2] = {2, 3};
    float data[6] = {1, 2, 3, 4, 5, 6};
    mg_tensor *t = mg_tensor_from_data(2, shape, data);
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_ne(mg_tensor_data(t), data);
    data[0] = 100;
    ck_assert_float_eq(mg_tensor_data(t)[0], 1.0f);
    ck_assert_float_eq(mg_tensor_data(t)[5], 6.0f);
    mg_tensor_free(t);
    mg_clear_error();
    ck_assert_ptr_null(mg_tensor_from_data(2, shape, NULL));
    ck_assert_int_eq(mg_last_code(), MG_EINVAL);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "NULL"));
}
END_TEST

START_TEST(test_scalar_tensor) {
    float v = 3.5f;
    mg_tensor *t = mg_tensor_from_data(0, NULL, &v);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(mg_tensor_ndim(t), 0);
    ck_assert_int_eq(mg_tensor_numel(t), 1);
    ck_assert_float_eq(mg_tensor_data(t)[0], 3.5f);
    char buf[32];
    ck_assert_str_eq(mg_shape_format(buf, sizeof buf, 0, NULL), "()");
    mg_tensor *c = mg_tensor_clone(NULL, t);
    ck_assert_float_eq(c->data[0], 3.5f);
    int64_t one[1] = {1};
    mg_tensor *v1 = mg_tensor_view(NULL, c, 1, one); /* () viewed as (1) */
    ck_assert_ptr_nonnull(v1);
    ck_assert_ptr_eq(v1->data, c->data);
    mg_tensor_free(v1);
    mg_tensor_free(c);
    mg_tensor_free(t);
}
END_TEST

START_TEST(test_zero_size_tensor) {
    int64_t shape[3] = {3, 0, 2};
    mg_tensor *t = mg_tensor_new(3, shape);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(mg_tensor_numel(t), 0);
    ck_assert_ptr_nonnull(t->data);
    mg_tensor *c = mg_tensor_clone(NULL, t);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->numel, 0);
    ck_assert(mg_shape_equal(3, c->shape, 3, shape));
    int64_t flat[1] = {0};
    mg_tensor *v = mg_tensor_view(NULL, t, 1, flat);
    ck_assert_ptr_nonnull(v);
    mg_tensor *z = mg_tensor_from_data(3, shape, NULL); /* no data needed for zero elements */
    ck_assert_ptr_nonnull(z);
    mg_tensor_free(z);
    mg_tensor_free(v);
    mg_tensor_free(c);
    mg_tensor_free(t);
}
END_TEST

START_TEST(test_view_shares_data) {
    int64_t shape[2] = {4, 6}, vshape[3] = {2, 3, 4};
    mg_tensor *t = mg_tensor_new(2, shape);
    mg_test_fill(t->data, t->numel, 1);
    mg_tensor *v = mg_tensor_view(NULL, t, 3, vshape);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_eq(v->data, t->data);
    ck_assert_int_eq(v->ndim, 3);
    ck_assert_int_eq(v->numel, 24);
    ck_assert((v->flags & MG_TENSOR_OWNS_DATA) == 0);
    v->data[7] = 42.0f;
    ck_assert_float_eq(t->data[7], 42.0f);
    mg_tensor_free(v); /* must not free t's data */
    ck_assert_float_eq(t->data[7], 42.0f);
    mg_tensor_free(t);
}
END_TEST

START_TEST(test_view_wrong_numel_refused) {
    int64_t shape[2] = {4, 6}, bad[2] = {5, 5};
    mg_tensor *t = mg_tensor_new(2, shape);
    mg_clear_error();
    ck_assert_ptr_null(mg_tensor_view(NULL, t, 2, bad));
    ck_assert_int_eq(mg_last_code(), MG_ESHAPE);
    ck_assert_msg(strstr(mg_last_error(), "(4, 6)") && strstr(mg_last_error(), "(5, 5)"),
                  "message: %s", mg_last_error());
    mg_tensor_free(t);
}
END_TEST

START_TEST(test_clone_is_deep) {
    int64_t shape[2] = {3, 7};
    mg_tensor *t = mg_tensor_new(2, shape);
    mg_test_fill(t->data, t->numel, 2);
    mg_tensor *c = mg_tensor_clone(NULL, t);
    ck_assert_ptr_ne(c->data, t->data);
    ck_assert(memcmp(c->data, t->data, 21 * sizeof(float)) == 0);
    c->data[0] = 9;
    ck_assert_float_ne(t->data[0], 9);
    mg_tensor_free(c);
    mg_tensor_free(t);
}
END_TEST

START_TEST(test_bad_shapes_refused) {
    int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    mg_clear_error();
    ck_assert_ptr_null(mg_tensor_new(9, shape));
    ck_assert_int_eq(mg_last_code(), MG_ESHAPE);
    ck_assert_msg(strstr(mg_last_error(), "9 dims") != NULL, "message: %s", mg_last_error());

    mg_clear_error();
    ck_assert_ptr_null(mg_tensor_new(-1, shape));
    ck_assert_int_eq(mg_last_code(), MG_ESHAPE);

    int64_t neg[2] = {3, -2};
    mg_clear_error();
    ck_assert_ptr_null(mg_tensor_new(2, neg));
    ck_assert_int_eq(mg_last_code(), MG_ESHAPE);
    ck_assert_msg(strstr(mg_last_error(), "-2") && strstr(mg_last_error(), "dim 1"), "message: %s",
                  mg_last_error());

    mg_clear_error();
    ck_assert_ptr_null(mg_tensor_new(2, NULL));
    ck_assert_int_eq(mg_last_code(), MG_EINVAL);

    int64_t huge[3] = {1ll << 40, 1ll << 40, 4};
    mg_clear_error();
    ck_assert_ptr_null(mg_tensor_new(3, huge));
    ck_assert_int_eq(mg_last_code(), MG_ESHAPE);
    ck_assert_msg(strstr(mg_last_error(), "too many") != NULL, "message: %s", mg_last_error());
}
END_TEST

START_TEST(test_max_rank) {
    int64_t shape[MG_MAX_DIMS];
    for (int i = 0; i < MG_MAX_DIMS; i++) shape[i] = 2;
    mg_tensor *t = mg_tensor_new(MG_MAX_DIMS, shape);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->numel, 256);
    mg_tensor_free(t);
}
END_TEST

START_TEST(test_shape_helpers) {
    int64_t s[3] = {2, 3, 4}, st[3];
    ck_assert_int_eq(mg_shape_numel(3, s), 24);
    ck_assert_int_eq(mg_shape_numel(0, NULL), 1);
    mg_shape_strides(3, s, st);
    ck_assert_int_eq(st[0], 12);
    ck_assert_int_eq(st[1], 4);
    ck_assert_int_eq(st[2], 1);
    int64_t t[3] = {2, 3, 5};
    ck_assert(mg_shape_equal(3, s, 3, s));
    ck_assert(!mg_shape_equal(3, s, 3, t));
    ck_assert(!mg_shape_equal(3, s, 2, s));
    ck_assert(mg_shape_equal(0, NULL, 0, NULL));
    char buf[64];
    ck_assert_str_eq(mg_shape_format(buf, sizeof buf, 3, s), "(2, 3, 4)");
    char tiny[5];
    mg_shape_format(tiny, sizeof tiny, 3, s); /* truncated, still terminated */
    ck_assert_int_eq(strlen(tiny), 4);
    ck_assert_int_eq(mg_shape_check(3, s, "test"), MG_OK);
}
END_TEST

START_TEST(test_null_accessors) {
    ck_assert_ptr_null(mg_tensor_data(NULL));
    ck_assert_int_eq(mg_tensor_ndim(NULL), -1);
    ck_assert_ptr_null(mg_tensor_shape(NULL));
    ck_assert_int_eq(mg_tensor_numel(NULL), 0);
    mg_tensor_free(NULL);
}
END_TEST

/* the tensor lives on the CPU and finds its backend there */
START_TEST(test_backend_of) {
    int64_t shape[1] = {4};
    mg_tensor *t = mg_tensor_new(1, shape);
    ck_assert_ptr_eq(mg_backend_of(t), mg_backend_cpu());
    ck_assert_int_eq(mg_backend_of(t)->iface->device, MG_DEVICE_CPU);
    ck_assert_ptr_null(mg_backend_of(NULL));
    mg_tensor_free(t);
}
END_TEST

/* A second mg_tensor_free of a heap tensor or view does nothing (it aborted
 * in free() before); a pointer freed earlier is not taken for a new tensor
 * that malloc put at its address; thousands of tensors freed in a scrambled
 * order, each twice, leave the others whole. */
START_TEST(test_free_twice) {
    int64_t shape[1] = {8};
    mg_tensor *t = mg_tensor_new(1, shape);
    mg_tensor *v = mg_tensor_view(NULL, t, 1, shape);
    mg_tensor *s = mg_tensor_slice(NULL, t, 2, 4);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(s);
    mg_tensor_free(v);
    mg_tensor_free(v);
    mg_tensor_free(s);
    mg_tensor_free(s);
    mg_tensor_free(t);
    mg_tensor_free(t);
    enum { N = 5000 };
    mg_tensor **u = calloc(N, sizeof *u);
    ck_assert_ptr_nonnull(u);
    for (int i = 0; i < N; i++) {
        u[i] = mg_tensor_new(1, shape);
        ck_assert_ptr_nonnull(u[i]);
        ck_assert_ptr_ne(u[i], t);
        mg_tensor_data(u[i])[0] = (float)i;
    }
    mg_tensor_free(t); /* freed long ago: the new tensors stay */
    for (int k = 0; k < N; k++) {
        int i = (int)(((uint64_t)k * 2654435761u) % N); /* a scrambled order, each once */
        ck_assert_float_eq(mg_tensor_data(u[i])[0], (float)i);
        mg_tensor_free(u[i]);
        mg_tensor_free(u[i]);
    }
    free(u);
}
END_TEST

int main(void) {
    const TTest *tests[] = {test_new_is_zeros, test_from_data_copies, test_scalar_tensor,
                            test_zero_size_tensor, test_view_shares_data,
                            test_view_wrong_numel_refused, test_clone_is_deep,
                            test_bad_shapes_refused, test_max_rank, test_shape_helpers,
                            test_null_accessors, test_backend_of, test_free_twice, NULL};
    return mg_test_run(mg_test_suite("tensor", tests));
}
