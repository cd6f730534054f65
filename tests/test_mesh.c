/* test_mesh.c (MPI): meshes of every shape the world size allows (1-D to 4-D):
 * row-major coordinates, the per-dim communicators (size, rank, members), the
 * refusals (sizes that do not multiply to the world size, non-positive sizes,
 * dims out of 1..4) with their messages and a good mesh right after each;
 * mg_mesh_parse and mg_mesh_format; mg_init idempotent, rank and size. */
#include <stdio.h>
#include <string.h>

#include "dist/comm.h"
#include "dist/mesh.h"
#include "status.h"
#include "test_dist.h"
#include "testutil.h"

static int world, me;

START_TEST(every_mesh_fits) {
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 4, ms);
    ck_assert_int_ge(nm, 2);
    for (int m = 0; m < nm; m++) {
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        mg_assert_all(mesh != NULL, "%s", mg_last_error());
        mg_assert_all(mg_mesh_ndim(mesh) == ms[m].ndim, "ndim");
        const int *coord = mg_mesh_coord(mesh), *shape = mg_mesh_shape(mesh);
        /* row-major: the world rank is the mesh rank of the coordinates */
        mg_assert_all(mg_mesh_rank_of(mesh, coord) == me, "rank %d at coordinates of rank %d", me,
                      mg_mesh_rank_of(mesh, coord));
        mg_assert_all(mesh->world->size == world && mesh->world->rank == me, "world comm");
        for (int i = 0; i < mesh->ndim; i++) {
            mg_comm *c = mesh->dim_comm[i];
            mg_assert_all(shape[i] == ms[m].shape[i], "shape");
            mg_assert_all(c->size == shape[i] && c->rank == coord[i],
                          "dim %d comm: size %d rank %d, want %d and %d", i, c->size, c->rank,
                          shape[i], coord[i]);
            /* its members are the ranks that differ from me only on dim i */
            float mine = (float)me, got[8];
            mg_assert_all(mg_comm_all_gather(c, &mine, 1, got) == MG_OK, "%s", mg_last_error());
            int good = 1;
            for (int r = 0; r < c->size; r++) {
                int cc[MG_MAX_MESH_DIMS];
                memcpy(cc, coord, sizeof cc);
                cc[i] = r;
                good &= got[r] == (float)mg_mesh_rank_of(mesh, cc);
            }
            mg_assert_all(good, "dim %d comm has the wrong members", i);
        }
        char buf[32];
        mg_mesh_format(buf, sizeof buf, mesh);
        mg_assert_all((strchr(buf, 'x') == NULL) == (mesh->ndim == 1), "format %s", buf);
        mg_mesh_free(mesh);
    }
}
END_TEST

/* The refusal for a mesh whose sizes do not multiply to the world size. */
START_TEST(mesh_refusals) {
    int good[1] = {world};
    int wrong[2] = {2, world == 4 ? 1 : 2};
    mg_assert_all(mg_mesh_new(2, wrong) == NULL, "a mesh that does not fit was made");
    mg_assert_all(mg_last_code() == MG_EMESH, "code %d", mg_last_code());
    char want[256];
    snprintf(want, sizeof want,
             "mg_mesh_new: mesh 2x%d has %d ranks but the job has %d: give a mesh whose sizes "
             "multiply to %d, e.g. %s",
             wrong[1], 2 * wrong[1], world, world,
             world == 1   ? "1"
             : world == 2 ? "2 or 1x2"
                          : "4 or 2x2");
    ck_assert_str_eq(mg_last_error(), want);
    mg_mesh *ok = mg_mesh_new(1, good);
    mg_assert_all(ok != NULL, "good mesh after refusal: %s", mg_last_error());
    mg_mesh_free(ok);

    int zero[2] = {world, 0};
    mg_assert_all(mg_mesh_new(2, zero) == NULL, "size 0 accepted");
    snprintf(want, sizeof want,
             "mg_mesh_new: mesh %dx0 has size 0 on dim 1: every mesh size must be at least 1",
             world);
    ck_assert_str_eq(mg_last_error(), want);
    int neg[2] = {-1, -world};
    mg_assert_all(mg_mesh_new(2, neg) == NULL, "negative size accepted");
    mg_assert_all(strstr(mg_last_error(), "size -1 on dim 0") != NULL, "%s", mg_last_error());
    ok = mg_mesh_new(1, good);
    mg_assert_all(ok != NULL, "good mesh after refusal: %s", mg_last_error());
    mg_mesh_free(ok);

    int five[5] = {world, 1, 1, 1, 1};
    mg_assert_all(mg_mesh_new(5, five) == NULL, "5-D mesh accepted");
    ck_assert_str_eq(mg_last_error(), "mg_mesh_new: a mesh has 1 to 4 dims, got 5");
    mg_assert_all(mg_mesh_new(0, five) == NULL, "0-D mesh accepted");
    ck_assert_str_eq(mg_last_error(), "mg_mesh_new: a mesh has 1 to 4 dims, got 0");
    mg_assert_all(mg_mesh_new(1, NULL) == NULL && mg_last_code() == MG_EINVAL, "NULL shape");
    /* a 4-D mesh right after */
    ok = mg_mesh_new(4, five);
    mg_assert_all(ok != NULL && mg_mesh_ndim(ok) == 4, "4-D mesh: %s", mg_last_error());
    mg_mesh_free(ok);
}
END_TEST

START_TEST(parse_and_format) {
    int shape[MG_MAX_MESH_DIMS];
    ck_assert_int_eq(mg_mesh_parse("2x2", shape), 2);
    ck_assert(shape[0] == 2 && shape[1] == 2);
    ck_assert_int_eq(mg_mesh_parse("4", shape), 1);
    ck_assert_int_eq(shape[0], 4);
    ck_assert_int_eq(mg_mesh_parse("1x2x1x3", shape), 4);
    ck_assert(shape[3] == 3);
    const char *bad[] = {"", "2y2", "0x2", "2x", "x2", "-2", "1x1x1x1x1", "2x2 ", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(mg_mesh_parse(bad[i], shape) == MG_EINVAL, "'%s' accepted", bad[i]);
        ck_assert(strlen(mg_last_error()) > 0);
    }
    mg_mesh_parse("2y2", shape);
    ck_assert_str_eq(mg_last_error(), "mesh '2y2': expected sizes separated by 'x', e.g. 2 or 2x2");
    mg_mesh_parse("0x2", shape);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "size 0 must be between 1 and"));
    ck_assert_int_eq(mg_mesh_parse(NULL, shape), MG_EINVAL);
    /* format: a mesh of the world parsed back */
    int n = mg_mesh_parse(world == 4 ? "2x2" : world == 2 ? "1x2" : "1", shape);
    mg_mesh *mesh = mg_mesh_new(n, shape);
    mg_assert_all(mesh != NULL, "%s", mg_last_error());
    char buf[32];
    ck_assert_str_eq(mg_mesh_format(buf, sizeof buf, mesh), world == 4   ? "2x2"
                                                            : world == 2 ? "1x2"
                                                                         : "1");
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(init_rank_size) {
    ck_assert_int_eq(mg_init(NULL, NULL), MG_OK); /* idempotent */
    int r, s;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    ck_assert_int_eq(mg_rank(), r);
    ck_assert_int_eq(mg_world_size(), s);
    ck_assert(mg_version() && mg_version()[0] >= '0' && mg_version()[0] <= '9');
    int eh_is_return = 0;
    MPI_Errhandler eh;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh);
    eh_is_return = eh == MPI_ERRORS_RETURN;
    MPI_Errhandler_free(&eh);
    ck_assert_msg(eh_is_return, "MPI_COMM_WORLD does not return errors");
}
END_TEST

static Suite *make_suite(void) {
    world = mg_world_size();
    me = mg_rank();
    const TTest *tests[] = {every_mesh_fits, mesh_refusals, parse_and_format, init_rank_size, NULL};
    return mg_test_suite("mesh", tests);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
