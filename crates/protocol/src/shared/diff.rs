//! Run-length diffs between a twin and the current page (multiple-writer protocols).
//!
//! Owns: diff creation (byte-exact: runs hold changed bytes only, so writers of neighbouring
//! bytes never clobber each other) and application. Encoding: repeated `(offset: u16, len: u16, bytes[len])`.
//! Must not touch: page access rights, messages.

use squall_core::PAGE_SIZE;

/// Encode the bytes of `cur` that differ from `twin`. Empty when the page is unchanged.
pub fn make_diff(twin: &[u8], cur: &[u8]) -> Vec<u8> {
    debug_assert_eq!(twin.len(), PAGE_SIZE);
    debug_assert_eq!(cur.len(), PAGE_SIZE);
    let mut out = Vec::new();
    let mut i = 0usize;
    let n = twin.len().min(cur.len());
    while i < n {
        // Skip equal 8-byte words quickly, then equal bytes.
        if i & 7 == 0 && i + 8 <= n && twin[i..i + 8] == cur[i..i + 8] {
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
        while end < n && twin[end] != cur[end] {
            end += 1;
        }
        out.extend_from_slice(&(start as u16).to_le_bytes());
        out.extend_from_slice(&((end - start) as u16).to_le_bytes());
        out.extend_from_slice(&cur[start..end]);
        i = end;
    }
    out
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
