/*
 * lu - blocked dense LU factorisation, the matrix allocated as ONE object (SPLASH-2 LU,
 * non-contiguous version; seed 000 section 3.2, seed 002 section 3.2).
 *
 * Owns: the matrix layout (one n x n column-major array). The program (thread grid, steps,
 * check) is common/lu_driver.h, shared with clu; the block arithmetic common/lu_kernels.h.
 *
 * A block is B columns of B doubles spaced n apart, so one block spans many pages that other
 * blocks share (the fine-grain / false-sharing case of the study).
 */
#define LU_NAME "lu"
#define LU_USAGE "lu: blocked LU factorisation, matrix as one object\n" \
                 "  -n N   matrix order (multiple of B)\n"                  \
                 "  -b B   block size"
typedef struct {
    double *a; /* n x n column-major, one object */
} lu_layout;
#include "lu_driver.h"

static inline double *lu_blk(const lu_shared *g, long I, long J)
{
    return g->m.a + I * g->b + J * g->b * g->n;
}
static inline long lu_ld(const lu_shared *g)
{
    return g->n;
}
static inline double *lu_elem(const lu_shared *g, long i, long j)
{
    return g->m.a + i + j * g->n;
}
static void lu_alloc_matrix(lu_shared *g)
{
    g->m.a = app_alloc_uninit((size_t)(g->n * g->n), sizeof(double), "lu matrix");
}
