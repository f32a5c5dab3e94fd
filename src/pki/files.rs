//! files (being written)
