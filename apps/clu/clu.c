/*
 * clu - blocked dense LU factorisation with every block CONTIGUOUS in memory (SPLASH-2
 * "contiguous LU"; seed 000 section 3.2: "computationally identical to Lu, but allocates each
 * block contiguously in memory").
 *
 * Owns: the block layout (nb*nb separately allocated B x B column-major blocks reached through
 * a shared pointer table). The program (thread grid, steps, check) is common/lu_driver.h,
 * shared with lu; the block arithmetic common/lu_kernels.h.
 */
#define LU_NAME "clu"
#define LU_USAGE "clu: blocked LU factorisation, each block contiguous\n" \
                 "  -n N   matrix order (multiple of B)\n"                  \
                 "  -b B   block size"
typedef struct {
    double **blk; /* nb*nb pointers; block (I,J) = blk[I + J*nb], B x B column-major */
} lu_layout;
#include "lu_driver.h"

static inline double *lu_blk(const lu_shared *g, long I, long J)
{
    return g->m.blk[I + J * g->nb];
}
static inline long lu_ld(const lu_shared *g)
{
    return g->b;
}
static inline double *lu_elem(const lu_shared *g, long i, long j)
{
    return lu_blk(g, i / g->b, j / g->b) + (i % g->b) + (j % g->b) * g->b;
}
static void lu_alloc_matrix(lu_shared *g)
{
    /* Every block is contiguous (CLU); they lie back to back in one page-aligned allocation, so
     * the blocks' relative placement (and with it the cache behaviour of the kernel) is the
     * same under every allocator (separately allocated blocks ran 1.5x faster or slower by
     * how malloc spaced them). */
    size_t bb = (size_t)(g->b * g->b);
    double *all = app_alloc_uninit((size_t)(g->nb * g->nb) * bb, sizeof(double), "matrix blocks");
    g->m.blk = app_alloc((size_t)(g->nb * g->nb), sizeof(double *), "block pointer table");
    for (long k = 0; k < g->nb * g->nb; k++)
        g->m.blk[k] = all + (size_t)k * bb;
}
