/*
 * volrend - SPLASH-2 VOLREND-style volume renderer: ray casting through a volume with a
 * min-max pyramid for empty-space skipping, image tiles handed out from per-thread task
 * queues with stealing, several frames (seed 000 §3.2 Volrend; issue 21 item 6).
 *
 * Owns: the synthetic density volume (a few Gaussian blobs and a shell, generated
 * deterministically by main), the opacity and shading maps and the max pyramid the team
 * computes, the per-thread tile queues, the frames' images, and the check against a
 * sequential render.
 * Must not touch: apps/common (the harness) or other apps.
 *
 * Written as outsiders write it (the SPLASH-2 program's structure): plain globals for the
 * volume, the maps, the pyramid, the queues and the image. Phases:
 *   1. opacity and shade maps (a transfer function of the density; Lambert shading of the
 *      density gradient), z-slabs of the volume per thread;                        barrier
 *   2. the max pyramid of opacity: level 0 holds the largest opacity a trilinear sample
 *      inside each 4^3 block can see, level l+1 the max of 8 level-l blocks; one level at a
 *      time, slabs of blocks per thread;                                     barrier per level
 *   3. F frames, the view rotating about the vertical axis; per frame every thread refills
 *      its own queue with a contiguous run of tiles;                                   barrier
 *      each thread takes tiles from the front of its own queue under that queue's lock; when
 *      it is empty it steals one tile from the back of another thread's queue (under the
 *      victim's lock), trying the others in turn, until every queue is empty;     barrier
 *   A ray is cast per pixel (orthographic view): trilinear samples of opacity and shade at
 *   unit steps, composited front to back, stopped when the opacity reaches 0.95, and a
 *   sample whose pyramid block (coarsest level first) is empty moves the ray to the block's
 *   exit without sampling.
 *
 * Sharing pattern: the maps and pyramid are written once by slabs then read by everyone (a
 * ray crosses every slab); the queues are an array of small structs, one per thread, next
 * to each other in memory (the task-queue false sharing the seed describes), each under its
 * own lock; the image (bytes) is written tile by tile, so every image page is written by
 * whoever took its tiles.
 *
 * Check: after the team ends, main renders every frame again sequentially with the same ray
 * caster on maps and pyramid it recomputes itself; every pixel of every frame must be equal.
 * check= is the sum of all pixels of all frames.
 */
#include "app.h"

static const char *vr_usage = "volrend: ray-cast volume rendering, tiles from per-thread queues with stealing\n"
                              "  -n V   volume edge in voxels (tiny 32, small 128, medium 160, large 256)\n"
                              "  -w W   image width = height (tiny 48, small 224, medium 320, large 512)\n"
                              "  -f F   frames (tiny 2, small 4, medium 6, large 8)\n"
                              "  -b B   tile edge in pixels (default 8)";

#define OPACITY_MIN 36 /* densities below this are transparent */
#define PYR_BASE 4     /* level-0 block edge in voxels */
#define MAX_LEVELS 8
#define MAX_ALPHA 0.95

typedef struct {
    app_lock_t lock;
    int head, tail; /* tiles [head, tail) still to do */
} task_queue;

/* Shared state: plain globals. */
APP_GLOBAL static int vn, width, frames, tile, ntiles_x, ntiles, nthreads, nlevels;
APP_GLOBAL static unsigned char *density;          /* vn^3, made by main */
APP_GLOBAL static unsigned char *opacity, *shade;  /* vn^3, made by the team */
APP_GLOBAL static unsigned char *pyr[MAX_LEVELS];  /* per level: max opacity of a block */
APP_GLOBAL static int pyr_n[MAX_LEVELS];           /* blocks per edge at each level */
APP_GLOBAL static unsigned char *image;            /* frames * width * width */
APP_GLOBAL static task_queue *queues;              /* one per thread, contiguous */
APP_GLOBAL static app_barrier bar;
APP_GLOBAL static long *tiles_own, *tiles_stolen;  /* per thread, for the note */
APP_GLOBAL static double *t_start, *t_end;

static long vidx(int x, int y, int z)
{
    return ((long)z * vn + y) * vn + x;
}

/* ------------------------------------------------------------------ the volume */

/* Densities: a few Gaussian blobs inside a thin spherical shell, plus a ripple (all
 * deterministic, from a fixed PRNG seed). */
static void make_density(void)
{
    enum { NBLOB = 7 };
    double bc[NBLOB][3], br[NBLOB], bw[NBLOB];
    app_rng r;
    app_rng_seed(&r, 7001);
    for (int b = 0; b < NBLOB; b++) {
        for (int k = 0; k < 3; k++)
            bc[b][k] = 0.25 + 0.5 * app_rng_double(&r);
        br[b] = 0.06 + 0.08 * app_rng_double(&r);
        bw[b] = 150.0 + 100.0 * app_rng_double(&r);
    }
    double inv = 1.0 / (double)vn;
    for (int z = 0; z < vn; z++)
        for (int y = 0; y < vn; y++)
            for (int x = 0; x < vn; x++) {
                double p[3] = {(x + 0.5) * inv, (y + 0.5) * inv, (z + 0.5) * inv};
                double d = 0.0;
                for (int b = 0; b < NBLOB; b++) {
                    double q = 0.0;
                    for (int k = 0; k < 3; k++)
                        q += (p[k] - bc[b][k]) * (p[k] - bc[b][k]);
                    d += bw[b] * exp(-q / (br[b] * br[b]));
                }
                double rr = sqrt((p[0] - 0.5) * (p[0] - 0.5) + (p[1] - 0.5) * (p[1] - 0.5) +
                                 (p[2] - 0.5) * (p[2] - 0.5));
                if (fabs(rr - 0.42) < 0.015 && p[1] < 0.6)
                    d += 120.0 + 60.0 * sin(20.0 * p[0]) * sin(20.0 * p[2]);
                density[vidx(x, y, z)] = (unsigned char)(d > 255.0 ? 255 : (int)d);
            }
}

/* Opacity and shade of voxels in z-slab [z0, z1): opacity a ramp of the density above
 * OPACITY_MIN, shade Lambert lighting of the central-difference gradient. */
static void make_maps(int z0, int z1, unsigned char *op, unsigned char *sh)
{
    const double L[3] = {0.577350269, 0.577350269, -0.577350269};
    for (int z = z0; z < z1; z++)
        for (int y = 0; y < vn; y++)
            for (int x = 0; x < vn; x++) {
                long i = vidx(x, y, z);
                int d = density[i];
                op[i] = (unsigned char)(d < OPACITY_MIN ? 0 : 40 + (d - OPACITY_MIN) * 215 / (255 - OPACITY_MIN));
                int xm = x > 0 ? x - 1 : x, xp = x < vn - 1 ? x + 1 : x;
                int ym = y > 0 ? y - 1 : y, yp = y < vn - 1 ? y + 1 : y;
                int zm = z > 0 ? z - 1 : z, zp = z < vn - 1 ? z + 1 : z;
                double g[3] = {(double)density[vidx(xp, y, z)] - density[vidx(xm, y, z)],
                               (double)density[vidx(x, yp, z)] - density[vidx(x, ym, z)],
                               (double)density[vidx(x, y, zp)] - density[vidx(x, y, zm)]};
                double gn = sqrt(g[0] * g[0] + g[1] * g[1] + g[2] * g[2]);
                double lam = gn > 1e-9 ? fabs(g[0] * L[0] + g[1] * L[1] + g[2] * L[2]) / gn : 0.0;
                sh[i] = (unsigned char)(40.0 + 215.0 * lam);
            }
}

/* Pyramid level l, blocks with z index in [bz0, bz1). Level 0: max opacity over the voxels a
 * trilinear sample inside the block reads ([4b, 4b+4] per axis, clipped); level l: max of the
 * 8 children. */
static void make_level(int l, int bz0, int bz1, const unsigned char *op, unsigned char *const *py)
{
    int n = pyr_n[l];
    for (int bz = bz0; bz < bz1; bz++)
        for (int by = 0; by < n; by++)
            for (int bx = 0; bx < n; bx++) {
                int m = 0;
                if (l == 0) {
                    int x1 = bx * PYR_BASE + PYR_BASE, y1 = by * PYR_BASE + PYR_BASE, z1 = bz * PYR_BASE + PYR_BASE;
                    x1 = x1 < vn ? x1 : vn - 1;
                    y1 = y1 < vn ? y1 : vn - 1;
                    z1 = z1 < vn ? z1 : vn - 1;
                    for (int z = bz * PYR_BASE; z <= z1; z++)
                        for (int y = by * PYR_BASE; y <= y1; y++)
                            for (int x = bx * PYR_BASE; x <= x1; x++) {
                                int o = op[vidx(x, y, z)];
                                m = o > m ? o : m;
                            }
                } else {
                    int cn = pyr_n[l - 1];
                    for (int dz = 0; dz < 2; dz++)
                        for (int dy = 0; dy < 2; dy++)
                            for (int dx = 0; dx < 2; dx++) {
                                int cx = 2 * bx + dx, cy = 2 * by + dy, cz = 2 * bz + dz;
                                if (cx >= cn || cy >= cn || cz >= cn)
                                    continue;
                                int o = py[l - 1][((long)cz * cn + cy) * cn + cx];
                                m = o > m ? o : m;
                            }
                }
                py[l][((long)bz * n + by) * n + bx] = (unsigned char)m;
            }
}

/* ------------------------------------------------------------------ ray casting */

/* Trilinear interpolation of map m at p (0 <= p < vn - 1 on every axis). */
static double trilinear(const unsigned char *m, const double p[3])
{
    int x = (int)p[0], y = (int)p[1], z = (int)p[2];
    double fx = p[0] - x, fy = p[1] - y, fz = p[2] - z;
    long i = vidx(x, y, z), sy = vn, sz = (long)vn * vn;
    double c00 = m[i] + fx * (m[i + 1] - m[i]);
    double c10 = m[i + sy] + fx * (m[i + sy + 1] - m[i + sy]);
    double c01 = m[i + sz] + fx * (m[i + sz + 1] - m[i + sz]);
    double c11 = m[i + sz + sy] + fx * (m[i + sz + sy + 1] - m[i + sz + sy]);
    double c0 = c00 + fy * (c10 - c00), c1 = c01 + fy * (c11 - c01);
    return c0 + fz * (c1 - c0);
}

/* Casts the ray o + t d (d unit) through the volume; returns the pixel value 0..255.
 * Samples lie at t = t0 + k (unit steps) so a skip lands on the same grid. */
static int cast_ray(const double o[3], const double d[3], const unsigned char *op, const unsigned char *sh,
                    unsigned char *const *py)
{
    /* clip against [0, vn - 1 - eps]^3, where trilinear samples are defined */
    double lo = 0.0, hi = (double)vn - 1.0 - 1e-9, t0 = 0.0, t1 = 1e30;
    for (int k = 0; k < 3; k++) {
        if (fabs(d[k]) < 1e-12) {
            if (o[k] < lo || o[k] > hi)
                return 0;
            continue;
        }
        double a = (lo - o[k]) / d[k], b = (hi - o[k]) / d[k];
        if (a > b) {
            double s = a;
            a = b;
            b = s;
        }
        t0 = a > t0 ? a : t0;
        t1 = b < t1 ? b : t1;
    }
    if (t0 >= t1)
        return 0;
    double color = 0.0, alpha = 0.0;
    long k = 0;
    for (;;) {
        double t = t0 + (double)k;
        if (t > t1 || alpha >= MAX_ALPHA)
            break;
        double p[3] = {o[0] + t * d[0], o[1] + t * d[1], o[2] + t * d[2]};
        int vx = (int)p[0], vy = (int)p[1], vz = (int)p[2];
        /* empty-space skipping: the coarsest empty block around the sample */
        int skipped = 0;
        for (int l = nlevels - 1; l >= 0; l--) {
            int s = PYR_BASE << l, n = pyr_n[l];
            int bx = vx / s, by = vy / s, bz = vz / s;
            if (py[l][((long)bz * n + by) * n + bx] != 0)
                continue;
            /* leave the block [b s, b s + s) along d: the first grid sample past the exit */
            double te = 1e30;
            int b[3] = {bx, by, bz};
            for (int a = 0; a < 3; a++) {
                if (d[a] > 1e-12) {
                    double w = ((double)(b[a] + 1) * s - o[a]) / d[a];
                    te = w < te ? w : te;
                } else if (d[a] < -1e-12) {
                    double w = ((double)b[a] * s - o[a]) / d[a];
                    te = w < te ? w : te;
                }
            }
            long kn = (long)ceil(te - t0 + 1e-9);
            k = kn > k ? kn : k + 1;
            skipped = 1;
            break;
        }
        if (skipped)
            continue;
        double a = trilinear(op, p) * (1.0 / 255.0);
        if (a > 0.0) {
            double c = trilinear(sh, p);
            color += (1.0 - alpha) * a * c;
            alpha += (1.0 - alpha) * a;
        }
        k++;
    }
    return (int)(color + 0.5) > 255 ? 255 : (int)(color + 0.5);
}

/* Renders tile number tl of frame f into img (frames * width * width bytes). */
static void render_tile(int f, int tl, unsigned char *img, const unsigned char *op, const unsigned char *sh,
                        unsigned char *const *py)
{
    int tx = tl % ntiles_x, ty = tl / ntiles_x;
    int x0 = tx * tile, y0 = ty * tile;
    int x1 = x0 + tile < width ? x0 + tile : width, y1 = y0 + tile < width ? y0 + tile : width;
    /* the view: rotated about the volume's vertical (y) axis, tilted down a little */
    double th = 0.35 + 2.0 * 3.14159265358979323846 * (double)f / (double)(frames > 1 ? frames + 1 : 2);
    double ph = 0.3;
    double dir[3] = {sin(th) * cos(ph), -sin(ph), cos(th) * cos(ph)};
    double right[3] = {cos(th), 0.0, -sin(th)};
    double up[3] = {dir[1] * right[2] - dir[2] * right[1], dir[2] * right[0] - dir[0] * right[2],
                    dir[0] * right[1] - dir[1] * right[0]};
    double c = 0.5 * (vn - 1), span = 0.9 * vn; /* the image covers the volume's diagonal */
    unsigned char *out = img + (long)f * width * width;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            double u = ((x + 0.5) / width - 0.5) * span * 1.6, v = (0.5 - (y + 0.5) / width) * span * 1.6;
            double o[3];
            for (int k = 0; k < 3; k++)
                o[k] = c + u * right[k] + v * up[k] - 2.0 * vn * dir[k];
            out[(long)y * width + x] = (unsigned char)cast_ray(o, dir, op, sh, py);
        }
}

/* ------------------------------------------------------------------ the team */

/* Next tile for thread tid: the front of its own queue, else one stolen from the back of
 * another thread's queue. -1 when every queue is empty. */
static int next_task(int tid, int *stolen)
{
    task_queue *q = &queues[tid];
    app_lock(&q->lock);
    int tl = q->head < q->tail ? q->head++ : -1;
    app_unlock(&q->lock);
    if (tl >= 0) {
        *stolen = 0;
        return tl;
    }
    for (int i = 1; i < nthreads; i++) {
        task_queue *v = &queues[(tid + i) % nthreads];
        app_lock(&v->lock);
        tl = v->head < v->tail ? --v->tail : -1;
        app_unlock(&v->lock);
        if (tl >= 0) {
            *stolen = 1;
            return tl;
        }
    }
    return -1;
}

static void *vr_worker(void *arg)
{
    int tid = app_tid(arg);
    long own = 0, stole = 0;
    app_barrier_wait(&bar);
    t_start[tid] = app_now();
    if (tid == 0)
        app_stats_mark();

    long zl, zh;
    app_block_range(vn, nthreads, tid, &zl, &zh);
    make_maps((int)zl, (int)zh, opacity, shade);
    app_barrier_wait(&bar);
    for (int l = 0; l < nlevels; l++) {
        long bl, bh;
        app_block_range(pyr_n[l], nthreads, tid, &bl, &bh);
        make_level(l, (int)bl, (int)bh, opacity, pyr);
        app_barrier_wait(&bar);
    }

    for (int f = 0; f < frames; f++) {
        long lo, hi;
        app_block_range(ntiles, nthreads, tid, &lo, &hi);
        app_lock(&queues[tid].lock);
        queues[tid].head = (int)lo;
        queues[tid].tail = (int)hi;
        app_unlock(&queues[tid].lock);
        app_barrier_wait(&bar);
        int tl, st;
        while ((tl = next_task(tid, &st)) >= 0) {
            render_tile(f, tl, image, opacity, shade, pyr);
            if (st)
                stole++;
            else
                own++;
        }
        app_barrier_wait(&bar);
    }
    tiles_own[tid] = own;
    tiles_stolen[tid] = stole;
    t_end[tid] = app_now();
    if (tid == 0)
        app_stats_mark();
    return NULL;
}

int main(int argc, char **argv)
{
    app_opts o;
    app_parse_common(argc, argv, &o, vr_usage);
    int si = app_size_index(&o);
    static const long VN[4] = {32, 128, 160, 256}, WD[4] = {48, 224, 320, 512}, FR[4] = {2, 4, 6, 8};
    vn = (int)app_flag_long(argc, argv, &o, "-n", VN[si], 8, 1024);
    width = (int)app_flag_long(argc, argv, &o, "-w", WD[si], 4, 8192);
    frames = (int)app_flag_long(argc, argv, &o, "-f", FR[si], 1, 1000);
    tile = (int)app_flag_long(argc, argv, &o, "-b", 8, 1, 1024);
    nthreads = o.threads;
    ntiles_x = (width + tile - 1) / tile;
    ntiles = ntiles_x * ntiles_x;

    long nv = (long)vn * vn * vn;
    density = app_alloc((size_t)nv, 1, "density");
    make_density();
    opacity = app_alloc_uninit((size_t)nv, 1, "opacity map");
    shade = app_alloc_uninit((size_t)nv, 1, "shade map");
    nlevels = 0;
    for (int s = PYR_BASE; nlevels < MAX_LEVELS; s *= 2) {
        int n = (vn + s - 1) / s;
        pyr_n[nlevels] = n;
        pyr[nlevels] = app_alloc_uninit((size_t)n * n * n, 1, "pyramid level");
        nlevels++;
        if (n <= 1)
            break;
    }
    image = app_alloc_uninit((size_t)frames * width * width, 1, "images");
    queues = app_alloc((size_t)nthreads, sizeof *queues, "task queues");
    for (int t = 0; t < nthreads; t++)
        app_lock_init(&queues[t].lock);
    app_barrier_init(&bar, nthreads);
    tiles_own = app_alloc((size_t)nthreads, sizeof *tiles_own, "tiles per thread");
    tiles_stolen = app_alloc((size_t)nthreads, sizeof *tiles_stolen, "tiles stolen per thread");
    t_start = app_alloc((size_t)nthreads, sizeof *t_start, "start stamps");
    t_end = app_alloc((size_t)nthreads, sizeof *t_end, "end stamps");

    app_run_team(nthreads, vr_worker, NULL);

    long npix = (long)frames * width * width;
    double check = 0;
    for (long i = 0; i < npix; i++)
        check += image[i];
    long stolen = 0, least = -1, most = 0;
    for (int t = 0; t < nthreads; t++) {
        long n = tiles_own[t] + tiles_stolen[t];
        stolen += tiles_stolen[t];
        most = n > most ? n : most;
        least = (least < 0 || n < least) ? n : least;
    }
    int ok = 0;
    char note[320];
    snprintf(note, sizeof note,
             "volume %d^3, %d levels, %d frames of %dx%d, %d tiles of %d px; tiles per thread %ld..%ld, %ld stolen; "
             "not checked",
             vn, nlevels, frames, width, width, ntiles, tile, least, most, stolen);
    if (o.verify) {
        /* the sequential render: maps, pyramid and every frame again, privately */
        unsigned char *op = malloc((size_t)nv), *sh = malloc((size_t)nv), *ref = malloc((size_t)npix);
        unsigned char *py[MAX_LEVELS];
        if (op == NULL || sh == NULL || ref == NULL) {
            fprintf(stderr, "volrend: out of memory for the reference\n");
            exit(2);
        }
        make_maps(0, vn, op, sh);
        long map_diff = 0;
        for (long i = 0; i < nv; i++)
            map_diff += (op[i] != opacity[i]) + (sh[i] != shade[i]);
        for (int l = 0; l < nlevels; l++) {
            py[l] = malloc((size_t)pyr_n[l] * pyr_n[l] * pyr_n[l]);
            if (py[l] == NULL) {
                fprintf(stderr, "volrend: out of memory for the reference pyramid\n");
                exit(2);
            }
            make_level(l, 0, pyr_n[l], op, py);
        }
        long pyr_diff = 0;
        for (int l = 0; l < nlevels; l++)
            for (long i = 0; i < (long)pyr_n[l] * pyr_n[l] * pyr_n[l]; i++)
                pyr_diff += py[l][i] != pyr[l][i];
        for (int f = 0; f < frames; f++)
            for (int tl = 0; tl < ntiles; tl++)
                render_tile(f, tl, ref, op, sh, py);
        long bad = 0, first = -1;
        double rsum = 0;
        for (long i = 0; i < npix; i++) {
            rsum += ref[i];
            if (ref[i] != image[i]) {
                bad++;
                if (first < 0)
                    first = i;
            }
        }
        ok = bad == 0 && map_diff == 0 && pyr_diff == 0 && rsum > 0;
        snprintf(note, sizeof note,
                 "volume %d^3, %d levels, %d frames of %dx%d, %d tiles of %d px; tiles per thread %ld..%ld, %ld "
                 "stolen; pixels unlike the sequential render %ld (first %ld), map/pyramid differences %ld/%ld",
                 vn, nlevels, frames, width, width, ntiles, tile, least, most, stolen, bad, first, map_diff,
                 pyr_diff);
        for (int l = 0; l < nlevels; l++)
            free(py[l]);
        free(op);
        free(sh);
        free(ref);
    }
    app_finish("volrend", &o, app_phase_time(t_start, t_end, nthreads), ok, check, note);
}
