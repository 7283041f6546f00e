//! Helm's release type, read the way Helm 3 and Helm 4 read it (`json.Unmarshal` into
//! `release.Release`), streaming: what is kept is a few short strings and a fingerprint.
//!
//! The tables below are Helm's Go types (v3.17 `pkg/release`, `pkg/chart`; v4.1
//! `pkg/release/v1`, `pkg/chart/v2`, `pkg/chart/common`): every field Go decodes is type-checked
//! because one wrong type anywhere makes Helm skip the whole record. Fields only Helm 4 has
//! (`apply_method`, `modtime`, `schemamodtime`, from 4.2 `info.rollback_revision`) are checked too: a record the guard counts must
//! be one both Helms read alike.
//!
//! Where Helm 3 and Helm 4 read a record differently it counts as unreadable (the safe side: a
//! record the guard skips can only make it stricter, and one created under a name Helm stores a
//! revision under is refused, C2; what Helm's own storage writes is Go's `json.Marshal` of its
//! type, which both read alike), but only where they differ on what the
//! guard decides by: whether the record is read at all, its revision, status, name, namespace
//! and the content it fingerprints. They differ on: an `info` given twice whose last copy lacks
//! the `status` an earlier one has (Helm 4 takes the status and description from the last copy
//! alone); `info.status` given under several spellings with different values, where the last
//! given (Helm 3's) is not the spelling that sorts last (Helm 4 decodes `info` and `last_run`
//! through a map, which `json.Marshal` writes back in key order); and an empty string as an
//! `info`/`last_run` time under a key spelt otherwise than Helm writes it (Helm 3's `pkg/time`
//! reads `""` as unset under any spelling, Helm 4 refuses the record). Where they differ only on
//! the description, a time or a hook's last run, the record counts and the guard keeps Helm 3's
//! reading.

use std::io::Read;

use serde::Serialize;

use super::gojson::{Capture, Fingerprint, JsonError, JsonReader, Kind, fold_eq, parse_go_time};
use super::{DecodeError, Fingerprinting};
use crate::release::Status;

/// Go types of Helm's fields, as far as decoding cares.
#[derive(Debug, Clone, Copy)]
enum Ty {
    Str,
    Int,
    Bool,
    Time,
    /// `[]byte`: base64 text (or an array of bytes).
    Bytes,
    /// `map[string]interface{}`
    MapAny,
    /// `map[string]string`
    MapStr,
    /// `[]string` (and the string kinds: hook events, delete policies)
    StrList,
    /// `[]interface{}`
    AnyList,
    /// `*T` or `T` for a struct T
    Struct(&'static [Field]),
    /// `[]*T`
    StructList(&'static [Field]),
    /// `map[string][]runtime.Object`: only nulls decode into an interface with no concrete type.
    Resources,
}

/// What of a field the guard keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    None,
    /// `info`: noted when present.
    Info,
    Name,
    Namespace,
    Version,
    Status,
    FirstDeployed,
    LastDeployed,
    Deleted,
    Description,
    ChartName,
    ChartVersion,
    AppVersion,
}

#[derive(Debug)]
struct Field {
    name: &'static str,
    ty: Ty,
    slot: Slot,
    /// Part of the content fingerprint (what Helm never changes in an update).
    content: bool,
}

const fn field(name: &'static str, ty: Ty) -> Field {
    Field { name, ty, slot: Slot::None, content: true }
}

const fn kept(name: &'static str, ty: Ty, slot: Slot) -> Field {
    Field { name, ty, slot, content: true }
}

/// A field Helm rewrites in its own updates, or that only records when (not what).
const fn mutable(name: &'static str, ty: Ty, slot: Slot) -> Field {
    Field { name, ty, slot, content: false }
}

const RELEASE: &[Field] = &[
    kept("name", Ty::Str, Slot::Name),
    // Given twice, Helm 3 decodes the second copy into the first (fields it lacks stay), Helm 4
    // (`Info.UnmarshalJSON`) too for the times, but takes `status` and `description` from the
    // last copy alone: see `read_release`.
    mutable("info", Ty::Struct(INFO), Slot::Info),
    field("chart", Ty::Struct(CHART)),
    field("config", Ty::MapAny),
    field("manifest", Ty::Str),
    field("hooks", Ty::StructList(HOOK)),
    kept("version", Ty::Int, Slot::Version),
    kept("namespace", Ty::Str, Slot::Namespace),
    mutable("apply_method", Ty::Str, Slot::None),
];

const INFO: &[Field] = &[
    mutable("first_deployed", Ty::Time, Slot::FirstDeployed),
    mutable("last_deployed", Ty::Time, Slot::LastDeployed),
    mutable("deleted", Ty::Time, Slot::Deleted),
    mutable("description", Ty::Str, Slot::Description),
    mutable("status", Ty::Str, Slot::Status),
    // Helm 4.2 on writes the revision a rollback went back to (`Info.RollbackRevision`).
    mutable("rollback_revision", Ty::Int, Slot::None),
    mutable("notes", Ty::Str, Slot::None),
    mutable("resources", Ty::Resources, Slot::None),
];

const CHART: &[Field] = &[
    field("metadata", Ty::Struct(METADATA)),
    field("lock", Ty::Struct(LOCK)),
    field("templates", Ty::StructList(FILE)),
    field("values", Ty::MapAny),
    field("schema", Ty::Bytes),
    mutable("schemamodtime", Ty::Time, Slot::None),
    field("files", Ty::StructList(FILE)),
    mutable("modtime", Ty::Time, Slot::None),
];

const FILE: &[Field] =
    &[field("name", Ty::Str), field("data", Ty::Bytes), mutable("modtime", Ty::Time, Slot::None)];

const METADATA: &[Field] = &[
    kept("name", Ty::Str, Slot::ChartName),
    field("home", Ty::Str),
    field("sources", Ty::StrList),
    kept("version", Ty::Str, Slot::ChartVersion),
    field("description", Ty::Str),
    field("keywords", Ty::StrList),
    field("maintainers", Ty::StructList(MAINTAINER)),
    field("icon", Ty::Str),
    field("apiVersion", Ty::Str),
    field("condition", Ty::Str),
    field("tags", Ty::Str),
    kept("appVersion", Ty::Str, Slot::AppVersion),
    field("deprecated", Ty::Bool),
    field("annotations", Ty::MapStr),
    field("kubeVersion", Ty::Str),
    field("dependencies", Ty::StructList(DEPENDENCY)),
    field("type", Ty::Str),
];

const MAINTAINER: &[Field] = &[field("name", Ty::Str), field("email", Ty::Str), field("url", Ty::Str)];

const DEPENDENCY: &[Field] = &[
    field("name", Ty::Str),
    field("version", Ty::Str),
    field("repository", Ty::Str),
    field("condition", Ty::Str),
    field("tags", Ty::StrList),
    field("enabled", Ty::Bool),
    field("import-values", Ty::AnyList),
    field("alias", Ty::Str),
];

const LOCK: &[Field] = &[
    field("generated", Ty::Time),
    field("digest", Ty::Str),
    field("dependencies", Ty::StructList(DEPENDENCY)),
];

const HOOK: &[Field] = &[
    field("name", Ty::Str),
    field("kind", Ty::Str),
    field("path", Ty::Str),
    field("manifest", Ty::Str),
    field("events", Ty::StrList),
    mutable("last_run", Ty::Struct(HOOK_EXECUTION), Slot::None),
    field("weight", Ty::Int),
    // Helm fills in its default delete policy when it runs a hook (observed: Helm 3 writes
    // `before-hook-creation` into a pending revision); the log policy likewise.
    mutable("delete_policies", Ty::StrList, Slot::None),
    mutable("output_log_policies", Ty::StrList, Slot::None),
];

const HOOK_EXECUTION: &[Field] = &[
    mutable("started_at", Ty::Time, Slot::None),
    mutable("completed_at", Ty::Time, Slot::None),
    mutable("phase", Ty::Str, Slot::None),
];

/// Structs that Helm 4 decodes through a `map[string]any` first (custom `UnmarshalJSON`).
fn read_through_map(fields: &'static [Field]) -> bool {
    // Constants have no fixed address: tell the tables apart by their first field.
    let first = |table: &[Field]| table.first().map(|field| field.name);
    first(fields) == first(INFO) || first(fields) == first(HOOK_EXECUTION)
}

/// How long a kept string may be; longer ones are cut (names: Kubernetes' own limit).
const NAME_CAP: usize = 253;
const TEXT_CAP: usize = 1024;

/// What helm-guard keeps of a release Helm 3 and Helm 4 both read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReleasePayload {
    /// The release's name.
    pub name: String,
    /// The release's namespace.
    pub namespace: String,
    /// The revision Helm shows (`version`).
    pub version: u32,
    /// Status, times and description.
    pub info: ReleaseInfo,
    /// The chart's metadata, when the payload has a chart.
    pub chart: Option<ChartMetadata>,
    /// SHA-256 of what Helm never changes once a revision is written: name, namespace, version,
    /// chart, manifest, config, and the hooks but for their `last_run` and the policies Helm
    /// fills in when it runs them.
    /// Taken only when asked for (an UPDATE compares it): `None` otherwise.
    #[serde(skip)]
    pub content: Option<[u8; 32]>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
/// The `info` of a release.
pub struct ReleaseInfo {
    /// The revision's status.
    pub status: Status,
    /// `info.status` as written when it is none of Helm's statuses (Helm shows it as it is).
    pub status_text: Option<String>,
    /// When the release was first deployed.
    pub first_deployed: Option<String>,
    /// When this revision was deployed.
    pub last_deployed: Option<String>,
    /// When the release was uninstalled.
    pub deleted: Option<String>,
    /// Helm's description of the revision.
    pub description: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
/// The `chart.metadata` of a release.
pub struct ChartMetadata {
    /// The chart's name.
    pub name: String,
    /// The chart's version.
    pub version: String,
    /// The chart's app version.
    pub app_version: Option<String>,
}

impl ReleasePayload {
    /// Whether Helm failed this revision on a server-side-apply field conflict. Helm 4 stores the
    /// API server's words in the description: `Upgrade "web" failed: conflict occurred while
    /// applying object NS/NAME apps/v1, Kind=Deployment: Apply failed with 1 conflict: conflict
    /// with "kubectl" with subresource "scale" using apps/v1: .spec.replicas` (Helm 4.1.4 on the
    /// real API server: tests/fixtures/snapshot/record-ssa-conflict-failed.json).
    pub(crate) fn failed_on_field_conflict(&self) -> bool {
        self.info.status == Status::Failed
            && self
                .info
                .description
                .as_deref()
                .is_some_and(|said| said.contains("Apply failed with") && said.contains("conflict with "))
    }

    /// The chart's metadata.
    pub(crate) fn chart_metadata(&self) -> Option<&ChartMetadata> {
        self.chart.as_ref()
    }

    /// `last_deployed` as Unix seconds; Helm 4 omits zero times and Helm 3 writes year 1.
    pub(crate) fn last_deployed_unix(&self) -> Option<i64> {
        parse_helm_time(self.info.last_deployed.as_deref()?)
    }
}

/// Parses a Helm timestamp (RFC 3339 as Go reads it); the zero time Helm 3 writes counts as absent.
pub(crate) fn parse_helm_time(text: &str) -> Option<i64> {
    parse_go_time(text.as_bytes()).filter(|secs| *secs > 0)
}

#[derive(Debug, Default)]
struct Kept {
    name: Option<String>,
    namespace: Option<String>,
    version: Option<i64>,
    status: Option<String>,
    first_deployed: Option<String>,
    last_deployed: Option<String>,
    deleted: Option<String>,
    description: Option<String>,
    chart_name: Option<String>,
    chart_version: Option<String>,
    app_version: Option<String>,
    has_info: bool,
    /// How many `info` objects were read, and whether the last one gave `status` (Helm 4 reads
    /// it from the last copy alone).
    info_copies: u32,
    last_info_status: bool,
}

impl Kept {
    fn text(&mut self, slot: Slot) -> Option<&mut Option<String>> {
        Some(match slot {
            Slot::Name => &mut self.name,
            Slot::Namespace => &mut self.namespace,
            Slot::Status => &mut self.status,
            Slot::FirstDeployed => &mut self.first_deployed,
            Slot::LastDeployed => &mut self.last_deployed,
            Slot::Deleted => &mut self.deleted,
            Slot::Description => &mut self.description,
            Slot::ChartName => &mut self.chart_name,
            Slot::ChartVersion => &mut self.chart_version,
            Slot::AppVersion => &mut self.app_version,
            Slot::None | Slot::Version | Slot::Info => return None,
        })
    }
}

/// What an empty string means for a time field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EmptyTime {
    /// Go's `time.Time`: an error.
    Refused,
    /// Helm's release times: unset, in Helm 3 and Helm 4 alike.
    Unset,
    /// Unset for Helm 3, an error for Helm 4.
    Disagree,
}

struct Walk<R> {
    json: JsonReader<R>,
    kept: Kept,
    /// The field path being read, for messages.
    path: Vec<&'static str>,
}

type Step<T> = Result<T, DecodeError>;

fn go_type(ty: Ty) -> &'static str {
    match ty {
        Ty::Str => "a string",
        Ty::Int => "an integer (Go int)",
        Ty::Bool => "a boolean",
        Ty::Time => "an RFC 3339 time",
        Ty::Bytes => "base64 text",
        Ty::MapAny | Ty::MapStr | Ty::Struct(_) | Ty::Resources => "an object",
        Ty::StrList | Ty::AnyList | Ty::StructList(_) => "an array",
    }
}

impl<R: Read> Walk<R> {
    fn path(&self) -> String {
        self.path.join(".")
    }

    fn wrong_type(&self, ty: Ty, found: Kind) -> DecodeError {
        DecodeError::Helm(format!(
            "`{}` is {}; Helm reads {} there and skips the whole record",
            self.path(),
            match found {
                Kind::Object => "an object",
                Kind::Array => "an array",
                Kind::String => "a string",
                Kind::Number => "a number",
                Kind::Bool => "a boolean",
                Kind::Null => "null",
            },
            go_type(ty)
        ))
    }

    fn helm(&self, what: &str) -> DecodeError {
        DecodeError::Helm(format!("`{}` {what}; Helm skips the whole record", self.path()))
    }

    /// Reads one value of type `ty`; returns whether it is Go's zero value (so that an omitted
    /// field and a written zero fingerprint alike, as Helm 3 and Helm 4 write them differently).
    fn value(
        &mut self,
        ty: Ty,
        slot: Slot,
        empty_time: EmptyTime,
        mut fingerprint: Option<&mut Fingerprint>,
    ) -> Step<bool> {
        let kind = self.json.peek_kind()?;
        if kind == Kind::Null {
            self.json.null()?;
            if slot == Slot::Info {
                // A pointer: Go sets it to nil, and a later copy starts from a new struct.
                let kept = &mut self.kept;
                kept.has_info = false;
                (kept.status, kept.description) = (None, None);
                (kept.first_deployed, kept.last_deployed, kept.deleted) = (None, None, None);
            }
            // Anything else Go leaves as it was.
            return Ok(true);
        }
        match (ty, kind) {
            (Ty::Str, Kind::String) => {
                // Only kept strings are held; for the rest the capture only tells empty from not.
                let cap = match slot {
                    Slot::None | Slot::Version | Slot::Info => 0,
                    Slot::Description => TEXT_CAP,
                    _ => NAME_CAP,
                };
                let mut capture = Capture::new(cap);
                match fingerprint.as_deref_mut() {
                    Some(p) => self.json.string(&mut (&mut capture, p))?,
                    None => self.json.string(&mut capture)?,
                }
                let zero = capture.bytes.is_empty() && !capture.truncated;
                if let Some(out) = self.kept.text(slot) {
                    *out = Some(capture.text());
                }
                Ok(zero)
            }
            (Ty::Int, Kind::Number) => {
                let Some(int) = self.json.number()?.int else {
                    return Err(self.helm("is not an integer a Go int holds"));
                };
                if slot == Slot::Version {
                    self.kept.version = Some(int);
                }
                if let Some(p) = fingerprint {
                    p.bytes(&int.to_le_bytes());
                }
                Ok(int == 0)
            }
            (Ty::Bool, Kind::Bool) => {
                let value = self.json.boolean()?;
                if let Some(p) = fingerprint {
                    p.tag(u8::from(value));
                }
                Ok(!value)
            }
            (Ty::Time, Kind::String) => {
                let mut capture = Capture::new(64);
                self.json.string(&mut capture)?;
                let text = capture.whole().unwrap_or_default();
                if text.is_empty() {
                    match empty_time {
                        EmptyTime::Unset => return Ok(true),
                        EmptyTime::Disagree => {
                            return Err(DecodeError::HelmDisagree(format!(
                                "`{}` is an empty string under a key spelt otherwise than Helm writes it: \
                                 Helm 3 reads it as unset, Helm 4 refuses the record",
                                self.path()
                            )));
                        }
                        EmptyTime::Refused => {}
                    }
                }
                let Some(secs) = parse_go_time(text.as_bytes()) else {
                    return Err(self.helm(&format!("is {text:?}, not an RFC 3339 time")));
                };
                if let Some(out) = self.kept.text(slot) {
                    *out = Some(text);
                }
                if let Some(p) = fingerprint {
                    p.bytes(&secs.to_le_bytes());
                }
                Ok(secs == parse_go_time(b"0001-01-01T00:00:00Z").unwrap_or_default())
            }
            (Ty::Bytes, Kind::String) => {
                let mut bytes = super::go_base64::GoBytes::default();
                match fingerprint {
                    Some(p) => self.json.string(&mut (&mut bytes, p))?,
                    None => self.json.string(&mut bytes)?,
                }
                bytes
                    .finish()
                    .map_err(|error| self.helm(&format!("is not base64 as Go decodes a []byte ({error})")))
            }
            (Ty::Bytes, Kind::Array) => {
                // Go also decodes an array of numbers 0-255 into a []byte.
                self.array(fingerprint, |walk, fingerprint| match walk.json.peek_kind()? {
                    Kind::Null => walk.json.null().map_err(DecodeError::from),
                    Kind::Number => match walk.json.number()?.int {
                        Some(byte @ 0..=255) => {
                            if let Some(p) = fingerprint {
                                p.bytes(&[byte as u8]);
                            }
                            Ok(())
                        }
                        _ => Err(walk.helm("holds a number that is not a byte")),
                    },
                    found => Err(walk.wrong_type(Ty::Int, found)),
                })
            }
            (Ty::MapAny, Kind::Object) => self.object(fingerprint, |walk, fingerprint| {
                walk.json.any(fingerprint, true)?;
                Ok(())
            }),
            (Ty::MapStr, Kind::Object) => self.object(fingerprint, |walk, fingerprint| {
                walk.value(Ty::Str, Slot::None, EmptyTime::Refused, fingerprint).map(|_| ())
            }),
            (Ty::Resources, Kind::Object) => {
                self.object(fingerprint, |walk, fingerprint| match walk.json.peek_kind()? {
                    Kind::Null => walk.json.null().map_err(DecodeError::from),
                    Kind::Array => walk
                        .array(fingerprint, |walk, _| match walk.json.peek_kind()? {
                            // runtime.Object is an interface with no concrete type: only null fits.
                            Kind::Null => walk.json.null().map_err(DecodeError::from),
                            found => Err(walk.wrong_type(Ty::Resources, found)),
                        })
                        .map(|_| ()),
                    found => Err(walk.wrong_type(Ty::AnyList, found)),
                })
            }
            (Ty::StrList, Kind::Array) => self.array(fingerprint, |walk, fingerprint| {
                walk.value(Ty::Str, Slot::None, EmptyTime::Refused, fingerprint).map(|_| ())
            }),
            (Ty::AnyList, Kind::Array) => self.array(fingerprint, |walk, fingerprint| {
                walk.json.any(fingerprint, true)?;
                Ok(())
            }),
            (Ty::StructList(fields), Kind::Array) => {
                self.array(fingerprint, |walk, fingerprint| walk.structure(fields, fingerprint).map(|_| ()))
            }
            (Ty::Struct(fields), Kind::Object) => {
                if slot == Slot::Info {
                    self.kept.has_info = true;
                    self.kept.info_copies += 1;
                    self.kept.last_info_status = false;
                }
                self.structure(fields, fingerprint)
            }
            (ty, found) => Err(self.wrong_type(ty, found)),
        }
    }

    /// An object whose values all have one type (a Go map); true when empty.
    fn object(
        &mut self,
        mut fingerprint: Option<&mut Fingerprint>,
        mut each: impl FnMut(&mut Self, Option<&mut Fingerprint>) -> Step<()>,
    ) -> Step<bool> {
        self.json.begin_object()?;
        let mut count = 0u64;
        loop {
            let more = match fingerprint.as_deref_mut() {
                Some(p) => {
                    p.tag(b'k');
                    let more = self.json.next_key(count == 0, p)?;
                    p.tag(b':');
                    more
                }
                None => self.json.next_key(count == 0, &mut ())?,
            };
            if !more {
                return Ok(count == 0);
            }
            count += 1;
            each(self, fingerprint.as_deref_mut())?;
        }
    }

    /// An array; true when empty.
    fn array(
        &mut self,
        mut fingerprint: Option<&mut Fingerprint>,
        mut each: impl FnMut(&mut Self, Option<&mut Fingerprint>) -> Step<()>,
    ) -> Step<bool> {
        self.json.begin_array()?;
        let mut count = 0u64;
        while self.json.next_element(count == 0)? {
            count += 1;
            if let Some(p) = fingerprint.as_deref_mut() {
                p.tag(b',');
            }
            each(self, fingerprint.as_deref_mut())?;
        }
        Ok(count == 0)
    }

    /// A Go struct: keys matched to fields as Go does, the last of repeated keys winning, unknown
    /// keys skipped. Each field's fingerprint is taken apart and left out when the value is zero.
    fn structure(&mut self, fields: &'static [Field], fingerprint: Option<&mut Fingerprint>) -> Step<bool> {
        if self.json.peek_kind()? == Kind::Null {
            self.json.null()?;
            return Ok(true);
        }
        if self.json.peek_kind()? != Kind::Object {
            let found = self.json.peek_kind()?;
            return Err(self.wrong_type(Ty::Struct(fields), found));
        }
        let through_map = read_through_map(fields);
        // Helm 4 reads these structs through a map: of a field given under several spellings it
        // takes the one whose key sorts last (Go's `json.Marshal` sorts map keys), where Helm 3
        // takes the last given. Followed per field, only there.
        let mut repeats: Vec<Repeats> =
            if through_map { vec![Repeats::default(); fields.len()] } else { Vec::new() };
        // Each field's fingerprint, the last given winning as in Go, then taken in the table's
        // order: field order in the text does not matter to Go, so it does not here.
        let mut fingerprints: Vec<Option<[u8; 32]>> = vec![None; fields.len()];
        // Which fields hold something other than their zero value.
        let mut set = vec![false; fields.len()];
        self.json.begin_object()?;
        let mut first = true;
        loop {
            let mut key = Capture::new(32);
            if !self.json.next_key(first, &mut key)? {
                // Only where the guard decides by the field (the status); of the others (the
                // description, times, a hook's last run) it keeps Helm 3's reading.
                if let Some(field) = fields
                    .iter()
                    .zip(&repeats)
                    .find_map(|(field, r)| (r.disagree() && field.slot == Slot::Status).then_some(field))
                {
                    let at = if self.path.is_empty() { String::new() } else { format!("{}.", self.path()) };
                    return Err(DecodeError::HelmDisagree(format!(
                        "`{at}{}` is given under several spellings and the last given is not the one that sorts last: \
                         Helm 3 reads the one, Helm 4 the other",
                        field.name
                    )));
                }
                let zero = !set.contains(&true);
                if let Some(p) = fingerprint {
                    for (field, fingerprint) in fields.iter().zip(&fingerprints) {
                        if let Some(fingerprint) = fingerprint {
                            p.tag(b'f');
                            p.bytes(field.name.as_bytes());
                            p.bytes(fingerprint);
                        }
                    }
                }
                return Ok(zero);
            }
            first = false;
            let found = if key.truncated {
                None
            } else {
                fields.iter().enumerate().find(|(_, field)| fold_eq(&key.bytes, field.name))
            };
            let Some((index, field)) = found else {
                // Helm 4 reads info and last_run through a map: every value there must be one Go
                // can hold in an interface{} (numbers in float64 range).
                self.json.any(None, through_map)?;
                continue;
            };
            self.kept.last_info_status |= field.slot == Slot::Status;
            self.path.push(field.name);
            // Helm's own times (Helm 3 `pkg/time`, Helm 4's map-first reading) take "" as unset.
            let empty_time = match (through_map, key.bytes == field.name.as_bytes()) {
                (false, _) => EmptyTime::Refused,
                (true, true) => EmptyTime::Unset,
                (true, false) => EmptyTime::Disagree,
            };
            let mut field_print = (field.content && fingerprint.is_some()).then(Fingerprint::default);
            let field_zero = self.value(field.ty, field.slot, empty_time, field_print.as_mut())?;
            self.path.pop();
            if let Some(repeat) = repeats.get_mut(index) {
                let value = self.kept.text(field.slot).and_then(|kept| kept.clone());
                repeat.given(key.bytes, value, field.slot != Slot::None);
            }
            if let Some(slot) = fingerprints.get_mut(index) {
                *slot = field_print.filter(|_| !field_zero).map(Fingerprint::finish);
            }
            if let Some(set) = set.get_mut(index) {
                *set = !field_zero;
            }
        }
    }
}

/// One field of a struct Helm 4 reads through a map, as its occurrences come.
#[derive(Debug, Clone, Default)]
struct Repeats {
    /// The greatest key it was given under, and what that occurrence left in its kept slot.
    greatest: Option<(Vec<u8>, Option<String>)>,
    /// Whether the last occurrence was under the greatest key, and what it left.
    last: Option<(bool, Option<String>)>,
    /// Whether the guard keeps the field's value (else two occurrences cannot be compared).
    kept: bool,
}

impl Repeats {
    fn given(&mut self, key: Vec<u8>, value: Option<String>, kept: bool) {
        self.kept = kept;
        let greatest = self.greatest.as_ref().is_none_or(|(top, _)| key >= *top);
        self.last = Some((greatest, value.clone()));
        if greatest {
            // The same key again also replaces its value in Helm 4's map.
            self.greatest = Some((key, value));
        }
    }

    /// Helm 3 (the last given) and Helm 4 (the greatest key's last value) read different values.
    fn disagree(&self) -> bool {
        match (&self.last, &self.greatest) {
            (Some((false, last)), Some((_, top))) => !self.kept || last != top,
            _ => false,
        }
    }
}

impl From<JsonError> for DecodeError {
    fn from(error: JsonError) -> DecodeError {
        match error {
            JsonError::TooLarge { limit } => DecodeError::TooLarge { limit: limit as usize },
            other => DecodeError::Json(other),
        }
    }
}

/// Reads release JSON as Helm does. `Err`: Helm 3 or Helm 4 would skip the record.
/// [`Fingerprinting::Take`]: also take the content fingerprint (it costs a SHA-256 over the chart).
pub(crate) fn read_release<R: Read>(
    json: JsonReader<R>,
    fingerprinting: Fingerprinting,
) -> Result<ReleasePayload, DecodeError> {
    let mut walk = Walk { json, kept: Kept::default(), path: Vec::new() };
    let mut content = Fingerprint::default();
    if walk.json.peek_kind()? != Kind::Object {
        let found = walk.json.peek_kind()?;
        let what = match found {
            Kind::Null => "null",
            Kind::Array => "an array",
            Kind::String => "a string",
            Kind::Number => "a number",
            Kind::Bool => "a boolean",
            Kind::Object => "an object",
        };
        return Err(DecodeError::Helm(format!("the release is {what}, not an object")));
    }
    walk.structure(RELEASE, (fingerprinting == Fingerprinting::Take).then_some(&mut content))?;
    walk.json.end()?;
    let kept = walk.kept;
    if !kept.has_info {
        return Err(DecodeError::Helm("the release has no `info`; Helm cannot show or use it".to_owned()));
    }
    // `info` given more than once: Helm 3 keeps an earlier copy's `status` or `description` that
    // the last copy lacks, Helm 4 reads none there. Alike unless that earlier value is not empty;
    // and only the status counts: the guard decides nothing by the description (it shows Helm
    // 3's).
    let kept_from_earlier = |given: bool, merged: &Option<String>| {
        !given && merged.as_deref().is_some_and(|text| !text.is_empty())
    };
    if kept.info_copies > 1 && kept_from_earlier(kept.last_info_status, &kept.status) {
        return Err(DecodeError::HelmDisagree(
            "`info` is given twice and its last copy lacks the `status` of an earlier one: \
             Helm 3 keeps the earlier status, Helm 4 reads none"
                .to_owned(),
        ));
    }
    let version = kept.version.unwrap_or(0);
    let version = u32::try_from(version).map_err(|_| {
        DecodeError::Helm(format!("`version` is {version}; helm-guard counts revisions 0 to {}", u32::MAX))
    })?;
    let status_text = kept.status.unwrap_or_default();
    let status = status_text.parse::<Status>().unwrap_or(Status::Unknown);
    let chart = (kept.chart_name.is_some() || kept.chart_version.is_some() || kept.app_version.is_some())
        .then(|| ChartMetadata {
            name: kept.chart_name.unwrap_or_default(),
            version: kept.chart_version.unwrap_or_default(),
            app_version: kept.app_version.filter(|v| !v.is_empty()),
        });
    Ok(ReleasePayload {
        name: kept.name.unwrap_or_default(),
        namespace: kept.namespace.unwrap_or_default(),
        version,
        info: ReleaseInfo {
            status,
            status_text: (status.as_str() != status_text).then_some(status_text),
            first_deployed: kept.first_deployed,
            last_deployed: kept.last_deployed,
            deleted: kept.deleted,
            description: kept.description,
        },
        chart,
        content: (fingerprinting == Fingerprinting::Take).then(|| content.finish()),
    })
}
