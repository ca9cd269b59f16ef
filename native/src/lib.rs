//! rankflow's per-event work in Rust (issue 41; docs/design.md, "The native kernel").
//!
//! The pure core ([`json`], [`signature`], [`score`]) knows nothing of Python, so
//! `cargo test` runs it alone; [`python`] is the module `rankflow._native` that the
//! flows call with whole batches of raw records.

pub mod crc;
pub mod json;
pub mod order;
pub mod rules;
pub mod score;
pub mod signature;
pub mod tags;

pub mod board_table;
#[cfg(feature = "python")]
mod board_table_python;
pub mod changes;
#[cfg(feature = "python")]
mod changes_python;
pub mod messages;
#[cfg(feature = "python")]
mod messages_python;
#[cfg(feature = "python")]
mod python;
#[cfg(feature = "python")]
mod rules_python;
