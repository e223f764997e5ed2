//! The status page for people (`GET /`) and the same facts as JSON (`GET /status`).
//!
//! Both read only what sysport already knows: what the scrapes left ([`history`], recorded
//! where a scrape's counters are), the readiness checks and sysport's own metrics. Opening
//! either never fetches an upstream, so a browser left open on the page costs the engine
//! nothing, and the history they draw is a fixed ring of one bucket per second.
//!
//! - [`history`]: an upstream's last scrape, last failure and last few minutes.
//! - [`facts`]: gathering the facts; their JSON form.
//! - `page`: the HTML; `chart`: the SVG of an upstream's last few minutes; `vitals`: the
//!   engine's figures and sparklines (see [`crate::vitals`]); `words`: escaping and spans of
//!   time, for both.

mod chart;
pub(crate) mod facts;
pub(crate) mod history;
mod page;
mod vitals;
mod words;

pub(crate) use facts::{Facts, Sources};

impl Facts {
    /// The HTML page.
    pub(crate) fn to_html(&self) -> String {
        page::render(self)
    }
}
