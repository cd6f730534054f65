/* testutil_h5.h: what the suites that write HDF5 files by hand to read them
 * back (test_data.c, test_tokens.c) share: mg_test_h5_write, one dataset
 * written whole (serial HDF5, on the rank that calls it). */
#ifndef MG_TESTUTIL_H5_H
#define MG_TESTUTIL_H5_H

#include <hdf5.h>

/* Writes dataset `name` under loc, of HDF5 type file_type and shape
 * dims[0..ndim), from `data` of memory type mem_type. */
static inline void mg_test_h5_write(hid_t loc, const char *name, hid_t file_type, hid_t mem_type,
                                    int ndim, const hsize_t *dims, const void *data) {
    hid_t s = H5Screate_simple(ndim, dims, NULL);
    hid_t d = H5Dcreate2(loc, name, file_type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dclose(d);
    H5Sclose(s);
}

#endif
