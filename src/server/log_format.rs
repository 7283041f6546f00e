//! JSON log lines, as tracing-subscriber's JSON format writes them, at a fraction of the cost.
//!
//! The guard writes one ledger line of some twenty fields per decision, on the request's path.
//! tracing-subscriber's JSON formatter serialises it through serde_json into its line buffer by
//! an adaptor that checks every fragment as UTF-8 and appends it on its own, and formats the
//! timestamp through `fmt` each time; serde_json escapes strings one byte at a time through a
//! table. [`JsonLines`] writes the same object into one string and hands it over once: a string
//! with nothing to escape (every field of a ledger line but a rare hand-set name) is copied after
//! one branch-free scan, anything else goes through serde_json, and the timestamp's
//! date and time of day are formatted once per second (BENCHMARKS.md, "The stack around the
//! handler").
//! Events inside a span and records from the `log` crate, which the guard writes rarely, go to
//! tracing-subscriber's own formatter, so their `spans` list and normalised target are its own
//! too; the tests hold the two formatters to the same output, byte for byte.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::time::UNIX_EPOCH;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::time::SystemTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter, SubscriberBuilder};
use tracing_subscriber::registry::LookupSpan;

/// A subscriber writing JSON lines to `writer`, as `serve --log-format json` does (which adds its
/// level filter).
pub fn json_subscriber<W>(writer: W) -> SubscriberBuilder<JsonFields, JsonLines, LevelFilter, W>
where
    W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
{
    tracing_subscriber::fmt().with_writer(writer).fmt_fields(JsonFields::new()).event_format(JsonLines::new())
}

/// One JSON object per line: `timestamp`, `level`, the event's fields, `target`, and for an event
/// inside a span, `spans` (tracing-subscriber's JSON format with `flatten_event(true)` and
/// `with_current_span(false)`).
pub struct JsonLines {
    /// Formats what the fast path leaves alone.
    spanned: Format<Json, SystemTime>,
}

impl JsonLines {
    /// The formatter. Pair it with tracing-subscriber's `JsonFields` for span fields.
    pub(crate) fn new() -> JsonLines {
        JsonLines { spanned: Format::default().json().flatten_event(true).with_current_span(false) }
    }
}

impl Default for JsonLines {
    fn default() -> Self {
        JsonLines::new()
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'lookup> LookupSpan<'lookup>,
    N: for<'writer> FormatFields<'writer> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // The span tracing-subscriber's formatter would list, found as it finds it.
        let in_span = event.parent().and_then(|id| ctx.span(id)).or_else(|| ctx.lookup_current()).is_some();
        if in_span || event.is_log() {
            return self.spanned.format_event(ctx, writer, event);
        }
        let mut line = String::with_capacity(1024);
        line.push_str("{\"timestamp\":\"");
        if !push_timestamp(&mut line, std::time::SystemTime::now()) {
            return self.spanned.format_event(ctx, writer, event);
        }
        line.push_str("\",\"level\":");
        let meta = event.metadata();
        push_string(&mut line, meta.level().as_str());
        event.record(&mut Entries(&mut line));
        line.push_str(",\"target\":");
        push_string(&mut line, meta.target());
        line.push_str("}\n");
        writer.write_str(&line)
    }
}

/// Writes each field as `,"name":value`, as serde_json writes the value tracing-serde's visitor
/// hands it: strings and the `Debug` of other values as JSON strings, integers and booleans as
/// they are, floating-point numbers as serde_json writes them (`null` when not finite).
struct Entries<'a>(&'a mut String);

impl Entries<'_> {
    fn key(&mut self, field: &Field) -> &mut String {
        self.0.push(',');
        push_string(self.0, field.name());
        self.0.push(':');
        self.0
    }
}

impl Visit for Entries<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        push_string(self.key(field), value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field).push_str(if value { "true" } else { "false" });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        // Writing to a String cannot fail.
        let _ = write!(self.key(field), "{value}");
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        let _ = write!(self.key(field), "{value}");
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        // serde_json's shortest round-trip form, which is not Rust's `Display`.
        let number = serde_json::to_string(&value).unwrap_or_else(|_| "null".into());
        self.key(field).push_str(&number);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        push_string(self.key(field), &format!("{value:?}"));
    }
}

/// Appends `value` as a JSON string, escaped exactly as serde_json escapes it.
fn push_string(line: &mut String, value: &str) {
    // Without an early exit the scan compiles to vector compares: a ledger line's strings are
    // a few hundred bytes, and almost never hold a byte serde_json escapes.
    let escaped = value.bytes().fold(false, |any, b| any | (b < 0x20) | (b == b'"') | (b == b'\\'));
    if escaped {
        // Serialising a string cannot fail.
        line.push_str(&serde_json::to_string(value).unwrap_or_default());
    } else {
        line.push('"');
        line.push_str(value);
        line.push('"');
    }
}

thread_local! {
    /// The last second a line was written in on this thread, and its date and time of day.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Appends `now` as tracing-subscriber's `SystemTime` writes it (RFC 3339 in UTC with
/// microseconds, as `2026-11-30T20:58:35.612056Z`); false, having appended nothing, for a time
/// before 1970 or after 9999 (which tracing-subscriber writes its own way).
fn push_timestamp(line: &mut String, now: std::time::SystemTime) -> bool {
    let Ok(since_epoch) = now.duration_since(UNIX_EPOCH) else {
        return false;
    };
    let seconds = since_epoch.as_secs();
    SECOND.with_borrow_mut(|(second, formatted)| {
        if *second != seconds {
            let Some(at) = i64::try_from(seconds).ok().and_then(|s| jiff::Timestamp::from_second(s).ok())
            else {
                return false;
            };
            formatted.clear();
            let _ = write!(formatted, "{}", at.strftime("%Y-%m-%dT%H:%M:%S"));
            *second = seconds;
        }
        line.push_str(formatted);
        let _ = write!(line, ".{:06}Z", since_epoch.subsec_micros());
        true
    })
}

/// Log output a test can read back: an `io::Write` and a tracing `MakeWriter` over one buffer.
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl Captured {
    /// What has been written so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

#[cfg(test)]
impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::Captured;
    use super::*;
    use std::time::Duration;
    use tracing_subscriber::fmt::time::FormatTime;

    #[derive(Debug)]
    struct Failure;

    impl fmt::Display for Failure {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("could not \"read\"\n")
        }
    }

    impl std::error::Error for Failure {}

    /// The lines the same events make under our formatter or tracing-subscriber's, each with
    /// its timestamp blanked.
    fn lines(ours: bool) -> Vec<String> {
        let out = Captured::default();
        let level = tracing::Level::TRACE;
        let run = || {
            let quoted = "a \"quoted\" \\ line\nwith\ttabs, \u{1} a control, é and 🦀";
            tracing::info!(target: "helm_guard::ledger", webhook = "validate", revision = 3u32, dry_run = false, offset = -4i64, ratio = 0.5f64, nan = f64::NAN, big = u128::MAX, message = quoted);
            tracing::warn!(kind = ?Some("Secret"), shown = %"display", error = &Failure as &dyn std::error::Error, "a message with {} and {:?}", "args", "debug");
            tracing::error!("");
            let span = tracing::info_span!("request", method = "POST", uri = "/validate?x=\"y\"");
            span.in_scope(|| tracing::info!(inner = 1, "inside a span"));
            let child = tracing::debug_span!(parent: &span, "child", n = 2);
            tracing::info!(parent: &child, "explicit parent");
            tracing::info!(parent: None, "no parent");
        };
        if ours {
            let subscriber = json_subscriber(out.clone()).with_max_level(level).finish();
            tracing::subscriber::with_default(subscriber, run);
        } else {
            let theirs = tracing_subscriber::fmt().json().flatten_event(true).with_current_span(false);
            let subscriber = theirs.with_writer(out.clone()).with_max_level(level).finish();
            tracing::subscriber::with_default(subscriber, run);
        }
        out.text()
            .lines()
            .map(|line| {
                let (timestamp, rest) = line.split_once(r#"","level""#).unwrap();
                assert!(timestamp.starts_with(r#"{"timestamp":"20"#) && timestamp.ends_with('Z'), "{line}");
                format!(r#"{{"timestamp":"…","level"{rest}"#)
            })
            .collect()
    }

    #[test]
    fn lines_are_those_of_tracing_subscribers_json_format_byte_for_byte() {
        let (ours, theirs) = (lines(true), lines(false));
        assert_eq!(ours.len(), 6);
        assert_eq!(ours, theirs);
        let first: serde_json::Value = serde_json::from_str(&ours[0]).unwrap();
        assert_eq!(first["message"], "a \"quoted\" \\ line\nwith\ttabs, \u{1} a control, é and 🦀");
        assert_eq!((&first["level"], &first["target"]), (&"INFO".into(), &"helm_guard::ledger".into()));
        assert_eq!(first["nan"], serde_json::Value::Null);
        assert!(ours[3].contains(r#""spans":[{"method":"POST","#), "{}", ours[3]);
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let every_ascii: String = (0u8..0x80).map(char::from).collect();
        for value in
            ["", "plain", "quote \" in", "back \\ slash", "\u{7f} del", "é and 🦀", "/", &every_ascii]
        {
            let mut line = String::new();
            push_string(&mut line, value);
            assert_eq!(line, serde_json::to_string(value).unwrap(), "{value:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_string_is_escaped_as_serde_json_escapes_it(value in ".*") {
            let mut line = String::new();
            push_string(&mut line, &value);
            proptest::prop_assert_eq!(line, serde_json::to_string(&value).unwrap());
        }
    }

    fn timestamp(seconds: u64, micros: u32) -> String {
        let mut line = String::new();
        assert!(push_timestamp(&mut line, UNIX_EPOCH + Duration::new(seconds, micros * 1000 + 999)));
        line
    }

    #[test]
    fn timestamps_are_utc_with_microseconds() {
        // The dates as `date -u -d @SECONDS` writes them.
        assert_eq!(timestamp(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(timestamp(951_782_399, 999_999), "2000-02-28T23:59:59.999999Z");
        assert_eq!(timestamp(951_782_400, 7), "2000-02-29T00:00:00.000007Z");
        assert_eq!(timestamp(1_796_075_915, 612_056), "2026-11-30T21:58:35.612056Z");
        // The same second again (its date remembered), then the next.
        assert_eq!(timestamp(1_796_075_915, 1), "2026-11-30T21:58:35.000001Z");
        assert_eq!(timestamp(1_796_075_916, 1), "2026-11-30T21:58:36.000001Z");
        assert_eq!(timestamp(253_402_207_199, 0), "9999-12-30T21:59:59.000000Z");
        // Past jiff's range (which ends on the 30th of December, 9999) the line is
        // tracing-subscriber's to write.
        assert!(!push_timestamp(&mut String::new(), UNIX_EPOCH + Duration::from_secs(253_402_300_799)));
        // So is a clock set before 1970.
        assert!(!push_timestamp(&mut String::new(), UNIX_EPOCH - Duration::from_secs(1)));
    }

    #[test]
    fn a_lines_timestamp_is_tracing_subscribers_at_the_same_moment() {
        let theirs = || {
            let mut text = String::new();
            SystemTime.format_time(&mut Writer::new(&mut text)).unwrap();
            text
        };
        let out = Captured::default();
        let before = theirs();
        tracing::subscriber::with_default(json_subscriber(out.clone()).finish(), || tracing::info!("now"));
        let after = theirs();
        let line: serde_json::Value = serde_json::from_str(out.text().trim()).unwrap();
        let ours = line["timestamp"].as_str().unwrap();
        assert_eq!(ours.len(), before.len(), "{ours} / {before}");
        assert!(before.as_str() <= ours && ours <= after.as_str(), "{before} <= {ours} <= {after}");
    }

    #[test]
    fn a_log_record_is_formatted_as_tracing_subscriber_does() {
        // tracing-subscriber installs the `log` bridge at `init`; a test cannot, so the record is
        // formatted through a subscriber that sees it as `log` would hand it over.
        let out = Captured::default();
        let subscriber = json_subscriber(out.clone()).finish();
        tracing::subscriber::with_default(subscriber, || {
            let record = tracing_log::log::Record::builder()
                .args(format_args!("a log record"))
                .level(tracing_log::log::Level::Warn)
                .target("rustls::conn")
                .build();
            tracing_log::format_trace(&record).unwrap();
        });
        let line: serde_json::Value = serde_json::from_str(out.text().trim()).unwrap();
        assert_eq!(line["target"], "rustls::conn");
        assert_eq!(line["message"], "a log record");
        assert_eq!(line["level"], "WARN");
    }
}
