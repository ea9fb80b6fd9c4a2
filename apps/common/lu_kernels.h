/*
 * apps/common/lu_kernels.h - the dense block kernels shared by lu (matrix as one object) and
 * clu (each block contiguous). Owns: the arithmetic on one B x B block given its address and
 * leading dimension (column-major, element (i,j) at a[i + j*lda]). Must not touch: the block
 * layout or partition (each app owns those). No pivoting: the apps build diagonally dominant
 * matrices.
 */
#ifndef SQUALL_LU_KERNELS_H
#define SQUALL_LU_KERNELS_H

/* In-place LU of the diagonal block: L unit lower (below the diagonal), U upper. */
static inline void lu_factor_diag(double *a, long lda, long b)
{
    for (long k = 0; k < b; k++) {
        double piv = a[k + k * lda];
        for (long i = k + 1; i < b; i++)
            a[i + k * lda] /= piv;
        for (long j = k + 1; j < b; j++) {
            double akj = a[k + j * lda];
            for (long i = k + 1; i < b; i++)
                a[i + j * lda] -= a[i + k * lda] * akj;
        }
    }
}

/* Block below the diagonal: a = a * U^-1 (U = upper part of the factored diagonal block d). */
static inline void lu_div_below(double *a, long lda, const double *d, long ldd, long b)
{
    for (long k = 0; k < b; k++) {
        double ukk = d[k + k * ldd];
        for (long i = 0; i < b; i++)
            a[i + k * lda] /= ukk;
        for (long j = k + 1; j < b; j++) {
            double ukj = d[k + j * ldd];
            for (long i = 0; i < b; i++)
                a[i + j * lda] -= a[i + k * lda] * ukj;
        }
    }
}

/* Block right of the diagonal: a = L^-1 * a (L = unit lower part of the diagonal block d). */
static inline void lu_div_right(double *a, long lda, const double *d, long ldd, long b)
{
    for (long j = 0; j < b; j++)
        for (long k = 0; k < b; k++) {
            double akj = a[k + j * lda];
            for (long i = k + 1; i < b; i++)
                a[i + j * lda] -= d[i + k * ldd] * akj;
        }
}

/* Interior block: c -= a * bm. */
static inline void lu_mod_interior(double *c, long ldc, const double *a, long lda, const double *bm, long ldb, long b)
{
    for (long j = 0; j < b; j++)
        for (long k = 0; k < b; k++) {
            double bkj = bm[k + j * ldb];
            for (long i = 0; i < b; i++)
                c[i + j * ldc] -= a[i + k * lda] * bkj;
        }
}

#endif /* SQUALL_LU_KERNELS_H */
