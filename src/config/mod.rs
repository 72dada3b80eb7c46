//! Configuration: resolved settings and their parsing from the environment (docs/behaviour.md §3).
//!
//! [`Settings`] is what every component is built from. [`Settings::from_env`] (process env plus
//! `.env`) and [`Settings::from_map`] parse the keys listed by [`accepted_keys`] and run the
//! assembly guards; hand-built settings are checked with [`Settings::validate`]. Nothing else in
//! the runtime reads environment variables.

pub mod budget;
pub(crate) mod defaults;
mod env;
pub mod error;
pub(crate) mod features;
pub(crate) mod guards;
pub mod keys;
mod secret;
pub mod server;
pub mod settings;

pub use crate::types::budget::SpendBudget;
pub use env::scope_kind_for;
pub use error::ConfigError;
pub use keys::{
    accepted_keys, EMBEDDING_SCOPE_KEYS, GLOBAL_KEYS, SCOPE_KEYS, SHORTHAND_KEYS, SOURCE_FIELDS,
};
pub use server::ServerSettings;
pub use settings::*;
