//! What the simulated engines serve.

/// The model name every simulated engine reports.
pub(super) const MODEL: &str = "demo-model";
