//! The server's routes, one file per family.

pub(crate) mod health;
pub(crate) mod ocr;
pub(crate) mod openai;
