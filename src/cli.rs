//! cli (being written)
