//! `/v1/loras`, in Dynamo's shapes (`lib/runtime/src/system_status_server.rs`:
//! `LoadLoraRequest {lora_name, source: {uri}}`, `LoraResponse {status, message, lora_name,
//! lora_id, loras, count}`), on each engine's own adapter API (`model::control::LoraApi`):
//! - `GET /v1/loras`: every adapter of every upstream with an adapter API (or `?upstream=`'s):
//!   vLLM's and SGLang's `/v1/models` entries with a `parent`, llama.cpp's `/lora-adapters`;
//!   and per upstream the labels of `vllm:lora_requests_info` (running and waiting adapters);
//! - `POST /v1/loras`: loads on `?upstream=`'s engine, else the first with an adapter API;
//! - `DELETE /v1/loras/{name}`: unloads there.
//!
//! `source.uri` is a `file://` URI or a path the engine reads, or `hf://` a Hugging Face
//! repository vLLM and SGLang fetch themselves. llama.cpp cannot load an adapter it did not
//! start with (`--lora`): loading sets the scale of the one named (its file name without
//! `.gguf`) to 1 (or `scale` in the body), unloading sets it to 0.

use axum::http::StatusCode;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::forward::{Answer, CallError};
use super::{Call, Control, Reply};
use crate::config::UpstreamConfig;
use crate::model::control::{LoraApi, Method};
use crate::model::{Engine, routes};

/// `vllm:lora_requests_info`: a series per set of running and waiting adapters, the current
/// one the latest (`vllm/v1/metrics/loggers.py`, `set_to_current_time`).
const LORA_REQUESTS_INFO: &str = "vllm:lora_requests_info";

fn answer(status: StatusCode, fields: Value) -> Reply {
    Reply::json(status, &fields)
}

fn failed(status: StatusCode, name: Option<&str>, message: impl std::fmt::Display) -> Reply {
    let mut v = json!({"status": "error", "message": message.to_string()});
    if let Some(name) = name {
        v["lora_name"] = json!(name);
    }
    answer(status, v)
}

/// The engine's own words for a failed answer: OpenAI's `error.message`, FastAPI's `detail`,
/// or the body.
fn engine_message(a: &Answer) -> String {
    let json = a.json();
    let picked = json.as_ref().and_then(|j| {
        j.pointer("/error/message")
            .or_else(|| j.get("message"))
            .or_else(|| j.get("detail"))
            .or_else(|| j.get("error"))
            .map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_owned))
    });
    picked.unwrap_or_else(|| String::from_utf8_lossy(&a.body).chars().take(500).collect())
}

fn has_api(u: &UpstreamConfig) -> bool {
    u.engine.control().lora != LoraApi::None
}

impl Control {
    /// Answers `/v1/loras` and `/v1/loras/{name}` for a caller the server let through.
    pub async fn loras(&self, call: Call) -> Reply {
        let name = routes::lora_name(&call.path).map(str::to_owned);
        match (&call.method, name) {
            (&axum::http::Method::GET, None) => self.list(&call).await,
            (&axum::http::Method::POST, None) => self.load(&call).await,
            (&axum::http::Method::DELETE, Some(name)) => self.unload(&call, &name).await,
            _ => failed(
                StatusCode::METHOD_NOT_ALLOWED,
                None,
                "GET or POST /v1/loras, DELETE /v1/loras/{name}",
            ),
        }
    }

    async fn list(&self, call: &Call) -> Reply {
        let chosen: Vec<usize> = match call.param("upstream") {
            Some(_) => match self.upstream(call, has_api, "/v1/loras") {
                Ok(u) => vec![u],
                Err(reply) => return reply,
            },
            None => (self.config.upstreams.iter().enumerate())
                .filter(|(_, u)| has_api(u))
                .map(|(i, _)| i)
                .collect(),
        };
        let mut loras = Map::new();
        let mut requests = Map::new();
        let mut problems = Vec::new();
        for u in chosen {
            let upstream = &self.config.upstreams[u];
            match self.adapters(call, u).await {
                Ok(found) => {
                    for (name, mut entry) in found {
                        entry["upstream"] = json!(upstream.name);
                        loras.insert(name, entry);
                    }
                }
                Err(message) => problems.push(format!("{}: {message}", upstream.name)),
            }
            if upstream.engine == Engine::Vllm {
                let info = self.info_labels(u, LORA_REQUESTS_INFO).await;
                requests.insert(
                    upstream.name.clone(),
                    info.unwrap_or_else(|reason| json!({ "not_available": reason })),
                );
            }
        }
        let mut v = json!({
            "status": if problems.is_empty() { "success" } else { "error" },
            "count": loras.len(),
            "loras": loras,
            "requests": requests,
        });
        if !problems.is_empty() {
            v["message"] = json!(problems.join("; "));
        }
        let status = if problems.is_empty() {
            StatusCode::OK
        } else {
            StatusCode::BAD_GATEWAY
        };
        answer(status, v)
    }

    /// The adapters upstream `u` serves, by name.
    async fn adapters(&self, call: &Call, u: usize) -> Result<Vec<(String, Value)>, String> {
        let engine = self.config.upstreams[u].engine.control();
        match engine.lora {
            LoraApi::LoadUnload { .. } => {
                let path = engine.models.unwrap_or("/v1/models");
                let a = self.ok(call, u, Method::Get, path, None).await?;
                let data = a.json().and_then(|j| j.get("data").cloned());
                let Some(Value::Array(models)) = data else {
                    return Err(format!("{path} has no data list"));
                };
                Ok(models
                    .iter()
                    .filter(|m| m.get("parent").is_some_and(|p| !p.is_null()))
                    .filter_map(|m| {
                        let id = m.get("id")?.as_str()?.to_owned();
                        let entry = json!({
                            "base_model": m.get("parent"),
                            "path": m.get("root"),
                        });
                        Some((id, entry))
                    })
                    .collect())
            }
            LoraApi::Scales { path } => {
                let list = self.scales(call, u, path).await?;
                Ok(list
                    .into_iter()
                    .map(|a| {
                        let entry = json!({"lora_id": a.id, "path": a.path, "scale": a.scale});
                        (a.name, entry)
                    })
                    .collect())
            }
            LoraApi::None => Ok(Vec::new()),
        }
    }

    async fn load(&self, call: &Call) -> Reply {
        let request: Value = match serde_json::from_slice(&call.body) {
            Ok(v) => v,
            Err(err) => {
                return failed(
                    StatusCode::BAD_REQUEST,
                    None,
                    format!("invalid JSON: {err}"),
                );
            }
        };
        let name = request.get("lora_name").and_then(Value::as_str);
        let uri = request.pointer("/source/uri").and_then(Value::as_str);
        let (Some(name), Some(uri)) = (name, uri) else {
            return failed(
                StatusCode::BAD_REQUEST,
                None,
                "the body needs lora_name and source.uri: {\"lora_name\": \"...\", \"source\": {\"uri\": \"file:///...\"}}",
            );
        };
        let path = match source_path(uri) {
            Ok(path) => path,
            Err(message) => return failed(StatusCode::BAD_REQUEST, Some(name), message),
        };
        let u = match self.upstream(call, has_api, "/v1/loras") {
            Ok(u) => u,
            Err(reply) => return reply,
        };
        let scale = request.get("scale").and_then(Value::as_f64).unwrap_or(1.0);
        self.change(call, u, name, Change::Load { path, scale })
            .await
    }

    async fn unload(&self, call: &Call, name: &str) -> Reply {
        let u = match self.upstream(call, has_api, "/v1/loras") {
            Ok(u) => u,
            Err(reply) => return reply,
        };
        self.change(call, u, name, Change::Unload).await
    }

    async fn change(&self, call: &Call, u: usize, name: &str, change: Change) -> Reply {
        let upstream = &self.config.upstreams[u];
        let (verb, done) = match change {
            Change::Load { .. } => ("load", "loaded"),
            Change::Unload => ("unload", "unloaded"),
        };
        match upstream.engine.control().lora {
            LoraApi::LoadUnload {
                load,
                unload,
                needs,
            } => {
                let (path, body) = match &change {
                    Change::Load { path, .. } => {
                        (load, json!({"lora_name": name, "lora_path": path}))
                    }
                    Change::Unload => (unload, json!({"lora_name": name})),
                };
                let body = Some(Bytes::from(body.to_string()));
                let a = match self.forward(call, verb, u, Method::Post, path, body).await {
                    Ok(a) => a,
                    Err(err) => return failed(err.status(), Some(name), err),
                };
                if a.status == StatusCode::NOT_FOUND
                    && a.json().is_some_and(|j| j.get("detail").is_some())
                {
                    // FastAPI's answer to a route it does not have.
                    return failed(
                        StatusCode::NOT_IMPLEMENTED,
                        Some(name),
                        format!("{} has no {path}: {needs}", upstream.name),
                    );
                }
                if !a.status.is_success() {
                    return failed(a.status, Some(name), engine_message(&a));
                }
                let said = String::from_utf8_lossy(&a.body)
                    .trim()
                    .trim_matches('"')
                    .to_owned();
                answer(
                    StatusCode::OK,
                    json!({"status": "success", "lora_name": name,
                           "message": if said.is_empty() { format!("LoRA {name} {done}") } else { said }}),
                )
            }
            LoraApi::Scales { path } => {
                let list = match self.scales(call, u, path).await {
                    Ok(list) => list,
                    Err(message) => return failed(StatusCode::BAD_GATEWAY, Some(name), message),
                };
                let wanted = |a: &Scaled| {
                    a.name == name
                        || matches!(&change, Change::Load { path, .. } if &a.path == path)
                };
                let Some(id) = list.iter().find(|a| wanted(a)).map(|a| a.id) else {
                    let known: Vec<&str> = list.iter().map(|a| a.name.as_str()).collect();
                    return failed(
                        StatusCode::NOT_FOUND,
                        Some(name),
                        format!(
                            "{} has no adapter {name:?} (it has {known:?}): llama-server loads \
                             adapters only at start (--lora FILE), and scales them here",
                            upstream.name
                        ),
                    );
                };
                let scale = match change {
                    Change::Load { scale, .. } => scale,
                    Change::Unload => 0.0,
                };
                let scales: Vec<Value> = list
                    .iter()
                    .map(|a| json!({"id": a.id, "scale": if a.id == id { scale } else { a.scale }}))
                    .collect();
                let body = Some(Bytes::from(Value::Array(scales).to_string()));
                match self.ok(call, u, Method::Post, path, body).await {
                    Ok(_) => answer(
                        StatusCode::OK,
                        json!({"status": "success", "lora_name": name, "lora_id": id,
                               "message": format!("LoRA {name} {done} (scale {scale})")}),
                    ),
                    Err(message) => failed(StatusCode::BAD_GATEWAY, Some(name), message),
                }
            }
            LoraApi::None => failed(
                StatusCode::NOT_IMPLEMENTED,
                Some(name),
                format!(
                    "{} ({}) has no adapter API",
                    upstream.name,
                    upstream.engine.preset().name
                ),
            ),
        }
    }

    /// llama.cpp's adapters and their scales.
    async fn scales(&self, call: &Call, u: usize, path: &str) -> Result<Vec<Scaled>, String> {
        let a = self.ok(call, u, Method::Get, path, None).await?;
        let Some(Value::Array(list)) = a.json() else {
            return Err(format!("{path} answered something other than a JSON list"));
        };
        Ok(list
            .iter()
            .filter_map(|a| {
                let path = a.get("path")?.as_str()?.to_owned();
                let name = std::path::Path::new(&path)
                    .file_name()?
                    .to_string_lossy()
                    .trim_end_matches(".gguf")
                    .to_owned();
                Some(Scaled {
                    id: a.get("id")?.as_u64()?,
                    scale: a.get("scale").and_then(Value::as_f64).unwrap_or(0.0),
                    path,
                    name,
                })
            })
            .collect())
    }

    /// A call whose answer must be a success; else why not, in words.
    async fn ok(
        &self,
        call: &Call,
        u: usize,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Answer, String> {
        let a = self
            .forward(call, path, u, method, path, body)
            .await
            .map_err(|e: CallError| format!("{path}: {e}"))?;
        if !a.status.is_success() {
            return Err(format!(
                "{path} answered {}: {}",
                a.status,
                engine_message(&a)
            ));
        }
        Ok(a)
    }
}

enum Change {
    Load { path: String, scale: f64 },
    Unload,
}

/// One llama.cpp adapter.
struct Scaled {
    id: u64,
    scale: f64,
    path: String,
    /// Its file name without `.gguf`.
    name: String,
}

/// What the engine is given for `source.uri`: a local path, or a Hugging Face repository.
fn source_path(uri: &str) -> Result<String, String> {
    if let Some(path) = uri.strip_prefix("file://") {
        return Ok(path.to_owned());
    }
    if let Some(repo) = uri.strip_prefix("hf://") {
        return Ok(repo.to_owned());
    }
    if uri.starts_with('/') {
        return Ok(uri.to_owned());
    }
    Err(format!(
        "source.uri {uri:?}: sysport passes the engine a file:// URI (or an absolute path) or an \
         hf:// repository; it downloads nothing itself"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_a_path_or_a_repository() {
        assert_eq!(source_path("file:///a/b"), Ok("/a/b".to_owned()));
        assert_eq!(source_path("/a/b"), Ok("/a/b".to_owned()));
        assert_eq!(source_path("hf://org/ad"), Ok("org/ad".to_owned()));
        assert!(source_path("s3://bucket/x").is_err_and(|e| e.contains("downloads nothing")));
    }
}
