//! The data model: what a parse makes of one body ([`Exposition`]) and what it is made of
//! ([`Family`], [`Sample`], [`Span`]), with what the parse counted ([`ParseStats`]). Parsing
//! fills it, merging and the writers read it.

mod exposition;
mod family;
mod sample;
mod stats;

pub use exposition::Exposition;
pub use family::{Family, Kind, NoDuplicates, RESERVED_PREFIX, Role, Span, Suffix};
pub use sample::Sample;
pub(crate) use sample::SideLex;
pub use stats::{Malformed, ParseStats, Rule};
