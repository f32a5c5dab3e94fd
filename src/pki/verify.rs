//! verify (being written)
