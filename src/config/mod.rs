//! Configuration: resolved settings and their parsing from the environment (SPEC §3).

pub mod settings;

pub use settings::*;
