/*
 * raytrace - SPLASH-2 RAYTRACE-style ray tracer pulling tiles from a shared work counter
 * (seed 000 §3.2; issue 21 item 6).
 *
 * Owns: the scene (spheres on a checkered plane, two point lights), the ray tracer (shadows,
 * mirror reflections, supersampling), the shared tile counter and image, and the check
 * against a sequential render.
 * Must not touch: apps/common (the harness) or other apps.
 *
 * Written as outsiders write it: plain globals for the scene, the image and the work counter;
 * a pthread mutex around the counter. Every thread loops: lock, take the next tile number,
 * unlock; render the tile's pixels (each supersampled, rays reflected up to a depth) and write
 * them into the shared image; until the tiles run out.
 *
 * Sharing pattern: a work counter under one lock, taken by every thread once per tile (the
 * pattern the seed measures: a lock acquire per unit of work, migrating between nodes); the
 * scene is read-only after main builds it; the image is written in tiles, so an image row's
 * pages are written by the threads that took the tiles across it (write-write false sharing,
 * merged at the releases).
 *
 * Check: main renders the whole image sequentially with the same code after the team ends;
 * every pixel must be identical (|difference| <= 1e-12). check= is the sum of all pixel values.
 */
#include "app.h"

static const char *ray_usage = "raytrace: tiles of an image pulled from a shared counter under a lock\n"
                               "  -w W   image width = height (tiny 64, small 384, medium 768, large 1024)\n"
                               "  -b B   tile edge in pixels (default 16)\n"
                               "  -a A   A x A samples per pixel (default 2)\n"
                               "  -o O   spheres (default 48)";

typedef struct {
    double x, y, z;
} vec;

static vec v(double x, double y, double z)
{
    vec r = {x, y, z};
    return r;
}
static vec vadd(vec a, vec b)
{
    return v(a.x + b.x, a.y + b.y, a.z + b.z);
}
static vec vsub(vec a, vec b)
{
    return v(a.x - b.x, a.y - b.y, a.z - b.z);
}
static vec vmul(vec a, double s)
{
    return v(a.x * s, a.y * s, a.z * s);
}
static double vdot(vec a, vec b)
{
    return a.x * b.x + a.y * b.y + a.z * b.z;
}
static vec vnorm(vec a)
{
    return vmul(a, 1.0 / sqrt(vdot(a, a)));
}

typedef struct {
    vec c;
    double r;
    vec color;
    double reflect;
} sphere;

#define MAX_DEPTH 4

/* Shared state: plain globals. */
APP_GLOBAL static int width, tile, samples, nspheres, ntiles_x, ntiles;
APP_GLOBAL static sphere *spheres; /* read-only after main builds it */
APP_GLOBAL static float *image;    /* width * width * 3, written in tiles */
APP_GLOBAL static app_lock_t work_lock; /* guards next_tile */
APP_GLOBAL static int next_tile;
APP_GLOBAL static app_barrier bar;
APP_GLOBAL static int nthreads;
APP_GLOBAL static long *tiles_done; /* per thread, for the note */
APP_GLOBAL static double *t_start, *t_end; /* per thread: after the start and the end barrier */

static const vec light_pos[2] = {{-8.0, 12.0, -6.0}, {9.0, 7.0, -10.0}};
static const double light_power[2] = {0.7, 0.45};

/* Nearest hit along o + t d (d unit) with t > 1e-6: the sphere's index, -1 for the plane
 * y = 0, -2 for nothing. */
static int ray_hit(vec o, vec d, double *t_out)
{
    double best = 1e30;
    int what = -2;
    for (int i = 0; i < nspheres; i++) {
        vec oc = vsub(o, spheres[i].c);
        double b = vdot(oc, d);
        double c = vdot(oc, oc) - spheres[i].r * spheres[i].r;
        double disc = b * b - c;
        if (disc <= 0)
            continue;
        double sq = sqrt(disc);
        double t = -b - sq;
        if (t <= 1e-6)
            t = -b + sq;
        if (t > 1e-6 && t < best) {
            best = t;
            what = i;
        }
    }
    if (d.y < -1e-12) {
        double t = -o.y / d.y;
        if (t > 1e-6 && t < best) {
            best = t;
            what = -1;
        }
    }
    *t_out = best;
    return what;
}

static vec ray_trace(vec o, vec d, int depth)
{
    double t;
    int what = ray_hit(o, d, &t);
    if (what == -2) /* sky */
        return v(0.25 + 0.2 * d.y, 0.35 + 0.2 * d.y, 0.6 + 0.3 * d.y);
    vec p = vadd(o, vmul(d, t));
    vec n, color;
    double refl;
    if (what == -1) {
        n = v(0, 1, 0);
        int check = ((int)floor(p.x * 0.5) + (int)floor(p.z * 0.5)) & 1;
        color = check ? v(0.9, 0.9, 0.9) : v(0.2, 0.25, 0.3);
        refl = 0.15;
    } else {
        n = vnorm(vsub(p, spheres[what].c));
        color = spheres[what].color;
        refl = spheres[what].reflect;
    }
    vec sum = vmul(color, 0.08); /* ambient */
    for (int l = 0; l < 2; l++) {
        vec tl = vsub(light_pos[l], p);
        double dist = sqrt(vdot(tl, tl));
        vec ld = vmul(tl, 1.0 / dist);
        double lambert = vdot(n, ld);
        if (lambert <= 0)
            continue;
        double ts;
        ray_hit(p, ld, &ts);
        if (ts < dist) /* in shadow */
            continue;
        vec h = vnorm(vsub(ld, d));
        double spec = pow(fmax(vdot(n, h), 0.0), 40.0);
        sum = vadd(sum, vadd(vmul(color, lambert * light_power[l]), v(spec * 0.5, spec * 0.5, spec * 0.5)));
    }
    if (refl > 0 && depth < MAX_DEPTH) {
        vec r = vsub(d, vmul(n, 2.0 * vdot(d, n)));
        sum = vadd(vmul(sum, 1.0 - refl), vmul(ray_trace(p, r, depth + 1), refl));
    }
    return sum;
}

/* Renders tile number k into img (width * width * 3). */
static void render_tile(int k, float *img)
{
    int tx = k % ntiles_x, ty = k / ntiles_x;
    int x0 = tx * tile, y0 = ty * tile;
    int x1 = x0 + tile < width ? x0 + tile : width, y1 = y0 + tile < width ? y0 + tile : width;
    vec eye = v(0.0, 3.0, -16.0);
    double inv = 1.0 / (double)(width * samples);
    for (int y = y0; y < y1; y++) {
        for (int x = x0; x < x1; x++) {
            vec acc = v(0, 0, 0);
            for (int sy = 0; sy < samples; sy++) {
                for (int sx = 0; sx < samples; sx++) {
                    double u = ((double)(x * samples + sx) + 0.5) * inv * 2.0 - 1.0;
                    double w = 1.0 - ((double)(y * samples + sy) + 0.5) * inv * 2.0;
                    vec d = vnorm(v(u, w * 0.9 - 0.15, 1.6));
                    acc = vadd(acc, ray_trace(eye, d, 0));
                }
            }
            acc = vmul(acc, 1.0 / (samples * samples));
            float *px = &img[((long)y * width + x) * 3];
            px[0] = (float)acc.x;
            px[1] = (float)acc.y;
            px[2] = (float)acc.z;
        }
    }
}

static void *ray_worker(void *arg)
{
    int tid = app_tid(arg);
    long mine = 0;
    app_barrier_wait(&bar);
    t_start[tid] = app_now();
    if (tid == 0)
        app_stats_mark();
    for (;;) {
        app_lock(&work_lock);
        int k = next_tile++;
        app_unlock(&work_lock);
        if (k >= ntiles)
            break;
        render_tile(k, image);
        mine++;
    }
    tiles_done[tid] = mine;
    app_barrier_wait(&bar);
    t_end[tid] = app_now();
    if (tid == 0)
        app_stats_mark();
    return NULL;
}

/* Parallel-phase time: from the first thread leaving the start barrier to the last one leaving
 * the end barrier (thread 0 alone may be descheduled while the others already work). */
int main(int argc, char **argv)
{
    app_opts o;
    app_parse_common(argc, argv, &o, ray_usage);
    static const long W[4] = {64, 384, 768, 1024};
    width = (int)app_flag_long(argc, argv, &o, "-w", W[app_size_index(&o)], 8, 8192);
    tile = (int)app_flag_long(argc, argv, &o, "-b", 16, 1, 1024);
    samples = (int)app_flag_long(argc, argv, &o, "-a", 2, 1, 16);
    nspheres = (int)app_flag_long(argc, argv, &o, "-o", 48, 1, 100000);
    nthreads = o.threads;
    ntiles_x = (width + tile - 1) / tile;
    ntiles = ntiles_x * ntiles_x;

    /* The scene: spheres resting on the plane on a jittered grid, built by main. */
    spheres = app_alloc((size_t)nspheres, sizeof *spheres, "spheres");
    app_rng rng;
    app_rng_seed(&rng, 12345);
    int side = (int)ceil(sqrt((double)nspheres));
    for (int i = 0; i < nspheres; i++) {
        sphere *s = &spheres[i];
        s->r = 0.35 + 0.5 * app_rng_double(&rng);
        double gx = (double)(i % side) - 0.5 * (side - 1), gz = (double)(i / side) - 0.5 * (side - 1);
        s->c = v(gx * 2.2 + 0.6 * (app_rng_double(&rng) - 0.5), s->r,
                 gz * 2.2 + 0.6 * (app_rng_double(&rng) - 0.5) + 4.0);
        s->color = v(0.2 + 0.8 * app_rng_double(&rng), 0.2 + 0.8 * app_rng_double(&rng),
                     0.2 + 0.8 * app_rng_double(&rng));
        s->reflect = app_rng_double(&rng) < 0.4 ? 0.5 : 0.0;
    }
    image = app_alloc_uninit((size_t)width * width * 3, sizeof *image, "image");
    tiles_done = app_alloc((size_t)nthreads, sizeof *tiles_done, "tiles per thread");
    app_lock_init(&work_lock);
    next_tile = 0;
    app_barrier_init(&bar, nthreads);
    t_start = app_alloc((size_t)nthreads, sizeof *t_start, "start stamps");
    t_end = app_alloc((size_t)nthreads, sizeof *t_end, "end stamps");

    app_run_team(nthreads, ray_worker, NULL);

    long npix = (long)width * width * 3;
    double check = 0;
    for (long i = 0; i < npix; i++)
        check += image[i];
    long most = 0, least = ntiles;
    for (int t = 0; t < nthreads; t++) {
        most = tiles_done[t] > most ? tiles_done[t] : most;
        least = tiles_done[t] < least ? tiles_done[t] : least;
    }
    int ok = 0;
    char note[240];
    snprintf(note, sizeof note, "%dx%d, %d tiles of %d px, %d samples/px, %d spheres; tiles per thread %ld..%ld, not checked",
             width, width, ntiles, tile, samples * samples, nspheres, least, most);
    if (o.verify) {
        float *ref = malloc((size_t)npix * sizeof *ref);
        if (ref == NULL) {
            fprintf(stderr, "raytrace: out of memory for the reference image\n");
            exit(2);
        }
        for (int k = 0; k < ntiles; k++)
            render_tile(k, ref);
        double worst = 0;
        long at = 0;
        for (long i = 0; i < npix; i++) {
            double d = fabs((double)image[i] - (double)ref[i]);
            if (d > worst) {
                worst = d;
                at = i;
            }
        }
        ok = worst <= 1e-12;
        snprintf(note, sizeof note,
                 "%dx%d, %d tiles of %d px, %d samples/px, %d spheres; tiles per thread %ld..%ld; "
                 "max |pixel - sequential| %.3g (at %ld)",
                 width, width, ntiles, tile, samples * samples, nspheres, least, most, worst, at);
        free(ref);
    }
    app_finish("raytrace", &o, app_phase_time(t_start, t_end, nthreads), ok, check, note);
}
