//! Bytes behind their blake3 checksum, for files written without fsync whose contents still parse when a
//! power loss tears them (the cache's hit index, the load memo): a reader takes the bytes only when the
//! checksum holds, and treats anything else as no file.

use std::io::{self, Write};

/// Writes the blake3 of `body`, then `body`, to `out`: straight to a file, so that a large body is never
/// copied behind its checksum first.
pub fn write_sealed(out: &mut (impl Write + ?Sized), body: &[u8]) -> io::Result<()> {
    out.write_all(blake3::hash(body).as_bytes())?;
    out.write_all(body)
}

/// The body of bytes written by [`write_sealed`], if its checksum holds.
pub fn unseal(bytes: &[u8]) -> Option<&[u8]> {
    let (checksum, body) = bytes.split_first_chunk::<{ blake3::OUT_LEN }>()?;
    (blake3::hash(body) == blake3::Hash::from_bytes(*checksum)).then_some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_comes_back_only_as_it_was_sealed() -> io::Result<()> {
        let mut sealed = b"head".to_vec();
        write_sealed(&mut sealed, b"the body")?;
        let bytes = &sealed[4..];
        assert_eq!(unseal(bytes), Some(&b"the body"[..]));
        let mut altered = bytes.to_vec();
        if let Some(last) = altered.last_mut() {
            *last ^= 1;
        }
        assert_eq!(unseal(&altered), None);
        assert_eq!(unseal(&bytes[..bytes.len() - 1]), None);
        assert_eq!(unseal(&bytes[..10]), None);
        Ok(())
    }
}
