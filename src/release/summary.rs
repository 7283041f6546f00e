//! A readable summary of one decoded record.

use serde::Serialize;

use super::ReleasePayload;
use super::record::{DecodedRecord, Driver, Record};
use super::status::Status;

#[derive(Debug, Clone, Serialize)]
/// What `inspect` shows of a record.
pub struct Summary {
    /// Where the record is kept.
    pub driver: Driver,
    /// The release's namespace.
    pub namespace: String,
    /// The release's name.
    pub release: String,
    /// The revision Helm reads.
    pub revision: u32,
    /// The status Helm reads.
    pub status: Status,
    /// The `status` label when it disagrees with the payload (what Helm reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_label: Option<String>,
    /// The chart's name.
    pub chart: Option<String>,
    /// The chart's version.
    pub chart_version: Option<String>,
    /// The chart's app version.
    pub app_version: Option<String>,
    /// When the release was first deployed (RFC 3339).
    pub first_deployed: Option<String>,
    /// When this revision was deployed (RFC 3339).
    pub last_deployed: Option<String>,
    /// Helm's description of the revision.
    pub description: Option<String>,
    /// The `name`/`version` labels agree with the object name (Helm's own records always do).
    pub identity_agrees: bool,
}

impl Summary {
    /// The summary of a record and its payload.
    pub fn new(record: &Record, payload: &ReleasePayload) -> Summary {
        let chart = payload.chart_metadata();
        let label = record.labels.get(super::record::LABEL_STATUS);
        Summary {
            driver: record.id.key.driver,
            namespace: record.id.key.namespace.clone(),
            release: record.id.key.release.clone(),
            revision: record.id.revision,
            status: payload.info.status,
            status_label: label.filter(|l| l.as_str() != payload.info.status.as_str()).cloned(),
            chart: chart.map(|c| c.name.clone()),
            chart_version: chart.map(|c| c.version.clone()),
            app_version: chart.and_then(|c| c.app_version.clone()),
            first_deployed: payload.info.first_deployed.clone(),
            last_deployed: payload.info.last_deployed.clone(),
            description: payload.info.description.clone(),
            identity_agrees: record.identity_agrees,
        }
    }

    /// The summary of a record Helm can read.
    pub fn of(record: &DecodedRecord) -> Option<Summary> {
        record.payload.as_ref().ok().map(|payload| Summary::new(&record.record, payload))
    }

    /// `demo-0.1.0`, as `helm ls` prints a chart.
    pub fn chart_ref(&self) -> Option<String> {
        Some(format!("{}-{}", self.chart.as_deref()?, self.chart_version.as_deref()?))
    }
}
