//! Match-result signatures (docs/semantics/boards.md section 1, check 6): HMAC-SHA256 of the
//! canonical bytes, as lowercase hex, compared in constant time.
//!
//! The signed bytes name each id with its length in UTF-8 bytes
//! (`len:game|len:match|len:player|points|played_at`), so an id holding `|` or `:`
//! cannot make two different results sign alike. The key's padded blocks are hashed
//! once, when the [`Signer`] is made; each result then costs two SHA-256 compressions
//! of its own, not four.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::Write;
use subtle::ConstantTimeEq;

/// HMAC-SHA256 under one key, prepared once.
#[derive(Clone)]
pub struct Signer {
    mac: Hmac<Sha256>,
}

impl Signer {
    /// A key longer than SHA-256's 64-byte block is hashed first (RFC 2104), as `hmac` does.
    pub fn new(key: &[u8]) -> Signer {
        Signer { mac: Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length") }
    }

    /// The lowercase hex signature of one result.
    pub fn hex(&self, game: &str, r#match: &str, player: &str, points: u64, played_at: u64) -> [u8; 64] {
        let mut canonical = Vec::with_capacity(48 + game.len() + r#match.len() + player.len());
        write!(
            canonical,
            "{}:{game}|{}:{match}|{}:{player}|{points}|{played_at}",
            game.len(),
            r#match.len(),
            player.len()
        )
        .expect("writing to a Vec cannot fail");
        let mut mac = self.mac.clone();
        mac.update(&canonical);
        let digest = mac.finalize().into_bytes();
        let mut hex = [0u8; 64];
        for (i, byte) in digest.iter().enumerate() {
            hex[2 * i] = HEX[usize::from(byte >> 4)];
            hex[2 * i + 1] = HEX[usize::from(byte & 15)];
        }
        hex
    }

    /// Whether `sig` (a string's UTF-8 bytes) is exactly the expected hex, compared in constant time.
    pub fn verify(&self, sig: &[u8], game: &str, r#match: &str, player: &str, points: u64, played_at: u64) -> bool {
        self.hex(game, r#match, player, points, played_at)[..].ct_eq(sig).into()
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_signature() {
        // state/signatures.py's doctest: sign(bytes(32), "g1", "m1", "ana", 50, 0)[:16]
        let hex = Signer::new(&[0; 32]).hex("g1", "m1", "ana", 50, 0);
        assert_eq!(&hex[..16], b"c7bbad1bed2c7aa8");
    }

    #[test]
    fn verify_wants_exactly_the_lowercase_hex() {
        let signer = Signer::new(b"a key longer than the sixty-four bytes of a SHA-256 block, hashed first....");
        let hex = signer.hex("g", "m|1", "é", 5, 7);
        assert!(signer.verify(&hex, "g", "m|1", "é", 5, 7));
        assert!(!signer.verify(&hex.to_ascii_uppercase(), "g", "m|1", "é", 5, 7));
        assert!(!signer.verify(&hex[..63], "g", "m|1", "é", 5, 7));
        assert!(!signer.verify(&hex, "g", "m|1", "é", 5, 8));
        assert!(!signer.verify(&hex, "g|", "m1", "é", 5, 7));
    }
}
