//! What a canary asks and how its answer is judged, as pure functions of the configuration and
//! the bytes that came back: `health` sends the request and reads at most
//! [`MAX_ANSWER_BYTES`] of the answer within the canary's timeout.

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};

use super::tracker::Kind;
use crate::config::CanaryConfig;
use crate::model::Url;
use crate::model::engine::CanaryAnswer;

/// The most of an answer a canary reads (the completion, or vLLM's `GET /v1/models`): a
/// one-token completion is well under a kilobyte, and a model list of 8 MiB names about
/// 20,000 models or LoRA adapters (vLLM writes about 400 bytes per entry). An answer that is
/// longer is a failed canary ([`Kind::TooLarge`]), read no further.
pub(crate) const MAX_ANSWER_BYTES: usize = 8 << 20;

/// Why a canary failed (or stopped): its result and the reason in words.
pub(crate) type Failure = (Kind, String);

/// One request of a canary: where, and the JSON body of a `POST` (`None`: a `GET`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub url: String,
    pub body: Option<String>,
}

/// Whether `canary` names the model, which must then be known (given, or asked of the engine).
pub(crate) fn needs_model(canary: &CanaryConfig) -> bool {
    canary.url.as_str().contains("%7Bmodel%7D")
        || canary
            .body
            .as_deref()
            .is_some_and(|b| b.contains("{model}"))
}

/// The canary's request with `model` in place of `{model}` (in the path, and as a JSON string
/// in the body).
pub(crate) fn request(canary: &CanaryConfig, model: Option<&str>) -> Request {
    let name = model.unwrap_or_default();
    Request {
        url: canary.url.as_str().replace("%7Bmodel%7D", name),
        body: canary
            .body
            .as_ref()
            .map(|b| b.replace("{model}", &serde_json::Value::from(name).to_string())),
    }
}

/// vLLM's model list (`GET /v1/models`, `vllm/entrypoints/openai/api_server.py`) on the
/// canary's origin.
pub(crate) fn models_url(canary: &CanaryConfig) -> Url {
    let mut url = canary.url.clone();
    url.set_path("/v1/models");
    url.set_query(None);
    url
}

/// A non-2xx answer: credentials refused (canaries pause: readiness stays with the health
/// check, and `canary.headers` fixes it), a route that does not generate (canaries pause:
/// a pooling or embedding model, or another `canary.url`), or a failure.
/// `asked` names the request when it is not the canary itself (`/v1/models`).
fn refused(status: u16, asked: Option<&str>) -> Failure {
    let what = match asked {
        Some(asked) => format!("{asked} answered"),
        None => "answered".to_owned(),
    };
    match status {
        401 | 403 => (
            Kind::Unauthorized,
            format!(
                "{what} HTTP {status}: the engine wants credentials; canaries paused \
                 (set canary.headers, for example Authorization: \"Bearer ${{VLLM_API_KEY}}\")"
            ),
        ),
        400 | 404 => (
            Kind::CannotGenerate,
            format!(
                "{what} HTTP {status}: the engine does not generate there (a pooling or \
                 embedding model, or another canary.url); canaries paused"
            ),
        ),
        _ => (Kind::HttpStatus, format!("{what} HTTP {status}")),
    }
}

/// Judges the canary's answer: its status and body (at most [`MAX_ANSWER_BYTES`]).
pub(crate) fn judge(answer: CanaryAnswer, status: u16, body: &[u8]) -> Result<(), Failure> {
    if !(200..300).contains(&status) {
        return Err(refused(status, None));
    }
    let bad = |what: &str| (Kind::BadAnswer, what.to_owned());
    match answer {
        CanaryAnswer::Status => Ok(()),
        CanaryAnswer::Choices => match serde_json::from_slice::<Choices>(body) {
            Ok(Choices {
                choices: NonEmpty(true),
            }) => Ok(()),
            Ok(_) => Err(bad("answer has no choices")),
            Err(e) if e.is_data() => Err(bad("answer has no choices")),
            Err(_) => Err(bad("answer is not JSON")),
        },
        CanaryAnswer::TextOutput => match serde_json::from_slice::<TextOutput>(body) {
            Ok(_) => Ok(()),
            Err(e) if e.is_data() => Err(bad("answer has no text_output")),
            Err(_) => Err(bad("answer is not JSON")),
        },
        CanaryAnswer::Content => match serde_json::from_slice::<Content>(body) {
            Ok(_) => Ok(()),
            Err(e) if e.is_data() => Err(bad("answer has no content")),
            Err(_) => Err(bad("answer is not JSON")),
        },
    }
}

/// The first `id` of vLLM's model list, from its status and body.
pub(crate) fn first_model(status: u16, body: &[u8]) -> Result<String, Failure> {
    if !(200..300).contains(&status) {
        return Err(refused(status, Some("/v1/models")));
    }
    match serde_json::from_slice::<Models>(body) {
        Ok(Models {
            data: FirstId(Some(id)),
        }) => Ok(id),
        _ => Err((Kind::BadAnswer, "/v1/models names no model".to_owned())),
    }
}

/// An OpenAI completion: a `choices` list, read only as far as its first element.
#[derive(Deserialize)]
struct Choices {
    choices: NonEmpty,
}

/// Triton's generate extension: a `text_output`.
#[derive(Deserialize)]
struct TextOutput {
    #[allow(dead_code)]
    text_output: IgnoredAny,
}

/// llama.cpp's `POST /completion`: a `content`.
#[derive(Deserialize)]
struct Content {
    #[allow(dead_code)]
    content: IgnoredAny,
}

/// vLLM's model list: the `data` list, of which only the first `id` is kept.
#[derive(Deserialize)]
struct Models {
    data: FirstId,
}

/// Whether a list has an element; the elements are skipped, not kept.
struct NonEmpty(bool);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NonEmpty;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NonEmpty, A::Error> {
                let first = seq.next_element::<IgnoredAny>()?.is_some();
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(NonEmpty(first))
            }
        }
        d.deserialize_seq(V)
    }
}

/// The `id` of a list's first object, the rest skipped (thousands of adapters cost nothing).
struct FirstId(Option<String>);

impl<'de> Deserialize<'de> for FirstId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Entry {
            id: String,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FirstId;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of models")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FirstId, A::Error> {
                let first = seq.next_element::<Entry>()?.map(|e| e.id);
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FirstId(first))
            }
        }
        d.deserialize_seq(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_passes_with_choices_and_fails_without() {
        let ok = br#"{"id":"c","choices":[{"text":"x","index":0}],"usage":{}}"#;
        assert_eq!(judge(CanaryAnswer::Choices, 200, ok), Ok(()));
        let empty = br#"{"choices":[]}"#;
        assert_eq!(
            judge(CanaryAnswer::Choices, 200, empty),
            Err((Kind::BadAnswer, "answer has no choices".into()))
        );
        assert_eq!(
            judge(CanaryAnswer::Choices, 200, br#"{"object":"error"}"#),
            Err((Kind::BadAnswer, "answer has no choices".into()))
        );
        assert_eq!(
            judge(CanaryAnswer::Choices, 200, b"<html>"),
            Err((Kind::BadAnswer, "answer is not JSON".into()))
        );
        assert_eq!(judge(CanaryAnswer::Status, 204, b""), Ok(()));
        assert_eq!(
            judge(
                CanaryAnswer::Content,
                200,
                br#"{"content":"a","stop":true}"#
            ),
            Ok(())
        );
        assert_eq!(
            judge(
                CanaryAnswer::TextOutput,
                200,
                br#"{"model_name":"ensemble"}"#
            ),
            Err((Kind::BadAnswer, "answer has no text_output".into()))
        );
    }

    #[test]
    fn credentials_refused_or_no_generation_stop_the_canary_with_the_fix() {
        let (kind, why) = judge(CanaryAnswer::Choices, 401, b"").expect_err("refused");
        assert_eq!(kind, Kind::Unauthorized);
        assert!(why.contains("canary.headers"), "{why}");
        let (kind, why) = judge(CanaryAnswer::Choices, 404, b"").expect_err("no route");
        assert_eq!(kind, Kind::CannotGenerate);
        assert!(why.contains("pooling or embedding"), "{why}");
        assert_eq!(
            judge(CanaryAnswer::Status, 500, b""),
            Err((Kind::HttpStatus, "answered HTTP 500".into()))
        );
        assert_eq!(
            first_model(403, b"").expect_err("refused").0,
            Kind::Unauthorized
        );
    }

    #[test]
    fn the_first_model_of_thousands_is_read_without_keeping_the_rest() {
        let mut list = String::from(r#"{"object":"list","data":["#);
        for k in 0..5000 {
            if k > 0 {
                list.push(',');
            }
            list.push_str(&format!(
                r#"{{"id":"adapter-{k}","object":"model","owned_by":"vllm","permission":[{{"id":"p"}}]}}"#
            ));
        }
        list.push_str("]}");
        assert_eq!(
            first_model(200, list.as_bytes()).as_deref(),
            Ok("adapter-0")
        );
        assert_eq!(
            first_model(200, br#"{"data":[]}"#),
            Err((Kind::BadAnswer, "/v1/models names no model".into()))
        );
    }

    #[test]
    fn the_model_stands_in_the_path_and_as_a_json_string_in_the_body() {
        let upstream = crate::config::UpstreamConfig::new(
            "t",
            Url::parse("http://127.0.0.1:8000/metrics").expect("url"),
        );
        let mut c = CanaryConfig::preset(&upstream, std::time::Duration::from_secs(1));
        c.url = Url::parse("http://127.0.0.1:8000/v2/models/{model}/generate").expect("url");
        c.body = Some(r#"{"model": {model}}"#.into());
        assert!(needs_model(&c));
        let r = request(&c, Some("a\"b"));
        assert_eq!(r.url, "http://127.0.0.1:8000/v2/models/a\"b/generate");
        assert_eq!(r.body.as_deref(), Some(r#"{"model": "a\"b"}"#));
        assert_eq!(models_url(&c).as_str(), "http://127.0.0.1:8000/v1/models");
    }
}
