//! One module per page family.

pub mod auth;
pub mod health;
pub mod home;
pub mod operator;
