//! Clients of the systems outside the console (DESIGN.md §2): Stripe today; the farm and the
//! desired-state pushes later. Services call them; nothing here touches the database.

pub mod stripe;
