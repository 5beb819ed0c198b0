//! Member Console: organizations buy plans, receive grants, and get entitlements the console
//! enforces on their FedWiki sites. See the README and `docs/`.

// The benchmarks and the stress run start stand-ins of their own (Stripe, the farm, mail, a
// connected system): a build without them has neither.
#[cfg(feature = "stand-ins")]
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
pub mod stand_ins;
pub mod states;
pub mod stop_signal;
pub mod store;
#[cfg(feature = "stand-ins")]
pub mod stress;
pub mod trace_context;
pub mod web;
