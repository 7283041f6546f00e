//! A streaming JSON reader with the semantics of Go's `encoding/json`, the decoder Helm reads its
//! records with.
//!
//! Why not serde_json: Helm's reading differs from serde's in what matters to a trust boundary
//! (keys match field names case-insensitively, a number that overflows a Go `int` or `float64`
//! is an error, invalid UTF-8 is replaced rather than refused), and a release payload must be
//! read without being held: a 6 MiB manifest or 30 MiB of `config` passes through a fixed buffer.
//! This module reads tokens; [`super::helm_release`] walks Helm's release type with them.
//!
//! Nothing here allocates in proportion to its input: strings go to a sink in pieces, nesting is
//! tracked in a byte stack capped at Go's own limit (10,000), numbers keep a bounded prefix.

use std::io::Read;

use sha2::{Digest, Sha256};

/// Go's `encoding/json` refuses nesting deeper than this.
pub(crate) const MAX_DEPTH: usize = 10_000;

/// Why a JSON text is not one Go would decode.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JsonError {
    #[error("invalid JSON at byte {offset}: {what}")]
    /// Not JSON at `offset`.
    Syntax {
        /// Bytes into the decoded JSON.
        offset: u64,
        /// What was expected or found.
        what: &'static str,
    },
    #[error("JSON nested deeper than {MAX_DEPTH} levels")]
    /// Nested deeper than Go's decoder allows.
    TooDeep,
    /// A layer below the JSON (base64, gzip) failed; the error says which.
    #[error("{0}")]
    Io(std::sync::Arc<std::io::Error>),
    #[error("the payload decodes to more than {limit} bytes (limit --max-decoded-bytes); refusing it")]
    /// Past the decoded-size limit.
    TooLarge {
        /// `--max-decoded-bytes`.
        limit: u64,
    },
}

const BUFFER: usize = 16 * 1024;

/// A buffered source that can look a few bytes ahead across refills and counts what it consumed.
#[derive(Debug)]
pub(crate) struct Source<R> {
    inner: R,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    consumed: u64,
    limit: u64,
    eof: bool,
}

impl<R: Read> Source<R> {
    /// `limit`: the most bytes the JSON text may have (the CPU bound of `--max-decoded-bytes`).
    pub(crate) fn new(inner: R, limit: u64) -> Source<R> {
        Source {
            inner,
            buf: vec![0; BUFFER].into_boxed_slice(),
            pos: 0,
            end: 0,
            consumed: 0,
            limit,
            eof: false,
        }
    }

    /// Makes at least `n` bytes available unless the input ends first; returns what is there.
    fn fill(&mut self, n: usize) -> Result<&[u8], JsonError> {
        while self.end - self.pos < n && !self.eof {
            if self.pos > 0 {
                self.buf.copy_within(self.pos..self.end, 0);
                self.end -= self.pos;
                self.pos = 0;
            }
            let free = self.buf.get_mut(self.end..).unwrap_or_default();
            match self.inner.read(free) {
                Ok(0) => self.eof = true,
                Ok(read) => self.end += read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => return Err(JsonError::Io(std::sync::Arc::new(error))),
            }
        }
        Ok(self.buf.get(self.pos..self.end).unwrap_or_default())
    }

    fn advance(&mut self, n: usize) -> Result<(), JsonError> {
        self.pos += n;
        self.consumed += n as u64;
        if self.consumed > self.limit {
            return Err(JsonError::TooLarge { limit: self.limit });
        }
        Ok(())
    }

    fn peek(&mut self) -> Result<Option<u8>, JsonError> {
        Ok(self.fill(1)?.first().copied())
    }
}

/// The first byte of a JSON value, which says its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `{...}`
    Object,
    /// `[...]`
    Array,
    /// `"..."`
    String,
    /// A number.
    Number,
    /// `true` or `false`.
    Bool,
    /// `null`.
    Null,
}

/// A number as Go would read it into an `int` and into a `float64`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Number {
    /// `Some` when Go's `strconv.ParseInt(text, 10, 64)` accepts it (no fraction, no exponent,
    /// in range).
    pub int: Option<i64>,
    /// `None` when Go's `strconv.ParseFloat(text, 64)` reports it out of range.
    pub float: Option<f64>,
}

/// Reads JSON tokens from a [`Source`].
#[derive(Debug)]
pub(crate) struct JsonReader<R> {
    src: Source<R>,
    depth: usize,
}

/// Where a string's decoded bytes go, piece by piece.
pub(crate) trait StringSink {
    /// Takes the next decoded bytes of the string.
    fn put(&mut self, bytes: &[u8]);
}

impl StringSink for () {
    fn put(&mut self, _: &[u8]) {}
}

/// Keeps the first `cap` bytes of a string and notes whether there was more.
#[derive(Debug, Default)]
pub(crate) struct Capture {
    /// What was captured so far.
    pub bytes: Vec<u8>,
    /// How much may be captured.
    pub cap: usize,
    /// Whether more was offered than `cap`.
    pub truncated: bool,
}

impl Capture {
    /// Captures up to `cap` bytes.
    pub(crate) fn new(cap: usize) -> Capture {
        Capture { bytes: Vec::new(), cap, truncated: false }
    }

    /// The text, when it was kept whole.
    pub(crate) fn whole(self) -> Option<String> {
        (!self.truncated).then(|| String::from_utf8_lossy(&self.bytes).into_owned())
    }

    /// The text, cut at the cap (for display).
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

impl StringSink for Capture {
    fn put(&mut self, bytes: &[u8]) {
        let room = self.cap.saturating_sub(self.bytes.len());
        let (kept, rest) = bytes.split_at(room.min(bytes.len()));
        self.bytes.extend_from_slice(kept);
        self.truncated |= !rest.is_empty();
    }
}

/// A running SHA-256 of a value's meaning (not its spelling), for telling whether an update
/// changed it. Tags keep kinds apart; string lengths end strings.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fingerprint {
    hash: Sha256,
    string_len: u64,
}

impl Fingerprint {
    /// Feeds a one-byte tag that keeps values of different kinds apart.
    pub(crate) fn tag(&mut self, tag: u8) {
        self.hash.update([tag]);
    }

    /// Feeds bytes.
    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        self.hash.update(bytes);
    }

    /// The fingerprint.
    pub(crate) fn finish(self) -> [u8; 32] {
        self.hash.finalize().into()
    }
}

impl StringSink for Fingerprint {
    fn put(&mut self, bytes: &[u8]) {
        self.string_len += bytes.len() as u64;
        self.hash.update(bytes);
    }
}

/// Both a capture and a fingerprint.
impl<A: StringSink, B: StringSink> StringSink for (&mut A, &mut B) {
    fn put(&mut self, bytes: &[u8]) {
        self.0.put(bytes);
        self.1.put(bytes);
    }
}

/// How many leading bytes of `bytes` are plain string content: printable ASCII other than `"`
/// and `\\`. Eight bytes at a time (SWAR): base64 chart files make up most of a payload.
fn plain_prefix(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut done = 0;
    for chunk in bytes.chunks_exact(8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        let special = (x & HIGH) // >= 0x80
            | x.wrapping_sub(0x20 * ONES) & !x & HIGH // < 0x20
            | has_zero(x ^ (u64::from(b'"') * ONES))
            | has_zero(x ^ (u64::from(b'\\') * ONES));
        if special != 0 {
            break;
        }
        done += 8;
    }
    let rest = bytes.get(done..).unwrap_or_default();
    done + rest.iter().take_while(|b| **b >= 0x20 && **b < 0x80 && **b != b'"' && **b != b'\\').count()
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl<R: Read> JsonReader<R> {
    /// A reader of the JSON that `src` yields.
    pub(crate) fn new(src: Source<R>) -> JsonReader<R> {
        JsonReader { src, depth: 0 }
    }

    fn syntax(&self, what: &'static str) -> JsonError {
        JsonError::Syntax { offset: self.src.consumed, what }
    }

    fn skip_ws(&mut self) -> Result<Option<u8>, JsonError> {
        loop {
            let buf = self.src.fill(1)?;
            let Some(&first) = buf.first() else { return Ok(None) };
            if !is_ws(first) {
                return Ok(Some(first));
            }
            let n = buf.iter().take_while(|b| is_ws(**b)).count();
            self.src.advance(n)?;
        }
    }

    /// The kind of the next value (after whitespace).
    pub(crate) fn peek_kind(&mut self) -> Result<Kind, JsonError> {
        match self.skip_ws()? {
            Some(b'{') => Ok(Kind::Object),
            Some(b'[') => Ok(Kind::Array),
            Some(b'"') => Ok(Kind::String),
            Some(b'-' | b'0'..=b'9') => Ok(Kind::Number),
            Some(b't' | b'f') => Ok(Kind::Bool),
            Some(b'n') => Ok(Kind::Null),
            Some(_) => Err(self.syntax("looking for the beginning of a value")),
            None => Err(self.syntax("unexpected end of JSON input")),
        }
    }

    /// After the top-level value: only whitespace may follow.
    pub(crate) fn end(&mut self) -> Result<(), JsonError> {
        match self.skip_ws()? {
            None => Ok(()),
            Some(_) => Err(self.syntax("after top-level value")),
        }
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), JsonError> {
        if self.src.fill(word.len())?.starts_with(word) {
            self.src.advance(word.len())
        } else {
            Err(self.syntax("in literal"))
        }
    }

    /// Reads `null`.
    pub(crate) fn null(&mut self) -> Result<(), JsonError> {
        self.literal(b"null")
    }

    /// Reads `true` or `false`.
    pub(crate) fn boolean(&mut self) -> Result<bool, JsonError> {
        if self.src.peek()? == Some(b't') {
            self.literal(b"true").map(|()| true)
        } else {
            self.literal(b"false").map(|()| false)
        }
    }

    /// Opens an object; then call [`Self::next_key`] until it says none is left.
    pub(crate) fn begin_object(&mut self) -> Result<(), JsonError> {
        self.open(b'{')
    }

    /// Opens an array; then call [`Self::next_element`] until it says none is left.
    pub(crate) fn begin_array(&mut self) -> Result<(), JsonError> {
        self.open(b'[')
    }

    fn open(&mut self, bracket: u8) -> Result<(), JsonError> {
        if self.skip_ws()? != Some(bracket) {
            return Err(self.syntax("expected an object or array"));
        }
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(JsonError::TooDeep);
        }
        self.src.advance(1)
    }

    /// Reads the next key of an open object into `sink`, or closes the object and returns false.
    /// `first`: whether this is the first call for this object.
    pub(crate) fn next_key(&mut self, first: bool, sink: &mut impl StringSink) -> Result<bool, JsonError> {
        let mut b = self.skip_ws()?;
        if b == Some(b'}') && first {
            self.depth -= 1;
            self.src.advance(1)?;
            return Ok(false);
        }
        if !first {
            match b {
                Some(b',') => {
                    self.src.advance(1)?;
                    b = self.skip_ws()?;
                }
                Some(b'}') => {
                    self.depth -= 1;
                    self.src.advance(1)?;
                    return Ok(false);
                }
                _ => return Err(self.syntax("after object key:value pair")),
            }
        }
        if b != Some(b'"') {
            return Err(self.syntax("looking for beginning of object key string"));
        }
        self.string(sink)?;
        if self.skip_ws()? != Some(b':') {
            return Err(self.syntax("after object key"));
        }
        self.src.advance(1)?;
        Ok(true)
    }

    /// Moves to the next element of an open array, or closes it and returns false.
    pub(crate) fn next_element(&mut self, first: bool) -> Result<bool, JsonError> {
        let b = self.skip_ws()?;
        if b == Some(b']') {
            self.depth -= 1;
            self.src.advance(1)?;
            return Ok(false);
        }
        if !first {
            if b != Some(b',') {
                return Err(self.syntax("after array element"));
            }
            self.src.advance(1)?;
            if self.skip_ws()? == Some(b']') {
                return Err(self.syntax("looking for beginning of value"));
            }
        }
        Ok(true)
    }

    /// Reads a string value into `sink` as Go unquotes it: escapes resolved, a lone surrogate or
    /// an invalid UTF-8 byte replaced by U+FFFD, a control character an error.
    pub(crate) fn string(&mut self, sink: &mut impl StringSink) -> Result<(), JsonError> {
        if self.skip_ws()? != Some(b'"') {
            return Err(self.syntax("expected a string"));
        }
        self.src.advance(1)?;
        loop {
            let buf = self.src.fill(1)?;
            if buf.is_empty() {
                return Err(self.syntax("unexpected end of JSON input in string"));
            }
            let plain = plain_prefix(buf);
            if plain > 0 {
                sink.put(buf.get(..plain).unwrap_or_default());
                self.src.advance(plain)?;
                continue;
            }
            match buf.first().copied().unwrap_or_default() {
                b'"' => return self.src.advance(1),
                b'\\' => self.escape(sink)?,
                b if b < 0x20 => return Err(self.syntax("in string literal (control character)")),
                _ => self.utf8(sink)?,
            }
        }
    }

    fn utf8(&mut self, sink: &mut impl StringSink) -> Result<(), JsonError> {
        let buf = self.src.fill(4)?;
        let head = buf.get(..buf.len().min(4)).unwrap_or_default();
        let width = match std::str::from_utf8(head) {
            Ok(_) => head.len(),
            Err(error) if error.valid_up_to() > 0 => error.valid_up_to(),
            Err(_) => 0,
        };
        // Only the first character: from_utf8 may have accepted ASCII after it.
        let first_width = head.first().map_or(0, |b| match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        });
        if width >= first_width && first_width > 1 {
            sink.put(head.get(..first_width).unwrap_or_default());
            self.src.advance(first_width)
        } else {
            // Go: utf8.DecodeRune gives RuneError, width 1.
            sink.put("\u{FFFD}".as_bytes());
            self.src.advance(1)
        }
    }

    fn hex4(&mut self) -> Result<Option<u16>, JsonError> {
        let buf = self.src.fill(6)?;
        let digits = buf.get(2..6).unwrap_or_default();
        if digits.len() < 4 {
            return Ok(None);
        }
        let text = std::str::from_utf8(digits).ok();
        Ok(text
            .filter(|t| t.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|t| u16::from_str_radix(t, 16).ok()))
    }

    fn escape(&mut self, sink: &mut impl StringSink) -> Result<(), JsonError> {
        let buf = self.src.fill(2)?;
        let simple = match buf.get(1).copied() {
            Some(b'"') => Some(b'"'),
            Some(b'\\') => Some(b'\\'),
            Some(b'/') => Some(b'/'),
            Some(b'b') => Some(0x08),
            Some(b'f') => Some(0x0C),
            Some(b'n') => Some(b'\n'),
            Some(b'r') => Some(b'\r'),
            Some(b't') => Some(b'\t'),
            Some(b'u') => None,
            _ => return Err(self.syntax("in string escape code")),
        };
        if let Some(byte) = simple {
            sink.put(&[byte]);
            return self.src.advance(2);
        }
        let Some(unit) = self.hex4()? else { return Err(self.syntax("in \\u hexadecimal character escape")) };
        self.src.advance(6)?;
        let mut code = u32::from(unit);
        if (0xD800..0xDC00).contains(&unit) {
            // A high surrogate: Go combines it with a following \uDC00-\uDFFF, else U+FFFD.
            if self.src.fill(2)?.starts_with(b"\\u")
                && let Some(low) = self.hex4()?
                && (0xDC00..0xE000).contains(&low)
            {
                self.src.advance(6)?;
                code = 0x10000 + ((code - 0xD800) << 10) + (u32::from(low) - 0xDC00);
            } else {
                code = 0xFFFD;
            }
        } else if (0xDC00..0xE000).contains(&unit) {
            code = 0xFFFD;
        }
        let ch = char::from_u32(code).unwrap_or('\u{FFFD}');
        let mut out = [0u8; 4];
        sink.put(ch.encode_utf8(&mut out).as_bytes());
        Ok(())
    }

    /// Reads a number as Go's scanner and `strconv` see it.
    pub(crate) fn number(&mut self) -> Result<Number, JsonError> {
        self.skip_ws()?;
        let mut negative = false;
        if self.src.peek()? == Some(b'-') {
            negative = true;
            self.src.advance(1)?;
        }
        // Significant digits (bounded), and the decimal exponent of the first one kept.
        let mut digits: Vec<u8> = Vec::new();
        let mut int_digits: u64 = 0;
        let mut leading_zero = false;
        let first = self.src.peek()?;
        match first {
            Some(b'0') => {
                leading_zero = true;
                self.src.advance(1)?;
            }
            Some(b'1'..=b'9') => {}
            _ => return Err(self.syntax("in numeric literal")),
        }
        if !leading_zero {
            while let Some(d @ b'0'..=b'9') = self.src.peek()? {
                if digits.len() < 800 {
                    digits.push(d);
                }
                int_digits += 1;
                self.src.advance(1)?;
            }
        }
        let mut is_int = true;
        if self.src.peek()? == Some(b'.') {
            is_int = false;
            self.src.advance(1)?;
            let mut any = false;
            while let Some(d @ b'0'..=b'9') = self.src.peek()? {
                any = true;
                if digits.len() < 800 {
                    digits.push(d);
                }
                self.src.advance(1)?;
            }
            if !any {
                return Err(self.syntax("after decimal point in numeric literal"));
            }
        }
        let mut exponent: i64 = 0;
        if matches!(self.src.peek()?, Some(b'e' | b'E')) {
            is_int = false;
            self.src.advance(1)?;
            let mut exp_negative = false;
            if let Some(sign @ (b'+' | b'-')) = self.src.peek()? {
                exp_negative = sign == b'-';
                self.src.advance(1)?;
            }
            let mut any = false;
            while let Some(d @ b'0'..=b'9') = self.src.peek()? {
                any = true;
                exponent = exponent.saturating_mul(10).saturating_add(i64::from(d - b'0'));
                self.src.advance(1)?;
            }
            if !any {
                return Err(self.syntax("in exponent of numeric literal"));
            }
            if exp_negative {
                exponent = -exponent;
            }
        }
        let text =
            if digits.is_empty() { "0".to_owned() } else { String::from_utf8_lossy(&digits).into_owned() };
        // value = 0.DIGITS × 10^(integer digits + exponent); digits past the 800th only refine it.
        let point = if leading_zero { 0 } else { i64::try_from(int_digits).unwrap_or(i64::MAX) };
        let scale = point.saturating_add(exponent);
        let float = if digits.iter().all(|d| *d == b'0') {
            Some(0.0)
        } else if scale > 400 {
            None
        } else if scale < -400 {
            Some(0.0)
        } else {
            format!("0.{text}e{scale}").parse::<f64>().ok().filter(|f| f.is_finite())
        };
        let float = float.map(|f| if negative { -f } else { f });
        let int = if is_int {
            let body = if leading_zero { "0".to_owned() } else { text };
            if int_digits > 19 {
                None
            } else {
                format!("{}{body}", if negative { "-" } else { "" }).parse::<i64>().ok()
            }
        } else {
            None
        };
        Ok(Number { int, float })
    }

    /// Reads and checks any value, feeding its meaning to `fingerprint` when given. `as_interface`: as
    /// Go's decoder into `interface{}` (a number must fit a float64); else as Go skips a value of
    /// an unknown field (syntax only). Iterative: depth costs one byte.
    pub(crate) fn any(
        &mut self,
        mut fingerprint: Option<&mut Fingerprint>,
        as_interface: bool,
    ) -> Result<(), JsonError> {
        // The open containers: b'{' or b'['; and whether the next token is their first.
        let mut stack: Vec<u8> = Vec::new();
        let mut first = false;
        loop {
            // Position on the next value, closing finished containers.
            if let Some(&open) = stack.last() {
                let more = if open == b'{' {
                    let mut key = fingerprint.as_deref_mut();
                    let more = match key.as_deref_mut() {
                        Some(p) => {
                            p.tag(b'k');
                            self.next_key(first, p)?
                        }
                        None => self.next_key(first, &mut ())?,
                    };
                    if let (true, Some(p)) = (more, key) {
                        let len = std::mem::take(&mut p.string_len);
                        p.bytes(&len.to_le_bytes());
                    }
                    more
                } else {
                    self.next_element(first)?
                };
                if !more {
                    stack.pop();
                    if let Some(p) = fingerprint.as_deref_mut() {
                        p.tag(if open == b'{' { b'}' } else { b']' });
                    }
                    first = false;
                    if stack.is_empty() {
                        return Ok(());
                    }
                    continue;
                }
            }
            first = false;
            match self.peek_kind()? {
                Kind::Object | Kind::Array => {
                    let object = self.peek_kind()? == Kind::Object;
                    if object {
                        self.begin_object()?
                    } else {
                        self.begin_array()?
                    }
                    if let Some(p) = fingerprint.as_deref_mut() {
                        p.tag(if object { b'{' } else { b'[' });
                    }
                    stack.push(if object { b'{' } else { b'[' });
                    first = true;
                    continue;
                }
                Kind::String => match fingerprint.as_deref_mut() {
                    Some(p) => {
                        p.tag(b's');
                        self.string(p)?;
                        let len = std::mem::take(&mut p.string_len);
                        p.bytes(&len.to_le_bytes());
                    }
                    None => self.string(&mut ())?,
                },
                Kind::Number => {
                    let number = self.number()?;
                    let Some(float) = number.float.or((!as_interface).then_some(f64::NAN)) else {
                        return Err(JsonError::Syntax {
                            offset: self.src.consumed,
                            what: "number out of range of a float64",
                        });
                    };
                    if let Some(p) = fingerprint.as_deref_mut() {
                        p.tag(b'n');
                        p.bytes(&float.to_bits().to_le_bytes());
                    }
                }
                Kind::Bool => {
                    let value = self.boolean()?;
                    if let Some(p) = fingerprint.as_deref_mut() {
                        p.tag(if value { b't' } else { b'f' });
                    }
                }
                Kind::Null => {
                    self.null()?;
                    if let Some(p) = fingerprint.as_deref_mut() {
                        p.tag(b'0');
                    }
                }
            }
            if stack.is_empty() {
                return Ok(());
            }
        }
    }
}

/// Go's field-name matching: `encoding/json` folds keys so that `Version`, `VERSION` and
/// `ver\u017Fion` (long s) all name the field `version`. Field names are ASCII; the only
/// non-ASCII runes that fold onto ASCII letters are U+017F (s) and U+212A (Kelvin sign, k).
pub(crate) fn fold_eq(key: &[u8], field: &str) -> bool {
    let mut rest = key;
    let mut field = field.bytes();
    loop {
        let (folded, width) = match rest {
            [] => return field.next().is_none(),
            [0xC5, 0xBF, ..] => (b'S', 2),
            [0xE2, 0x84, 0xAA, ..] => (b'K', 3),
            [b, ..] if b.is_ascii() => (b.to_ascii_uppercase(), 1),
            _ => return false,
        };
        match field.next() {
            Some(f) if f.to_ascii_uppercase() == folded => rest = rest.get(width..).unwrap_or_default(),
            _ => return false,
        }
    }
}

/// Parses a timestamp as Go's `time.Time.UnmarshalJSON` (strict RFC 3339) does; Unix seconds.
pub(crate) fn parse_go_time(text: &[u8]) -> Option<i64> {
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let at = |i: usize| text.get(i).copied();
    if at(4) != Some(b'-')
        || at(7) != Some(b'-')
        || at(10) != Some(b'T')
        || at(13) != Some(b':')
        || at(16) != Some(b':')
    {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    // Go takes a comma for the decimal point too (checked with Helm 3.17 and 4.1).
    if matches!(at(i), Some(b'.' | b',')) {
        i += 1;
        let start = i;
        while at(i).is_some_and(|b| b.is_ascii_digit()) {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let offset = match at(i) {
        Some(b'Z') if text.len() == i + 1 => 0,
        Some(sign @ (b'+' | b'-')) if text.len() == i + 6 && at(i + 3) == Some(b':') => {
            let (h, m) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            // Go's RFC 3339 fast path (`parseRFC3339`, which `Time.UnmarshalJSON` tries first)
            // takes offset hours to 24 and minutes to 60, both inclusive.
            if h > 24 || m > 60 {
                return None;
            }
            let secs = h * 3600 + m * 60;
            if sign == b'-' { -secs } else { secs }
        }
        _ => return None,
    };
    // The grammar above is Go's (offsets to 24:00, a comma for the point: RFC 3339 parsers
    // refuse both); the calendar is jiff's.
    let date =
        jiff::civil::Date::new(i16::try_from(year).ok()?, i8::try_from(month).ok()?, i8::try_from(day).ok()?)
            .ok()?;
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let midnight = date.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp().as_second();
    Some(midnight + hour * 3600 + minute * 60 + second - offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(text: &str) -> JsonReader<&[u8]> {
        JsonReader::new(Source::new(text.as_bytes(), u64::MAX))
    }

    fn string(text: &str) -> Result<String, JsonError> {
        let mut capture = Capture::new(1 << 20);
        reader(text).string(&mut capture)?;
        Ok(capture.text())
    }

    #[test]
    fn strings_unquote_as_go_does() {
        assert_eq!(string(r#""a\"b\\c\/\n\u00e9""#).unwrap(), "a\"b\\c/\né");
        assert_eq!(string(r#""\ud83d\ude00""#).unwrap(), "😀");
        assert_eq!(string(r#""\ud83dx""#).unwrap(), "\u{FFFD}x", "lone high surrogate");
        assert_eq!(string(r#""\ude00""#).unwrap(), "\u{FFFD}", "lone low surrogate");
        assert_eq!(string("\"a\u{e9}\"").unwrap(), "aé");
        let mut capture = Capture::new(64);
        reader("\"a\u{80}\"").string(&mut capture).unwrap();
        let invalid = [b'"', b'a', 0xff, 0xc3, b'"'];
        let mut capture = Capture::new(64);
        JsonReader::new(Source::new(&invalid[..], u64::MAX)).string(&mut capture).unwrap();
        assert_eq!(capture.text(), "a\u{FFFD}\u{FFFD}", "invalid UTF-8 is replaced, byte by byte");
        assert!(string("\"a\u{1}\"").is_err(), "control character");
        assert!(string(r#""\x""#).is_err());
        assert!(string(r#""abc"#).is_err());
    }

    fn number(text: &str) -> Number {
        reader(text).number().unwrap()
    }

    #[test]
    fn numbers_as_parse_int_and_parse_float_see_them() {
        assert_eq!(number("3"), Number { int: Some(3), float: Some(3.0) });
        assert_eq!(number("-0"), Number { int: Some(0), float: Some(-0.0) });
        assert_eq!(number("1.0").int, None);
        assert_eq!(number("1e2"), Number { int: None, float: Some(100.0) });
        assert_eq!(number("9223372036854775807").int, Some(i64::MAX));
        assert_eq!(number("9223372036854775808").int, None);
        assert_eq!(number("-9223372036854775808").int, Some(i64::MIN));
        assert_eq!(number("1e400").float, None, "overflow is an error in Go");
        assert_eq!(number("1e-400").float, Some(0.0), "underflow is not");
        assert_eq!(number("0.5").float, Some(0.5));
        assert_eq!(number("123.456e-2").float, Some(1.23456));
        assert_eq!(number(&"9".repeat(400)).float, None);
        assert_eq!(number(&format!("0.{}1", "0".repeat(1000))).float, Some(0.0));
        for bad in ["01x", "-", "1.", "1e", "+1", ".5"] {
            let mut r = reader(bad);
            let ok = r.number().and_then(|_| r.end());
            assert!(ok.is_err(), "{bad}");
        }
    }

    #[test]
    fn any_value_is_checked_and_fingerprinted_by_meaning() {
        let fingerprint = |text: &str| -> Result<[u8; 32], JsonError> {
            let mut fp = Fingerprint::default();
            let mut r = reader(text);
            r.any(Some(&mut fp), true).and_then(|()| r.end()).map(|()| fp.finish())
        };
        assert_eq!(
            fingerprint(r#"{"a": [1, 2.0, "x"]}"#).ok(),
            fingerprint(r#"{"a":[1.0,2,"\u0078"]}"#).ok()
        );
        assert_ne!(fingerprint(r#"{"a":"bc"}"#).ok(), fingerprint(r#"{"ab":"c"}"#).ok());
        assert_ne!(fingerprint(r#"{"a":1}"#).ok(), fingerprint(r#"{"a":"1"}"#).ok());
        assert!(fingerprint(r#"{"a":1e400}"#).is_err());
        let mut skipped = reader(r#"{"a":1e400}"#);
        assert!(skipped.any(None, false).is_ok(), "an unknown field's value is only scanned");
        assert!(fingerprint(r#"{"a":1,}"#).is_err());
        assert!(fingerprint(r#"[1 2]"#).is_err());
        assert!(fingerprint(r#"{"a" 1}"#).is_err());
        assert!(fingerprint(r#"{1:1}"#).is_err());
        assert!(fingerprint(r#"[1,]"#).is_err());
        assert!(fingerprint(r#"{} x"#).is_err());
        assert!(fingerprint(&format!("{}{}", "[".repeat(10_000), "]".repeat(10_000))).is_ok());
        assert!(matches!(
            fingerprint(&format!("{}{}", "[".repeat(10_001), "]".repeat(10_001))),
            Err(JsonError::TooDeep)
        ));
    }

    #[test]
    fn the_plain_prefix_stops_at_the_first_special_byte() {
        let text = b"abcdefghijklmnopqrstuvwxyz0123456789";
        for at in 0..text.len() {
            for special in [b'"', b'\\', 0x1f, 0x00, 0x80, 0xff] {
                let mut bytes = text.to_vec();
                bytes[at] = special;
                assert_eq!(plain_prefix(&bytes), at, "{special:#x} at {at}");
            }
        }
        assert_eq!(plain_prefix(text), text.len());
        assert_eq!(plain_prefix(b" ~"), 2);
    }

    #[test]
    fn keys_fold_as_go_matches_field_names() {
        assert!(fold_eq(b"version", "version"));
        assert!(fold_eq(b"VERSION", "version"));
        assert!(fold_eq("ver\u{17f}ion".as_bytes(), "version"));
        assert!(fold_eq("\u{212a}ind".as_bytes(), "kind"));
        assert!(fold_eq(b"Import-Values", "import-values"));
        assert!(!fold_eq(b"versions", "version"));
        assert!(!fold_eq(b"versio", "version"));
        assert!(!fold_eq("v\u{e9}rsion".as_bytes(), "version"));
    }

    #[test]
    fn times_parse_as_go_rfc3339() {
        assert_eq!(parse_go_time(b"2026-11-29T16:04:02.491141154Z"), Some(1_795_968_242));
        assert_eq!(parse_go_time(b"1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_go_time(b"0001-01-01T00:00:00Z"), Some(-62_135_596_800));
        assert_eq!(parse_go_time(b"2026-11-29T16:04:02,5Z"), Some(1_795_968_242));
        // The calendar: leap days where they are, year 0 as Go takes it.
        assert_eq!(parse_go_time(b"2024-02-29T00:00:00Z"), Some(1_709_164_800));
        assert_eq!(parse_go_time(b"2000-02-29T00:00:00Z"), Some(951_782_400));
        assert_eq!(parse_go_time(b"0000-01-01T00:00:00Z"), Some(-62_167_219_200));
        // Go's fast path takes offsets to +24:00 and minutes to 60 (real Helm 3.17 and 4.1 list
        // such records; +25:00 and +23:61 they skip).
        assert_eq!(parse_go_time(b"2026-11-30T16:04:02+24:00"), Some(1_795_968_242));
        assert_eq!(parse_go_time(b"2026-11-30T16:05:02+23:60"), Some(1_795_968_302));
        for bad in [
            "2026-11-29T16:04:02+25:00",
            "2026-11-29T16:04:02+23:61",
            "yesterday",
            "2026-11-29",
            "2026-11-29 16:04:02Z",
            "2026-02-30T00:00:00Z",
            "2100-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-00-10T00:00:00Z",
            "2026-11-29T24:00:00Z",
            "2026-11-29T16:04:02",
            "2026-11-29T16:04:02.Z",
            "2026-12-31T23:59:60Z",
            "2026-11-29t16:04:02Z",
            "2026-11-29T16:04:02z",
            "2026-11-29T16:04:02ZZ",
        ] {
            assert_eq!(parse_go_time(bad.as_bytes()), None, "{bad}");
        }
    }
}
