//! OpenAI's request and answer shapes, shared by everything that speaks them to a caller:
//! `polygateway serve` (feature `server`) and batch jobs ([`crate::batch`]). One rendering of a
//! completion, an embedding list and an error, so a batch output line and a server answer can
//! never drift apart. Not the upstream wire codecs ([`crate::transport`]): those speak to
//! providers, these answer callers.

pub(crate) mod completion;
pub(crate) mod embedding;
pub(crate) mod error;
pub(crate) mod models;
pub(crate) mod request;
