//! One governed call, as a stack of layers.

pub(crate) mod failure;
pub(crate) mod order;
