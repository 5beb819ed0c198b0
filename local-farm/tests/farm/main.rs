//! The local farm over real HTTP: the API contract, callbacks, faults, serving sites, and (with
//! `wiki` installed, as `scripts/test` does) the real FedWiki server behind it.

mod common;

mod callbacks;
mod contract;
mod editing;
mod faults;
mod serving;
mod wiki;
