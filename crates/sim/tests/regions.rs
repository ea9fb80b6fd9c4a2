//! 10,000 seeds of the CRL region protocol in the simulator (loss, duplication and
//! reordering on half of them), each checked against the sequential reference.
use squall_sim::regions::run_seed;

#[test]
fn region_protocol_ten_thousand_seeds() {
    let seeds = 10_000u64;
    let (mut misses, mut invalidations, mut recalls, mut resent) = (0u64, 0u64, 0u64, 0u64);
    for s in 0..seeds {
        match run_seed(s, false) {
            Ok(r) => {
                misses += r.read_misses + r.write_misses;
                invalidations += r.invalidations;
                recalls += r.recalls;
                resent += r.retransmissions;
            }
            Err(e) => panic!(
                "seed {s}: {e}\nreplay: cargo run -p squall-sim --release -- --model regions --seed {s} --trace"
            ),
        }
    }
    // The seeds exercised what they check: misses, invalidations, recalls, lost datagrams.
    assert!(misses > seeds, "misses {misses}");
    assert!(invalidations > seeds / 10, "invalidations {invalidations}");
    assert!(recalls > seeds / 10, "recalls {recalls}");
    assert!(resent > 0, "no datagram was retransmitted");
    println!("{seeds} seeds: {misses} misses, {invalidations} invalidations, {recalls} recalls, {resent} retransmissions");
}
