//! The cache validators' part that is the kernel's: a request target's digest in a tag
//! (`api/http_cache.py`: `"<snapshot>-<published_at>-<digest>"`).

use std::fmt::Write;

use blake2::digest::{Update, VariableOutput};
use blake2::Blake2sVar;

/// A request target's digest in a tag: BLAKE2s with a 6-byte output (the parameter block's,
/// not a cut: `hashlib.blake2s(target, digest_size=6)`), as 12 hex digits.
pub fn target_digest(target: &[u8]) -> String {
    let mut hasher = Blake2sVar::new(6).expect("6 is a BLAKE2s output size");
    hasher.update(target);
    let mut digest = [0u8; 6];
    hasher.finalize_variable(&mut digest).expect("the size asked");
    digest.iter().fold(String::with_capacity(12), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use super::target_digest;

    #[test]
    fn a_target_digest_is_pythons_blake2s_of_6_bytes() {
        // hashlib.blake2s(b"/boards/g/all/players/p1", digest_size=6).hexdigest()
        assert_eq!(target_digest(b"/boards/g/all/players/p1"), "b4b3203776cf");
        assert_eq!(target_digest(b"").len(), 12);
    }
}
