//! One module per page family.

pub mod account;
pub mod auth;
pub mod billing;
pub mod catalog;
pub mod connections;
pub mod farm;
pub mod grants;
pub mod health;
pub mod home;
pub mod invitations;
pub mod members;
pub mod metrics;
pub mod operator;
pub mod operator_accounts;
pub mod organizations;
pub mod plan_acts;
pub mod product_prices;
pub mod rule_changes;
pub mod signup;
pub mod sites;
pub mod topology;
pub mod webhooks;
