//! Packet authentication: the per-job key, the MAC trailer of [`Flags::AUTH`](crate::Flags::AUTH)
//! packets and the replay window. Owns the cryptographic arithmetic only; must not touch
//! sockets, clocks, environment variables or random number generators (the launcher makes the
//! key, the transports keep the per-peer state).
//!
//! Trailer (after the payload, [`AUTH_TRAILER_LEN`] = 40 bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | authentication sequence number (little-endian), per sender→receiver pair, from 1 |
//! | 8 | 32 | tag (below) |
//!
//! For a payload of more than [`SHORT_PAYLOAD`] bytes,
//! tag = BLAKE3(k_packet; header ‖ sequence number ‖ BLAKE3(k_payload; payload)); for a
//! shorter one, tag = BLAKE3(k_short; header ‖ sequence number ‖ payload). The three keys are
//! derived from the job key by BLAKE3's key derivation (three contexts: no two uses share a
//! key, and the header's length field says which form applies). Hashing a long payload alone,
//! in one call, lets BLAKE3 hash its 1 KiB chunks side by side with SIMD (a 4 KiB payload
//! costs less than half of one streaming pass over header and payload, whose first chunk is
//! not aligned); a short one has no chunks to spread, so one pass over everything is cheapest.
//!
//! Encryption (optional, [`AuthKey::seal_encrypted`]): the payload is encrypted in place with
//! ChaCha20-Poly1305 under a fourth derived key, the nonce being source rank ‖ destination rank
//! ‖ sequence number (never reused: each sender numbers each pair's packets from 1), the header
//! as associated data; the trailer then holds the sequence number, the 16-byte Poly1305 tag
//! and 16 zero bytes, and the receiver decrypts and checks in one step
//! ([`AuthKey::open_encrypted`]). Which form a job uses is a job-wide setting.
//!
//! The tag covers every header byte (job id, type, source and destination ranks, flags
//! including `AUTH` itself, reliability sequence and ack, request id, length, fragment fields),
//! the whole payload and the authentication sequence number, so a packet cannot be altered,
//! redirected to another node, credited to another sender or replayed (the receiver keeps a
//! [`ReplayWindow`] per sender) without the key. Tags are compared in constant time
//! (`blake3::Hash`'s equality).
use std::fmt;

/// Bytes of a per-job key.
pub const KEY_LEN: usize = 32;
/// Bytes of the authentication sequence number in the trailer.
pub const AUTH_SEQ_LEN: usize = 8;
/// Bytes of the tag in the trailer (a whole BLAKE3 output).
pub const AUTH_TAG_LEN: usize = 32;
/// Bytes of the trailer an authenticated packet carries after its payload.
pub const AUTH_TRAILER_LEN: usize = AUTH_SEQ_LEN + AUTH_TAG_LEN;

/// A per-job secret key (and the two keys derived from it). Its `Debug` form never shows it.
#[derive(Clone)]
pub struct AuthKey {
    key: [u8; KEY_LEN],
    payload: [u8; KEY_LEN],
    packet: [u8; KEY_LEN],
    short: [u8; KEY_LEN],
    /// ChaCha20-Poly1305 under the derived encryption key, set up once.
    aead: chacha20poly1305::ChaCha20Poly1305,
}

impl PartialEq for AuthKey {
    fn eq(&self, other: &AuthKey) -> bool {
        // Everything else is derived from `key`.
        self.key == other.key
    }
}

impl Eq for AuthKey {}

/// Longest payload tagged in one pass (one BLAKE3 chunk).
pub const SHORT_PAYLOAD: usize = 1024;

/// BLAKE3 key-derivation contexts of the two derived keys.
const PAYLOAD_CONTEXT: &str = "squall 2026 packet authentication: payload digest";
const PACKET_CONTEXT: &str = "squall 2026 packet authentication: packet tag";
const SHORT_CONTEXT: &str = "squall 2026 packet authentication: short packet tag";
const AEAD_CONTEXT: &str = "squall 2026 packet encryption: chacha20-poly1305 key";
/// Bytes of the Poly1305 tag in an encrypted packet's trailer (the rest of the tag field is 0).
const POLY_TAG_LEN: usize = 16;

impl fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthKey(<secret>)")
    }
}

/// Why a key text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("a key is {want} hexadecimal digits, this text has {found} characters", want = 2 * KEY_LEN)]
    Length { found: usize },
    #[error("a key is hexadecimal digits only (0-9, a-f)")]
    NotHex,
}

impl AuthKey {
    /// The key made of these bytes (the launcher fills them from the OS random source).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> AuthKey {
        AuthKey {
            key: bytes,
            payload: blake3::derive_key(PAYLOAD_CONTEXT, &bytes),
            packet: blake3::derive_key(PACKET_CONTEXT, &bytes),
            short: blake3::derive_key(SHORT_CONTEXT, &bytes),
            aead: {
                use chacha20poly1305::aead::KeyInit;
                chacha20poly1305::ChaCha20Poly1305::new(
                    &blake3::derive_key(AEAD_CONTEXT, &bytes).into(),
                )
            },
        }
    }

    /// The key's bytes (to hand it to other nodes over a trusted channel).
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.key
    }

    /// Lower-case hexadecimal, the form of `SQUALL_AUTH_KEY` and key files.
    pub fn to_hex(&self) -> String {
        self.key.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses [`AuthKey::to_hex`]'s form; surrounding white space is ignored.
    pub fn parse_hex(text: &str) -> Result<AuthKey, KeyError> {
        let t = text.trim();
        if t.len() != 2 * KEY_LEN {
            return Err(KeyError::Length { found: t.len() });
        }
        let mut out = [0u8; KEY_LEN];
        for (i, pair) in t.as_bytes().chunks_exact(2).enumerate() {
            let hi = hex_digit(pair[0]).ok_or(KeyError::NotHex)?;
            let lo = hex_digit(pair[1]).ok_or(KeyError::NotHex)?;
            out[i] = hi << 4 | lo;
        }
        Ok(AuthKey::from_bytes(out))
    }

    /// The tag of a packet whose encoded header is `header` and payload `payload`, sent with
    /// authentication sequence number `seq`.
    pub fn tag(&self, header: &[u8], payload: &[u8], seq: u64) -> blake3::Hash {
        if payload.len() <= SHORT_PAYLOAD {
            let mut h = blake3::Hasher::new_keyed(&self.short);
            h.update(header);
            h.update(&seq.to_le_bytes());
            h.update(payload);
            return h.finalize();
        }
        let digest = blake3::keyed_hash(&self.payload, payload);
        let mut h = blake3::Hasher::new_keyed(&self.packet);
        h.update(header);
        h.update(&seq.to_le_bytes());
        h.update(digest.as_bytes());
        h.finalize()
    }

    /// The trailer to append after `payload`.
    pub fn trailer(&self, header: &[u8], payload: &[u8], seq: u64) -> [u8; AUTH_TRAILER_LEN] {
        let mut t = [0u8; AUTH_TRAILER_LEN];
        t[..AUTH_SEQ_LEN].copy_from_slice(&seq.to_le_bytes());
        t[AUTH_SEQ_LEN..].copy_from_slice(self.tag(header, payload, seq).as_bytes());
        t
    }

    /// Checks a received packet's trailer; returns its authentication sequence number.
    /// The tag comparison takes the same time wherever the first differing byte is.
    pub fn verify(&self, header: &[u8], payload: &[u8], trailer: &[u8]) -> Result<u64, BadTag> {
        if trailer.len() != AUTH_TRAILER_LEN {
            return Err(BadTag);
        }
        let mut s = [0u8; AUTH_SEQ_LEN];
        s.copy_from_slice(&trailer[..AUTH_SEQ_LEN]);
        let seq = u64::from_le_bytes(s);
        let mut t = [0u8; AUTH_TAG_LEN];
        t.copy_from_slice(&trailer[AUTH_SEQ_LEN..]);
        // `blake3::Hash`'s `PartialEq` is constant-time.
        if self.tag(header, payload, seq) == blake3::Hash::from_bytes(t) {
            Ok(seq)
        } else {
            Err(BadTag)
        }
    }
}

impl AuthKey {
    fn nonce(header: &[u8], seq: u64) -> chacha20poly1305::Nonce {
        // Source and destination ranks (header offsets 14 and 16), then the sequence number.
        let mut n = [0u8; 12];
        if header.len() >= 18 {
            n[..4].copy_from_slice(&header[14..18]);
        }
        n[4..].copy_from_slice(&seq.to_le_bytes());
        n.into()
    }

    /// Encrypts `payload` in place (associated data: the encoded `header`, with `AUTH` set)
    /// and returns the trailer for sequence number `seq`.
    pub fn seal_encrypted(
        &self,
        header: &[u8],
        payload: &mut [u8],
        seq: u64,
    ) -> [u8; AUTH_TRAILER_LEN] {
        use chacha20poly1305::aead::AeadInPlace;
        let cipher = &self.aead;
        let mut t = [0u8; AUTH_TRAILER_LEN];
        t[..AUTH_SEQ_LEN].copy_from_slice(&seq.to_le_bytes());
        // Encryption only fails for payloads beyond 256 GiB; a packet is far below.
        if let Ok(tag) =
            cipher.encrypt_in_place_detached(&Self::nonce(header, seq), header, payload)
        {
            t[AUTH_SEQ_LEN..AUTH_SEQ_LEN + POLY_TAG_LEN].copy_from_slice(&tag);
        }
        t
    }

    /// Checks and decrypts an encrypted packet's `payload` in place; returns its sequence
    /// number. On failure the buffer holds garbage and must be thrown away.
    pub fn open_encrypted(
        &self,
        header: &[u8],
        payload: &mut [u8],
        trailer: &[u8],
    ) -> Result<u64, BadTag> {
        use chacha20poly1305::aead::AeadInPlace;
        if trailer.len() != AUTH_TRAILER_LEN
            || trailer[AUTH_SEQ_LEN + POLY_TAG_LEN..]
                .iter()
                .any(|b| *b != 0)
        {
            return Err(BadTag);
        }
        let mut s = [0u8; AUTH_SEQ_LEN];
        s.copy_from_slice(&trailer[..AUTH_SEQ_LEN]);
        let seq = u64::from_le_bytes(s);
        let tag =
            chacha20poly1305::Tag::from_slice(&trailer[AUTH_SEQ_LEN..AUTH_SEQ_LEN + POLY_TAG_LEN]);
        self.aead
            .decrypt_in_place_detached(&Self::nonce(header, seq), header, payload, tag)
            .map(|()| seq)
            .map_err(|_| BadTag)
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// A packet's tag does not match its contents under this job's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("authentication tag does not match")]
pub struct BadTag;

/// Why a correctly tagged packet was refused by a [`ReplayWindow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Replay {
    #[error("authentication sequence {seq} was already received")]
    Seen { seq: u64 },
    #[error("authentication sequence {seq} is older than the window (highest {highest})")]
    TooOld { seq: u64, highest: u64 },
    #[error("authentication sequence 0 is never sent")]
    Zero,
}

/// Bits of history a datagram window keeps (how far a datagram may be overtaken).
pub const REPLAY_WINDOW: u64 = 1024;
const WORDS: usize = (REPLAY_WINDOW / 64) as usize;

/// The authentication sequence numbers received from one sender. A datagram window accepts
/// each number once, in any order within [`REPLAY_WINDOW`] of the highest seen (udp may
/// reorder); a stream window ([`ReplayWindow::in_order`], tcp) accepts only increasing numbers.
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    highest: u64,
    /// Bit `s % REPLAY_WINDOW` is set when `s` (within the window) was received.
    bits: [u64; WORDS],
    in_order: bool,
}

impl ReplayWindow {
    /// A window for a datagram transport (reordering allowed).
    pub fn datagram() -> ReplayWindow {
        ReplayWindow {
            highest: 0,
            bits: [0; WORDS],
            in_order: false,
        }
    }

    /// A window for an ordered stream: every number must exceed the previous one.
    pub fn in_order() -> ReplayWindow {
        ReplayWindow {
            in_order: true,
            ..ReplayWindow::datagram()
        }
    }

    /// The highest number accepted so far (0: none).
    pub fn highest(&self) -> u64 {
        self.highest
    }

    fn bit(seq: u64) -> (usize, u64) {
        let i = seq % REPLAY_WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Accepts `seq` (recording it) or says why it is a replay. Call only after the tag
    /// verified, so forged numbers never move the window.
    pub fn accept(&mut self, seq: u64) -> Result<(), Replay> {
        if seq == 0 {
            return Err(Replay::Zero);
        }
        if seq > self.highest {
            if self.in_order {
                self.highest = seq;
                return Ok(());
            }
            // Forget the numbers that slide out of the window.
            let shift = seq - self.highest;
            if shift >= REPLAY_WINDOW {
                self.bits = [0; WORDS];
            } else {
                for s in self.highest + 1..=seq {
                    let (w, b) = Self::bit(s);
                    self.bits[w] &= !b;
                }
            }
            self.highest = seq;
            let (w, b) = Self::bit(seq);
            self.bits[w] |= b;
            return Ok(());
        }
        if self.in_order || self.highest - seq >= REPLAY_WINDOW {
            if self.in_order && seq == self.highest {
                return Err(Replay::Seen { seq });
            }
            return Err(Replay::TooOld {
                seq,
                highest: self.highest,
            });
        }
        let (w, b) = Self::bit(seq);
        if self.bits[w] & b != 0 {
            return Err(Replay::Seen { seq });
        }
        self.bits[w] |= b;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> AuthKey {
        AuthKey::from_bytes([b; KEY_LEN])
    }

    #[test]
    fn hex_round_trip_and_errors() {
        let k = AuthKey::from_bytes(std::array::from_fn(|i| (i * 37) as u8));
        assert_eq!(
            AuthKey::parse_hex(&format!(" {}\n", k.to_hex())),
            Ok(k.clone())
        );
        assert_eq!(
            AuthKey::parse_hex(&k.to_hex().to_uppercase()),
            Ok(k.clone())
        );
        assert_eq!(
            AuthKey::parse_hex("abc"),
            Err(KeyError::Length { found: 3 })
        );
        let bad = format!("g{}", &k.to_hex()[1..]);
        assert_eq!(AuthKey::parse_hex(&bad), Err(KeyError::NotHex));
        assert!(!format!("{k:?}").contains(&k.to_hex()[..8]));
    }

    #[test]
    fn tag_covers_header_payload_and_sequence() {
        let k = key(7);
        let header = [1u8; 52];
        let payload = b"some payload";
        let t = k.trailer(&header, payload, 5);
        assert_eq!(k.verify(&header, payload, &t), Ok(5));
        // Any flipped bit anywhere is caught.
        for i in 0..header.len() {
            let mut h = header;
            h[i] ^= 1;
            assert_eq!(k.verify(&h, payload, &t), Err(BadTag), "header byte {i}");
        }
        let mut p = payload.to_vec();
        p[3] ^= 0x80;
        assert_eq!(k.verify(&header, &p, &t), Err(BadTag));
        for i in 0..AUTH_TRAILER_LEN {
            let mut bad = t;
            bad[i] ^= 4;
            assert_eq!(k.verify(&header, payload, &bad), Err(BadTag), "trailer {i}");
        }
        // Another key, a short trailer.
        assert_eq!(key(8).verify(&header, payload, &t), Err(BadTag));
        assert_eq!(k.verify(&header, payload, &t[..39]), Err(BadTag));
        // Long payloads (the two-level form) too.
        let long = vec![9u8; 3000];
        let t = k.trailer(&header, &long, 1);
        assert_eq!(k.verify(&header, &long, &t), Ok(1));
        let mut l2 = long.clone();
        l2[2999] ^= 1;
        assert_eq!(k.verify(&header, &l2, &t), Err(BadTag));
        assert_eq!(k.verify(&header, &long[..SHORT_PAYLOAD], &t), Err(BadTag));
        // Bytes moved between header and payload change the tag.
        let mut longer = header.to_vec();
        longer.push(payload[0]);
        assert_ne!(k.tag(&longer, &payload[1..], 5), k.tag(&header, payload, 5));
        // The same packet under another sequence number has another tag.
        assert_ne!(k.trailer(&header, payload, 6)[8..], t[8..]);
    }

    #[test]
    fn encrypted_payloads_hide_their_bytes_and_resist_tampering() {
        let k = key(7);
        let mut header = [1u8; 52];
        header[14..18].copy_from_slice(&[3, 0, 1, 0]);
        let plain = b"the secret contents of page 0x5000_0000_1000".to_vec();
        let mut buf = plain.clone();
        let t = k.seal_encrypted(&header, &mut buf, 9);
        assert_ne!(buf, plain, "not encrypted");
        assert!(!buf.windows(6).any(|w| w == b"secret"));
        // The same payload under the next number encrypts differently.
        let mut again = plain.clone();
        let t2 = k.seal_encrypted(&header, &mut again, 10);
        assert_ne!(again, buf);
        let mut open = buf.clone();
        assert_eq!(k.open_encrypted(&header, &mut open, &t), Ok(9));
        assert_eq!(open, plain);
        let mut open2 = again.clone();
        assert_eq!(k.open_encrypted(&header, &mut open2, &t2), Ok(10));
        // Any flipped bit of header, ciphertext or trailer (number, tag, padding) fails.
        for i in 0..header.len() {
            let mut h = header;
            h[i] ^= 2;
            let mut b = buf.clone();
            assert_eq!(k.open_encrypted(&h, &mut b, &t), Err(BadTag), "header {i}");
        }
        for i in 0..buf.len() {
            let mut b = buf.clone();
            b[i] ^= 2;
            assert_eq!(
                k.open_encrypted(&header, &mut b, &t),
                Err(BadTag),
                "byte {i}"
            );
        }
        for i in 0..AUTH_TRAILER_LEN {
            let mut bad = t;
            bad[i] ^= 2;
            let mut b = buf.clone();
            assert_eq!(
                k.open_encrypted(&header, &mut b, &bad),
                Err(BadTag),
                "trailer {i}"
            );
        }
        let mut b = buf.clone();
        assert_eq!(key(8).open_encrypted(&header, &mut b, &t), Err(BadTag));
    }

    #[test]
    fn datagram_window_accepts_each_number_once_in_any_order() {
        let mut w = ReplayWindow::datagram();
        assert_eq!(w.accept(0), Err(Replay::Zero));
        for s in [3u64, 1, 2, 7, 5] {
            assert_eq!(w.accept(s), Ok(()), "{s}");
        }
        for s in [1u64, 2, 3, 5, 7] {
            assert_eq!(w.accept(s), Err(Replay::Seen { seq: s }));
        }
        assert_eq!(w.accept(4), Ok(()));
        assert_eq!(w.accept(6), Ok(()));
        // Far ahead: the old numbers fall out of the window and stay refused.
        assert_eq!(w.accept(7 + REPLAY_WINDOW), Ok(()));
        assert_eq!(
            w.accept(7),
            Err(Replay::TooOld {
                seq: 7,
                highest: 7 + REPLAY_WINDOW
            })
        );
        // Just inside the window: never seen, so accepted once.
        assert_eq!(w.accept(8), Ok(()));
        assert_eq!(w.accept(8), Err(Replay::Seen { seq: 8 }));
        // A bit reused after the window slid is fresh again.
        assert_eq!(w.accept(2 * REPLAY_WINDOW + 9), Ok(()));
        assert_eq!(w.accept(REPLAY_WINDOW + 10), Ok(()));
        assert_eq!(
            w.accept(REPLAY_WINDOW + 9),
            Err(Replay::TooOld {
                seq: REPLAY_WINDOW + 9,
                highest: 2 * REPLAY_WINDOW + 9
            })
        );
    }

    #[test]
    fn datagram_window_matches_a_set_model() {
        use std::collections::BTreeSet;
        let mut w = ReplayWindow::datagram();
        let mut seen = BTreeSet::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut top = 0u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mostly near the top, sometimes far behind, sometimes a jump ahead.
            let s = match x % 16 {
                0 => top + 1 + x % 3000,
                1..=3 => top.saturating_sub(x % 3000).max(1),
                _ => (top + (x >> 8) % 40).saturating_sub(20).max(1),
            };
            let want = if seen.contains(&s) {
                Err(Replay::Seen { seq: s })
            } else if top >= REPLAY_WINDOW && s <= top - REPLAY_WINDOW {
                Err(Replay::TooOld {
                    seq: s,
                    highest: top,
                })
            } else {
                Ok(())
            };
            let got = w.accept(s);
            match want {
                // An old, seen number may be reported either way; it must be refused.
                Err(_) => assert!(got.is_err(), "{s} accepted twice (top {top})"),
                Ok(()) => assert_eq!(got, Ok(()), "{s} refused (top {top})"),
            }
            if got.is_ok() {
                seen.insert(s);
                top = top.max(s);
            }
        }
    }

    #[test]
    fn stream_window_wants_increasing_numbers() {
        let mut w = ReplayWindow::in_order();
        assert_eq!(w.accept(1), Ok(()));
        assert_eq!(w.accept(2), Ok(()));
        assert_eq!(w.accept(2), Err(Replay::Seen { seq: 2 }));
        assert_eq!(w.accept(1), Err(Replay::TooOld { seq: 1, highest: 2 }));
        assert_eq!(w.accept(10), Ok(()));
        assert_eq!(w.highest(), 10);
    }
}
