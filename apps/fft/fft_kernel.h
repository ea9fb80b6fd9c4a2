/*
 * fft_kernel.h - the complex type, the radix-2 row FFT, the input and the check of fft,
 * shared by its three styles: fft.c (page-based threads), fft_crl.c (CRL regions) and
 * fft_splitc.c (Split-C global pointers). Owns: the arithmetic. Must not touch: distribution
 * or communication (each style owns its own).
 */
#ifndef FFT_KERNEL_H
#define FFT_KERNEL_H
#include "app.h"

typedef struct {
    double re, im;
} cplx;

static inline cplx cmul(cplx a, cplx b)
{
    cplx r = {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
    return r;
}

/* In-place radix-2 DIT FFT of length len (power of two) with roots w[e * (n/len)] = w_len^e. */
static void fft_row(cplx *a, long len, const cplx *w, long n)
{
    for (long i = 1, j = 0; i < len; i++) {
        long bit = len >> 1;
        for (; j & bit; bit >>= 1)
            j ^= bit;
        j ^= bit;
        if (i < j) {
            cplx tmp = a[i];
            a[i] = a[j];
            a[j] = tmp;
        }
    }
    for (long half = 1; half < len; half <<= 1) {
        long step = n / (half * 2);
        for (long i = 0; i < len; i += 2 * half)
            for (long k = 0; k < half; k++) {
                cplx v = cmul(a[i + k + half], w[k * step]);
                cplx u = a[i + k];
                a[i + k].re = u.re + v.re;
                a[i + k].im = u.im + v.im;
                a[i + k + half].re = u.re - v.re;
                a[i + k + half].im = u.im - v.im;
            }
    }
}

/* The roots of unity w[e] = w_n^e = exp(-2 pi i e / n). */
static inline void fft_roots(cplx *w, long n)
{
    const double tau = 6.283185307179586476925286766559;
    for (long e = 0; e < n; e++) {
        double ang = tau * (double)e / (double)n;
        w[e].re = cos(ang);
        w[e].im = -sin(ang);
    }
}

/* The input of every style: n points from app_rng seed 99, re then im. */
static inline void fft_input(cplx *x, long n)
{
    app_rng r;
    app_rng_seed(&r, 99);
    for (long i = 0; i < n; i++) {
        x[i].re = 2.0 * app_rng_double(&r) - 1.0;
        x[i].im = 2.0 * app_rng_double(&r) - 1.0;
    }
}

/* The check of the SPMD styles: X against an independent sequential radix-2 FFT of x (max
 * error / max magnitude into *relfull) and a direct DFT with fresh trig at 4 points (*worst).
 * Returns 1 when relfull <= 1e-10 and worst <= 1e-8 (fft.c's tolerances). */
static inline int fft_verify(const cplx *x, const cplx *X, const cplx *w, long n, double *relfull, double *worst)
{
    const double tau = 6.283185307179586476925286766559;
    cplx *ref = malloc(sizeof(cplx) * (size_t)n);
    if (!ref) {
        fprintf(stderr, "fft: out of memory for the check\n");
        exit(2);
    }
    memcpy(ref, x, (size_t)n * sizeof(cplx));
    fft_row(ref, n, w, n);
    double maxerr = 0.0, maxmag = 0.0;
    for (long k = 0; k < n; k++) {
        double e = hypot(ref[k].re - X[k].re, ref[k].im - X[k].im);
        double mg = hypot(ref[k].re, ref[k].im);
        if (e > maxerr || e != e)
            maxerr = e != e ? INFINITY : e;
        if (mg > maxmag)
            maxmag = mg;
    }
    *relfull = maxerr / (maxmag > 0 ? maxmag : 1.0);
    long pts[4] = {0, 1, n / 3, n - 1};
    *worst = 0.0;
    for (int q = 0; q < 4; q++) {
        long k = pts[q];
        double sr = 0.0, si = 0.0;
        for (long j = 0; j < n; j++) {
            long e = (long)(((unsigned long)j * (unsigned long)k) % (unsigned long)n);
            double ang = tau * (double)e / (double)n, c = cos(ang), s = -sin(ang);
            sr += x[j].re * c - x[j].im * s;
            si += x[j].re * s + x[j].im * c;
        }
        double d = hypot(sr - X[k].re, si - X[k].im) / (maxmag > 0 ? maxmag : 1.0);
        if (d > *worst || d != d)
            *worst = d != d ? INFINITY : d;
    }
    free(ref);
    return *relfull <= 1e-10 && *worst <= 1e-8;
}

/* Parses fft's flags for the style `name` (its usage line "name: what"): the common ones, -m
 * (*m: log2 of the number of points) and -r (*reps: repetitions of the transform). */
static inline void fft_parse(int argc, char **argv, app_opts *o, const char *name, const char *what, long *m,
                             long *reps)
{
    static char usage[256];
    snprintf(usage, sizeof usage,
             "%s: %s\n"
             "  -m M   log2 of the number of points (n = 2^M, M >= 2)\n"
             "  -r R   repetitions of the transform",
             name, what);
    static const long M[4] = {12, 22, 24, 26};
    static const long R[4] = {1, 4, 3, 3};
    app_parse_common(argc, argv, o, usage);
    int si = app_size_index(o);
    *m = app_flag_long(argc, argv, o, "-m", M[si], 2, 30);
    *reps = app_flag_long(argc, argv, o, "-r", R[si], 1, 1L << 20);
}

#endif /* FFT_KERNEL_H */
