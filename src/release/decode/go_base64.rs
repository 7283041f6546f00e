//! Go's `base64.StdEncoding` as the base64 crate's engine: the layer Helm wraps its payload in
//! ([`super::codec`]) and every `[]byte` field of a release, which `encoding/json` decodes with it
//! ([`GoBytes`]).

use base64::Engine as _;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::{DecodePaddingMode, GeneralPurpose as Engine};

/// Go's `base64.StdEncoding`: padding required, non-zero trailing bits accepted.
pub(crate) const GO_STD: GeneralPurpose = Engine::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// [`GO_STD`] with no padding allowed: what every quantum but the last of a `[]byte` must be
/// (Go refuses anything after padding).
const GO_STD_UNPADDED: GeneralPurpose = Engine::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

/// Base64 text held for the engine: a multiple of 4, so that every full buffer but the last is
/// whole quanta.
const GO_BYTES_CHUNK: usize = 1024;

/// A JSON string decoded as `encoding/json` decodes it into a Go `[]byte` (`base64.StdEncoding`:
/// line breaks skipped, padding required, any trailing bits), by the engine, as it streams past:
/// nothing is kept but one chunk of text. [`GoBytes::finish`] says what it held.
pub(crate) struct GoBytes {
    text: [u8; GO_BYTES_CHUNK],
    held: usize,
    decoded: [u8; GO_BYTES_CHUNK / 4 * 3],
    empty: bool,
    error: Option<base64::DecodeError>,
}

impl Default for GoBytes {
    fn default() -> GoBytes {
        GoBytes {
            text: [0; GO_BYTES_CHUNK],
            held: 0,
            decoded: [0; GO_BYTES_CHUNK / 4 * 3],
            empty: true,
            error: None,
        }
    }
}

impl GoBytes {
    /// Decodes the text held, with `engine`: [`GO_STD_UNPADDED`] for a chunk more text follows,
    /// [`GO_STD`] for the last.
    fn decode_held(&mut self, engine: &GeneralPurpose) {
        if self.error.is_none() {
            let text = self.text.get(..self.held).unwrap_or_default();
            if let Err(error) = engine.decode_slice(text, &mut self.decoded) {
                self.error = Some(match error {
                    base64::DecodeSliceError::DecodeError(error) => error,
                    // A chunk of 4n characters decodes to at most 3n bytes: the buffer holds them.
                    base64::DecodeSliceError::OutputSliceTooSmall => {
                        base64::DecodeError::InvalidLength(self.held)
                    }
                });
            }
        }
        self.held = 0;
    }

    /// `Ok(true)` when the string decoded to no bytes; the engine's error when Go would refuse it.
    pub(crate) fn finish(mut self) -> Result<bool, base64::DecodeError> {
        self.decode_held(&GO_STD);
        match self.error {
            Some(error) => Err(error),
            None => Ok(self.empty),
        }
    }
}

impl super::gojson::StringSink for GoBytes {
    fn put(&mut self, bytes: &[u8]) {
        for part in bytes.split(|b| matches!(b, b'\r' | b'\n')) {
            let mut part = part;
            while !part.is_empty() {
                if self.held == GO_BYTES_CHUNK {
                    self.decode_held(&GO_STD_UNPADDED);
                }
                let room = GO_BYTES_CHUNK - self.held;
                let (now, later) = part.split_at(part.len().min(room));
                if let Some(slot) = self.text.get_mut(self.held..self.held + now.len()) {
                    slot.copy_from_slice(now);
                }
                self.held += now.len();
                self.empty = false;
                part = later;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Some(empty)` when Go's `encoding/json` decodes `text` into a `[]byte`, fed in `piece`-byte
    /// parts.
    fn go_bytes(text: &str, piece: usize) -> Option<bool> {
        use super::super::gojson::StringSink as _;
        let mut bytes = GoBytes::default();
        text.as_bytes().chunks(piece.max(1)).for_each(|part| bytes.put(part));
        bytes.finish().ok()
    }

    #[test]
    fn base64_is_decoded_as_go_decodes_a_byte_slice_whatever_the_parts() {
        let long = "QUJD".repeat(GO_BYTES_CHUNK); // 4 KiB: several chunks
        for piece in [1, 3, 7, 1000, usize::MAX] {
            for valid in ["", "AAAA", "AAA=", "AA==", "AA\r\n==", "AB==", long.as_str()] {
                assert!(go_bytes(valid, piece).is_some(), "{valid:?} in parts of {piece}");
            }
            assert_eq!(go_bytes("", piece), Some(true));
            assert_eq!(go_bytes("\r\n", piece), Some(true), "line breaks alone: no bytes");
            assert_eq!(go_bytes("AA==", piece), Some(false));
            for invalid in ["AAA", "A===", "AA=A", "AA==AAAA", "AA-_", "AAAA====", "QUJD\u{0}"] {
                assert_eq!(go_bytes(invalid, piece), None, "{invalid:?} in parts of {piece}");
            }
            // 256 `=` once wrapped a byte counter to none, and what followed read as valid.
            assert_eq!(go_bytes(&format!("AAAA{}AAAA", "=".repeat(256)), piece), None);
            assert_eq!(go_bytes(&format!("AAAA{}", "=".repeat(1024)), piece), None);
            // Padding that ends a chunk exactly, with more after it, and line breaks on a boundary.
            let padded_at_boundary = format!("{}AA==AAAA", "A".repeat(GO_BYTES_CHUNK - 4));
            assert_eq!(go_bytes(&padded_at_boundary, piece), None, "padding then more, across chunks");
            let broken_lines = format!("{}\r\n{}", "A".repeat(GO_BYTES_CHUNK), "AA==");
            assert!(go_bytes(&broken_lines, piece).is_some(), "a line break on a chunk boundary");
            assert_eq!(go_bytes(&format!("{}A", long), piece), None, "one character too many");
        }
    }
}
