//! pki (being written)
pub mod files;
pub mod verify;
