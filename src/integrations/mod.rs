//! Clients of the systems outside the console (DESIGN.md §2): Stripe and the farm today; the
//! desired-state pushes later. Services call them; nothing here touches the database.

pub mod farm;
pub mod stripe;
