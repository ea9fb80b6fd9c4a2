/*
 * apps/common/lu_value.h - the original matrix of lu and clu (lu_driver.h) and of lu's
 * CRL-region and Split-C versions (apps/lu/lu_crl.c, lu_splitc.c). Owns: the value of every
 * entry. Must not touch: layout, partition, arithmetic.
 */
#ifndef SQUALL_LU_VALUE_H
#define SQUALL_LU_VALUE_H
#include "app.h"

/* Entry (i, j) of the original matrix: uniform in [-1, 1) plus n on the diagonal (diagonally
 * dominant, so no pivoting), a function of the position only. */
static inline double lu_value(long i, long j, long n)
{
    app_rng r;
    app_rng_seed(&r, 12345ULL * 0x9E3779B97F4A7C15ULL + (unsigned long long)(i + j * n));
    double v = 2.0 * app_rng_double(&r) - 1.0;
    return i == j ? v + (double)n : v;
}

#endif /* SQUALL_LU_VALUE_H */
