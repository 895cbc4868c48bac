//! A blake3 digest held as its 32 bytes: cache keys, blob names and output hashes.
//!
//! Text formats (JSON manifests, entries, events) spell it as 64 lowercase hex digits, as they always have;
//! binary ones (the cache's MessagePack hit index) as its 32 bytes. Held as a hex `String` it took about 90 bytes
//! of heap and header a copy, and a no-op of 100 000 nodes holds several copies per node.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(*blake3::hash(bytes).as_bytes())
    }

    pub const fn from_bytes(bytes: [u8; 32]) -> Digest {
        Digest(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 hex digits, without allocating.
    pub fn to_hex(&self) -> impl std::ops::Deref<Target = str> + fmt::Display + use<> {
        blake3::Hash::from_bytes(self.0).to_hex()
    }
}

impl From<blake3::Hash> for Digest {
    fn from(hash: blake3::Hash) -> Digest {
        Digest(*hash.as_bytes())
    }
}

/// Text that is not 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotADigest(String);

impl fmt::Display for NotADigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` is not a digest (64 hex digits)", self.0)
    }
}

impl std::error::Error for NotADigest {}

impl FromStr for Digest {
    type Err = NotADigest;

    fn from_str(text: &str) -> Result<Digest, NotADigest> {
        // Lowercase only: the digest's one spelling, so that text compared as text stays equal.
        if text.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(NotADigest(text.chars().take(80).collect()));
        }
        blake3::Hash::from_hex(text)
            .map(Digest::from)
            .map_err(|_| NotADigest(text.chars().take(80).collect()))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&self.to_hex())
        } else {
            serializer.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Digest, D::Error> {
        struct DigestVisitor;
        impl<'de> Visitor<'de> for DigestVisitor {
            type Value = Digest;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a blake3 digest: 64 hex digits or 32 bytes")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Digest, E> {
                text.parse().map_err(E::custom)
            }

            fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Digest, E> {
                <[u8; 32]>::try_from(bytes)
                    .map(Digest)
                    .map_err(|_| E::invalid_length(bytes.len(), &self))
            }
        }
        if deserializer.is_human_readable() {
            deserializer.deserialize_str(DigestVisitor)
        } else {
            deserializer.deserialize_bytes(DigestVisitor)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_formats_spell_it_in_hex_and_binary_ones_in_bytes()
    -> Result<(), Box<dyn std::error::Error>> {
        let digest = Digest::of(b"fracflow");
        let hex = blake3::hash(b"fracflow").to_hex().to_string();
        assert_eq!(digest.to_string(), hex);
        assert_eq!(serde_json::to_string(&digest)?, format!("\"{hex}\""));
        assert_eq!(
            serde_json::from_str::<Digest>(&format!("\"{hex}\""))?,
            digest
        );
        let packed = rmp_serde::to_vec(&digest)?;
        assert_eq!(packed.len(), 2 + 32, "bin8 header and the bytes");
        assert_eq!(rmp_serde::from_slice::<Digest>(&packed)?, digest);
        Ok(())
    }

    #[test]
    fn anything_but_64_lowercase_hex_digits_is_refused() {
        let hex = Digest::of(b"x").to_string();
        assert!(hex.parse::<Digest>().is_ok());
        for bad in [
            String::new(),
            hex[..63].to_owned(),
            format!("{hex}0"),
            hex.to_uppercase(),
            format!("{}g", &hex[..63]),
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
            assert!(serde_json::from_str::<Digest>(&format!("\"{bad}\"")).is_err());
        }
        let mut short = vec![0xc4, 31];
        short.extend([0u8; 31]);
        assert!(rmp_serde::from_slice::<Digest>(&short).is_err(), "31 bytes");
    }
}
