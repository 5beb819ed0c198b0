//! One module per page family; each renders the body that goes inside the layout.

pub mod account;
pub mod auth;
pub mod billing;
pub mod catalog;
pub mod connections;
pub mod errors;
pub mod farm;
pub mod grants;
pub mod home;
pub mod members;
pub mod operator;
pub mod organizations;
pub mod plan_acts;
pub mod rule_changes;
pub mod signup;
pub mod sites;
pub mod topology;
