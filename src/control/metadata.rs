//! `/metadata`: what each upstream is, read from the engine's own routes (`model::control`):
//! its kind and version, the models it serves (`/v1/models`: id, longest context, the base
//! model of an adapter), its cache configuration (the labels of its `*cache_config_info`
//! family), the labels sysport adds to its series, and sysport's own version.
//!
//! Read without being asked ([`Control::keep_read`]) once the upstream's scrapes are first up
//! (at start, and after a reload), and again after each restart of its engine that the
//! incidents see (its process start time changed). On demand, read again when the last read
//! is older than the check interval, when a scrape of the upstream failed since (the cache is
//! one of the scraper's recorders), or when its scrapes came back. One read at a time, each
//! answer bounded. The cache configuration comes from the upstream's page through the scraper
//! (a selective read, sharing fetches with `/metrics`). What could not be read is
//! `{"not_available": reason}` in its place: the answer is always 200.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::forward::{self, MAX_ANSWER_BYTES};
use super::{Control, Reply, engine_url};
use crate::config::UpstreamConfig;
use crate::expfmt::{self, Exposition, Selection};
use crate::model::control::Method;
use crate::model::{Read, Recorder, ScrapeRecord, ShownUrl};

/// One read of an upstream.
#[derive(Debug, Clone)]
struct Entry {
    at: Instant,
    /// Its scrapes were up when it was read.
    up: bool,
    /// The restarts the incidents had seen of its engine when it was read.
    restarts: u64,
    /// The cache configuration has been read (from the page: only when asked).
    page: bool,
    value: Value,
}

/// What the last read of each upstream found.
#[derive(Debug)]
pub struct Cache {
    /// Per upstream: its last read.
    read: Mutex<Vec<Option<Entry>>>,
    /// Held while reading, so a burst of requests makes one read.
    reading: tokio::sync::Mutex<()>,
    /// Per upstream: a scrape failed since its last read (the engine down, or restarting).
    failed: Vec<AtomicBool>,
    /// Per upstream: its last scrape succeeded.
    up: Vec<AtomicBool>,
    /// Woken when an upstream's scrapes turn up: [`Control::keep_read`] reads it.
    came_up: tokio::sync::Notify,
}

/// Told every scrape's result: a failure makes the next `/metadata` read that upstream again;
/// scrapes that turn up wake the reader.
impl Recorder for Cache {
    fn scraped(&self, record: &ScrapeRecord<'_>) {
        let u = record.upstream;
        let (Some(failed), Some(up)) = (self.failed.get(u), self.up.get(u)) else {
            return;
        };
        if record.succeeded() {
            if !up.swap(true, Ordering::Relaxed) {
                self.came_up.notify_one();
            }
        } else if record.read != Read::Deadline {
            failed.store(true, Ordering::Relaxed);
            up.store(false, Ordering::Relaxed);
        }
    }
}

/// What is known of an upstream now, against which its last read is judged.
#[derive(Debug, Clone, Copy)]
struct Now {
    up: bool,
    restarts: u64,
}

/// Which upstreams a pass reads.
#[derive(Debug, Clone, Copy)]
enum Due {
    /// Asked for: read longer ago than the age, failed a scrape since, its scrapes' state or
    /// its engine's restarts changed since, or never read; the cache configuration of one read
    /// unasked.
    Asked(Duration),
    /// Unasked: up now, and never read while up or restarted since.
    Unasked,
}

/// What a read asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The engine's own routes and its page.
    Whole,
    /// The engine's own routes: unasked, sysport adds no fetch of the page to its scrapes.
    Engine,
    /// The page, for the cache configuration of a read made unasked.
    Page,
}

impl Due {
    fn wants(self, entry: Option<&Entry>, failed: bool, now: Now) -> Option<Part> {
        let changed = |e: &Entry| e.up != now.up || e.restarts != now.restarts;
        match (self, entry) {
            (Due::Asked(_), None) => Some(Part::Whole),
            (Due::Asked(max_age), Some(e)) if failed || changed(e) || e.at.elapsed() >= max_age => {
                Some(Part::Whole)
            }
            (Due::Asked(_), Some(e)) => (!e.page).then_some(Part::Page),
            (Due::Unasked, e) => {
                (now.up && e.is_none_or(|e| !e.up || changed(e))).then_some(Part::Engine)
            }
        }
    }
}

impl Cache {
    pub fn new(upstreams: usize) -> Cache {
        Cache {
            read: Mutex::new(vec![None; upstreams]),
            reading: tokio::sync::Mutex::new(()),
            failed: (0..upstreams).map(|_| AtomicBool::new(false)).collect(),
            up: (0..upstreams).map(|_| AtomicBool::new(false)).collect(),
            came_up: tokio::sync::Notify::new(),
        }
    }

    /// The upstreams `due` reads, and what of each.
    fn stale(&self, due: Due, now: &[Now]) -> Vec<(usize, Part)> {
        let read = self.read.lock().expect("metadata lock");
        (read.iter().enumerate())
            .filter_map(|(i, e)| {
                let failed = self.failed[i].load(Ordering::Relaxed);
                Some((i, due.wants(e.as_ref(), failed, now[i])?))
            })
            .collect()
    }
}

fn na(reason: impl std::fmt::Display) -> Value {
    json!({ "not_available": reason.to_string() })
}

impl Control {
    /// The `/metadata` answer, re-reading upstreams whose read is older than the interval.
    pub async fn metadata(&self) -> Reply {
        self.refresh(Due::Asked(self.interval())).await;
        let read = self.metadata.read.lock().expect("metadata lock");
        let upstreams: Map<String, Value> = (self.config.upstreams.iter().zip(read.iter()))
            .map(|(u, r)| {
                let value = r.as_ref().map_or_else(
                    || na("not read yet"),
                    |e| {
                        let mut v = e.value.clone();
                        v["age_seconds"] = json!(e.at.elapsed().as_secs_f64());
                        v
                    },
                );
                (u.name.clone(), value)
            })
            .collect();
        let labels: Map<String, Value> = (self.config.labels.iter())
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        Reply::json(
            StatusCode::OK,
            &json!({
                "sysport": { "version": env!("CARGO_PKG_VERSION") },
                "labels": labels,
                "upstreams": upstreams,
            }),
        )
    }

    /// Reads each upstream once its scrapes are up, and again after each restart of its
    /// engine, until `stop`: woken when scrapes turn up and by the incidents at a restart, and
    /// once per check interval besides (it looks at sysport's own state; the engine is asked
    /// only when a read is due).
    pub async fn keep_read(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut restarts = self.incidents.watch_restarts();
        let mut told = true;
        loop {
            self.refresh(Due::Unasked).await;
            tokio::select! {
                changed = restarts.changed(), if told => told = changed.is_ok(),
                () = self.metadata.came_up.notified() => {}
                () = tokio::time::sleep(self.interval()) => {}
                _ = stop.changed() => return,
            }
        }
    }

    fn now(&self) -> Vec<Now> {
        (self.config.upstreams.iter().enumerate())
            .map(|(u, upstream)| Now {
                up: self.metadata.up[u].load(Ordering::Relaxed),
                restarts: self.incidents.restarts(&upstream.name),
            })
            .collect()
    }

    async fn refresh(&self, due: Due) {
        if self.metadata.stale(due, &self.now()).is_empty() {
            return;
        }
        let _reading = self.metadata.reading.lock().await;
        // Another pass may have read them while this one waited.
        let before = self.now();
        let stale = self.metadata.stale(due, &before);
        for &(u, part) in &stale {
            if part != Part::Page {
                self.metadata.failed[u].store(false, Ordering::Relaxed);
            }
        }
        let reads = stale.iter().map(|&(u, part)| self.read_upstream(u, part));
        let values = futures_util::future::join_all(reads).await;
        let after = self.now();
        let mut read = self.metadata.read.lock().expect("metadata lock");
        for ((u, part), value) in stale.into_iter().zip(values) {
            match (part, read[u].as_mut()) {
                (Part::Page, Some(entry)) => {
                    entry.value["cache_config"] = value;
                    entry.page = true;
                }
                (Part::Page, None) => {}
                (Part::Whole | Part::Engine, _) => {
                    read[u] = Some(Entry {
                        at: Instant::now(),
                        up: after[u].up,
                        // A restart seen during the read is read again.
                        restarts: before[u].restarts,
                        page: part == Part::Whole,
                        value,
                    });
                }
            }
        }
    }

    /// What `part` of upstream `u` says: its whole value, or with [`Part::Page`] its cache
    /// configuration alone.
    async fn read_upstream(&self, u: usize, part: Part) -> Value {
        match part {
            Part::Page => self.cache_config(u).await,
            Part::Engine => self.read_engine(u).await,
            Part::Whole => {
                let mut value = self.read_engine(u).await;
                value["cache_config"] = self.cache_config(u).await;
                value
            }
        }
    }

    /// The labels of upstream `u`'s cache configuration family, read from its page.
    async fn cache_config(&self, u: usize) -> Value {
        let upstream = &self.config.upstreams[u];
        match upstream.engine.control().cache_config {
            Some(family) => self.info_labels(u, family).await.unwrap_or_else(na),
            None => na(format!(
                "{} serves no cache configuration family",
                upstream.engine.preset().name
            )),
        }
    }

    /// Upstream `u` as its engine's own routes say (the cache configuration left out).
    async fn read_engine(&self, u: usize) -> Value {
        let upstream = &self.config.upstreams[u];
        let control = upstream.engine.control();
        let version = match control.version {
            Some(v) => match self.get_json(upstream, v.path).await {
                Ok(answer) => match answer.pointer(v.pointer) {
                    Some(Value::String(s)) => json!(s),
                    Some(Value::Number(n)) => json!(n.to_string()),
                    _ => na(format!("{} has no {} field", v.path, &v.pointer[1..])),
                },
                Err(reason) => na(reason),
            },
            None => na("the engine has no version route"),
        };
        let models = match control.models {
            Some(path) => match self.get_json(upstream, path).await {
                Ok(answer) => models(&answer, path),
                Err(reason) => na(reason),
            },
            None => na("the engine has no /v1/models"),
        };
        let read_at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        json!({
            "engine": upstream.engine.preset().name,
            "url": ShownUrl(&upstream.url).to_string(),
            "version": version,
            "models": models,
            "cache_config": Value::Null,
            "read_at": read_at,
        })
    }

    /// `path` of the upstream's engine as JSON, or why not.
    async fn get_json(&self, upstream: &UpstreamConfig, path: &str) -> Result<Value, String> {
        let url = engine_url(upstream, path);
        let answer = forward::call(
            &self.client,
            Method::Get,
            url,
            None,
            self.config.control.timeout,
            MAX_ANSWER_BYTES,
        )
        .await
        .map_err(|e| format!("{path}: {e}"))?;
        if !answer.status.is_success() {
            return Err(format!("{path} answered {}", answer.status));
        }
        answer
            .json()
            .ok_or_else(|| format!("{path} answered something other than JSON"))
    }

    /// The labels of `family`'s latest series on upstream `u`'s page, read through the
    /// scraper (a selective read: shared with `/metrics`, within `min_interval`).
    pub(super) async fn info_labels(&self, u: usize, family: &str) -> Result<Value, String> {
        let selection = Selection::new([family]);
        let scraped = self.scraper.scrape(&[u], Some(&selection), None).await;
        let page = match scraped.into_iter().next().map(|s| s.result) {
            Some(Ok(page)) => page,
            Some(Err(err)) => return Err(format!("metrics page: {err}")),
            None => return Err("metrics page: not read".to_owned()),
        };
        info_labels(&page.parsed, family)
    }
}

/// The served models of an OpenAI `/v1/models` answer: id, longest context (`max_model_len`,
/// llama.cpp's `meta.n_ctx`), the base model of an adapter (`parent`).
fn models(answer: &Value, path: &str) -> Value {
    let Some(data) = answer.get("data").and_then(Value::as_array) else {
        return na(format!("{path} has no data list"));
    };
    let models: Vec<Value> = data
        .iter()
        .map(|m| {
            let max_len = m
                .get("max_model_len")
                .or_else(|| m.pointer("/meta/n_ctx"))
                .cloned()
                .unwrap_or(Value::Null);
            json!({
                "id": m.get("id").cloned().unwrap_or(Value::Null),
                "max_model_len": max_len,
                "parent": m.get("parent").cloned().unwrap_or(Value::Null),
            })
        })
        .collect();
    Value::Array(models)
}

/// The labels of `family`'s series of the largest value in a page (an info gauge's value is 1,
/// or the time its labels were set).
pub fn info_labels(page: &Exposition, family: &str) -> Result<Value, String> {
    let found = page
        .families()
        .iter()
        .find(|f| page.family_name(f).0 == family.as_bytes())
        .and_then(|f| {
            (page.samples(f).iter()).max_by(|a, b| page.value(a).total_cmp(&page.value(b)))
        });
    let Some(sample) = found else {
        return Err(format!("the metrics page has no {family}"));
    };
    let labels: Map<String, Value> = page
        .label_pairs(sample)
        .map(|(k, v)| {
            let v = expfmt::unescape_label_value(v);
            (
                String::from_utf8_lossy(k).into_owned(),
                json!(String::from_utf8_lossy(&v)),
            )
        })
        .collect();
    Ok(Value::Object(labels))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::expfmt::{Format, PairHasher, ParseOptions};

    fn page(text: &str) -> Exposition {
        let keep = ["vllm:".to_owned()];
        let opts = ParseOptions {
            keep: &keep,
            limits: crate::config::Limits::default().parse_limits(),
            added_labels: &[],
            hasher: PairHasher::new(1),
            allow_reserved: false,
        };
        expfmt::parse(Bytes::from(text.to_owned()), Format::Text, &opts).expect("parses")
    }

    #[test]
    fn cache_config_is_the_info_family_labels() {
        let text = "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n\
                    # TYPE vllm:cache_config_info gauge\n\
                    vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"2048\",prefix=\"a\\\"b\"} 1.0\n\
                    vllm:num_requests_running{engine=\"0\"} 0.0\n";
        let labels = info_labels(&page(text), "vllm:cache_config_info").expect("found");
        assert_eq!(
            labels,
            json!({"block_size": "16", "num_gpu_blocks": "2048", "prefix": "a\"b"})
        );
        let missing = info_labels(&page("x 1\n"), "vllm:cache_config_info");
        assert_eq!(
            missing,
            Err("the metrics page has no vllm:cache_config_info".to_owned())
        );
    }

    #[test]
    fn models_keep_id_length_and_parent() {
        let answer = json!({"object": "list", "data": [
            {"id": "tiny", "max_model_len": 256, "parent": null, "root": "/m"},
            {"id": "ad", "max_model_len": 256, "parent": "tiny", "root": "/a"},
            {"id": "g.gguf", "meta": {"n_ctx": 1024}},
        ]});
        assert_eq!(
            models(&answer, "/v1/models"),
            json!([
                {"id": "tiny", "max_model_len": 256, "parent": null},
                {"id": "ad", "max_model_len": 256, "parent": "tiny"},
                {"id": "g.gguf", "max_model_len": 1024, "parent": null},
            ])
        );
    }
}
