//! The suites that test the live path's parts from inside: claim books against a stub of the API
//! server's Leases, the watchers against a stub API server, Events, the watch feed, the recycle
//! bin's API calls and its place in a verdict, namespaces, and random Helm flows through the
//! webhook beside Helm's own storage, and a tenant's random writes against them (the red team). They share `tests/common` with the integration suites, and reach what is
//! `pub(crate)`: what they test is not the library's API.

mod claim_books;
mod events;
mod helm_flows;
mod lease_stub;
mod live_apiserver;
mod live_feed;
mod recycle_bin;
mod recycle_bin_api;
mod red_team;
mod replicas;
mod webhook_namespaces;
mod writers;
