//! Work distributions as data.
