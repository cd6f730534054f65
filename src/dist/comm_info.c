/* comm_info.c: the record of what a communicator is, cached on it (see
 * comm_info.h). State: the dist layer's attribute key (`comm_keyval`), table
 * of records (`comm_info`, `n_comm_info`) and the records past its room
 * (`comm_info_extra`).
 * Exports: mg_comm_info_of, mg_comm_info_free. */
#include "dist/comm_info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "dist/dist_state.h"

static void record_free(mg_comm_info *info) {
    if (!info) return;
    free(info->ranks);
    free(info->p2p);
    free(info);
}

/* A record in the table lives until mg_finalize; one beyond it (on the extra
 * list) goes with its communicator. The value is not read: MPI may run this
 * after mg_finalize freed the records, for a communicator of the program's
 * that outlived it (MPI_Finalize deletes every attribute left). */
static int attr_delete(MPI_Comm comm, int key, void *value, void *extra) {
    (void)comm, (void)key, (void)extra;
    mg_dist_state *c = mg_dist();
    for (int i = 0; value && i < c->n_comm_info_extra; i++) {
        if (c->comm_info_extra[i] != value) continue;
        record_free(value);
        c->comm_info_extra[i] = c->comm_info_extra[--c->n_comm_info_extra];
        break;
    }
    return MPI_SUCCESS;
}

static int same_members(const mg_comm_info *a, const mg_comm_info *b) {
    if (a->nranks != b->nranks || strcmp(a->name, b->name) != 0) return 0;
    return memcmp(a->ranks, b->ranks, (size_t)a->nranks * sizeof(int)) == 0;
}

static mg_comm_info *describe(MPI_Comm comm) {
    mg_comm_info *info = calloc(1, sizeof *info);
    int size = 0;
    MPI_Comm_size(comm, &size);
    if (!info) return NULL;
    info->ranks = malloc((size_t)size * sizeof(int));
    info->p2p = calloc(2 * (size_t)size, sizeof(int64_t));
    int *local = malloc((size_t)size * sizeof(int));
    if (!info->ranks || !info->p2p || !local) {
        free(local);
        record_free(info);
        return NULL;
    }
    info->nranks = size;
    MPI_Comm_rank(comm, &info->rank);
    MPI_Group group, world;
    MPI_Comm_group(comm, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    for (int i = 0; i < size; i++) local[i] = i;
    MPI_Group_translate_ranks(group, size, local, world, info->ranks);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    free(local);

    char name[MPI_MAX_OBJECT_NAME];
    int len = 0, dim, cmp = MPI_UNEQUAL;
    name[0] = '\0';
    MPI_Comm_get_name(comm, name, &len);
    snprintf(info->name, sizeof info->name, "%s", name[0] ? name : "comm");
    MPI_Comm_compare(comm, MPI_COMM_WORLD, &cmp);
    if (sscanf(name, "meshgrad mesh dim %d", &dim) == 1 && dim >= 0)
        info->mesh_dim = dim;
    else if (strcmp(name, "meshgrad mesh") == 0 || cmp == MPI_IDENT)
        info->mesh_dim = MG_COMM_WHOLE_MESH;
    else
        info->mesh_dim = MG_COMM_UNKNOWN_DIM;
    return info;
}

/* Into the table when there is room (ordinal counted over it). */
static void enter(mg_dist_state *c, mg_comm_info *info) {
    info->index = -1;
    if (!c->comm_info) c->comm_info = calloc(MG_COMM_INFO_MAX, sizeof *c->comm_info);
    for (int i = 0; c->comm_info && i < c->n_comm_info; i++)
        info->ordinal += same_members(c->comm_info[i], info);
    if (!c->comm_info || c->n_comm_info == MG_COMM_INFO_MAX) { /* past the table: its own */
        if (mg_array_grow((void **)&c->comm_info_extra, &c->cap_comm_info_extra,
                          c->n_comm_info_extra + 1, sizeof *c->comm_info_extra,
                          "communicator records") == MG_OK)
            c->comm_info_extra[c->n_comm_info_extra++] = info;
        return;
    }
    info->index = c->n_comm_info;
    c->comm_info[c->n_comm_info] = info;
    __atomic_store_n(&c->n_comm_info, c->n_comm_info + 1, __ATOMIC_RELEASE);
}

mg_comm_info *mg_comm_info_of(MPI_Comm comm) {
    mg_dist_state *c = mg_dist();
    if (c->comm_keyval == 0) {
        int key = MPI_KEYVAL_INVALID;
        if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, attr_delete, &key, NULL) != MPI_SUCCESS)
            return NULL;
        c->comm_keyval = key + 1;
    }
    mg_comm_info *info = NULL;
    int found = 0;
    MPI_Comm_get_attr(comm, c->comm_keyval - 1, &info, &found);
    if (found && info) return info;
    info = describe(comm);
    if (!info) return NULL;
    enter(c, info);
    if (MPI_Comm_set_attr(comm, c->comm_keyval - 1, info) != MPI_SUCCESS && info->index < 0) {
        attr_delete(comm, 0, info, NULL); /* off the extra list, freed */
        return NULL;
    }
    return info;
}

void mg_comm_info_free(void) {
    mg_dist_state *c = mg_dist();
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (c->comm_keyval && !finalized) {
        /* the world outlives mg_finalize when the program started MPI: its
         * record goes, so the attribute that points at it goes first */
        int key = c->comm_keyval - 1, found = 0;
        void *value = NULL;
        MPI_Comm_get_attr(MPI_COMM_WORLD, key, &value, &found);
        if (found) MPI_Comm_delete_attr(MPI_COMM_WORLD, key);
        MPI_Comm_free_keyval(&key);
    }
    c->comm_keyval = 0;
    for (int i = 0; i < c->n_comm_info; i++) record_free(c->comm_info[i]);
    for (int i = 0; i < c->n_comm_info_extra; i++) record_free(c->comm_info_extra[i]);
    free(c->comm_info);
    free(c->comm_info_extra);
    c->comm_info = c->comm_info_extra = NULL;
    c->n_comm_info = c->n_comm_info_extra = c->cap_comm_info_extra = 0;
}
