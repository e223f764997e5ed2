//! The bottom layer: plain data every other module may use, and which uses nothing else of
//! sysport (only the exposition crate, for what a metric or label name is).
//!
//! - [`family`]: a family as readers name it ([`FamilyKey`]) and how copies of one number
//!   combine ([`Op`], [`ViewFamily`]);
//! - [`control`]: each engine's control and inventory routes, for `/engine/{name}`,
//!   `/v1/loras` and `/metadata`;
//! - [`engine`]: what sysport knows about each inference engine, as a table of presets;
//! - [`routes`]: the paths sysport serves;
//! - [`reading`]: what one health check read of an engine's load and progress;
//! - [`scrape`]: what a scrape of an upstream left, and the [`Recorder`] interface it is
//!   recorded through;
//! - [`url`]: the URL type every configured address is held in ([`Url`]), and how one is
//!   shown ([`ShownUrl`], its password as `***`).

pub mod control;
pub mod engine;
pub mod family;
pub mod reading;
pub mod routes;
pub mod scrape;
pub mod url;

pub use engine::{Engine, Preset};
pub use family::{FamilyKey, FamilyKeyError, Op, ViewFamily};
pub use reading::Reading;
pub use scrape::{
    LastRead, PageSeries, Read, Recorder, ScrapeRecord, SeriesOutcomes, UpstreamRecord,
};
pub use url::{ShownUrl, Url, hide_password_in};
