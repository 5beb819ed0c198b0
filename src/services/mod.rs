//! One module per area; each public function is one documented path. A path opens the
//! transaction kind the spec names, takes its locks in the declared order, and returns a typed
//! result or a typed refusal (`refusal::ServiceError`, one model for every area).

pub mod account_settings;
pub mod accounts;
pub mod auth;
pub mod billing;
pub mod catalog;
pub mod clock;
pub mod desired_state;
pub mod entitlements;
pub mod fedwiki;
pub mod grants;
pub mod invitations;
pub mod letters;
pub mod mail;
pub mod mail_limits;
pub mod members;
pub mod observability;
pub mod operator_accounts;
pub mod organizations;
pub mod plan_acts;
pub mod reads;
pub mod refusal;
pub mod rule_changes;
pub mod signup;
pub mod tokens;
pub mod topology;

pub use refusal::ServiceError;
