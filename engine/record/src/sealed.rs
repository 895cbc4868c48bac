//! Bytes behind their blake3 checksum, for files written without fsync whose contents still parse when a
//! power loss tears them (the cache's hit index, the load memo): a reader takes the bytes only when the
//! checksum holds, and treats anything else as no file.

/// Appends the blake3 of `body`, then `body`, to `out`.
pub fn append_sealed(out: &mut Vec<u8>, body: &[u8]) {
    out.reserve(blake3::OUT_LEN + body.len());
    out.extend_from_slice(blake3::hash(body).as_bytes());
    out.extend_from_slice(body);
}

/// The body of bytes written by [`append_sealed`], if its checksum holds.
pub fn unseal(bytes: &[u8]) -> Option<&[u8]> {
    let (checksum, body) = bytes.split_first_chunk::<{ blake3::OUT_LEN }>()?;
    (blake3::hash(body) == blake3::Hash::from_bytes(*checksum)).then_some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_comes_back_only_as_it_was_sealed() {
        let mut sealed = b"head".to_vec();
        append_sealed(&mut sealed, b"the body");
        let bytes = &sealed[4..];
        assert_eq!(unseal(bytes), Some(&b"the body"[..]));
        let mut altered = bytes.to_vec();
        if let Some(last) = altered.last_mut() {
            *last ^= 1;
        }
        assert_eq!(unseal(&altered), None);
        assert_eq!(unseal(&bytes[..bytes.len() - 1]), None);
        assert_eq!(unseal(&bytes[..10]), None);
    }
}
