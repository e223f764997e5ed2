//! What each engine serves for control and inventory, as plain data: the engine-neutral names of
//! `/engine/{name}` and the engine's own route each maps to, where `/metadata` reads the
//! engine's kind, version, models and cache configuration, and how `/v1/loras` lists, loads
//! and unloads adapters. The `control` module forwards by these tables; docs/control.md shows
//! them.
//!
//! Sources, per engine:
//! - vLLM 0.32: `vllm/entrypoints/serve/dev/sleep/api_router.py` (`POST /sleep?level=`,
//!   `POST /wake_up`, `GET /is_sleeping`), `serve/dev/cache/api_router.py`
//!   (`POST /reset_prefix_cache`), all three only with `VLLM_SERVER_DEV_MODE=1`
//!   (`launchers/api_server/routers.py`); `serve/profile/api_router.py` (`POST /start_profile`,
//!   `/stop_profile`, only with a profiler configured); `serve/instrumentator/basic.py`
//!   (`GET /version`, `{"version": ...}`); `serve/lora/api_router.py`
//!   (`POST /v1/load_lora_adapter` `{"lora_name","lora_path"}` and `/v1/unload_lora_adapter`
//!   `{"lora_name"}`, only with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`); `/v1/models`, an
//!   adapter's entry with `parent` (the base model) and `root` (its path).
//! - SGLang: `python/sglang/srt/entrypoints/http_server.py`: `GET /get_server_info` (the server
//!   arguments and `version`), `POST /flush_cache`, `/start_profile`, `/stop_profile`,
//!   `/release_memory_occupation`, `/resume_memory_occupation`, `/load_lora_adapter`
//!   `{"lora_name","lora_path"}`, `/unload_lora_adapter` `{"lora_name"}`; `/v1/models`.
//! - llama.cpp's `llama-server`: `tools/server/server.cpp` (the routes) and
//!   `tools/server/server-context.cpp` (their handlers): `GET /props` (`build_info`,
//!   `model_path`, `default_generation_settings.n_ctx`, `total_slots`), `POST
//!   /slots/{id}?action=erase` (only with `--slot-save-path`), `GET /lora-adapters` (the
//!   adapters given with `--lora`: `id`, `path`, `scale`) and `POST /lora-adapters`
//!   (`[{"id","scale"}]`: it cannot load a new adapter, only scale those it started with);
//!   `/v1/models` (`meta.n_ctx`).
//! - trtllm-serve: `tensorrt_llm/serve/openai_server.py`: `GET /version`, `/v1/models`.
//! - Triton: the KServe v2 protocol's server metadata, `GET /v2` (`name`, `version`).

use super::engine::Engine;

/// An HTTP method an engine's route takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
}

impl Method {
    /// As HTTP writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// One engine-neutral `/engine/{name}` and the engine's own route behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineRoute {
    /// The name after `/engine/`.
    pub name: &'static str,
    pub method: Method,
    /// The engine's path; `{arg}` stands for the segment after the name
    /// (`/engine/erase_slot/2` → `/slots/2?action=erase`).
    pub path: &'static str,
    /// Whether the route takes that segment (a whole number).
    pub takes_arg: bool,
    /// Where the engine serves it, and what it needs for that.
    pub source: &'static str,
}

impl EngineRoute {
    /// The engine's path and query for `arg`; the request's own query, if any, is added after.
    pub fn target(&self, arg: Option<&str>) -> String {
        match arg {
            Some(arg) => self.path.replace("{arg}", arg),
            None => self.path.to_owned(),
        }
    }
}

/// How an engine tells its kind and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionRoute {
    pub path: &'static str,
    /// The JSON pointer of the version in the answer.
    pub pointer: &'static str,
}

/// How an engine's adapters are listed, loaded and unloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoraApi {
    /// `POST load {"lora_name","lora_path"}`, `POST unload {"lora_name"}`; listed by
    /// `/v1/models` entries with a `parent` (vLLM, SGLang).
    LoadUnload {
        load: &'static str,
        unload: &'static str,
        /// What the engine needs to serve `load` and `unload`.
        needs: &'static str,
    },
    /// Adapters given at start, scaled at `path` (`GET` lists, `POST [{"id","scale"}]` sets):
    /// llama.cpp. Loading sets an adapter's scale (1 unless asked), unloading sets it to 0.
    Scales { path: &'static str },
    /// The engine has no adapter API.
    None,
}

/// What sysport knows about one engine's control and inventory routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Control {
    pub routes: &'static [EngineRoute],
    pub version: Option<VersionRoute>,
    /// Where the served models are listed (OpenAI's `/v1/models`).
    pub models: Option<&'static str>,
    /// The info family whose labels hold the cache configuration.
    pub cache_config: Option<&'static str>,
    pub lora: LoraApi,
}

const VLLM_DEV: &str = "vllm/entrypoints/serve/dev (VLLM_SERVER_DEV_MODE=1)";
const VLLM_PROFILE: &str = "vllm/entrypoints/serve/profile/api_router.py (a profiler configured)";
const SGLANG: &str = "python/sglang/srt/entrypoints/http_server.py";

const fn route(
    name: &'static str,
    method: Method,
    path: &'static str,
    source: &'static str,
) -> EngineRoute {
    EngineRoute {
        name,
        method,
        path,
        takes_arg: false,
        source,
    }
}

static VLLM: Control = Control {
    routes: &[
        route("sleep", Method::Post, "/sleep", VLLM_DEV),
        route("wake_up", Method::Post, "/wake_up", VLLM_DEV),
        route("is_sleeping", Method::Get, "/is_sleeping", VLLM_DEV),
        route(
            "reset_prefix_cache",
            Method::Post,
            "/reset_prefix_cache",
            VLLM_DEV,
        ),
        route(
            "start_profile",
            Method::Post,
            "/start_profile",
            VLLM_PROFILE,
        ),
        route("stop_profile", Method::Post, "/stop_profile", VLLM_PROFILE),
    ],
    version: Some(VersionRoute {
        path: "/version",
        pointer: "/version",
    }),
    models: Some("/v1/models"),
    cache_config: Some("vllm:cache_config_info"),
    lora: LoraApi::LoadUnload {
        load: "/v1/load_lora_adapter",
        unload: "/v1/unload_lora_adapter",
        needs: "vLLM serves /v1/load_lora_adapter and /v1/unload_lora_adapter only when started \
                with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora",
    },
};

static SGLANG_CONTROL: Control = Control {
    routes: &[
        route("sleep", Method::Post, "/release_memory_occupation", SGLANG),
        route("wake_up", Method::Post, "/resume_memory_occupation", SGLANG),
        route(
            "release_memory_occupation",
            Method::Post,
            "/release_memory_occupation",
            SGLANG,
        ),
        route(
            "resume_memory_occupation",
            Method::Post,
            "/resume_memory_occupation",
            SGLANG,
        ),
        route("reset_prefix_cache", Method::Post, "/flush_cache", SGLANG),
        route("start_profile", Method::Post, "/start_profile", SGLANG),
        route("stop_profile", Method::Post, "/stop_profile", SGLANG),
    ],
    version: Some(VersionRoute {
        path: "/get_server_info",
        pointer: "/version",
    }),
    models: Some("/v1/models"),
    cache_config: Some("sglang:cache_config_info"),
    lora: LoraApi::LoadUnload {
        load: "/load_lora_adapter",
        unload: "/unload_lora_adapter",
        needs: "SGLang serves /load_lora_adapter only when started with --enable-lora \
                (and --max-lora-rank, --lora-target-modules for adapters it did not start with)",
    },
};

static LLAMACPP: Control = Control {
    routes: &[EngineRoute {
        name: "erase_slot",
        method: Method::Post,
        path: "/slots/{arg}?action=erase",
        takes_arg: true,
        source: "tools/server/server-context.cpp, handle_slots_erase (--slot-save-path)",
    }],
    version: Some(VersionRoute {
        path: "/props",
        pointer: "/build_info",
    }),
    models: Some("/v1/models"),
    cache_config: None,
    lora: LoraApi::Scales {
        path: "/lora-adapters",
    },
};

static TRTLLM: Control = Control {
    routes: &[],
    version: Some(VersionRoute {
        path: "/version",
        pointer: "/version",
    }),
    models: Some("/v1/models"),
    cache_config: None,
    lora: LoraApi::None,
};

static TRITON: Control = Control {
    routes: &[],
    version: Some(VersionRoute {
        path: "/v2",
        pointer: "/version",
    }),
    models: None,
    cache_config: None,
    lora: LoraApi::None,
};

impl Engine {
    /// The engine's control and inventory routes.
    pub fn control(self) -> &'static Control {
        match self {
            Engine::Vllm => &VLLM,
            Engine::Sglang => &SGLANG_CONTROL,
            Engine::Trtllm => &TRTLLM,
            Engine::Triton => &TRITON,
            Engine::Llamacpp => &LLAMACPP,
        }
    }
}

impl Control {
    /// The route `name` maps to on this engine.
    pub fn route(&self, name: &str) -> Option<&'static EngineRoute> {
        self.routes.iter().find(|r| r.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_has_a_version_route_and_unique_names() {
        for engine in [
            Engine::Vllm,
            Engine::Sglang,
            Engine::Trtllm,
            Engine::Triton,
            Engine::Llamacpp,
        ] {
            let c = engine.control();
            assert!(c.version.is_some(), "{engine:?}");
            for (i, r) in c.routes.iter().enumerate() {
                assert!(r.path.starts_with('/'), "{}", r.name);
                assert_eq!(r.takes_arg, r.path.contains("{arg}"), "{}", r.name);
                assert!(c.routes[..i].iter().all(|o| o.name != r.name), "{}", r.name);
            }
        }
    }

    #[test]
    fn a_slot_erase_names_its_slot() {
        let erase = Engine::Llamacpp
            .control()
            .route("erase_slot")
            .expect("mapped");
        assert_eq!(erase.target(Some("3")), "/slots/3?action=erase");
        assert_eq!(
            Engine::Vllm
                .control()
                .route("reset_prefix_cache")
                .map(|r| r.path),
            Some("/reset_prefix_cache")
        );
        assert!(Engine::Vllm.control().route("erase_slot").is_none());
    }
}
