//! Per-link packet authentication state of one node: the job key, the next authentication
//! sequence number toward each peer, the replay window of each peer, and the rate-limited
//! warning about refused packets. Owns sealing outgoing packets and checking incoming ones;
//! must not touch sockets, handlers or the reliability layer (a refused packet is simply never
//! handed on, so it cannot change anything above).
//!
//! The arithmetic (keyed BLAKE3 tag, trailer layout, window) is `squall_wire::auth`'s.
use crate::stats::DropReason;
use squall_core::NodeId;
use squall_wire::auth::{AuthKey, ReplayWindow};
use squall_wire::{encode_into, encode_sealed_into, Flags, Header, Packet, HEADER_LEN};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// At most one warning about refused packets per this interval (the others are counted and
/// summed into the next warning).
const WARN_INTERVAL: Duration = Duration::from_secs(1);

/// Authentication of one node's links to its peers.
#[derive(Debug)]
pub(crate) struct LinkAuth {
    key: AuthKey,
    /// Payloads are encrypted too (ChaCha20-Poly1305), not only tagged.
    encrypt: bool,
    /// Next authentication sequence number toward each peer (from 1).
    next_seq: Vec<u64>,
    /// What each peer has already sent us.
    windows: Vec<ReplayWindow>,
    /// Packets that passed the check.
    pub authenticated: u64,
    last_warn: Option<Instant>,
    unreported: u64,
}

impl LinkAuth {
    /// State for a job of `size` nodes; `in_order`: the transport keeps order (tcp), so
    /// sequence numbers must increase; otherwise a window tolerates reordering (udp).
    pub(crate) fn new(key: AuthKey, size: usize, in_order: bool, encrypt: bool) -> LinkAuth {
        let window = if in_order {
            ReplayWindow::in_order()
        } else {
            ReplayWindow::datagram()
        };
        LinkAuth {
            key,
            encrypt,
            next_seq: vec![1; size],
            windows: vec![window; size],
            authenticated: 0,
            last_warn: None,
            unreported: 0,
        }
    }

    fn take_seq(&mut self, to: NodeId) -> u64 {
        match self.next_seq.get_mut(to.index()) {
            Some(s) => {
                let v = *s;
                *s += 1;
                v
            }
            // Not a peer of this job: the receiver refuses it anyway.
            None => 0,
        }
    }

    /// Appends `header` (with `AUTH` set) + `payload` + trailer to `out`, using the next
    /// sequence number toward `header.dst`.
    pub(crate) fn seal_into(&mut self, header: &Header, payload: &[u8], out: &mut Vec<u8>) {
        let seq = self.take_seq(header.dst);
        if !self.encrypt {
            encode_sealed_into(header, payload, &self.key, seq, out);
            return;
        }
        let mut h = *header;
        h.flags.insert(Flags::AUTH);
        let start = out.len();
        encode_into(&h, payload, out);
        let (head, body) = out[start..].split_at_mut(HEADER_LEN);
        let trailer = self.key.seal_encrypted(head, body, seq);
        out.extend_from_slice(&trailer);
    }

    /// True when payloads are encrypted: a writer must then go through
    /// [`LinkAuth::seal_into`] (its own copy), never send the caller's payload as is.
    pub(crate) fn encrypts(&self) -> bool {
        self.encrypt
    }

    /// The trailer for a packet whose encoded header (with `AUTH` set) is `header` toward `to`
    /// (for writers that send header, payload and trailer as separate slices; tagging only,
    /// see [`LinkAuth::encrypts`]).
    pub(crate) fn trailer(
        &mut self,
        to: NodeId,
        header: &[u8; HEADER_LEN],
        payload: &[u8],
    ) -> [u8; squall_wire::AUTH_TRAILER_LEN] {
        let seq = self.take_seq(to);
        self.key.trailer(header, payload, seq)
    }

    /// Checks a decoded packet from `pkt.header.src` (already known to be a peer of this
    /// job): an unsealed packet or a wrong tag is [`DropReason::BadMac`], a sequence number
    /// already received (or older than the window) is [`DropReason::Replayed`]. With
    /// encryption, returns the decrypted payload (use it instead of `pkt.payload`).
    pub(crate) fn check(&mut self, pkt: &Packet<'_>) -> Result<Option<Vec<u8>>, DropReason> {
        let trailer = pkt.trailer.ok_or(DropReason::BadMac)?;
        let mut plain = None;
        let seq = if self.encrypt {
            let mut buf = pkt.payload.to_vec();
            let seq = self
                .key
                .open_encrypted(pkt.header_bytes, &mut buf, trailer)
                .map_err(|_| DropReason::BadMac)?;
            plain = Some(buf);
            seq
        } else {
            self.key
                .verify(pkt.header_bytes, pkt.payload, trailer)
                .map_err(|_| DropReason::BadMac)?
        };
        let w = self
            .windows
            .get_mut(pkt.header.src.index())
            .ok_or(DropReason::BadDest)?;
        w.accept(seq).map_err(|_| DropReason::Replayed)?;
        self.authenticated += 1;
        Ok(plain)
    }

    /// Logs that a packet claiming to come from `claimed` (at `addr`) was refused for
    /// `why`; at most one line per second, the others summed into the next.
    pub(crate) fn warn(
        &mut self,
        now: Instant,
        me: NodeId,
        claimed: NodeId,
        addr: Option<SocketAddr>,
        why: DropReason,
    ) {
        if self
            .last_warn
            .is_some_and(|t| now.duration_since(t) < WARN_INTERVAL)
        {
            self.unreported += 1;
            return;
        }
        let what = match why {
            DropReason::Replayed => {
                "its sequence number was already received (a replay, or a copy the network duplicated)"
            }
            _ => "its authentication tag does not match this job's key",
        };
        let at = addr.map_or_else(String::new, |a| format!(" at {a}"));
        let more = match std::mem::take(&mut self.unreported) {
            0 => String::new(),
            n => format!(" ({n} more refused since the last warning)"),
        };
        eprintln!(
            "squall: {me}: warning: dropped a packet claiming to come from {claimed}{at}: \
             {what}{more}; nothing was delivered"
        );
        self.last_warn = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squall_core::JobId;
    use squall_wire::{decode_packet, MsgType};

    fn packet(a: &mut LinkAuth, src: u16, dst: u16, body: &[u8]) -> Vec<u8> {
        let h = Header::new(JobId(5), MsgType(70), NodeId(src), NodeId(dst));
        let mut out = Vec::new();
        a.seal_into(&h, body, &mut out);
        out
    }

    #[test]
    fn sealed_packets_pass_once_and_forgeries_never() {
        let key = AuthKey::from_bytes([1; 32]);
        let mut tx = LinkAuth::new(key.clone(), 2, false, false);
        let mut rx = LinkAuth::new(key, 2, false, false);
        let p1 = packet(&mut tx, 1, 0, b"first");
        let p2 = packet(&mut tx, 1, 0, b"second");
        // Reordered delivery is fine; each packet once.
        assert_eq!(rx.check(&decode_packet(&p2).expect("p2")), Ok(None));
        assert_eq!(rx.check(&decode_packet(&p1).expect("p1")), Ok(None));
        assert_eq!(
            rx.check(&decode_packet(&p1).expect("p1")),
            Err(DropReason::Replayed)
        );
        assert_eq!(rx.authenticated, 2);
        // Another key.
        let mut evil = LinkAuth::new(AuthKey::from_bytes([2; 32]), 2, false, false);
        let f = packet(&mut evil, 1, 0, b"forged");
        assert_eq!(
            rx.check(&decode_packet(&f).expect("f")),
            Err(DropReason::BadMac)
        );
        // A captured packet with one payload byte changed.
        let mut t = packet(&mut tx, 1, 0, b"third");
        t[HEADER_LEN] ^= 1;
        assert_eq!(
            rx.check(&decode_packet(&t).expect("t")),
            Err(DropReason::BadMac)
        );
        // Stripping the AUTH flag leaves an unsealed packet: refused.
        let mut plain = Header::new(JobId(5), MsgType(70), NodeId(1), NodeId(0));
        plain.flags = Flags::empty();
        let u = squall_wire::encode(&plain, b"plain");
        assert_eq!(
            rx.check(&decode_packet(&u).expect("u")),
            Err(DropReason::BadMac)
        );
        assert_eq!(rx.authenticated, 2);
    }

    #[test]
    fn stream_links_want_increasing_numbers() {
        let key = AuthKey::from_bytes([3; 32]);
        let mut tx = LinkAuth::new(key.clone(), 2, true, false);
        let mut rx = LinkAuth::new(key, 2, true, false);
        let p1 = packet(&mut tx, 0, 1, b"a");
        let p2 = packet(&mut tx, 0, 1, b"b");
        assert_eq!(rx.check(&decode_packet(&p2).expect("p2")), Ok(None));
        assert_eq!(
            rx.check(&decode_packet(&p1).expect("p1")),
            Err(DropReason::Replayed)
        );
    }

    #[test]
    fn encrypted_links_deliver_the_plaintext_once() {
        let key = AuthKey::from_bytes([4; 32]);
        let mut tx = LinkAuth::new(key.clone(), 2, false, true);
        let mut rx = LinkAuth::new(key.clone(), 2, false, true);
        let p = packet(&mut tx, 1, 0, b"page contents");
        assert!(
            !p.windows(8).any(|w| w == b"contents"),
            "plaintext on the wire"
        );
        let d = decode_packet(&p).expect("p");
        assert_eq!(rx.check(&d), Ok(Some(b"page contents".to_vec())));
        assert_eq!(rx.check(&d), Err(DropReason::Replayed));
        // A tag-only receiver cannot take it, nor can an encrypting one take a tagged packet.
        let mut mac = LinkAuth::new(key.clone(), 2, false, false);
        assert_eq!(mac.check(&d), Err(DropReason::BadMac));
        let mut tagger = LinkAuth::new(key, 2, false, false);
        let q = packet(&mut tagger, 1, 0, b"x");
        assert_eq!(
            rx.check(&decode_packet(&q).expect("q")),
            Err(DropReason::BadMac)
        );
    }
}
