/*
 * spmd.h - what the SPMD style versions of the apps share (<app>/<app>_crl.c over CRL regions,
 * <app>/<app>_splitc.c over Split-C global pointers; built with -DAPP_STYLE, one process per
 * node): the timed phase's clock, and for the Split-C style the error check of squall.h calls,
 * start-up, symmetric allocation, the gathering of per-node blocks and the end of the run; for
 * the CRL style (include <crl.h> before this header) the regions of a node's block.
 *
 * Owns: that boilerplate, nothing on a compute path (every helper runs once per run, or once per
 * block at set-up and at the check). Must not touch: communication inside the timed phase, the
 * arithmetic and the checks (each app's own file and kernel header).
 */
#ifndef APP_SPMD_H
#define APP_SPMD_H
#include "app.h"

#ifndef APP_STYLE
#error "spmd.h is for the SPMD style builds (-DAPP_STYLE=\"<style>\")"
#endif

#include <errno.h> /* program_invocation_short_name (_GNU_SOURCE, set by app.h) */

/* Reads the clock at a bound of the timed phase (called by every node right after the barrier
 * that opens or closes it); node 0 also marks the statistics there (app_stats_mark). */
static inline double spmd_clock(int me)
{
    double t = app_now();
    if (me == 0)
        app_stats_mark();
    return t;
}

/* The block partition of n elements over p nodes (app_block_range): returns qlo[0..p], node q
 * holding [qlo[q], qlo[q + 1]); *chunk gets the largest block (the symmetric arrays' length). */
static inline long *spmd_blocks(long n, int p, long *chunk)
{
    long *qlo = app_alloc((size_t)p + 1, sizeof(long), "block starts");
    *chunk = 0;
    for (int q = 0; q < p; q++) {
        long a, b;
        app_block_range(n, p, q, &a, &b);
        qlo[q] = a;
        qlo[q + 1] = b;
        *chunk = b - a > *chunk ? b - a : *chunk;
    }
    return qlo;
}

/* ------------------------------------------------------------ Split-C (squall.h) */

/* OK(call): a squall.h call that fails (< 0) ends this node with the call's text and
 * squall_last_error(), prefixed by the program's name. */
#define OK(call)                                                                                               \
    do {                                                                                                       \
        if ((call) < 0) {                                                                                      \
            fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, #call, squall_last_error());      \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

/* Joins the job (squall_init, squall_gptr_start): *me gets this node's rank, *p the node count,
 * which is also the run's thread count in the RESULT line. */
static inline void spmd_start(app_opts *o, int *me, int *p)
{
    OK(squall_init());
    OK(squall_gptr_start());
    *me = squall_rank();
    *p = squall_size();
    o->threads = *p;
}

/* Symmetric memory (squall_all_alloc: every node calls it in the same order and gets the same
 * address), at least one byte; ends the node with a message naming `what` if it fails. */
static inline void *spmd_alloc(size_t bytes, const char *what)
{
    void *x = squall_all_alloc(bytes ? bytes : 1);
    if (x == NULL) {
        fprintf(stderr, "%s: squall_all_alloc for %s: %s\n", program_invocation_short_name, what,
                squall_last_error());
        exit(1);
    }
    return x;
}

/* Node 0's gathering for the check: node q holds elements [qlo[q], qlo[q + 1]) of an array of
 * `elem`-byte elements at the symmetric address `mine`; dst (the whole array) gets them all,
 * its own by copy, the others' by blocking bulk reads. */
static inline void spmd_gather_blocks(void *dst, const void *mine, const long *qlo, int p, int me, size_t elem)
{
    for (int q = 0; q < p; q++) {
        long cnt = qlo[q + 1] - qlo[q];
        if (cnt == 0)
            continue;
        char *to = (char *)dst + (size_t)qlo[q] * elem;
        if (q == me) {
            memcpy(to, mine, (size_t)cnt * elem);
        } else {
            SquallGptr from = {(uint32_t)q, (void *)mine};
            OK(squall_gptr_read(to, from, (size_t)cnt * elem));
        }
    }
}

/* The end of the run: a barrier (node 0 has checked), node 0 prints the RESULT line, every node
 * leaves the job. Returns main's exit status: 0 if verified or not checked, 1 otherwise. */
static inline int spmd_finish(const char *app, const app_opts *o, int me, double time_s, int ok, double check,
                              const char *note)
{
    OK(squall_barrier());
    if (me == 0)
        app_result(app, o, time_s, ok, check, note);
    OK(squall_finalize());
    return (ok || !o->verify) ? 0 : 1;
}

/* ------------------------------------------------------------ CRL (crl.h) */
#ifdef SQUALL_CRL_H

/* Joins the job (crl_init): *me gets this node's id, *p the node count, which is also the
 * run's thread count in the RESULT line. */
static inline void crl_spmd_start(app_opts *o, int *me, int *p)
{
    crl_init();
    *me = crl_self_addr;
    *p = crl_num_nodes;
    o->threads = *p;
}

/* One region of `elem` bytes per element of this node's block [lo, hi) of n, created here and
 * initialised from init (the whole array, `elem`-byte elements); then every node's block of ids
 * is broadcast in node order, so ids[0..n) ends the same on every node. */
static inline void crl_block_regions(rid_t *ids, const void *init, long n, size_t elem, int p, int me)
{
    long lo, hi;
    app_block_range(n, p, me, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        ids[i] = rgn_create((unsigned)elem);
        void *x = rgn_map(ids[i]);
        rgn_start_write(x);
        memcpy(x, (const char *)init + (size_t)i * elem, elem);
        rgn_end_write(x);
        rgn_unmap(x);
    }
    for (int q = 0; q < p; q++) { /* node q broadcasts its block's ids */
        long qlo, qhi;
        app_block_range(n, p, q, &qlo, &qhi);
        if (qhi > qlo) {
            int bytes = (int)((qhi - qlo) * (long)sizeof(rid_t));
            if (q == me)
                rgn_bcast_send(bytes, &ids[qlo]);
            else
                rgn_bcast_recv(bytes, &ids[qlo]);
        }
        rgn_barrier(); /* one broadcast at a time */
    }
}

#endif /* SQUALL_CRL_H */

#endif /* APP_SPMD_H */
