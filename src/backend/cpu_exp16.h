/* cpu_exp16.h: exp of 16 floats at once with AVX-512, for the softmax
 * forward (cpu_nn.c), where the exps are the work: fewer cycles a vector
 * than mg_cpu_exp's loop. Within 1.07 ulp of exp wherever the result is a
 * normal float (every float in [-87.3, 0]; test_nn_kernels's test_exp16 sweeps them);
 * below that it falls through the subnormals to 0, exp(-inf)
 * is 0 and NaN stays NaN.
 *
 * x = (16 m + j) ln2 / 16 + r with |r| <= ln2 / 32, so exp(x) is
 * 2^m 2^(j/16) exp(r). 2^(j/16) comes from a table of 16 that one permute
 * reads (it takes j from the low bits of k = 16 m + j, held in t's mantissa
 * by the magic number's rounding), exp(r) - 1 from a polynomial of degree 3
 * (truncated there at 9e-9), and 2^m from vscalefps, which takes the floor
 * of k / 16 itself and handles underflow and overflow as a multiplication
 * would. Against mg_cpu_exp: a shorter polynomial, and no clamp at the top
 * nor integer work to build 2^m.
 *
 * Exports MG_CPU_EXP16 (defined where mg_cpu_exp16 is built: GCC on x86-64;
 * callers check mg_cpu_isa() >= MG_ISA_AVX512, blas_core.h, before they call
 * it) and mg_cpu_exp16. */
#ifndef MG_BACKEND_CPU_EXP16_H
#define MG_BACKEND_CPU_EXP16_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MG_CPU_EXP16 1
#include <immintrin.h>

__attribute__((target("arch=x86-64-v4"))) static inline __m512 mg_cpu_exp16(__m512 x) {
    /* 2^(j / 16), j = 0..15 */
    const __m512 table = _mm512_setr_ps(
        1.0f, 1.04427378f, 1.09050773f, 1.13878863f, 1.18920712f, 1.24185781f, 1.29683955f,
        1.35425555f, 1.41421356f, 1.47682615f, 1.54221083f, 1.61049033f, 1.68179283f,
        1.75625216f, 1.83400809f, 1.91520656f);
    /* below -104 every result is 0 (exp(-104) is under half the least
     * subnormal); -inf would make r NaN. max keeps its second operand, x,
     * where either is NaN. */
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    /* t = 1.5 * 2^23 + k, k = x 16 / ln2 rounded to an integer */
    __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(23.0831206542234f), _mm512_set1_ps(12582912.0f));
    __m512 k = _mm512_sub_ps(t, _mm512_set1_ps(12582912.0f));
    /* r = x - k ln2 / 16, ln2 / 16 in two parts (the first exact in k's range) */
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.0433349609375f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-1.32621525e-5f), r);
    /* q = exp(r) - 1 = r + r^2 / 2 + r^3 / 6 */
    __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 6), r, _mm512_set1_ps(0.5f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
    q = _mm512_mul_ps(q, r);
    __m512 tj = _mm512_permutexvar_ps(_mm512_castps_si512(t), table);
    /* 2^(j/16) (1 + q) in one rounding, times 2^floor(k / 16) */
    return _mm512_scalef_ps(_mm512_fmadd_ps(tj, q, tj), _mm512_mul_ps(k, _mm512_set1_ps(0.0625f)));
}
#endif

#endif
