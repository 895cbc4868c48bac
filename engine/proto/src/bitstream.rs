//! Recognising what a bitstream file holds, from its first bytes: a real Xilinx `.bit` (its header), a real
//! raw `.bin` (the sync word after padding), an emulated container (the emulator's `FRACFULL`/`FRACPART`
//! envelope), or neither. Pure functions, so the CLI, the testbed session and the emulated device all refuse
//! the same files for the same reasons (frac §4.2: the build's products; frac §3: the partial format).

/// The `.bit` header starts with a field of length 9 holding this preamble, then a field of length 1.
const BIT_PREAMBLE: [u8; 13] = [
    0x00, 0x09, 0x0f, 0xf0, 0x0f, 0xf0, 0x0f, 0xf0, 0x0f, 0xf0, 0x00, 0x00, 0x01,
];

/// The configuration sync word every Xilinx bitstream carries before its first packet.
pub const SYNC_WORD: [u8; 4] = [0xAA, 0x99, 0x55, 0x66];

/// How far into a raw `.bin` the sync word may appear: bitstreams start with a few dozen bytes of padding
/// (0xFF) and a bus-width pattern; a few hundred bytes covers every writer.
pub const SYNC_SEARCH_BYTES: usize = 512;

/// The emulated device's container magics (`engine/emulator/src/image.rs`). They are repeated here rather
/// than imported because the emulator depends on this crate, not the other way round.
pub const EMULATED_FULL_MAGIC: [u8; 8] = *b"FRACFULL";
pub const EMULATED_PARTIAL_MAGIC: [u8; 8] = *b"FRACPART";

/// The fields of a `.bit` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitHeader {
    pub design: String,
    pub part: String,
    pub date: String,
    pub time: String,
    /// Length in bytes of the configuration data that follows the header.
    pub data_length: u32,
}

/// What a file's bytes turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BitstreamKind {
    /// A `.bit` file with a well-formed header.
    XilinxBit(BitHeader),
    /// A raw bitstream whose sync word sits at this offset.
    XilinxBin { sync_offset: usize },
    /// An emulated container: "full image" or "partial".
    Emulated(&'static str),
    /// Neither; the reason says what was missing.
    Unknown(String),
}

impl BitstreamKind {
    pub fn is_xilinx(&self) -> bool {
        matches!(
            self,
            BitstreamKind::XilinxBit(_) | BitstreamKind::XilinxBin { .. }
        )
    }
}

/// Classify a file's bytes (the whole file, or at least its first few hundred bytes).
pub fn classify(bytes: &[u8]) -> BitstreamKind {
    if bytes.starts_with(&EMULATED_FULL_MAGIC) {
        return BitstreamKind::Emulated("full image");
    }
    if bytes.starts_with(&EMULATED_PARTIAL_MAGIC) {
        return BitstreamKind::Emulated("partial");
    }
    if bytes.starts_with(&BIT_PREAMBLE) {
        return match parse_bit_header(bytes) {
            Ok(header) => BitstreamKind::XilinxBit(header),
            Err(why) => BitstreamKind::Unknown(format!("a .bit preamble but {why}")),
        };
    }
    match find_sync_word(bytes) {
        Some(sync_offset) => BitstreamKind::XilinxBin { sync_offset },
        None => BitstreamKind::Unknown(format!(
            "neither a .bit header nor the sync word AA995566 in the first {SYNC_SEARCH_BYTES} bytes"
        )),
    }
}

/// The offset of the sync word within the first [`SYNC_SEARCH_BYTES`] bytes.
pub fn find_sync_word(bytes: &[u8]) -> Option<usize> {
    let window = &bytes[..bytes.len().min(SYNC_SEARCH_BYTES)];
    window.windows(SYNC_WORD.len()).position(|w| w == SYNC_WORD)
}

/// Parse the `.bit` header: the preamble, then the fields `a` (design name), `b` (part), `c` (date),
/// `d` (time), each a key byte, a big-endian u16 length and a NUL-terminated string, then `e` with a
/// big-endian u32 data length.
pub fn parse_bit_header(bytes: &[u8]) -> Result<BitHeader, String> {
    if !bytes.starts_with(&BIT_PREAMBLE) {
        return Err("no .bit preamble (00 09 0f f0 … 00 00 01)".to_owned());
    }
    let mut at = BIT_PREAMBLE.len();
    let mut strings = Vec::with_capacity(4);
    for key in [b'a', b'b', b'c', b'd'] {
        let found = *bytes.get(at).ok_or("the header ends early")?;
        if found != key {
            return Err(format!(
                "field `{}` expected at byte {at}, found {found:#04x}",
                key as char
            ));
        }
        let length = read_be(bytes, at + 1, 2).ok_or("the header ends early")? as usize;
        let start = at + 3;
        let field = bytes
            .get(start..start + length)
            .ok_or_else(|| format!("field `{}` runs past the end", key as char))?;
        let text = field.strip_suffix(&[0]).unwrap_or(field);
        strings.push(String::from_utf8_lossy(text).into_owned());
        at = start + length;
    }
    if bytes.get(at) != Some(&b'e') {
        return Err(format!("field `e` expected at byte {at}"));
    }
    let data_length = read_be(bytes, at + 1, 4).ok_or("the header ends early")?;
    let mut strings = strings.into_iter();
    let mut next = || strings.next().unwrap_or_default();
    Ok(BitHeader {
        design: next(),
        part: next(),
        date: next(),
        time: next(),
        data_length,
    })
}

fn read_be(bytes: &[u8], at: usize, width: usize) -> Option<u32> {
    let field = bytes.get(at..at + width)?;
    Some(field.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)))
}

/// A `.bit` file with a valid header around `data`; for tests and fixtures that need a real-looking image.
pub fn make_bit_file(design: &str, part: &str, date: &str, time: &str, data: &[u8]) -> Vec<u8> {
    let mut out = BIT_PREAMBLE.to_vec();
    for (key, value) in [(b'a', design), (b'b', part), (b'c', date), (b'd', time)] {
        out.push(key);
        let length = u16::try_from(value.len() + 1).unwrap_or(u16::MAX);
        out.extend_from_slice(&length.to_be_bytes());
        out.extend_from_slice(&value.as_bytes()[..usize::from(length) - 1]);
        out.push(0);
    }
    out.push(b'e');
    out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// A raw `.bin` bitstream: padding, the bus-width pattern, the sync word, then `data`.
pub fn make_bin_file(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0xFF; 32];
    out.extend_from_slice(&[0x00, 0x00, 0x00, 0xBB, 0x11, 0x22, 0x00, 0x44]);
    out.extend_from_slice(&[0xFF; 8]);
    out.extend_from_slice(&SYNC_WORD);
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bit_file_header_is_parsed_field_by_field() {
        let data = make_bin_file(&[1, 2, 3]);
        let file = make_bit_file(
            "frac;UserID=0XFFFFFFFF",
            "xcu280-fsvh2892-2L-e",
            "2024/05/01",
            "12:00:00",
            &data,
        );
        let BitstreamKind::XilinxBit(header) = classify(&file) else {
            panic!("not recognised: {:?}", classify(&file));
        };
        assert_eq!(header.design, "frac;UserID=0XFFFFFFFF");
        assert_eq!(header.part, "xcu280-fsvh2892-2L-e");
        assert_eq!(header.date, "2024/05/01");
        assert_eq!(header.time, "12:00:00");
        assert_eq!(header.data_length as usize, data.len());
    }

    #[test]
    fn a_bin_file_is_recognised_by_its_sync_word_after_padding() {
        let file = make_bin_file(&[0u8; 100]);
        assert_eq!(
            classify(&file),
            BitstreamKind::XilinxBin { sync_offset: 48 }
        );
        assert!(classify(&file).is_xilinx());
    }

    #[test]
    fn a_sync_word_too_far_in_does_not_count() {
        let mut file = vec![0xFF; SYNC_SEARCH_BYTES];
        file.extend_from_slice(&SYNC_WORD);
        assert!(matches!(classify(&file), BitstreamKind::Unknown(_)));
    }

    #[test]
    fn emulated_containers_are_recognised_as_emulated() {
        let mut full = b"FRACFULL".to_vec();
        full.extend_from_slice(&SYNC_WORD);
        assert_eq!(classify(&full), BitstreamKind::Emulated("full image"));
        assert_eq!(
            classify(b"FRACPART\x01\x00"),
            BitstreamKind::Emulated("partial")
        );
        assert!(!classify(&full).is_xilinx());
    }

    #[test]
    fn garbage_is_unknown_and_says_what_was_missing() {
        let BitstreamKind::Unknown(why) = classify(b"hello, this is not a bitstream") else {
            panic!("garbage recognised");
        };
        assert!(why.contains("sync word AA995566"), "{why}");
        assert!(matches!(classify(&[]), BitstreamKind::Unknown(_)));
    }

    #[test]
    fn a_truncated_bit_header_is_refused_with_the_reason() {
        let file = make_bit_file("d", "p", "date", "time", &[]);
        let BitstreamKind::Unknown(why) = classify(&file[..20]) else {
            panic!("truncated header accepted");
        };
        assert!(
            why.contains("runs past the end") || why.contains("ends early"),
            "{why}"
        );
    }
}
