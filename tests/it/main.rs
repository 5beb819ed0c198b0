//! The integration tests, as one binary (one link of the crate instead of one per area), a
//! module per area. Each test still runs in a process of its own under nextest.

mod common;

mod account_pages;
mod bench_http;
mod billing;
mod billing_pages;
mod browser;
mod browser_account;
mod browser_journeys;
mod browser_topology;
mod browser_wiki;
mod connection_pages;
mod crashes;
mod desired_state;
mod dns;
mod domain_verification;
mod entitlements;
mod grant_pages;
mod grants;
mod isolation;
mod jobs;
mod lock_trace;
mod mail;
mod metrics;
mod migrations;
mod offline_data;
mod operator_pages;
mod plan_acts;
mod plan_changes;
mod private_cluster;
mod replicas;
mod request_ids;
// Issue 39, resource keys' names.
mod resource_names;
mod route_policy;
mod rule_changes;
mod serve_process;
mod signup;
mod site_editing;
mod site_maintenance;
mod site_swaps;
mod sites;
mod states;
mod static_assets;
mod stress;
mod tier_acts;
mod topology;
mod tx_kinds;
mod walk_account_pages;
mod walk_accounts;
mod walk_billing;
mod walk_catalog;
mod walk_desired_state;
mod walk_domains;
mod walk_grants;
mod walk_platform;
mod walk_signup;
mod walk_sites;
mod walk_topology;
mod walk_upkeep;
mod web_shell;
// Issue 38, members.
mod browser_members;
mod members;
mod walk_members;
// Issue 39, accessibility.
mod browser_a11y;
// Issue 39: the Stripe stand-in keeps its state.
mod stripe_standin_state;
