//! The `/metrics` pages of the simulated processes, rendered from the simulation's state.

mod lmcache;
mod vllm;

pub(super) use lmcache::render as lmcache;
pub(super) use vllm::render as vllm;
