//! The live-mode load rig: release records in a real API server, the DELETE reviews the API
//! server would send for them, and the API server's count of the requests it served.
//!
//!     cargo run --release --example live_load -- seed NAMESPACES RELEASES REVISIONS
//!     cargo run --release --example live_load -- reviews KIND SPREAD OUT.jsonl
//!     cargo run --release --example live_load -- count
//!     cargo run --release --example live_load -- apicalls [RESOURCE...]
//!
//! `seed` writes NAMESPACES x RELEASES releases of REVISIONS revisions each (namespaces
//! `bench-NNN`, releases `rNNNN`; revisions 1.. superseded, the last deployed) into the cluster in
//! KUBECONFIG, re-encoded from a real Helm 4 record of tests/fixtures, 32 writes at a time.
//! `reviews` writes DELETE reviews (the real API server's DELETE request, carrying each record as
//! stored: uid and resourceVersion) over SPREAD releases, each KIND over releases of its own:
//! `refusal` deletes each release's latest deployed revision (D8), `approval` its revision 1
//! (history pruning, D5: confirmed, no agreement), `keep` the latest deployed revision annotated
//! `helm-guard.io/allow-delete` (break-glass, D2: approved once a copy is in the recycle bin, as
//! only an override lets it go; releases 6 to 9 of each namespace whatever SPREAD, 400 reviews,
//! each a record of its own, so that each keeps a new copy),
//! `coordinated` a `failed` revision written above the latest deployed one first (stuck-revision
//! recovery, D7: confirmed and agreed with the other replicas). `count` prints how many release
//! records the cluster holds. `apicalls` prints the
//! API server's own count of the requests it served for secrets, configmaps and leases (or the
//! resources named), other than watches (`apiserver_request_total`): run it before and after a load run, the difference
//! is what the guard asked. The load itself is `examples/load.rs`; BENCHMARKS.md has the runs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a measuring tool stops on a broken setup"
)]

use futures::StreamExt;
use helm_guard::release::DecodeLimits;
use helm_guard::release::decode::codec::decode_secret_payload;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, PostParams};
use records::record;
use serde_json::{Value, json};

#[path = "support/records.rs"]
mod records;

const DELETE: &str = "tests/fixtures/admission/02-delete-oldest-and-dryrun-latest/001-validate-delete-secret-sh.helm.release.v1.web.v1.json";

fn read(path: &str) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn namespace(n: usize) -> String {
    format!("bench-{n:03}")
}

fn release(r: usize) -> String {
    format!("r{r:04}")
}

/// The revision of a `failed` upgrade written above the `revisions` of `name` (once: a second
/// call finds it), copied from its latest deployed record: the latest then is `failed`.
async fn failed_above(api: &Api<Secret>, name: &str, revisions: usize) -> usize {
    let latest = format!("sh.helm.release.v1.{name}.v{revisions}");
    let stored = serde_json::to_value(api.get(&latest).await.unwrap()).unwrap();
    let status = stored["metadata"]["labels"]["status"].as_str().unwrap_or_default();
    if status == "failed" {
        return revisions;
    }
    let payload: Value = serde_json::from_slice(
        &decode_secret_payload(
            stored["data"]["release"].as_str().unwrap().as_bytes(),
            DecodeLimits::default(),
        )
        .unwrap(),
    )
    .unwrap();
    let namespace = stored["metadata"]["namespace"].as_str().unwrap();
    let object = record(&stored, &payload, namespace, name, revisions + 1, "failed");
    let secret: Secret = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &secret).await.unwrap();
    revisions + 1
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let client = kube::Client::try_default().await.expect("a cluster in KUBECONFIG");
    match args.first().map(String::as_str) {
        Some("seed") => {
            let [namespaces, releases, revisions] =
                [1, 2, 3].map(|i| args.get(i).and_then(|a| a.parse::<usize>().ok()).expect("seed N R V"));
            let (base, payload) = records::base();
            for n in 0..namespaces {
                let object: Namespace =
                    serde_json::from_value(json!({"metadata": {"name": namespace(n)}})).unwrap();
                let _ = Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &object).await;
            }
            let writes = (0..namespaces)
                .flat_map(|n| (0..releases).flat_map(move |r| (1..=revisions).map(move |v| (n, r, v))));
            let started = std::time::Instant::now();
            let done = futures::stream::iter(writes)
                .map(|(n, r, v)| {
                    let status = if v == revisions { "deployed" } else { "superseded" };
                    let object = record(&base, &payload, &namespace(n), &release(r), v, status);
                    let client = client.clone();
                    async move {
                        let secret: Secret = serde_json::from_value(object).unwrap();
                        let api = Api::<Secret>::namespaced(client, &namespace(n));
                        match api.create(&PostParams::default(), &secret).await {
                            Ok(_) => true,
                            Err(kube::Error::Api(status)) if status.code == 409 => true,
                            Err(error) => panic!("{error}"),
                        }
                    }
                })
                .buffer_unordered(32)
                .count()
                .await;
            println!("{done} records in {:.1} s", started.elapsed().as_secs_f64());
        }
        Some("reviews") => {
            let kind = args.get(1).expect("refusal|approval|keep|coordinated").as_str();
            // Each kind over releases of its own, so that one kind's writes change no other's.
            let offset = match kind {
                "refusal" | "approval" => 0,
                "coordinated" => 4,
                "keep" => 6,
                other => panic!("{other}: refusal, approval, keep or coordinated"),
            };
            let spread: usize = args.get(2).and_then(|a| a.parse().ok()).expect("SPREAD");
            let out = args.get(3).expect("OUT.jsonl");
            let template = read(DELETE);
            let mut lines = String::new();
            // A copy is kept once per record: `keep` deletes the latest of four releases a namespace.
            let reviews = if kind == "keep" { 400 } else { spread };
            for i in 0..reviews {
                // Spread over the namespaces first, then over the releases of each.
                let (n, r) = (i % 100, offset + i / 100);
                let api = Api::<Secret>::namespaced(client.clone(), &namespace(n));
                let revisions = api
                    .list_metadata(
                        &kube::api::ListParams::default().labels(&format!("owner=helm,name={}", release(r))),
                    )
                    .await
                    .unwrap()
                    .items
                    .len();
                if revisions == 0 {
                    continue;
                }
                let revision = match kind {
                    "approval" => 1,
                    "coordinated" => failed_above(&api, &release(r), revisions).await,
                    _ => revisions,
                };
                let name = format!("sh.helm.release.v1.{}.v{revision}", release(r));
                let mut stored = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
                if kind == "keep" {
                    stored["metadata"]["annotations"]["helm-guard.io/allow-delete"] =
                        json!("live-mode bench");
                }
                let mut review = template.clone();
                review["request"]["uid"] = json!(format!("live-load-{kind}-{i}"));
                review["request"]["name"] = json!(name);
                review["request"]["namespace"] = json!(namespace(n));
                review["request"]["oldObject"] = stored;
                lines.push_str(&serde_json::to_string(&review).unwrap());
                lines.push('\n');
            }
            std::fs::write(out, lines).unwrap();
        }
        Some("count") => {
            // Release records in the cluster (metadata only: a dump of 100,000 is a gigabyte).
            let api = Api::<Secret>::all(client.clone());
            let (mut params, mut count) =
                (kube::api::ListParams::default().labels("owner=helm").limit(5000), 0);
            loop {
                let page = api.list_metadata(&params).await.unwrap();
                count += page.items.len();
                match page.metadata.continue_.filter(|token| !token.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => break,
                }
            }
            println!("{count}");
        }
        Some("apicalls") => {
            // The resources counted: secrets, configmaps and leases unless named.
            let named: Vec<String> = args.iter().skip(1).cloned().collect();
            let resources: Vec<String> = if named.is_empty() {
                ["secrets", "configmaps", "leases"].map(String::from).to_vec()
            } else {
                named
            };
            let request = hyper::Request::get("/metrics").body(Vec::new()).unwrap();
            let text = client.request_text(request).await.unwrap();
            let total: f64 = text
                .lines()
                .filter(|line| line.starts_with("apiserver_request_total{"))
                .filter(|line| resources.iter().any(|r| line.contains(&format!("resource=\"{r}\""))))
                .filter(|line| !line.contains("verb=\"WATCH\""))
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            println!("{total}");
        }
        _ => {
            eprintln!(
                "usage: live_load seed N R V | reviews KIND SPREAD OUT.jsonl | count | apicalls [RESOURCE...]"
            );
            std::process::exit(2);
        }
    }
}
