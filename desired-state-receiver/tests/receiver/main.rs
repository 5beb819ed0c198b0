//! The receiver over real HTTP: pushes, signatures and rotation, read-back, and the test
//! controls.

mod common;

mod controls;
mod pushes;
mod read_back;
mod signatures;
