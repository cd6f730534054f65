/* cuda_kernels.cu: the CUDA backend's layout, elementwise and optimizer kernels
 * (copy, fill, copy_block, add_block, permute, binary with broadcasting, unary,
 * axpy, SGD, AdamW), each a grid-stride kernel on the backend's stream with
 * the semantics of cpu.c.
 *
 * Exports: mg_cu_kernels_iface (cuda_internal.h). */
#include <math.h>
#include <stdint.h>

#include "backend/cuda_internal.h"
#include "backend/kernel_math.h"

/* ---- layout --------------------------------------------------------------------- */

/* dst = src, n floats of device memory (enqueued) */
static void copy_d2d(float *dst, const float *src, int64_t n) {
    if (n <= 0 || dst == src) return;
    cuda_ok("cudaMemcpyAsync (device)",
            cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
                            mg_cu.stream));
}

static void cuda_copy(void *ctx, const mg_tensor *src, mg_tensor *dst) {
    (void)ctx;
    copy_d2d(dst->data, src->data, src->numel);
}

__global__ void k_fill(float *p, int64_t n, float v) {
    FOR_EACH(i, n) p[i] = v;
}

static void cuda_fill(void *ctx, mg_tensor *t, float value) {
    (void)ctx;
    int64_t n = t->numel;
    if (n <= 0) return;
    if (value == 0.0f && !signbit(value)) {
        cuda_ok("cudaMemsetAsync",
                cudaMemsetAsync(t->data, 0, (size_t)n * sizeof(float), mg_cu.stream));
        return;
    }
    k_fill<<<grid_for(n), THREADS, 0, mg_cu.stream>>>(t->data, n, value);
    LAUNCHED("fill kernel");
}

/* item i of the box `ext` (nd dims) at offsets by the strides ss (src), ds
 * (dst): copied, or added into dst */
__global__ void k_copy_block(const float *src, float *dst, int nd, dims8 ext, dims8 ss, dims8 ds,
                             int64_t n, bool add) {
    FOR_EACH(i, n) {
        int64_t so, dof;
        mg_unravel2(i, nd, ext.v, ss.v, ds.v, &so, &dof);
        dst[dof] = add ? dst[dof] + src[so] : src[so];
    }
}

/* dst[dst_offset + i] = src[src_offset + i] (add: +=) for i in the box
 * `extent`. Trailing dims the box covers whole in both tensors merge into one. */
static void block_apply(const mg_tensor *src, const int64_t *src_offset, mg_tensor *dst,
                        const int64_t *dst_offset, const int64_t *extent, bool add) {
    int nd = src->ndim;
    if (nd == 0 && !add) {
        copy_d2d(dst->data, src->data, 1);
        return;
    }
    for (int d = 0; d < nd; d++)
        if (extent[d] <= 0) return;
    int64_t ss[MG_MAX_DIMS], ds[MG_MAX_DIMS], src_base = 0, dst_base = 0;
    mg_shape_strides(nd, src->shape, ss);
    mg_shape_strides(nd, dst->shape, ds);
    for (int d = 0; d < nd; d++) {
        src_base += src_offset[d] * ss[d];
        dst_base += dst_offset[d] * ds[d];
    }
    dims8 e, s, o;
    int m = 0;
    if (nd > 0) {
        int k = nd - 1; /* dims k.. form one run of `run` elements, strides 1 */
        int64_t run = extent[k];
        while (k > 0 && extent[k] == src->shape[k] && extent[k] == dst->shape[k]) {
            k--;
            run *= extent[k];
        }
        for (int d = 0; d < k; d++, m++) {
            e.v[m] = extent[d];
            s.v[m] = ss[d];
            o.v[m] = ds[d];
        }
        e.v[m] = run;
    } else {
        e.v[m] = 1; /* a 0-d tensor: one element */
    }
    s.v[m] = 1;
    o.v[m] = 1;
    m++;
    int64_t n = mg_shape_numel(nd, extent);
    if (m == 1 && !add) {
        copy_d2d(dst->data + dst_base, src->data + src_base, n);
        return;
    }
    k_copy_block<<<grid_for(n), THREADS, 0, mg_cu.stream>>>(
        src->data + src_base, dst->data + dst_base, m, e, s, o, n, add);
    LAUNCHED("copy_block kernel");
}

static void cuda_copy_block(void *ctx, const mg_tensor *src, const int64_t *src_offset,
                            mg_tensor *dst, const int64_t *dst_offset, const int64_t *extent) {
    (void)ctx;
    block_apply(src, src_offset, dst, dst_offset, extent, false);
}

static void cuda_add_block(void *ctx, const mg_tensor *src, const int64_t *src_offset,
                           mg_tensor *dst, const int64_t *dst_offset, const int64_t *extent) {
    (void)ctx;
    block_apply(src, src_offset, dst, dst_offset, extent, true);
}

/* out[i] = x[offset of out index i through the permuted strides] */
__global__ void k_permute(const float *x, float *out, int nd, dims8 shape, dims8 stride,
                          int64_t n) {
    FOR_EACH(i, n) {
        int64_t rem = i, off = 0;
        for (int d = nd - 1; d >= 0; d--) {
            off += rem % shape.v[d] * stride.v[d];
            rem /= shape.v[d];
        }
        out[i] = x[off];
    }
}

static void cuda_permute(void *ctx, const mg_tensor *x, const int *perm, mg_tensor *out) {
    (void)ctx;
    int nd = x->ndim;
    if (out->numel <= 0) return;
    if (nd < 2) {
        copy_d2d(out->data, x->data, x->numel);
        return;
    }
    int64_t xs[MG_MAX_DIMS];
    mg_shape_strides(nd, x->shape, xs);
    dims8 shape, stride;
    for (int i = 0; i < nd; i++) {
        shape.v[i] = out->shape[i];
        stride.v[i] = xs[perm[i]];
    }
    k_permute<<<grid_for(out->numel), THREADS, 0, mg_cu.stream>>>(x->data, out->data, nd, shape,
                                                                 stride, out->numel);
    LAUNCHED("permute kernel");
}

/* ---- elementwise ---------------------------------------------------------------- */

#define BINARY_KERNEL(E, name, f) \
    case MG_BINARY_##E: return (f);
__device__ __forceinline__ float binary_apply(int op, float x, float y) {
    switch (op) {
        MG_BINARY_KERNELS(BINARY_KERNEL)
    default: return 0.0f;
    }
}

/* out[i] = op(a, b) where i unravels over the k merged dims n, strides sa, sb */
__global__ void k_binary(int op, const float *a, const float *b, float *out, int k, dims8 n,
                         dims8 sa, dims8 sb, int64_t total) {
    FOR_EACH(i, total) {
        int64_t oa, ob;
        mg_unravel2(i, k, n.v, sa.v, sb.v, &oa, &ob);
        out[i] = binary_apply(op, a[oa], b[ob]);
    }
}

/* the common flat cases without index arithmetic: strides (1, 1) or (1, 0) */
__global__ void k_binary_flat(int op, const float *a, const float *b, int64_t sb, float *out,
                              int64_t total) {
    FOR_EACH(i, total) out[i] = binary_apply(op, a[i], b[i * sb]);
}

static void cuda_binary(void *ctx, mg_binary_op op, const mg_tensor *a, const mg_tensor *b,
                        mg_tensor *out) {
    (void)ctx;
    if (out->numel <= 0) return;
    /* merge dims that both inputs step through alike; drop size-1 dims */
    dims8 n, sa, sb;
    int k = mg_binary_dims(a, b, out, n.v, sa.v, sb.v);
    int64_t total = out->numel;
    if (k == 0) { /* one element */
        n.v[0] = 1;
        sa.v[0] = sb.v[0] = 0;
        k = 1;
    }
    if (k == 1 && sa.v[0] == 1 && (sb.v[0] == 1 || sb.v[0] == 0)) {
        k_binary_flat<<<grid_for(total), THREADS, 0, mg_cu.stream>>>(op, a->data, b->data, sb.v[0],
                                                                    out->data, total);
        LAUNCHED("binary kernel");
        return;
    }
    k_binary<<<grid_for(total), THREADS, 0, mg_cu.stream>>>(op, a->data, b->data, out->data, k, n,
                                                           sa, sb, total);
    LAUNCHED("binary kernel");
}

__global__ void k_unary(int op, const float *xd, float alpha, float *od, int64_t n) {
    FOR_EACH(i, n) {
        float x = xd[i], y;
#define UNARY_KERNEL(E, name, f) \
    case MG_UNARY_##E: y = (f); break;
        switch (op) {
            MG_UNARY_KERNELS(UNARY_KERNEL)
        default: y = 0.0f; break;
        }
        od[i] = y;
    }
}

static void cuda_unary(void *ctx, mg_unary_op op, const mg_tensor *x, float alpha, mg_tensor *out) {
    (void)ctx;
    int64_t n = out->numel;
    if (n <= 0) return;
    k_unary<<<grid_for(n), THREADS, 0, mg_cu.stream>>>(op, x->data, alpha, out->data, n);
    LAUNCHED("unary kernel");
}

__global__ void k_axpy(float alpha, const float *x, float *y, int64_t n) {
    FOR_EACH(i, n) y[i] += alpha * x[i];
}

static void cuda_axpy(void *ctx, float alpha, const mg_tensor *x, mg_tensor *y) {
    (void)ctx;
    int64_t n = y->numel;
    if (n <= 0) return;
    k_axpy<<<grid_for(n), THREADS, 0, mg_cu.stream>>>(alpha, x->data, y->data, n);
    LAUNCHED("axpy kernel");
}

/* ---- optimizers ----------------------------------------------------------------- */

/* PyTorch SGD, as cpu.c: g = grad + wd p; buf = g (first step) or momentum buf + g. */
__global__ void k_sgd(float *p, const float *gd, float *buf, int64_t n, float lr, float momentum,
                      float weight_decay, bool first_step) {
    FOR_EACH(i, n) {
        float g = gd[i] + weight_decay * p[i];
        if (buf) {
            buf[i] = first_step ? g : momentum * buf[i] + g;
            g = buf[i];
        }
        p[i] -= lr * g;
    }
}

static void cuda_sgd_step(void *ctx, mg_tensor *param, const mg_tensor *grad,
                          mg_tensor *momentum_buf, float lr, float momentum, float weight_decay,
                          bool first_step) {
    (void)ctx;
    int64_t n = param->numel;
    if (n <= 0) return;
    float *buf = momentum != 0.0f && momentum_buf ? momentum_buf->data : NULL;
    k_sgd<<<grid_for(n), THREADS, 0, mg_cu.stream>>>(param->data, grad->data, buf, n, lr, momentum,
                                                    weight_decay, first_step);
    LAUNCHED("sgd kernel");
}

/* PyTorch AdamW, as cpu.c: p *= 1 - lr wd; p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps). */
__global__ void k_adamw(float *p, const float *gd, float *md, float *vd, int64_t n, float beta1,
                        float beta2, float eps, float step_size, float bc2_sqrt, float decay) {
    FOR_EACH(i, n) {
        float g = gd[i];
        p[i] *= decay;
        md[i] = beta1 * md[i] + (1.0f - beta1) * g;
        vd[i] = beta2 * vd[i] + (1.0f - beta2) * g * g;
        p[i] -= step_size * md[i] / (sqrtf(vd[i]) / bc2_sqrt + eps);
    }
}

static void cuda_adamw_step(void *ctx, mg_tensor *param, const mg_tensor *grad, mg_tensor *m,
                            mg_tensor *v, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int64_t step) {
    (void)ctx;
    int64_t n = param->numel;
    if (n <= 0) return;
    double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
    float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    float decay = 1.0f - lr * weight_decay;
    k_adamw<<<grid_for(n), THREADS, 0, mg_cu.stream>>>(param->data, grad->data, m->data, v->data, n,
                                                      beta1, beta2, eps, step_size, bc2_sqrt,
                                                      decay);
    LAUNCHED("adamw kernel");
}

void mg_cu_kernels_iface(struct mg_backend_iface *f) {
    f->permute = cuda_permute;
    f->copy_block = cuda_copy_block;
    f->add_block = cuda_add_block;
    f->copy = cuda_copy;
    f->fill = cuda_fill;
    f->unary = cuda_unary;
    f->binary = cuda_binary;
    f->axpy = cuda_axpy;
    f->sgd_step = cuda_sgd_step;
    f->adamw_step = cuda_adamw_step;
}
