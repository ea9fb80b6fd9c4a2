/* Read sharing with caching: node 0 fills a region of SIZE bytes; every node then reads it
 * READS times. The copy stays cached across read operations, so each other node misses once
 * (the statistics say so: regions.read_misses, read_hits); node 0 then writes it again, which
 * invalidates every copy (regions.invalidations), and the next reads see the new bytes.
 * Prints "ok crl sharing". */
#include <crl.h>
#include <squall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of counter `name` in the "regions" object of this node's statistics. */
static long region_stat(const char *name)
{
    char key[64];
    char *json = squall_stats_json();
    const char *p;
    long v = -1;
    if (!json)
        return -1;
    p = strstr(json, "\"regions\":");
    snprintf(key, sizeof key, "\"%s\":", name);
    if (p)
        p = strstr(p, key);
    if (p)
        v = strtol(p + strlen(key), NULL, 10);
    squall_string_free(json);
    return v;
}

static int check(const unsigned char *b, unsigned size, int round)
{
    unsigned i;
    for (i = 0; i < size; i++)
        if (b[i] != (unsigned char)(i * 7 + round))
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    unsigned size = argc > 1 ? (unsigned)atoi(argv[1]) : 20000;
    int reads = argc > 2 ? atoi(argv[2]) : 40;
    rid_t rid;
    unsigned char *b;
    unsigned i;
    int r, ok;
    long m0, h0, misses, hits, inv;

    crl_init();
    if (crl_self_addr == 0) {
        rid = rgn_create(size);
        rgn_bcast_send(sizeof(rid), &rid);
    } else {
        rgn_bcast_recv(sizeof(rid), &rid);
    }
    b = (unsigned char *)rgn_map(rid);
    if (crl_self_addr == 0) {
        rgn_start_write(b);
        for (i = 0; i < size; i++)
            b[i] = (unsigned char)(i * 7 + 1);
        rgn_end_write(b);
    }
    rgn_barrier();
    m0 = region_stat("read_misses");
    h0 = region_stat("read_hits");
    for (r = 0; r < reads; r++) {
        rgn_start_read(b);
        ok = check(b, size, 1);
        rgn_end_read(b);
        if (!ok) {
            printf("WRONG: node %d read %d saw other bytes\n", crl_self_addr, r);
            return 1;
        }
    }
    misses = region_stat("read_misses") - m0;
    hits = region_stat("read_hits") - h0;
    /* Node 0 holds the copy it wrote; every other node misses once and then hits. */
    if (misses != (crl_self_addr == 0 ? 0 : 1) || hits != reads - misses) {
        printf("WRONG: node %d: %ld misses, %ld hits in %d reads\n", crl_self_addr, misses,
               hits, reads);
        return 1;
    }
    rgn_barrier();
    if (crl_self_addr == 0) {
        rgn_start_write(b);
        for (i = 0; i < size; i++)
            b[i] = (unsigned char)(i * 7 + 2);
        rgn_end_write(b);
    }
    rgn_barrier();
    rgn_start_read(b);
    ok = check(b, size, 2);
    rgn_end_read(b);
    inv = region_stat("invalidations");
    if (!ok || (crl_self_addr != 0 && inv != 1)) {
        printf("WRONG: node %d after the second write: bytes %s, %ld invalidations\n",
               crl_self_addr, ok ? "right" : "wrong", inv);
        return 1;
    }
    rgn_barrier();
    if (crl_self_addr == 0)
        printf("ok crl sharing %u bytes %d reads\n", size, reads);
    return 0;
}
