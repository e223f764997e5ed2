//! The `vitals:` section: the window the engine vitals' rates and quantiles are computed over.

use std::time::Duration;

use crate::config::loader::{Loader, Origin};
use crate::config::section::{Text, section};
use crate::config::units::{format_duration, parse_duration};

/// Engine vitals settings.
#[derive(Debug, Clone, PartialEq)]
pub struct VitalsConfig {
    /// The range of the vitals' rates and quantiles (`rate(x[window])`), default 1 min; zero
    /// turns the vitals off.
    pub window: Duration,
}

impl Default for VitalsConfig {
    fn default() -> Self {
        VitalsConfig {
            window: Duration::from_secs(60),
        }
    }
}

section! {
    /// `vitals:` section.
    RawVitals {
        /// The window rates and quantiles are computed over, as Prometheus' `rate(x[window])`
        /// (`1m`, default 1m). At least two health checks must fit in it for a figure. `0s`
        /// turns the vitals off: the health checks then read no families for them.
        window: Text,
    }
}

impl Loader<'_> {
    /// The `vitals:` section; the default for what it leaves out or gets wrong (recorded).
    pub(crate) fn vitals(&mut self, raw: Option<RawVitals>) -> VitalsConfig {
        let window = raw.and_then(|vitals| {
            self.unknown_keys(&vitals.unknown, "vitals", RawVitals::FIELDS);
            let (window, at) =
                self.file_value(vitals.window.as_ref(), "vitals.window", parse_duration)?;
            if !window.is_zero() && window < Duration::from_secs(1) {
                self.issue(
                    Origin::File(at),
                    "vitals.window",
                    "must be 0s (off) or at least 1s",
                );
                return None;
            }
            Some(window)
        });
        window.map_or_else(VitalsConfig::default, |window| VitalsConfig { window })
    }
}

/// The `vitals:` section as `check-config` prints it.
pub(crate) fn render(f: &mut std::fmt::Formatter<'_>, vitals: &VitalsConfig) -> std::fmt::Result {
    writeln!(f, "vitals:")?;
    writeln!(f, "  window: {}", format_duration(vitals.window))
}
