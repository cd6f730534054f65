/* checkpoint_helper.c: a small MPI program driven by test_checkpoint_crash.sh.
 *   save PATH STEP     saves three tensors (values from STEP) on a 1-D mesh
 *                      (honours MG_CKPT_FAULT / MG_CKPT_FAULT_RANK)
 *   verify PATH STEP   loads them on a 2-D mesh (1-D at odd sizes) under other
 *                      placements and compares with the values of STEP
 *   resolve DIR        prints the checkpoint mg_checkpoint_resolve picks
 *   corrupt PATH       flips bytes inside the first chunk of /params/w (rank 0)
 * Exit 0 on success, 1 on failure (with the message on stderr). */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "io/checkpoint.h"
#include "meshgrad.h"
#include "status.h"
#include "testutil.h"

static const char *names[3] = {"params/w", "params/b", "optim/w/exp_avg"};
static const int ndims[3] = {2, 1, 2};
static const int64_t shapes[3][2] = {{13, 7}, {5, 0}, {13, 7}};

static int helper_fail(const char *what) {
    fprintf(stderr, "checkpoint_helper: rank %d: %s: %s\n", mg_rank(), what, mg_last_error());
    return 1;
}

/* the three entries on mesh under placements p[i] (zeros, or the values of step) */
static void make(mg_mesh *mesh, mg_placement p[3][2], int step, int fill, mg_ckpt_entry *e) {
    for (int i = 0; i < 3; i++) {
        mg_tensor *full = mg_tensor_new(ndims[i], shapes[i]);
        if (fill) mg_test_fill_int(full->data, full->numel, (uint64_t)(step * 10 + i));
        e[i].name = names[i];
        e[i].tensor = mg_distribute(mesh, full, p[i], mesh->ndim);
        mg_tensor_free(full);
    }
}

int main(int argc, char **argv) {
    mg_init(&argc, &argv);
    int rc = 1, world = mg_world_size();
    if (argc == 4 && (strcmp(argv[1], "save") == 0 || strcmp(argv[1], "verify") == 0)) {
        int step = atoi(argv[3]), save = strcmp(argv[1], "save") == 0;
        int even = world % 2 == 0, shape2[2] = {even ? world / 2 : world, even ? 2 : 1};
        mg_mesh *mesh = save ? mg_mesh_new(1, &world) : mg_mesh_new(2, shape2);
        mg_placement ps[3][2] = {{MG_SHARD(0)}, {MG_REPLICATE}, {MG_SHARD(1)}};
        mg_placement pl[3][2] = {
            {MG_SHARD(1), MG_SHARD(0)}, {MG_SHARD(0), MG_REPLICATE}, {MG_REPLICATE, MG_SHARD(0)}};
        mg_ckpt_entry e[3];
        make(mesh, save ? ps : pl, step, save, e);
        if (save) {
            mg_ckpt_attr attr = {"step", ""};
            snprintf(attr.value, sizeof attr.value, "%d", step);
            rc = mg_checkpoint_save(argv[2], e, 3, &attr, 1) == MG_OK ? 0 : helper_fail("save");
        } else if (mg_checkpoint_load(argv[2], e, 3, NULL, 0, NULL) != MG_OK) {
            rc = helper_fail("load");
        } else {
            int ok = 1;
            for (int i = 0; i < 3; i++) {
                mg_tensor *got = mg_full_tensor(e[i].tensor),
                          *want = mg_tensor_new(ndims[i], shapes[i]);
                mg_test_fill_int(want->data, want->numel, (uint64_t)(step * 10 + i));
                ok &= memcmp(got->data, want->data, (size_t)want->numel * sizeof(float)) == 0;
                mg_tensor_free(got);
                mg_tensor_free(want);
            }
            rc = ok ? 0 : 1;
            if (mg_rank() == 0)
                printf("verify %s step %d: %s\n", argv[2], step, ok ? "ok" : "DIFFERENT");
        }
        for (int i = 0; i < 3; i++) mg_dtensor_free(e[i].tensor);
        mg_mesh_free(mesh);
    } else if (argc == 3 && strcmp(argv[1], "resolve") == 0) {
        char out[4096];
        rc = mg_checkpoint_resolve(argv[2], out, sizeof out) == MG_OK ? 0 : helper_fail("resolve");
        if (rc == 0 && mg_rank() == 0) printf("%s\n", out);
    } else if (argc == 3 && strcmp(argv[1], "corrupt") == 0) {
        rc = 0;
        if (mg_rank() == 0) {
            hid_t f = H5Fopen(argv[2], H5F_ACC_RDONLY, H5P_DEFAULT);
            hid_t d = H5Dopen2(f, "params/w", H5P_DEFAULT);
            hsize_t offset[2], size = 0;
            unsigned mask;
            haddr_t addr = 0;
            hid_t sp = H5Dget_space(d);
            rc = H5Dget_chunk_info(d, sp, 0, offset, &mask, &addr, &size) < 0;
            H5Sclose(sp);
            H5Dclose(d);
            H5Fclose(f);
            FILE *fp = fopen(argv[2], "r+b");
            unsigned char b[8];
            fseek(fp, (long)(addr + size / 2), SEEK_SET);
            rc |= fread(b, 1, sizeof b, fp) != sizeof b;
            for (int i = 0; i < 8; i++) b[i] ^= 0xA5;
            fseek(fp, (long)(addr + size / 2), SEEK_SET);
            fwrite(b, 1, sizeof b, fp);
            fclose(fp);
        }
    } else {
        fprintf(stderr,
                "usage: checkpoint_helper save|verify PATH STEP | resolve DIR | corrupt PATH\n");
        rc = 2;
    }
    int all = rc;
    MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    mg_finalize();
    return all;
}
