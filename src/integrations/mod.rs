//! Clients of the systems outside the console (DESIGN.md §2): Stripe, the farm, mail and DNS;
//! the connected systems' desired-state pushes. Services call them; nothing here touches the database.

pub mod desired_state;
pub mod dns;
pub mod farm;
pub mod mail;
pub mod stripe;
