//! Member Console: organizations buy plans, receive grants, and get entitlements the console
//! enforces on their FedWiki sites. See the README and `docs/`.

pub mod bench;
pub mod boot;
pub mod config;
pub mod db;
pub mod demo;
pub mod hostname;
pub mod ids;
pub mod integrations;
pub mod job_registry;
pub mod jobs;
pub mod lock_paths;
pub mod metrics;
pub mod scratch;
pub mod services;
pub mod states;
pub mod store;
pub mod stress;
pub mod trace_context;
pub mod web;
