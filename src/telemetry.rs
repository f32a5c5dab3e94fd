//! telemetry (being written)
