//! The Stripe stand-in: a stateful, local server speaking the parts of Stripe's API the console
//! uses. Filled in by the stand-in work (issue 12).
