//! Run-length diffs between a twin and the current page (multiple-writer protocols).
//!
//! Owns: diff creation (byte-exact: runs hold changed bytes only, so writers of neighbouring
//! bytes never clobber each other) and application. Encoding: repeated `(offset: u16, len: u16, bytes[len])`.
//! Must not touch: page access rights, messages.

use squall_core::PAGE_SIZE;

/// Encode the bytes of `cur` that differ from `twin`. Empty when the page is unchanged.
/// Equal stretches are skipped 64 and 8 bytes at a time, and a run of changed bytes grows a
/// word at a time while every byte of the word differs (a row rewritten whole is one run
/// found at memory speed, not a byte at a time).
pub fn make_diff(twin: &[u8], cur: &[u8]) -> Vec<u8> {
    debug_assert_eq!(twin.len(), PAGE_SIZE);
    debug_assert_eq!(cur.len(), PAGE_SIZE);
    let n = twin.len().min(cur.len());
    let (twin, cur) = (&twin[..n], &cur[..n]);
    let mut out = Vec::new();
    let mut i = 0usize;
    while i < n {
        // Skip equal blocks, then equal words, then equal bytes.
        if i.is_multiple_of(64) && i + 64 <= n && twin[i..i + 64] == cur[i..i + 64] {
            i += 64;
            continue;
        }
        if i.is_multiple_of(8) && i + 8 <= n && word(twin, i) == word(cur, i) {
            i += 8;
            continue;
        }
        if twin[i] == cur[i] {
            i += 1;
            continue;
        }
        let start = i;
        // A run holds changed bytes only: an unchanged byte inside a run would carry this
        // writer's stale copy of a byte another writer may have changed (false sharing).
        let mut end = i + 1;
        while end < n && !end.is_multiple_of(8) && twin[end] != cur[end] {
            end += 1;
        }
        if end.is_multiple_of(8) {
            while end + 8 <= n && !has_zero_byte(word(twin, end) ^ word(cur, end)) {
                end += 8;
            }
            while end < n && twin[end] != cur[end] {
                end += 1;
            }
        }
        if out.is_empty() {
            out.reserve(n - start + 4);
        }
        out.extend_from_slice(&(start as u16).to_le_bytes());
        out.extend_from_slice(&((end - start) as u16).to_le_bytes());
        out.extend_from_slice(&cur[start..end]);
        i = end;
    }
    out
}

/// The 8 bytes of `s` at `i` (`i + 8 <= s.len()`) as one word.
fn word(s: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[i..i + 8]);
    u64::from_le_bytes(w)
}

/// Whether any byte of `x` is zero (exact as a whole, though not per byte).
fn has_zero_byte(x: u64) -> bool {
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    x.wrapping_sub(LOW) & !x & HIGH != 0
}

/// Number of changed bytes a diff carries (its payload, for statistics).
pub fn diff_payload(diff: &[u8]) -> Option<usize> {
    let mut total = 0;
    walk(diff, |_, b| total += b.len())?;
    Some(total)
}

/// Apply a diff to a page buffer. `None` if the diff is malformed (nothing is applied then).
pub fn apply_diff(page: &mut [u8], diff: &[u8]) -> Option<()> {
    for_each_run(diff, |off, b| page[off..off + b.len()].copy_from_slice(b))
}

/// Call `f(offset, bytes)` for every run of a diff, after checking the whole diff is well
/// formed (`None`, and no call, if it is not). Used to apply a diff in place, run by run.
pub fn for_each_run(diff: &[u8], f: impl FnMut(usize, &[u8])) -> Option<()> {
    walk(diff, |_, _| {})?;
    walk(diff, f)
}

fn walk(diff: &[u8], mut f: impl FnMut(usize, &[u8])) -> Option<()> {
    let mut i = 0usize;
    while i < diff.len() {
        let hdr = diff.get(i..i + 4)?;
        let off = usize::from(u16::from_le_bytes([hdr[0], hdr[1]]));
        let len = usize::from(u16::from_le_bytes([hdr[2], hdr[3]]));
        if off + len > PAGE_SIZE {
            return None;
        }
        let body = diff.get(i + 4..i + 4 + len)?;
        f(off, body);
        i += 4 + len;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_round_trip_and_merge_of_disjoint_writers() {
        let twin = vec![0u8; PAGE_SIZE];
        let mut a = twin.clone();
        let mut b = twin.clone();
        a[0] = 1;
        a[4095] = 2;
        a[100..120].fill(9);
        b[1] = 3; // neighbouring byte written by another node
        let da = make_diff(&twin, &a);
        let db = make_diff(&twin, &b);
        assert_eq!(diff_payload(&da), Some(1 + 1 + 20));
        let mut home = twin.clone();
        apply_diff(&mut home, &da).expect("valid diff");
        apply_diff(&mut home, &db).expect("valid diff");
        assert_eq!(home[0], 1);
        assert_eq!(home[1], 3);
        assert_eq!(home[4095], 2);
        assert!(home[100..120].iter().all(|&x| x == 9));
        assert!(make_diff(&twin, &twin).is_empty());
    }

    /// The byte-at-a-time definition `make_diff` must match.
    fn reference_diff(twin: &[u8], cur: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < twin.len() {
            if twin[i] == cur[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < twin.len() && twin[i] != cur[i] {
                i += 1;
            }
            out.extend_from_slice(&(start as u16).to_le_bytes());
            out.extend_from_slice(&((i - start) as u16).to_le_bytes());
            out.extend_from_slice(&cur[start..i]);
        }
        out
    }

    proptest::proptest! {
        /// Pages changed in runs of any length and alignment, with bytes rewritten to their
        /// old value inside them: the fast scan finds exactly the byte-wise runs.
        #[test]
        fn make_diff_matches_the_bytewise_definition(
            runs in proptest::collection::vec((0usize..PAGE_SIZE, 1usize..600, 0u8..4), 0..12),
            seed in 0u64..u64::MAX,
        ) {
            let twin: Vec<u8> = (0..PAGE_SIZE)
                .map(|i| (i as u64).wrapping_mul(seed | 1).rotate_left(17) as u8)
                .collect();
            let mut cur = twin.clone();
            for (k, (off, len, kind)) in runs.into_iter().enumerate() {
                for j in off..(off + len).min(PAGE_SIZE) {
                    cur[j] = match kind {
                        // Some bytes keep their value (equal bytes inside a changed stretch).
                        0 if (j + k) % 5 == 0 => twin[j],
                        _ => twin[j].wrapping_add(1 + (j % 7) as u8),
                    };
                }
            }
            let d = make_diff(&twin, &cur);
            proptest::prop_assert_eq!(&d, &reference_diff(&twin, &cur));
            let mut home = twin.clone();
            proptest::prop_assert!(apply_diff(&mut home, &d).is_some());
            proptest::prop_assert_eq!(home, cur);
        }
    }

    #[test]
    fn malformed_diff_is_rejected_without_writing() {
        let mut page = vec![0u8; PAGE_SIZE];
        let mut bad = vec![0, 0, 2, 0, 7, 7]; // fine run
        bad.extend_from_slice(&[0xff, 0x0f, 10, 0]); // offset 4095 + 10 > page
        assert_eq!(apply_diff(&mut page, &bad), None);
        assert!(page.iter().all(|&x| x == 0));
        assert_eq!(apply_diff(&mut page, &[1, 2, 3]), None);
    }
}
