//! JSON log lines, as tracing-subscriber's JSON format writes them, at a fraction of the cost.
//!
//! The guard writes one ledger line of some twenty fields per decision. tracing-subscriber's JSON
//! formatter serialises into its line buffer through an adaptor that checks every fragment (each
//! key, each quote, each run of a string) as UTF-8 and appends it on its own: 32,000
//! instructions for one ledger line, a sixth of a whole DELETE review (BENCHMARKS.md).
//! [`JsonLines`] serialises the same map, with the same field visitor (`tracing-serde`'s), into a
//! byte buffer and hands it over once. Events inside a span and records from the `log` crate,
//! which the guard writes rarely, go to tracing-subscriber's own formatter, so their `spans` list
//! and normalised target are its own too; the tests hold the two formatters to the same output.

use std::fmt;

use serde::Serializer as _;
use serde::ser::SerializeMap;
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
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
    pub fn new() -> JsonLines {
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
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let mut line = Vec::with_capacity(1024);
        serialize(&mut line, &timestamp, event).map_err(|_| fmt::Error)?;
        // serde_json writes UTF-8 only; the check is one pass over a line already in cache.
        writer.write_str(std::str::from_utf8(&line).map_err(|_| fmt::Error)?)?;
        writeln!(writer)
    }
}

/// The event as one JSON object, in the order tracing-subscriber writes it.
fn serialize(line: &mut Vec<u8>, timestamp: &str, event: &Event<'_>) -> Result<(), serde_json::Error> {
    let meta = event.metadata();
    let mut serializer = serde_json::Serializer::new(line);
    let mut map = serializer.serialize_map(None)?;
    map.serialize_entry("timestamp", timestamp)?;
    map.serialize_entry("level", meta.level().as_str())?;
    let mut fields = tracing_serde::SerdeMapVisitor::new(map);
    event.record(&mut fields);
    let mut map = fields.take_serializer()?;
    map.serialize_entry("target", meta.target())?;
    map.end()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::log_writer::Captured;

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
