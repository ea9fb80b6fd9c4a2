/*
 * crl.h - the C Region Library (CRL 1.0) interface on Squall.
 *
 * A region is a contiguous block of bytes of any size, created by one node (its home) and
 * named everywhere by a region id. A node maps a region to get the address of its local copy
 * and accesses the bytes only inside operations: rgn_start_read/rgn_end_read (any number of
 * readers) and rgn_start_write/rgn_end_write (one writer in the whole job, no readers).
 * Copies stay cached across operations: a read copy until someone writes the region, a
 * written copy at its writer until someone else asks for it; the home's directory
 * invalidates read copies and recalls written ones (Squall's README, "CRL regions", and
 * docs/memory-model.md).
 *
 * Build: cc prog.c $(pkg-config --cflags --libs squall-crl); run: squall run -n N ./prog
 *
 * CRL's calls return nothing: a failing call (an id that was never created or was deleted,
 * an operation ended that was not started, a lost node) prints "crl: CALL: why" and ends the
 * process with status 1, and the job ends with it.
 *
 * Statistics (SQUALL_STATS=1): regions.read_misses, write_misses, read_hits, write_hits,
 * invalidations (copies this node dropped), recalls (written copies it sent back),
 * messages_sent and per-kind counts, beside the node's other counters.
 */
#ifndef SQUALL_CRL_H
#define SQUALL_CRL_H

#ifdef __cplusplus
extern "C" {
#endif

/* A region id: the same on every node (the home's number in the top 10 bits). */
typedef unsigned rid_t;

/* This node's number (0 .. crl_num_nodes-1) and the number of nodes; set by crl_init. */
extern int crl_self_addr;
extern int crl_num_nodes;

/* Start CRL on this node: every node calls it before anything else. The node leaves the job
 * when the process exits. */
void crl_init(void);

/* Create a region of `size` bytes, zero-filled, homed on this node. Map it to use it. */
rid_t rgn_create(unsigned size);
/* Delete a region; no node may use it afterwards. */
void rgn_delete(rid_t rgn_id);

/* Map a region on this node: the address of its bytes (the same address while it stays
 * mapped; mapping twice returns it again, each map wants its own unmap). */
void *rgn_map(rid_t rgn_id);
/* Unmap a region (`rgn` is the address rgn_map returned); its copy stays cached here. */
void rgn_unmap(void *rgn);
/* The id and the size in bytes of a mapped region. */
rid_t rgn_rid(void *rgn);
unsigned rgn_size(void *rgn);

/* Operations on a mapped region. A read waits until this node has a current copy and nobody
 * writes the region; a write waits until this node has the only copy and nobody else reads
 * or writes it. Several threads of a node may read at once; start and end are paired by the
 * program. */
void rgn_start_read(void *rgn);
void rgn_end_read(void *rgn);
void rgn_start_write(void *rgn);
void rgn_end_write(void *rgn);

/* Send this node's copy home and drop it here (outside any operation on the region). */
void rgn_flush(void *rgn);

/* Global synchronization: a barrier of every node; a broadcast from the calling node to
 * every other node (each receives it with rgn_bcast_recv, of the same size); reductions of
 * one double per node (every node calls; every node gets the result). */
void rgn_barrier(void);
void rgn_bcast_send(int nbytes, void *buf);
void rgn_bcast_recv(int nbytes, void *buf);
double rgn_reduce_dadd(double arg);
double rgn_reduce_dmin(double arg);
double rgn_reduce_dmax(double arg);

#ifdef __cplusplus
}
#endif

#endif /* SQUALL_CRL_H */
