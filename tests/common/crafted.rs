//! Release records crafted from a real Helm 4 record the way an attacker with kubectl can: each
//! with what real Helm 3.17.3 and Helm 4.1.4 made of it (`helm history`, against a real API
//! server; tests/e2e_helm.rs checks the table against Helm again whenever it runs).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

/// How a crafted payload is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Gzip,
    Plain,
    /// gzip in two members (Go's reader reads on into the second).
    TwoGzipMembers,
    /// gzip followed by two bytes of garbage.
    GzipThenGarbage,
    /// base64 with line breaks every 76 characters.
    LineBreaks,
    /// the last base64 character carries a non-zero bit past the data (Go ignores it).
    TrailingBits,
}

/// What `helm history` showed for a single-record release: `None` when it listed nothing (or
/// Helm crashed on the record, see `crashes`).
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub json: Vec<u8>,
    pub stored: Stored,
    pub helm3: Option<(i64, &'static str)>,
    pub helm4: Option<(i64, &'static str)>,
    /// Helm itself panics on this record (nil pointer): the guard skips it.
    pub crashes: bool,
}

/// The real release JSON every case starts from, renamed and set to revision 1.
pub fn base(name: &str) -> Value {
    let mut release = super::release_json(&super::helm4_secret());
    release["name"] = json!(name);
    release["version"] = json!(1);
    release
}

fn text(release: &Value) -> Vec<u8> {
    serde_json::to_vec(release).unwrap()
}

fn edit(name: &'static str, change: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut release = base(name);
    change(&mut release);
    text(&release)
}

/// Inserts `insert` right after the first occurrence of `after` in the JSON text.
fn splice(name: &str, after: &str, insert: &str) -> Vec<u8> {
    splice_into(&base(name), after, insert)
}

/// The same, into the text of `release`.
fn splice_into(release: &Value, after: &str, insert: &str) -> Vec<u8> {
    let original = String::from_utf8(text(release)).unwrap();
    let at = original.find(after).unwrap() + after.len();
    format!("{}{insert}{}", &original[..at], &original[at..]).into_bytes()
}

/// The text with its closing brace replaced by `tail`.
fn ending(name: &str, tail: &str) -> Vec<u8> {
    let mut bytes = text(&base(name));
    bytes.pop();
    bytes.extend_from_slice(tail.as_bytes());
    bytes
}

const DEPLOYED: Option<(i64, &str)> = Some((1, "deployed"));

/// The base with its `info.status` spelt `STATUS`.
fn upper_status(name: &str) -> Value {
    let mut release = base(name);
    let info = release["info"].as_object_mut().unwrap();
    let status = info.remove("status").unwrap();
    info.insert("STATUS".into(), status);
    release
}

/// The base with its `info.description` under the key `DESCRIPTION`.
fn upper_description(name: &str) -> Value {
    let mut release = base(name);
    let info = release["info"].as_object_mut().unwrap();
    let description = info.remove("description").unwrap();
    info.insert("DESCRIPTION".into(), description);
    release
}

#[allow(clippy::too_many_lines)] // one table
pub fn cases() -> Vec<Case> {
    let case = |name, json, helm3, helm4| Case {
        name: String::from(name),
        json,
        stored: Stored::Gzip,
        helm3,
        helm4,
        crashes: false,
    };
    let stored = |mut c: Case, stored| {
        c.stored = stored;
        c
    };
    let crash = |mut c: Case| {
        c.crashes = true;
        c
    };
    let deep = |n: usize| format!("\"d\":{}{},", "[".repeat(n), "]".repeat(n));
    vec![
        case("baseline", text(&base("baseline")), DEPLOYED, DEPLOYED),
        case("config-number", edit("config-number", |r| r["config"] = json!(1)), None, None),
        case(
            "time-yesterday",
            edit("time-yesterday", |r| r["info"]["last_deployed"] = json!("yesterday")),
            None,
            None,
        ),
        case(
            "go-keys",
            edit("go-keys", |r| {
                let o = r.as_object_mut().unwrap();
                let version = o.remove("version").unwrap();
                o.insert("Version".into(), version);
                let mut info = o.remove("info").unwrap();
                let status = info.as_object_mut().unwrap().remove("status").unwrap();
                info.as_object_mut().unwrap().insert("Status".into(), status);
                o.insert("Info".into(), info);
            }),
            DEPLOYED,
            DEPLOYED,
        ),
        case(
            "dup-version",
            ending("dup-version", r#","version":2}"#),
            Some((2, "deployed")),
            Some((2, "deployed")),
        ),
        stored(case("b64-linebreaks", text(&base("b64-linebreaks")), DEPLOYED, DEPLOYED), Stored::LineBreaks),
        case("version-string", edit("version-string", |r| r["version"] = json!("1")), None, None),
        case(
            "chart-version-number",
            edit("chart-version-number", |r| r["chart"]["metadata"]["version"] = json!(1)),
            None,
            None,
        ),
        case(
            "status-bogus",
            edit("status-bogus", |r| r["info"]["status"] = json!("bogus")),
            Some((1, "bogus")),
            Some((1, "bogus")),
        ),
        case(
            "time-lowercase-t",
            edit("time-lowercase-t", |r| r["info"]["last_deployed"] = json!("2026-11-29t16:04:02Z")),
            None,
            None,
        ),
        case(
            "time-lowercase-z",
            edit("time-lowercase-z", |r| r["info"]["last_deployed"] = json!("2026-11-29T16:04:02z")),
            None,
            None,
        ),
        case(
            "time-comma",
            edit("time-comma", |r| r["info"]["last_deployed"] = json!("2026-11-29T16:04:02,5Z")),
            DEPLOYED,
            DEPLOYED,
        ),
        case(
            "time-leap-second",
            edit("time-leap-second", |r| r["info"]["last_deployed"] = json!("2026-12-31T23:59:60Z")),
            None,
            None,
        ),
        case("config-1e400", splice("config-1e400", r#""config":{"#, r#""huge":1e400,"#), None, None),
        case("unknown-1e400", ending("unknown-1e400", r#","extra":1e400}"#), DEPLOYED, DEPLOYED),
        case(
            "info-unknown-1e400",
            splice("info-unknown-1e400", r#""info":{"#, r#""extra":1e400,"#),
            DEPLOYED,
            None,
        ),
        case(
            "info-long-s-status",
            String::from_utf8(text(&base("info-long-s-status")))
                .unwrap()
                .replacen(r#""status":"deployed""#, "\"\u{17f}tatus\":\"failed\"", 1)
                .into_bytes(),
            Some((1, "failed")),
            Some((1, "failed")),
        ),
        case(
            "version-1.0",
            String::from_utf8(text(&base("version-1.0")))
                .unwrap()
                .replacen(r#""version":1"#, r#""version":1.0"#, 1)
                .into_bytes(),
            None,
            None,
        ),
        case(
            "info-deleted-caps-empty",
            edit("info-deleted-caps-empty", |r| r["info"]["Deleted"] = json!("")),
            DEPLOYED,
            None,
        ),
        case(
            "info-deleted-empty",
            edit("info-deleted-empty", |r| r["info"]["deleted"] = json!("")),
            DEPLOYED,
            DEPLOYED,
        ),
        stored(
            case("gzip-multimember", text(&base("gzip-multimember")), DEPLOYED, DEPLOYED),
            Stored::TwoGzipMembers,
        ),
        case(
            "template-bad-base64",
            edit("template-bad-base64", |r| r["chart"]["templates"][0]["data"] = json!("%%%")),
            None,
            None,
        ),
        case(
            "resources-object",
            edit("resources-object", |r| r["info"]["resources"] = json!({"v1/Pod": [{"kind": "Pod"}]})),
            None,
            None,
        ),
        case(
            "resources-null",
            edit("resources-null", |r| r["info"]["resources"] = json!({"v1/Pod": [null]})),
            DEPLOYED,
            DEPLOYED,
        ),
        crash(case("null-release", b"null".to_vec(), None, None)),
        crash(case(
            "no-info",
            edit("no-info", |r| drop(r.as_object_mut().unwrap().remove("info"))),
            None,
            None,
        )),
        crash(stored(case("exactly-3-bytes", b"{} ".to_vec(), None, None), Stored::Plain)),
        case(
            "manifest-invalid-utf8",
            {
                let original = text(&base("manifest-invalid-utf8"));
                let needle = br#""manifest":""#;
                let at = original.windows(needle.len()).position(|w| w == needle).unwrap() + needle.len();
                [&original[..at], &[0xff, 0xfe], &original[at..]].concat()
            },
            DEPLOYED,
            DEPLOYED,
        ),
        case(
            "description-lone-surrogate",
            splice("description-lone-surrogate", r#""description":""#, r"\ud800"),
            DEPLOYED,
            DEPLOYED,
        ),
        case(
            "apply-method-number",
            edit("apply-method-number", |r| r["apply_method"] = json!(5)),
            DEPLOYED,
            None,
        ),
        // Helm 4.2 on writes it on a rollback's record; 4.1 and Helm 3 ignore it.
        case(
            "rollback-revision",
            edit("rollback-revision", |r| r["info"]["rollback_revision"] = json!(1)),
            DEPLOYED,
            DEPLOYED,
        ),
        case(
            "lock-generated-empty",
            edit("lock-generated-empty", |r| {
                r["chart"]["lock"] = json!({"generated": "", "digest": "", "dependencies": null})
            }),
            None,
            None,
        ),
        case("config-deep", splice("config-deep", r#""config":{"#, &deep(10_001)), None, None),
        case("config-deep-ok", splice("config-deep-ok", r#""config":{"#, &deep(9_990)), DEPLOYED, DEPLOYED),
        case("trailing-garbage", [text(&base("trailing-garbage")), b" x".to_vec()].concat(), None, None),
        case(
            "info-twice",
            ending("info-twice", r#","info":{"description":"again"}}"#),
            DEPLOYED,
            Some((1, "")),
        ),
        // The last copy lacks only the description: Helm 3 shows the earlier one, Helm 4 none;
        // both read revision 1 deployed, and that is what the guard decides by.
        case(
            "info-twice-description-differs",
            ending("info-twice-description-differs", r#","info":{"status":"deployed"}}"#),
            DEPLOYED,
            DEPLOYED,
        ),
        // The description under two spellings, the last given sorting first: Helm 3 reads the
        // one, Helm 4 the other; both read revision 1 deployed.
        case(
            "description-spelt-twice-unsorted",
            splice_into(
                &upper_description("description-spelt-twice-unsorted"),
                r#""info":{"#,
                r#""description":"earlier","#,
            ),
            DEPLOYED,
            DEPLOYED,
        ),
        // One field of `info` under two spellings: Helm 3 takes the last given, Helm 4 (through a
        // map) the key that sorts last ("status" > "STATUS"); alike when those coincide, or when
        // both hold the same value.
        case(
            "status-spelt-twice-sorted",
            splice("status-spelt-twice-sorted", r#""info":{"#, r#""STATUS":"failed","#),
            DEPLOYED,
            DEPLOYED,
        ),
        case(
            "status-spelt-twice-unsorted",
            splice_into(&upper_status("status-spelt-twice-unsorted"), r#""info":{"#, r#""status":"failed","#),
            DEPLOYED,
            Some((1, "failed")),
        ),
        case(
            "status-spelt-twice-same-value",
            splice_into(
                &upper_status("status-spelt-twice-same-value"),
                r#""info":{"#,
                r#""status":"deployed","#,
            ),
            DEPLOYED,
            DEPLOYED,
        ),
        // Both copies whole: Helm 3 and Helm 4 alike read the last (checked with real Helm).
        case(
            "info-twice-whole",
            ending("info-twice-whole", r#","info":{"status":"failed","description":"again"}}"#),
            Some((1, "failed")),
            Some((1, "failed")),
        ),
        case(
            "info-twice-spelt-otherwise",
            ending("info-twice-spelt-otherwise", r#","Info":{"STATUS":"superseded","description":"again"}}"#),
            Some((1, "superseded")),
            Some((1, "superseded")),
        ),
        case("modtime-bad", edit("modtime-bad", |r| r["chart"]["modtime"] = json!("never")), DEPLOYED, None),
        case(
            "schema-bytes-array",
            edit("schema-bytes-array", |r| r["chart"]["schema"] = json!([123, 125])),
            DEPLOYED,
            DEPLOYED,
        ),
        case(
            "weight-float",
            edit("weight-float", |r| r["hooks"] = json!([{"name": "h", "weight": 1.5}])),
            None,
            None,
        ),
        case(
            "last-run-caps-empty",
            edit("last-run-caps-empty", |r| {
                r["hooks"] = json!([{"name": "h", "last_run": {"Started_At": "", "phase": ""}}])
            }),
            DEPLOYED,
            None,
        ),
        case(
            "deprecated-string",
            edit("deprecated-string", |r| r["chart"]["metadata"]["deprecated"] = json!("true")),
            None,
            None,
        ),
        stored(
            case("gzip-trailing-garbage", text(&base("gzip-trailing-garbage")), None, None),
            Stored::GzipThenGarbage,
        ),
        stored(
            case(
                "b64-trailing-bits",
                {
                    // Plain JSON whose length leaves padding, so the last character has spare bits.
                    let mut json = text(&base("b64-trailing-bits"));
                    while json.len().is_multiple_of(3) {
                        json.pop();
                        json.extend_from_slice(b" }");
                    }
                    json
                },
                DEPLOYED,
                DEPLOYED,
            ),
            Stored::TrailingBits,
        ),
    ]
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use flate2::{Compression, write::GzEncoder};
    use std::io::Write;
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

impl Case {
    /// Helm's base64 text of the payload, stored as the case says.
    pub fn helm_base64(&self) -> String {
        let data = match self.stored {
            Stored::Gzip | Stored::LineBreaks => gzip(&self.json),
            Stored::Plain | Stored::TrailingBits => self.json.clone(),
            Stored::TwoGzipMembers => [gzip(&self.json[..100]), gzip(&self.json[100..])].concat(),
            Stored::GzipThenGarbage => [gzip(&self.json), b"xx".to_vec()].concat(),
        };
        let mut text = STANDARD.encode(data);
        match self.stored {
            Stored::LineBreaks => {
                let lines: Vec<&str> =
                    text.as_bytes().chunks(76).map(|c| std::str::from_utf8(c).unwrap()).collect();
                text = lines.join("\n") + "\r\n";
            }
            Stored::TrailingBits => {
                const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
                let padding = text.len() - text.trim_end_matches('=').len();
                assert!(padding > 0);
                let mut bytes = text.into_bytes();
                let at = bytes.len() - padding - 1;
                let index = ALPHABET.iter().position(|c| *c == bytes[at]).unwrap();
                bytes[at] = ALPHABET[index | 1];
                text = String::from_utf8(bytes).unwrap();
            }
            _ => {}
        }
        text
    }

    /// The case as a Secret of release `name` in `namespace`, labelled revision 1 deployed.
    pub fn secret(&self, namespace: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
            "metadata": {
                "name": format!("sh.helm.release.v1.{}.v1", self.name),
                "namespace": namespace,
                "labels": {"owner": "helm", "name": self.name, "version": "1", "status": "deployed"},
            },
            "data": {"release": STANDARD.encode(self.helm_base64())},
        })
    }

    /// What the guard must make of it: what both Helms read alike, else nothing.
    pub fn expected(&self) -> Option<(i64, &'static str)> {
        if self.helm3 == self.helm4 && !self.crashes { self.helm3 } else { None }
    }
}
