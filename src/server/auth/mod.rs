//! Who may call the server and how much: virtual keys ([`keys`]) and their limits ([`limits`]).

pub(crate) mod keys;
pub(crate) mod limits;
